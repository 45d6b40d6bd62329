//! A dense layer on any device: packed host weights and the deterministic [`crate::matmul`] on
//! the CPU, Burn's `linear` elsewhere. The encoders and the decoders build their projections
//! from it.
use burn::tensor::module::linear;
use burn::tensor::TensorData;

use crate::device::{is_host_cpu, Device, Tensor};
use crate::matmul::{matmul_packed, Init, Mat, PackedB};

/// A dense layer `x · W + b` with the weight in `[in, out]` layout.
///
/// On a host-memory device the weights are packed once ([`PackedB`]) and the product runs as one
/// [`matmul_packed`] over every row (leading dimensions folded in), starting from the bias: one
/// summation order per output on every CPU, so embeddings are the same bits on any x86-64
/// (see [`crate::matmul`]). Burn 0.21's CPU `linear` instead broadcast the weight over a
/// batched matmul and allocated its output twice; other devices use Burn's `linear`.
#[derive(Debug, Clone)]
pub struct Dense {
    d_in: usize,
    d_out: usize,
    weights: DenseWeights,
}

#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per layer, built once; boxing would add a pointer chase per matmul
enum DenseWeights {
    Host { weight: std::sync::Arc<PackedB>, bias: std::sync::Arc<[f32]> },
    Device { weight: Tensor<2>, bias: Tensor<1> },
}

impl Dense {
    /// A dense layer from a row-major `[d_in, d_out]` weight and a `[d_out]` bias.
    pub fn new(weight: Vec<f32>, bias: Vec<f32>, d_in: usize, d_out: usize, device: &Device) -> Dense {
        assert_eq!(weight.len(), d_in * d_out, "dense weight must be [{d_in}, {d_out}]");
        assert_eq!(bias.len(), d_out, "dense bias must be [{d_out}]");
        let weights = if is_host_cpu(device) {
            DenseWeights::Host { weight: PackedB::new(Mat::new(&weight, d_in, d_out, d_out)).into(), bias: bias.into() }
        } else {
            DenseWeights::Device {
                weight: Tensor::from_data(TensorData::new(weight, [d_in, d_out]), device),
                bias: Tensor::from_data(TensorData::new(bias, [d_out]), device),
            }
        };
        Dense { d_in, d_out, weights }
    }

    /// Output features.
    pub fn d_out(&self) -> usize {
        self.d_out
    }

    /// Input features.
    pub fn d_in(&self) -> usize {
        self.d_in
    }

    /// `x · W + b` over the last dimension.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let dims = x.dims();
        assert_eq!(dims[D - 1], self.d_in, "dense input has {} features, expected {}", dims[D - 1], self.d_in);
        let rows: usize = dims[..D - 1].iter().product();
        let mut out_dims = dims;
        out_dims[D - 1] = self.d_out;
        match &self.weights {
            DenseWeights::Device { weight, bias } => linear(x.reshape([rows, self.d_in]), weight.clone(), Some(bias.clone())).reshape(out_dims),
            DenseWeights::Host { weight, bias } => {
                let device = x.device();
                let data = x.into_data().convert::<f32>();
                let src = data.as_slice::<f32>().expect("f32 after convert");
                let mut out = vec![0.0f32; rows * self.d_out];
                matmul_packed(Mat::new(src, rows, self.d_in, self.d_in), weight, Init::Bias(bias), &mut out, self.d_out);
                Tensor::from_data(TensorData::new(out, out_dims), &device)
            }
        }
    }
}
