//! `train-lora`: QLoRA-style adapter training for the Llama-family decoders gauge loads, in
//! Burn, saved as PEFT adapter folders.
//!
//! - [`frozen`]: the frozen base held in 4 bits (GGUF blocks or NF4), dequantised per layer.
//! - [`model`]: the network with LoRA, loss on target tokens, gradients by Burn autodiff with
//!   layer-wise recomputation.
//! - [`optim`]: PyTorch's AdamW, global-norm clipping, warm-up + cosine/linear schedules.
//! - [`data`]: chat-format SFT examples → token ids and assistant-token targets.
//! - [`bert`]: BERT encoders for training (embedder and cross-encoder; LoRA or full); their
//!   CPU step runs on hand-written host kernels (`bert_host`), Burn autodiff elsewhere.
//! - [`retriever`]: the `embedder` and `reranker` targets (data, hard negatives, losses).
//! - [`steps`]: the optimisation loop both trainers share (order, schedule, AdamW, curve,
//!   evaluation, checkpoints and resume).
//! - [`train`]: the training stage (config, fingerprint, checkpoints and resume, evaluation
//!   loss, adapter folder, loss curve).
#![deny(missing_docs)]
pub mod cli;
pub mod curve;
pub mod data;
pub mod frozen;
pub mod host;
pub mod model;
pub mod optim;
pub mod steps;
pub mod train;
pub mod merge;
pub mod bert;
mod bert_host;
mod bert_types;
pub mod retriever;
pub mod run;

pub use frozen::BaseStorage;
pub use model::{LoraParams, LoraShape, Sequence, TrainableLlama};
pub use run::{RetrieverConfig, Target};
pub use train::{TrainConfig, TrainInputs, TrainLora};

/// Errors of adapter training.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// The base model failed to load.
    #[error(transparent)]
    Decoder(#[from] gauge_decoder::DecoderError),
    /// The network cannot run what was asked.
    #[error("{0}")]
    Model(String),
    /// A setting is wrong.
    #[error("{0}")]
    Config(String),
    /// Training data is missing or malformed.
    #[error("{path}: {message}")]
    Data {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
}
