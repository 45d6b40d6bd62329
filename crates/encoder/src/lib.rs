//! BERT-family encoders in Burn, loaded from Hugging Face / sentence-transformers folders
//! with no conversion step.
//!
//! - [`config`]: `config.json`, `modules.json`, pooling and `sentence_bert_config.json`.
//! - [`bert`]: the encoder (embeddings, post-norm layers with padding-masked attention).
//! - [`embedder`]: tokenization, token-budget batching, pooling, normalisation, prefixes.
//! - [`adapter`]: LoRA adapters in PEFT's folder format (shared with the decoders).
//! - [`family`]: defaults of the MiniLM, BGE, E5 and GTE families.
//! - [`device`]: the backend, tensor type and compute device (burn-flex CPU; CUDA with the
//!   `cuda` feature), chosen at run time.
#![deny(missing_docs)]
pub mod adapter;
pub mod bert;
pub mod config;
pub mod cross_encoder;
pub mod embedder;
pub mod family;
pub mod matmul;
pub mod weights;

pub use burn;
pub use config::{BertConfig, Pooling};
pub use cross_encoder::{CrossEncoder, CrossEncoderInfo, CrossEncoderOptions, PairEncoding};
pub use embedder::{BatchStats, Embedder, EmbedderInfo, EmbedderOptions};
pub use family::Family;
pub use gauge_core::models::{resolve_model, ModelSource};

use std::path::{Path, PathBuf};

/// Errors of model loading and inference.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    /// A model file is missing, unreadable or inconsistent.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A model did not resolve.
    #[error(transparent)]
    ModelNotFound(#[from] gauge_core::models::ModelNotFound),
    /// Tokenization failed.
    #[error("tokenization failed: {0}")]
    Tokenize(String),
    /// An unknown device name.
    #[error("unknown device `{0}` (expected cpu; ndarray or cuda[:N] in builds with those features)")]
    Device(String),
    /// A CUDA device asked of a build without the `cuda` feature.
    #[error("device `{0}` needs a CUDA build: rebuild with `--features cuda` (or `just build-gpu`)")]
    NoCuda(String),
}

impl EncoderError {
    /// An error about a file.
    pub fn file(path: &Path, message: String) -> Self {
        EncoderError::File { path: path.to_path_buf(), message }
    }
}

/// Compute devices and the tensor type of every gauge model.
///
/// gauge runs on Burn's runtime-dispatched backend ([`burn::Dispatch`]): one model code, the
/// device chosen at run time (`--device cpu|cuda[:N]`), so the encoder, and later crates built
/// on it, get the CPU and CUDA from the same source.
pub mod device {
    use super::EncoderError;

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
    pub fn parse(name: &str) -> Result<Device, EncoderError> {
        match name {
            "cpu" | "flex" => Ok(cpu()),
            #[cfg(feature = "ndarray")]
            "ndarray" => Ok(burn::DispatchDevice::NdArray(Default::default())),
            "cuda" => cuda_device(0, name),
            s if s.starts_with("cuda:") => {
                let index = s["cuda:".len()..].parse::<usize>().map_err(|_| EncoderError::Device(name.to_string()))?;
                cuda_device(index, name)
            }
            other => Err(EncoderError::Device(other.to_string())),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_device(index: usize, _name: &str) -> Result<Device, EncoderError> {
        Ok(cuda(index))
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda_device(_index: usize, name: &str) -> Result<Device, EncoderError> {
        Err(EncoderError::NoCuda(name.to_string()))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn device_names_parse_or_fail_with_the_fix() {
            assert!(is_host_cpu(&parse("cpu").unwrap()));
            assert!(matches!(parse("gpu"), Err(EncoderError::Device(_))));
            assert!(matches!(parse("cuda:x"), Err(EncoderError::Device(_))));
            #[cfg(not(feature = "cuda"))]
            {
                let err = parse("cuda:1").unwrap_err().to_string();
                assert!(err.contains("--features cuda"), "{err}");
            }
        }
    }
}
