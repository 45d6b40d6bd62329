//! `synth-data`: questions with gold passages from a chunk artifact, by a teacher LLM or by
//! inverse cloze.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use gauge_core::ArtifactStore;
use gauge_synth::{Mode, Runtime, Style, SynthConfig};

/// Writes `artifacts/synth/<fingerprint>/golden.jsonl` (the golden-set format `evaluate`
/// reads) plus `train/dev/test.jsonl` when split, `failures.jsonl` and the journal.
///
/// Prints the artifact directory as the last line of stdout. A killed LLM run resumes from
/// its journal when rerun with the same settings.
#[derive(Parser, Debug)]
#[command(name = "synth-data", version)]
struct Args {
    /// The chunk artifact directory.
    chunks: PathBuf,
    /// `llm` (a teacher endpoint) or `ict` (inverse cloze, offline).
    #[arg(long, default_value = "ict")]
    mode: String,
    /// Samples to draw.
    #[arg(long)]
    n: Option<usize>,
    /// LLM question styles, comma-separated: factual, scenario, multi_hop.
    #[arg(long)]
    styles: Option<String>,
    /// Split weights train:dev:test (e.g. 70:15:15) or train:test, grouped by source page.
    #[arg(long)]
    split: Option<String>,
    /// Seed of sampling and splits.
    #[arg(long)]
    seed: Option<u64>,
    /// Skip chunks shorter than this.
    #[arg(long)]
    min_chars: Option<usize>,
    /// Teacher base URL (up to /v1), e.g. https://api.openai.com/v1 or http://localhost:11434/v1.
    #[arg(long)]
    base_url: Option<String>,
    /// Teacher model name.
    #[arg(long)]
    model: Option<String>,
    /// Name of the environment variable holding the API key (never the key itself).
    #[arg(long)]
    api_key_env: Option<String>,
    /// Prompt templates folder.
    #[arg(long, default_value = "pipelines/prompts")]
    prompts: PathBuf,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Requests per minute (0: unlimited).
    #[arg(long, default_value_t = 60)]
    rpm: u32,
    /// Seconds before a request counts as timed out.
    #[arg(long, default_value_t = 120.0)]
    timeout_s: f64,
    /// Retries on 429/5xx/timeouts.
    #[arg(long, default_value_t = 6)]
    max_retries: u32,
    /// First backoff in milliseconds (doubles per retry, ±50 % jitter).
    #[arg(long, default_value_t = 2000)]
    backoff_ms: u64,
    /// JSON config file (SynthConfig); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also copy golden.jsonl here (e.g. data/golden/fra-ict.jsonl) for pipelines to read.
    #[arg(long)]
    copy_to: Option<PathBuf>,
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Recompute even when the output exists (discards the journal).
    #[arg(long)]
    force: bool,
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("synth-data", || run(args));
}

fn run(args: Args) -> Result<()> {
    let mut cfg: SynthConfig = gauge_core::read_config(args.config.as_deref())?;
    cfg.mode = match args.mode.as_str() {
        "ict" => Mode::Ict,
        "llm" => Mode::Llm,
        other => anyhow::bail!("unknown --mode `{other}` (llm, ict)"),
    };
    if let Some(n) = args.n {
        cfg.n = n;
    }
    if let Some(s) = &args.styles {
        cfg.styles = s
            .split(',')
            .map(|x| Style::parse(x).ok_or_else(|| anyhow::anyhow!("unknown style `{x}` (factual, scenario, multi_hop)")))
            .collect::<Result<_>>()?;
    }
    if let Some(s) = &args.split {
        cfg.split = s.split(':').map(|w| w.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("--split takes weights like 70:15:15, got `{s}`"))).collect::<Result<_>>()?;
    }
    if let Some(v) = args.seed {
        cfg.seed = v;
    }
    if let Some(v) = args.min_chars {
        cfg.min_chars = v;
    }
    if let Some(v) = args.base_url {
        cfg.teacher.base_url = v;
    }
    if let Some(v) = args.model {
        cfg.teacher.model = v;
    }
    if let Some(v) = args.api_key_env {
        cfg.teacher.api_key_env = v;
    }
    let rt = Runtime {
        concurrency: args.concurrency,
        retry: gauge_llm::RetryPolicy {
            timeout: Duration::from_secs_f64(args.timeout_s),
            max_retries: args.max_retries,
            backoff_base: Duration::from_millis(args.backoff_ms),
            backoff_max: Duration::from_secs(120),
            requests_per_minute: args.rpm,
        },
        prompts: args.prompts,
        force: args.force,
    };
    let out = gauge_synth::run(&args.chunks, &cfg, &rt, &ArtifactStore::new(&args.artifacts))?;
    if let Some(dest) = &args.copy_to {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = dest.with_extension("jsonl.partial");
        std::fs::copy(out.dir.join("golden.jsonl"), &tmp).map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dest)?;
    }
    gauge_core::report_outcome("synth-data", &out.dir, out.cache_hit, || {
        format!("{} questions kept, {} samples failed ({} resumed from the journal)", out.accepted, out.failed, out.resumed)
    });
    Ok(())
}
