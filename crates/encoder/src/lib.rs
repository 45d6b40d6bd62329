//! BERT-family encoders in Burn, loaded from Hugging Face / sentence-transformers folders
//! with no conversion step.
//!
//! - [`config`]: `config.json`, `modules.json`, pooling and `sentence_bert_config.json`.
//! - [`bert`]: the BERT encoder (embeddings, post-norm layers with padding-masked attention).
//! - [`mpnet`]: the MPNet encoder (BERT's layers with a relative-position bias, all-mpnet-base-v2).
//! - [`architecture`]: which of the two a folder's `config.json` names.
//! - [`embedder`]: tokenization, token-budget batching, pooling, normalisation, prefixes.
//! - [`adapter`], [`weights`], [`matmul`], [`device`]: re-exported from `gauge-tensor`, the floor
//!   under the encoders, decoders and trainers.
//! - [`family`]: defaults of the MiniLM, BGE, E5 and GTE families.
#![deny(missing_docs)]
pub mod architecture;
pub mod bert;
pub mod config;
pub mod cross_encoder;
pub mod embedder;
pub mod family;
pub mod mpnet;

pub use gauge_tensor::{adapter, burn, matmul, weights};
pub use architecture::{Encoder, EncoderConfig};
pub use config::{BertConfig, Pooling};
pub use mpnet::MpnetConfig;
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

/// Compute devices and the tensor type of every gauge model ([`gauge_tensor::device`]), with
/// device names parsed into this crate's error.
pub mod device {
    pub use gauge_tensor::device::{cpu, is_host_cpu, Backend, Device, Tensor};
    #[cfg(feature = "cuda")]
    pub use gauge_tensor::device::cuda;

    /// Parses `cpu` (burn-flex), `ndarray` (with the `ndarray` feature) or `cuda` / `cuda:N`
    /// (with the `cuda` feature).
    pub fn parse(name: &str) -> Result<Device, super::EncoderError> {
        Ok(gauge_tensor::device::parse(name)?)
    }
}

impl From<gauge_tensor::TensorError> for EncoderError {
    fn from(e: gauge_tensor::TensorError) -> Self {
        match e {
            gauge_tensor::TensorError::File { path, message } => EncoderError::File { path, message },
            gauge_tensor::TensorError::Device(d) => EncoderError::Device(d),
            gauge_tensor::TensorError::NoCuda(d) => EncoderError::NoCuda(d),
        }
    }
}
