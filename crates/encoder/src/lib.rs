//! BERT-family encoders in Burn, loaded from Hugging Face / sentence-transformers folders
//! with no conversion step.
//!
//! - [`config`]: `config.json`, `modules.json`, pooling and `sentence_bert_config.json`.
//! - [`bert`]: the encoder (embeddings, post-norm layers with padding-masked attention).
//! - [`embedder`]: tokenization, token-budget batching, pooling, normalisation, prefixes.
//! - [`family`]: defaults of the MiniLM, BGE, E5 and GTE families.
//! - [`resolve`]: `--model` as a folder, `models/<name>` or the Hugging Face cache.
//! - [`device`]: the compute device (burn-flex CPU; CUDA with the `cuda` feature).
pub mod bert;
pub mod config;
pub mod cross_encoder;
pub mod embedder;
pub mod family;
pub mod resolve;
pub mod weights;

pub use burn;
pub use config::{BertConfig, Pooling};
pub use cross_encoder::{CrossEncoder, CrossEncoderInfo, CrossEncoderOptions, PairEncoding};
pub use embedder::{BatchStats, Embedder, EmbedderInfo, EmbedderOptions};
pub use family::Family;
pub use resolve::{resolve_model, ModelSource};

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
    /// `--model` did not resolve.
    #[error("model `{spec}` not found (looked in {searched}); pass a model folder, put one under models/, or run `just models` for the default all-MiniLM-L6-v2")]
    ModelNotFound {
        /// What was asked for.
        spec: String,
        /// Where it looked.
        searched: String,
    },
    /// Tokenization failed.
    #[error("tokenization failed: {0}")]
    Tokenize(String),
    /// An unknown device name.
    #[error("unknown device `{0}` (expected cpu; ndarray or cuda[:N] in builds with those features)")]
    Device(String),
}

impl EncoderError {
    /// An error about a file.
    pub fn file(path: &Path, message: String) -> Self {
        EncoderError::File { path: path.to_path_buf(), message }
    }
}

/// Compute devices.
pub mod device {
    use super::EncoderError;
    pub use burn::tensor::Device;

    /// Parses `cpu` (burn-flex), `ndarray` (with the `ndarray` feature) or `cuda` / `cuda:N`
    /// (with the `cuda` feature).
    pub fn parse(name: &str) -> Result<Device, EncoderError> {
        match name {
            "cpu" | "flex" => Ok(Device::flex()),
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            "ndarray" => Ok(Device::ndarray()),
            #[cfg(feature = "cuda")]
            s if s == "cuda" || s.starts_with("cuda:") => {
                let index: usize = s.strip_prefix("cuda:").map(|i| i.parse().unwrap_or(0)).unwrap_or(0);
                Ok(Device::cuda(index))
            }
            other => Err(EncoderError::Device(other.to_string())),
        }
    }
}
