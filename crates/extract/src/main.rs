//! `extract`: documents (PDF, Markdown, text, JSONL) → `pages.parquet`.
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use gauge_core::ArtifactStore;
use gauge_extract::{ExtractConfig, RunOptions};

/// Extracts pages from documents into `artifacts/extract/<fingerprint>/pages.parquet`.
///
/// Prints the artifact directory as the last line of stdout.
#[derive(Parser, Debug)]
#[command(name = "extract", version)]
struct Args {
    /// Input folders (walked recursively) or files.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Artifact root.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Recompute even when the output exists.
    #[arg(long)]
    force: bool,
    /// Exit non-zero when any input fails (default: only when nothing could be extracted).
    #[arg(long)]
    strict: bool,
    /// JSON config file (ExtractConfig); flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Skip Unicode NFKC normalisation.
    #[arg(long)]
    no_nfkc: bool,
    /// Keep private-use bullet glyphs as they are.
    #[arg(long)]
    no_bullets: bool,
    /// Keep whitespace as extracted.
    #[arg(long)]
    no_whitespace: bool,
    /// Keep running headers and footers.
    #[arg(long)]
    no_headers_footers: bool,
    /// Keep line-end hyphens and line breaks as extracted.
    #[arg(long)]
    no_hyphen_join: bool,
    /// JSONL field holding the record id.
    #[arg(long)]
    jsonl_id_field: Option<String>,
    /// JSONL field holding the title.
    #[arg(long)]
    jsonl_title_field: Option<String>,
    /// JSONL field holding the text.
    #[arg(long)]
    jsonl_text_field: Option<String>,
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("extract", || run(args));
}

fn run(args: Args) -> Result<()> {
    let mut config: ExtractConfig = gauge_core::read_config(args.config.as_deref())?;
    let c = &mut config.cleaning;
    c.nfkc &= !args.no_nfkc;
    c.bullets &= !args.no_bullets;
    c.whitespace &= !args.no_whitespace;
    c.headers_footers &= !args.no_headers_footers;
    c.hyphen_join &= !args.no_hyphen_join;
    if let Some(f) = args.jsonl_id_field {
        config.jsonl.id = f;
    }
    if let Some(f) = args.jsonl_title_field {
        config.jsonl.title = f;
    }
    if let Some(f) = args.jsonl_text_field {
        config.jsonl.text = f;
    }
    let store = ArtifactStore::new(&args.artifacts);
    let out = gauge_extract::run(&args.inputs, &config, &store, &RunOptions { force: args.force, strict: args.strict })?;
    gauge_core::report_outcome("extract", &out.dir, out.cache_hit, || {
        let s = &out.stats;
        let failed = if out.errors.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = out.errors.iter().map(|e| format!("{} ({})", e.source, e.reason)).collect();
            format!("; {} failed: {}", out.errors.len(), list.join(", "))
        };
        format!("{} documents, {} pages ({} empty) from {} files{failed}", s.documents, s.pages, s.empty_pages, s.files)
    });
    Ok(())
}
