//! The `chunk` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::{switch_off, switch_on, Layer};
use serde::Serialize;

use crate::{Chunk, Strategy};

/// Inputs and flags of `chunk`; each flag sets one field of [`crate::ChunkConfig`].
#[derive(clap::Args, Debug, Serialize)]
pub struct ChunkArgs {
    /// The extract artifact directory (or its pages.parquet).
    #[serde(skip)]
    pub pages: PathBuf,
    /// Chunking strategy (`strategy`).
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,
    /// Chunk size: characters; tokens for --strategy tokens (`size`).
    #[arg(long)]
    pub size: Option<usize>,
    /// Overlap: characters; tokens for --strategy tokens (`overlap`).
    #[arg(long)]
    pub overlap: Option<usize>,
    /// tokenizer.json, a model folder or a model id, for --strategy tokens (`tokenizer`).
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// Minimum chunk length in characters, 0 keeps all (`filters.min_chars`).
    #[arg(long)]
    #[serde(rename = "filters.min_chars")]
    pub min_chars: Option<usize>,
    /// Keep table-of-contents (dot-leader) chunks (`filters.toc = false`).
    #[arg(long)]
    #[serde(rename = "filters.toc", serialize_with = "switch_off")]
    pub keep_toc: bool,
    /// Keep exact duplicate chunks (`filters.duplicates = false`).
    #[arg(long)]
    #[serde(rename = "filters.duplicates", serialize_with = "switch_off")]
    pub keep_duplicates: bool,
    /// Add an embed_text column with a `title › section` header (`contextual_header`).
    #[arg(long)]
    #[serde(serialize_with = "switch_on")]
    pub contextual_header: bool,
}

impl StageCli for Chunk {
    const ABOUT: &'static str = "Cuts extracted pages into chunks in artifacts/chunk/<fingerprint>/chunks.parquet; prints the artifact directory as the last line of stdout.";
    type Args = ChunkArgs;

    fn invocation(args: ChunkArgs, _shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        Ok(Invocation { inputs: args.pages, options: (), flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::ChunkArgs>(super::Chunk::BIN, super::Chunk::ABOUT, true).debug_assert();
    }
}
