//! The `raptor` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::Layer;
use serde::Serialize;

use crate::{Raptor, RaptorInputs, RaptorOptions};

/// Inputs and flags of `raptor`; config flags set one field of [`crate::RaptorConfig`] each.
#[derive(clap::Args, Debug, Serialize)]
pub struct RaptorArgs {
    /// The embed artifact directory (its chunks are the leaves).
    #[serde(skip)]
    pub embeddings: PathBuf,
    /// The chunk artifact directory (default: the one the embeddings were made from).
    #[arg(long)]
    #[serde(skip)]
    pub chunks: Option<PathBuf>,
    /// Wanted chunks per cluster (`cluster_size`).
    #[arg(long)]
    pub cluster_size: Option<usize>,
    /// Summary levels, 1 or 2 (`levels`).
    #[arg(long)]
    pub levels: Option<usize>,
    /// Local model file, folder or name writing the summaries (`model.model`); an endpoint is
    /// set in a config file (`[model] kind = "api"`).
    #[arg(long)]
    #[serde(rename = "model.model")]
    pub llm_model: Option<String>,
    /// A template file replacing the built-in summary prompt (`template`).
    #[arg(long)]
    pub template: Option<String>,
    /// Tokens per summary (`max_new_tokens`).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Seed of clustering and sampling (`seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Device of the local decoder: cpu, or cuda[:N] in a build with `--features cuda`.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Endpoint calls in flight at once.
    #[arg(long, default_value_t = 4)]
    #[serde(skip)]
    pub concurrency: usize,
}

impl StageCli for Raptor {
    const ABOUT: &'static str = "Adds RAPTOR summary nodes (clusters of chunk embeddings summarised by a language model) to a chunk artifact → artifacts/raptor/<fingerprint>/chunks.parquet; prints the artifact directory as the last line of stdout.";
    type Args = RaptorArgs;

    fn invocation(args: RaptorArgs, shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        let options = RaptorOptions { device: args.device, cache: Some(shared.artifacts.join("llm-cache")), concurrency: args.concurrency };
        Ok(Invocation { inputs: RaptorInputs { embeddings: args.embeddings, chunks: args.chunks }, options, flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::RaptorArgs>(super::Raptor::BIN, super::Raptor::ABOUT, true).debug_assert();
    }
}
