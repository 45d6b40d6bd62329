//! The `index` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::{switch_on, Layer};
use serde::Serialize;

use crate::{FaissDevice, Index, IndexInputs};

/// Inputs and flags of `index`; config flags set one field of [`crate::IndexConfig`] each.
#[derive(clap::Args, Debug, Serialize)]
pub struct IndexArgs {
    /// The chunk artifact directory (default: the one the embeddings were made from).
    #[arg(long)]
    #[serde(skip)]
    pub chunks: Option<PathBuf>,
    /// The embedding artifact directory (made from those chunks); repeat it once per shard of
    /// `embed --shard i/n` to build the index of all of them.
    #[arg(long, required = true)]
    #[serde(skip)]
    pub embeddings: Vec<PathBuf>,
    /// Index only shard i/n of the chunks (0-based; the partition `embed --shard` uses) (`shard`).
    #[arg(long)]
    pub shard: Option<gauge_core::shard::Shard>,
    /// faiss factory string: Flat, HNSW32, IVF{n},Flat, IVF{n},PQ{m} (`faiss`).
    #[arg(long)]
    pub faiss: Option<String>,
    /// English stemming in the BM25 index (`stemming`).
    #[arg(long)]
    #[serde(serialize_with = "switch_on")]
    pub stemming: bool,
    /// Lucene's English stop words left out of the BM25 index and its queries (`stopwords`).
    #[arg(long)]
    #[serde(serialize_with = "switch_on")]
    pub stopwords: bool,
    /// Where faiss trains and fills the index: cpu, or cuda[:N] in a `--features faiss-gpu`
    /// build; the index written is the CPU form either way (`device`).
    #[arg(long)]
    #[serde(rename = "device")]
    pub faiss_device: Option<FaissDevice>,
}

impl StageCli for Index {
    const ABOUT: &'static str = "Builds artifacts/index/<fingerprint>/ (dense.faiss, bm25/, chunks.parquet) from chunks and their embeddings; prints the artifact directory as the last line of stdout.";
    type Args = IndexArgs;

    fn invocation(args: IndexArgs, _shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        let mut embeddings = args.embeddings.into_iter();
        let first = embeddings.next().expect("clap requires one");
        Ok(Invocation { inputs: IndexInputs { chunks: args.chunks, embeddings: first, more_embeddings: embeddings.collect() }, options: (), flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::IndexArgs>(super::Index::BIN, super::Index::ABOUT, true).debug_assert();
    }
}
