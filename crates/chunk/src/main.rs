//! `chunk`: `pages.parquet` → `chunks.parquet`.
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use gauge_chunk::{ChunkConfig, Strategy};
use gauge_core::ArtifactStore;

/// Cuts extracted pages into chunks in `artifacts/chunk/<fingerprint>/chunks.parquet`.
///
/// Prints the artifact directory as the last line of stdout.
#[derive(Parser, Debug)]
#[command(name = "chunk", version)]
struct Args {
    /// The extract artifact directory (or its pages.parquet).
    pages: PathBuf,
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Recompute even when the output exists.
    #[arg(long)]
    force: bool,
    /// JSON config file (ChunkConfig); flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Chunking strategy.
    #[arg(long, value_enum)]
    strategy: Option<Strategy>,
    /// Chunk size (characters; tokens for --strategy tokens).
    #[arg(long)]
    size: Option<usize>,
    /// Overlap (characters; tokens for --strategy tokens).
    #[arg(long)]
    overlap: Option<usize>,
    /// tokenizer.json (or a model folder holding one) for --strategy tokens.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Minimum chunk length in characters (0 keeps all).
    #[arg(long)]
    min_chars: Option<usize>,
    /// Keep table-of-contents (dot-leader) chunks.
    #[arg(long)]
    keep_toc: bool,
    /// Keep exact duplicate chunks.
    #[arg(long)]
    keep_duplicates: bool,
    /// Add an embed_text column with a `title › section` header.
    #[arg(long)]
    contextual_header: bool,
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("chunk", || run(args));
}

fn run(args: Args) -> Result<()> {
    let mut config: ChunkConfig = gauge_core::read_config(args.config.as_deref())?;
    if let Some(s) = args.strategy {
        config.strategy = s;
    }
    if let Some(s) = args.size {
        config.size = s;
    }
    if let Some(o) = args.overlap {
        config.overlap = o;
    }
    if let Some(m) = args.min_chars {
        config.filters.min_chars = m;
    }
    config.filters.toc &= !args.keep_toc;
    config.filters.duplicates &= !args.keep_duplicates;
    config.contextual_header |= args.contextual_header;
    let store = ArtifactStore::new(&args.artifacts);
    let out = gauge_chunk::run(&args.pages, args.tokenizer.as_deref(), &config, &store, args.force)?;
    gauge_core::report_outcome("chunk", &out.dir, out.cache_hit, || {
        let s = &out.stats;
        format!(
            "{} chunks from {} documents ({} before filters; removed {} short, {} table-of-contents, {} duplicates)",
            s.chunks, s.documents, s.chunks_before_filters, s.removed_min_chars, s.removed_toc, s.removed_duplicates
        )
    });
    Ok(())
}
