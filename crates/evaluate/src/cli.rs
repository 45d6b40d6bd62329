//! The `evaluate` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::{Path, PathBuf};


use gauge_core::cli::{Invocation, SharedArgs, StageCli};
use gauge_core::config::{parse_as, Layer};
use gauge_core::stage::Built;
use serde::Serialize;

use crate::ablate::{copy_to_eval, Evaluate, EvaluateOptions, EvaluateSummary};
use crate::RelevanceMode;

/// Inputs and flags of `evaluate`.
#[derive(clap::Args, Debug, Serialize)]
pub struct EvaluateArgs {
    /// The pipeline file.
    #[arg(default_value = "pipelines/fra.toml")]
    #[serde(skip)]
    pub pipeline: PathBuf,
    /// Force a relevance mode: page, span, keyword or auto (default: the pipeline's) (`relevance`).
    #[arg(long, value_parser = parse_as::<RelevanceMode>)]
    pub relevance: Option<RelevanceMode>,
    /// Evaluate on this golden set instead of the pipeline's, e.g. a held-out synthetic set
    /// (`golden`); a `<set>.pages.json` beside it is its page split (see `synth-data --mode heldout`).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub golden: Option<PathBuf>,
    /// Results under eval/<NAME>/ instead of the pipeline's name (`name`); give one with --golden.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where `<pipeline>/` results are copied.
    #[arg(long, default_value = "eval")]
    #[serde(skip)]
    pub eval_dir: PathBuf,
    /// Device of the query embedders and rerankers: cpu, or cuda[:N] in a `--features cuda` build.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Verify a shared result instead of evaluating: re-hash the outputs and inputs recorded in
    /// DIR/manifest.json (e.g. eval/fra), re-score runs.parquet, re-derive metrics.parquet.
    #[arg(long, value_name = "DIR")]
    #[serde(skip)]
    pub verify: Option<PathBuf>,
    /// With --verify: rebuild the pipeline's upstream artifacts (the PIPELINE argument) and
    /// check each config's index fingerprint against the recorded one.
    #[arg(long, requires = "verify")]
    #[serde(skip)]
    pub rebuild: bool,
    /// Rewrite DIR/report.html (e.g. eval/fra) from the folder's committed tables and
    /// manifest, without evaluating anything; input paths resolve from the current directory.
    #[arg(long, value_name = "DIR", conflicts_with = "verify")]
    #[serde(skip)]
    pub report_only: Option<PathBuf>,
}

impl StageCli for Evaluate {
    const ABOUT: &'static str = "Builds every distinct upstream artifact of a pipeline once, evaluates every config on its golden set, and writes metrics.parquet, per_query.parquet, runs.parquet, TREC run/qrels files, ablation.md and ablation.png into artifacts/evaluate/<fingerprint>/, copied to eval/<pipeline>/ with report.html (one self-contained page: tables, plots, every question's passages; --report-only DIR rewrites it). Prints the artifact directory as the last line of stdout.";
    type Args = EvaluateArgs;

    /// `--verify DIR`: the reproducibility check of a finished evaluation.
    fn instead(args: &EvaluateArgs, shared: &SharedArgs) -> Option<anyhow::Result<()>> {
        if let Some(dir) = &args.report_only {
            return Some(crate::report_page::write(dir, Path::new(".")).map(|out| gauge_core::outln!("{}", out.display())));
        }
        let dir = args.verify.as_ref()?;
        let opts = crate::verify::VerifyOptions { rebuild: args.rebuild.then(|| args.pipeline.clone()), artifacts: shared.artifacts.clone(), device: args.device.clone() };
        Some(crate::verify::verify(dir, &opts).and_then(|r| crate::verify::print(&r)))
    }

    fn invocation(args: EvaluateArgs, shared: &SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let flags = Layer::from_flags("flags", &args);
        let options = EvaluateOptions { eval_dir: args.eval_dir, device: args.device, artifacts: shared.artifacts.clone() };
        Ok(Invocation { inputs: args.pipeline, options, flags })
    }

    /// Copies the tables to `eval/<pipeline name>/`.
    fn after(built: &Built<EvaluateSummary>, options: &EvaluateOptions) -> anyhow::Result<()> {
        let manifest = gauge_core::Manifest::read(&built.dir)?;
        let name = manifest.config["pipeline"].as_str().unwrap_or("pipeline").to_string();
        gauge_core::names::plain_name(&name).map_err(|why| anyhow::anyhow!("{}: the pipeline name {why}", built.dir.join("manifest.json").display()))?;
        let dest = options.eval_dir.join(name);
        copy_to_eval(&built.dir, &dest)?;
        eprintln!("evaluate: tables and report.html in {}", dest.display());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::EvaluateArgs>(super::Evaluate::BIN, super::Evaluate::ABOUT, true).debug_assert();
    }
}
