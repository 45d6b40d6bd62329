//! The `embed` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::Layer;
use gauge_encoder::Pooling;
use serde::Serialize;

use crate::{Embed, EmbedOptions};

/// Inputs and flags of `embed`; config flags set one field of [`crate::EmbedConfig`] each.
#[derive(clap::Args, Debug, Serialize)]
pub struct EmbedArgs {
    /// The chunk artifact directory (or its chunks.parquet).
    #[serde(skip)]
    pub chunks: PathBuf,
    /// Model folder or id, looked up in the models directory and the Hugging Face cache (`model`).
    #[arg(long)]
    pub model: Option<String>,
    /// Prefix for queries; default: the model family's, e.g. `query: ` for E5 (`query_prefix`).
    #[arg(long)]
    pub query_prefix: Option<String>,
    /// Prefix for passages; default: the model family's (`passage_prefix`).
    #[arg(long)]
    pub passage_prefix: Option<String>,
    /// Pooling override: cls or mean; default: what the model folder declares (`pooling`).
    #[arg(long, value_parser = gauge_core::config::parse_as::<Pooling>)]
    pub pooling: Option<Pooling>,
    /// Skip L2 normalisation (`normalize = false`).
    #[arg(long)]
    #[serde(rename = "normalize", serialize_with = "gauge_core::config::switch_off")]
    pub no_normalize: bool,
    /// Maximum tokens per text; default: the model's max_seq_length (`max_length`).
    #[arg(long)]
    pub max_length: Option<usize>,
    /// A LoRA adapter folder (PEFT, e.g. `train-lora --target embedder`'s `adapter/`) merged into the model (`adapter`).
    #[arg(long)]
    pub adapter: Option<String>,
    /// Embed only shard i/n of the chunks (0-based; a stable partition by chunk id) (`shard`).
    #[arg(long)]
    pub shard: Option<gauge_core::shard::Shard>,
    /// Device: cpu, or cuda[:N] in a build with `--features cuda`.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Padded tokens per batch.
    #[arg(long, default_value_t = 2048)]
    #[serde(skip)]
    pub token_budget: usize,
    /// Batches encoded at once (default: available cores).
    #[arg(long)]
    #[serde(skip)]
    pub workers: Option<usize>,
}

impl StageCli for Embed {
    const ABOUT: &'static str = "Embeds chunks into artifacts/embed/<fingerprint>/embeddings.parquet; prints the artifact directory as the last line of stdout.";
    type Args = EmbedArgs;

    fn invocation(args: EmbedArgs, _shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        let options = EmbedOptions { device: args.device, token_budget: args.token_budget, workers: args.workers };
        Ok(Invocation { inputs: args.chunks, options, flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::EmbedArgs>(super::Embed::BIN, super::Embed::ABOUT, true).debug_assert();
    }
}
