//! `index`: chunks + embeddings → a faiss index and a tantivy BM25 index.
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use gauge_core::ArtifactStore;
use gauge_index::IndexConfig;

/// Builds `artifacts/index/<fingerprint>/` (dense.faiss, bm25/, chunks.parquet).
///
/// Prints the artifact directory as the last line of stdout.
#[derive(Parser, Debug)]
#[command(name = "index", version)]
struct Args {
    /// The chunk artifact directory.
    #[arg(long)]
    chunks: PathBuf,
    /// The embedding artifact directory (made from those chunks).
    #[arg(long)]
    embeddings: PathBuf,
    /// faiss factory string: Flat, HNSW32, IVF{n},Flat, IVF{n},PQ{m}.
    #[arg(long)]
    faiss: Option<String>,
    /// English stemming in the BM25 index.
    #[arg(long)]
    stemming: bool,
    /// Where faiss trains and fills the index: cpu, or cuda[:N] in a `--features faiss-gpu`
    /// build. The index written is the CPU form either way.
    #[arg(long)]
    faiss_device: Option<gauge_index::FaissDevice>,
    /// JSON config file (IndexConfig); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Recompute even when the output exists.
    #[arg(long)]
    force: bool,
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("index", || run(args));
}

fn run(args: Args) -> Result<()> {
    let mut config: IndexConfig = gauge_core::read_config(args.config.as_deref())?;
    if let Some(f) = args.faiss {
        config.faiss = f;
    }
    config.stemming |= args.stemming;
    if let Some(d) = args.faiss_device {
        config.device = d;
    }
    let out = gauge_index::run(&args.chunks, &args.embeddings, &config, &ArtifactStore::new(&args.artifacts), args.force)?;
    gauge_core::report_outcome("index", &out.dir, out.cache_hit, || format!("{} chunks indexed ({} on {} + BM25)", out.chunks, config.faiss, config.device));
    Ok(())
}
