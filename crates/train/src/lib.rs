//! Training the models gauge uses (`train-lora`, one stage for every `--target`), in Burn:
//!
//! - [`generator`]: QLoRA adapters for the Llama-family decoders (frozen 4-bit base, hand-written
//!   CPU kernels, PEFT adapter folders, merged folders).
//! - [`retriever`]: the `embedder` and `reranker` targets, LoRA or full fine-tuning (data, hard
//!   negatives, losses, BERT forward/backward).
//! - [`stage`]: the stage (config, fingerprint, inputs; dispatches to the target).
//! - [`steps`]: the optimisation loop both share (order, schedule, AdamW, curve, evaluation,
//!   checkpoints and resume); [`optim`]: PyTorch's AdamW, global-norm clipping, warm-up +
//!   cosine/linear schedules; [`run`]: the run's config and summary types; [`curve`]: the loss
//!   curve's table and plot.
#![deny(missing_docs)]
pub mod cli;
pub mod curve;
pub mod generator;
pub mod optim;
pub mod retriever;
pub mod run;
pub mod stage;
pub mod steps;

pub use generator::frozen::BaseStorage;
pub use generator::model::{LoraParams, LoraShape, Sequence, TrainableLlama};
pub use run::{RetrieverConfig, Target};
pub use stage::{TrainConfig, TrainInputs, TrainLora};

/// Errors of training (any target).
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
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
