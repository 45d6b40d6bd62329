//! The `extract` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::{switch_off, Layer};
use serde::Serialize;

use crate::{Extract, ExtractOptions};

/// Inputs and flags of `extract`; each flag sets one field of [`crate::ExtractConfig`].
#[derive(clap::Args, Debug, Serialize)]
pub struct ExtractArgs {
    /// Input folders (walked recursively) or files.
    #[arg(required = true)]
    #[serde(skip)]
    pub inputs: Vec<PathBuf>,
    /// Exit non-zero when any input fails (default: only when nothing could be extracted).
    #[arg(long)]
    #[serde(skip)]
    pub strict: bool,
    /// Follow symbolic links that lead outside the input folder (by default they are skipped
    /// and counted; links inside it are followed, each folder read once).
    #[arg(long)]
    #[serde(skip)]
    pub follow_symlinks: bool,
    /// Skip Unicode NFKC normalisation (`cleaning.nfkc = false`).
    #[arg(long)]
    #[serde(rename = "cleaning.nfkc", serialize_with = "switch_off")]
    pub no_nfkc: bool,
    /// Keep private-use bullet glyphs as they are (`cleaning.bullets = false`).
    #[arg(long)]
    #[serde(rename = "cleaning.bullets", serialize_with = "switch_off")]
    pub no_bullets: bool,
    /// Keep whitespace as extracted (`cleaning.whitespace = false`).
    #[arg(long)]
    #[serde(rename = "cleaning.whitespace", serialize_with = "switch_off")]
    pub no_whitespace: bool,
    /// Keep running headers and footers (`cleaning.headers_footers = false`).
    #[arg(long)]
    #[serde(rename = "cleaning.headers_footers", serialize_with = "switch_off")]
    pub no_headers_footers: bool,
    /// Keep line-end hyphens and line breaks as extracted (`cleaning.hyphen_join = false`).
    #[arg(long)]
    #[serde(rename = "cleaning.hyphen_join", serialize_with = "switch_off")]
    pub no_hyphen_join: bool,
    /// JSONL field holding the record id (`jsonl.id`).
    #[arg(long)]
    #[serde(rename = "jsonl.id")]
    pub jsonl_id_field: Option<String>,
    /// JSONL field holding the title (`jsonl.title`).
    #[arg(long)]
    #[serde(rename = "jsonl.title")]
    pub jsonl_title_field: Option<String>,
    /// JSONL field holding the text (`jsonl.text`).
    #[arg(long)]
    #[serde(rename = "jsonl.text")]
    pub jsonl_text_field: Option<String>,
}

impl StageCli for Extract {
    const ABOUT: &'static str = "Extracts pages from documents (PDF, Markdown, text; JSONL, TSV and TREC <DOC> records) into artifacts/extract/<fingerprint>/pages.parquet; prints the artifact directory as the last line of stdout.";
    type Args = ExtractArgs;

    fn invocation(args: ExtractArgs, shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        Ok(Invocation { inputs: args.inputs, options: ExtractOptions { strict: args.strict, follow_symlinks: args.follow_symlinks, skip_dirs: vec![shared.artifacts.clone()] }, flags })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::ExtractArgs>(super::Extract::BIN, super::Extract::ABOUT, true).debug_assert();
    }
}
