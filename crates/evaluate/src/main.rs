//! `evaluate`: runs a pipeline's ablation (upstream stages cached) and writes the tables.
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use gauge_evaluate::{run_pipeline, AblateOptions, RelevanceMode};

/// Builds every distinct upstream artifact of a pipeline once, evaluates every config on its
/// golden set, and writes `metrics.parquet`, `per_query.parquet`, `runs.parquet`, TREC
/// run/qrels files, `ablation.md` and `ablation.png` into `artifacts/evaluate/<fingerprint>/`,
/// copied to `eval/<pipeline>/`.
///
/// Prints the artifact directory as the last line of stdout.
#[derive(Parser, Debug)]
#[command(name = "evaluate", version)]
struct Args {
    /// The pipeline file.
    #[arg(default_value = "pipelines/fra.toml")]
    pipeline: PathBuf,
    /// Force a relevance mode: page, span or keyword (default: from the golden set's fields).
    #[arg(long)]
    relevance: Option<String>,
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Where `<pipeline>/` results are copied.
    #[arg(long, default_value = "eval")]
    eval_dir: PathBuf,
    /// Re-evaluate even when cached (upstream stages stay cached).
    #[arg(long)]
    force: bool,
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("evaluate", || run(args));
}

fn run(args: Args) -> Result<()> {
    let relevance = match args.relevance.as_deref() {
        None | Some("auto") => None,
        Some("page") => Some(RelevanceMode::Page),
        Some("span") => Some(RelevanceMode::Span),
        Some("keyword") => Some(RelevanceMode::Keyword),
        Some(other) => anyhow::bail!("unknown --relevance `{other}` (page, span, keyword, auto)"),
    };
    let started = std::time::Instant::now();
    let out = run_pipeline(&args.pipeline, &AblateOptions { artifacts: args.artifacts, eval_dir: args.eval_dir, force: args.force, relevance })?;
    for b in &out.built {
        eprintln!("built {b}");
    }
    gauge_core::report_outcome("evaluate", &out.dir, out.cache_hit, || {
        let skipped = if out.skipped > 0 { format!(" ({} skipped, see ablation.md)", out.skipped) } else { String::new() };
        format!("{} configs evaluated{skipped} in {:.1} s; tables in {}", out.configs, started.elapsed().as_secs_f64(), out.eval_copy.display())
    });
    Ok(())
}
