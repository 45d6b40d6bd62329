//! The floor under gauge's models: what the encoders, the decoders and the trainers share.
//!
//! - [`device`]: the backend, tensor type and compute device (burn-flex CPU; CUDA with the
//!   `cuda` feature), chosen at run time.
//! - [`weights`]: safetensors checkpoints read by name, with a PEFT adapter merged at load.
//! - [`adapter`]: LoRA adapters in PEFT's folder format.
//! - [`matmul`]: the deterministic f32 matrix product (one summation order per output on every
//!   CPU; scalar, AVX2 and AVX-512 paths chosen at run time, `GAUGE_MATMUL`), and [`dense::Dense`] on it.
//! - [`gemm`]: strided f32 products through the `gemm` crate (the decoder's host forward and the
//!   trainers' kernels), with their thread choice.
//! - [`cpu_path`]: run-time kernel-path selection shared by every hot loop (a path per CPU
//!   feature level, the fastest the machine has unless an environment variable names one).
#![deny(missing_docs)]
pub mod adapter;
pub mod cpu_path;
pub mod dense;
pub mod gemm;
pub mod matmul;
pub mod weights;

pub use burn;
pub use dense::Dense;

use std::path::{Path, PathBuf};

/// Errors of the shared model layer: files, devices.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    /// A model or adapter file is missing, unreadable or inconsistent.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong and what was expected.
        message: String,
    },
    /// An unknown device name.
    #[error("unknown device `{0}` (expected cpu; ndarray or cuda[:N] in builds with those features)")]
    Device(String),
    /// A CUDA device asked of a build without the `cuda` feature.
    #[error("device `{0}` needs a CUDA build: rebuild with `--features cuda` (or `just build-gpu`)")]
    NoCuda(String),
}

impl TensorError {
    /// An error about a file.
    pub fn file(path: &Path, message: String) -> Self {
        TensorError::File { path: path.to_path_buf(), message }
    }
}

/// Compute devices and the tensor type of every gauge model.
///
/// gauge runs on Burn's runtime-dispatched backend ([`burn::Dispatch`]): one model code, the
/// device chosen at run time (`--device cpu|cuda[:N]`), so the encoder, and later crates built
/// on it, get the CPU and CUDA from the same source.
pub mod device {
    use crate::TensorError;

    /// The backend every gauge tensor lives on: Burn's dispatch over the enabled backends.
    pub type Backend = burn::Dispatch;
    /// A device of [`Backend`]: burn-flex (CPU), burn-ndarray, or CUDA with the `cuda` feature.
    pub type Device = burn::DispatchDevice;
    /// A tensor on [`Backend`] (float unless a kind is given: `Tensor<2, Int>`).
    pub type Tensor<const D: usize, K = burn::tensor::Float> = burn::tensor::Tensor<Backend, D, K>;

    /// The CPU device (burn-flex).
    pub fn cpu() -> Device {
        burn::DispatchDevice::Flex(burn::backend::flex::FlexDevice)
    }

    /// CUDA device `index` (builds with the `cuda` feature).
    #[cfg(feature = "cuda")]
    pub fn cuda(index: usize) -> Device {
        burn::DispatchDevice::Cuda(burn::backend::cuda::CudaDevice::new(index))
    }

    /// Whether tensors on this device live in host memory (burn-flex, burn-ndarray), where
    /// gauge's fused CPU kernels apply.
    pub fn is_host_cpu(device: &Device) -> bool {
        match device {
            burn::DispatchDevice::Flex(_) => true,
            #[cfg(feature = "ndarray")]
            burn::DispatchDevice::NdArray(_) => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Parses `cpu` (burn-flex), `ndarray` (with the `ndarray` feature) or `cuda` / `cuda:N`
    /// (with the `cuda` feature).
    pub fn parse(name: &str) -> Result<Device, TensorError> {
        match name {
            "cpu" | "flex" => Ok(cpu()),
            #[cfg(feature = "ndarray")]
            "ndarray" => Ok(burn::DispatchDevice::NdArray(Default::default())),
            "cuda" => cuda_device(0, name),
            s if s.starts_with("cuda:") => {
                let index = s["cuda:".len()..].parse::<usize>().map_err(|_| TensorError::Device(name.to_string()))?;
                cuda_device(index, name)
            }
            other => Err(TensorError::Device(other.to_string())),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_device(index: usize, _name: &str) -> Result<Device, TensorError> {
        Ok(cuda(index))
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda_device(_index: usize, name: &str) -> Result<Device, TensorError> {
        Err(TensorError::NoCuda(name.to_string()))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn device_names_parse_or_fail_with_the_fix() {
            assert!(is_host_cpu(&parse("cpu").unwrap()));
            assert!(matches!(parse("gpu"), Err(TensorError::Device(_))));
            assert!(matches!(parse("cuda:x"), Err(TensorError::Device(_))));
            #[cfg(not(feature = "cuda"))]
            {
                let err = parse("cuda:1").unwrap_err().to_string();
                assert!(err.contains("--features cuda"), "{err}");
            }
        }
    }
}
