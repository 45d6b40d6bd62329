//! `embed`: `chunks.parquet` → `embeddings.parquet`.
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use gauge_core::ArtifactStore;
use gauge_embed::{EmbedConfig, Runtime};
use gauge_encoder::Pooling;

/// Embeds chunks into `artifacts/embed/<fingerprint>/embeddings.parquet`.
///
/// Prints the artifact directory as the last line of stdout.
#[derive(Parser, Debug)]
#[command(name = "embed", version)]
struct Args {
    /// The chunk artifact directory (or its chunks.parquet).
    chunks: PathBuf,
    /// Model folder or hub id (looked up in models/ and the Hugging Face cache).
    #[arg(long)]
    model: Option<String>,
    /// Prefix for queries (default: the model family's, e.g. `query: ` for E5).
    #[arg(long)]
    query_prefix: Option<String>,
    /// Prefix for passages (default: the model family's, e.g. `passage: ` for E5).
    #[arg(long)]
    passage_prefix: Option<String>,
    /// Pooling override (default: what the model folder declares).
    #[arg(long, value_parser = parse_pooling)]
    pooling: Option<Pooling>,
    /// Skip L2 normalisation.
    #[arg(long)]
    no_normalize: bool,
    /// Maximum tokens per text (default: the model's max_seq_length).
    #[arg(long)]
    max_length: Option<usize>,
    /// Device: cpu, or cuda[:N] in a build with `--features cuda`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Padded tokens per batch.
    #[arg(long, default_value_t = 2048)]
    token_budget: usize,
    /// Batches encoded at once (default: available cores).
    #[arg(long)]
    workers: Option<usize>,
    /// JSON config file (EmbedConfig); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Recompute even when the output exists.
    #[arg(long)]
    force: bool,
}

fn parse_pooling(s: &str) -> Result<Pooling, String> {
    match s {
        "cls" => Ok(Pooling::Cls),
        "mean" => Ok(Pooling::Mean),
        other => Err(format!("unknown pooling `{other}` (cls, mean)")),
    }
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("embed", || run(args));
}

fn run(args: Args) -> Result<()> {
    let mut config: EmbedConfig = gauge_core::read_config(args.config.as_deref())?;
    if let Some(m) = args.model {
        config.model = m;
    }
    if args.query_prefix.is_some() {
        config.query_prefix = args.query_prefix;
    }
    if args.passage_prefix.is_some() {
        config.passage_prefix = args.passage_prefix;
    }
    if args.pooling.is_some() {
        config.pooling = args.pooling;
    }
    if args.no_normalize {
        config.normalize = Some(false);
    }
    if args.max_length.is_some() {
        config.max_length = args.max_length;
    }
    let runtime = Runtime { device: args.device, token_budget: args.token_budget, workers: args.workers, force: args.force };
    let out = gauge_embed::run(&args.chunks, &config, &runtime, &ArtifactStore::new(&args.artifacts))?;
    gauge_core::report_outcome("embed", &out.dir, out.cache_hit, || {
        format!("{} chunks in {:.1} s ({:.1} chunks/s)", out.chunks, out.seconds, out.chunks as f64 / out.seconds.max(1e-9))
    });
    Ok(())
}
