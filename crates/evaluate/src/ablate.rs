//! Orchestration of `evaluate` as phases with typed hand-offs: plan ([`crate::planning`]:
//! pipeline, golden set, upstream artifacts → [`EvaluatePlan`]), the config search
//! ([`crate::config_search`], with `[search]`), retrieve ([`crate::retrieve`]: every config's
//! searches → [`crate::retrieve::Retrieved`]), the retrieval tables ([`crate::tables`]),
//! answers and judge ([`crate::answering`] → [`crate::answering::AnswerPhase`]), the gate
//! ([`crate::gate`]) and the files ([`crate::outputs`]).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use gauge_core::stage::{Plan, Stage};
use gauge_core::StageRun;

pub use crate::planning::{upstream_indexes, EvaluateConfig, EvaluateOptions, EvaluatePlan};
pub use crate::retrieve::config_for;
use crate::retrieve::{evaluate_variants, SearchRun};
use crate::tables::RetrievalTables;

/// Stage name of evaluation artifacts.
pub const STAGE: &str = "evaluate";
/// Output format version (4: adjusted p-values, wins/ties/losses; 5: graded nDCG over gold
/// items, graded TREC qrels; 6: that nDCG capped at 1 for passages covering several items;
/// 7: nDCG and recall over the gold-item ranking the passages imply, written as
/// `trec/<config>.items.run` + `trec/items.qrels`).
pub const FORMAT_VERSION: u32 = 7;

/// What an evaluation did.
#[derive(Debug, Default)]
pub struct EvaluateSummary {
    /// Configs evaluated.
    pub configs: usize,
    /// Configs skipped (see `ablation.md`).
    pub skipped: usize,
    /// Seconds.
    pub seconds: f64,
}

/// The `evaluate` stage: a pipeline file → metrics, per-question rows, runs, TREC files,
/// `ablation.md` and `ablation.png` (upstream stages built through the stage DAG).
pub struct Evaluate;

impl Stage for Evaluate {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = EvaluateConfig;
    /// The pipeline file.
    type Inputs = PathBuf;
    type Options = EvaluateOptions;
    type State = EvaluatePlan;
    type Summary = EvaluateSummary;

    fn plan(config: &EvaluateConfig, pipeline_path: &PathBuf, options: &EvaluateOptions) -> anyhow::Result<Plan<EvaluatePlan>> {
        crate::planning::plan_evaluation(config, pipeline_path, options)
    }

    fn build(plan: EvaluatePlan, run: &mut StageRun, _: &EvaluateConfig, _: &PathBuf, options: &EvaluateOptions) -> anyhow::Result<EvaluateSummary> {
        let started = Instant::now();
        for b in &plan.built {
            eprintln!("evaluate: built {b}");
        }
        let mut plan = plan;
        let search_md = match plan.search_questions.take() {
            Some(questions) => crate::config_search::run_search(&mut plan, questions, run, options)?,
            None => String::new(),
        };
        let (configs, skipped) = evaluate_plan(&plan, run, options, &search_md)?;
        Ok(EvaluateSummary { configs, skipped, seconds: started.elapsed().as_secs_f64() })
    }

    fn summary_line(s: &EvaluateSummary) -> String {
        let skipped = if s.skipped > 0 { format!(" ({} skipped, see ablation.md)", s.skipped) } else { String::new() };
        format!("{} configs evaluated{skipped} in {:.1} s", s.configs, s.seconds)
    }
}

/// Runs the phases after planning and writes the run's files; returns (configs evaluated,
/// configs skipped).
fn evaluate_plan(plan: &EvaluatePlan, run: &mut StageRun, options: &EvaluateOptions, search_md: &str) -> anyhow::Result<(usize, usize)> {
    let pipeline = &plan.pipeline;
    let skip: BTreeSet<&str> = plan.skipped.iter().map(|(n, _)| n.as_str()).collect();
    let cache = std::sync::Arc::new(gauge_generator::cache::CallCache::new(options.artifacts.join("llm-cache")));
    let retrieved = evaluate_variants(pipeline, &plan.upstream, &plan.golden, plan.mode, &skip, &SearchRun { device: &options.device, cache: &cache, trace_and_show: true })?;
    if cache.hits() + cache.misses() > 0 {
        eprintln!("evaluate: {} model calls, {} served from the cache ({})", cache.misses(), cache.hits(), cache.dir().display());
        run.set_stat("model_calls", cache.misses());
        run.set_stat("model_calls_cached", cache.hits());
    }
    let names: Vec<String> = pipeline.variants.iter().filter(|v| !skip.contains(v.name.as_str())).map(|v| v.name.clone()).collect();
    let tables = RetrievalTables::of(pipeline, &plan.golden, &retrieved.query_rows, names);
    let answers = crate::answering::answer_phase(plan, &retrieved, &cache, &options.device, run)?;
    let mut failures = retrieved.failures.clone();
    failures.extend(answers.failures.iter().cloned());
    let gate = crate::gate::rows(pipeline, &tables, &retrieved.query_rows, &plan.answers, &answers.deltas, plan.golden.len()).context("the gate")?;
    let non_inferiority = crate::gate::non_inferiority_rows(pipeline, &plan.answers, &answers.deltas)?;
    let evaluation = crate::outputs::Evaluation { plan, retrieved: &retrieved, tables: &tables, answers: &answers, failures: &failures, gate: &gate, non_inferiority: &non_inferiority, search_md };
    crate::outputs::write(&evaluation, run)?;
    Ok((tables.names.len(), plan.skipped.len()))
}

/// Replaces `eval/<name>/` with a copy of the artifact and its report page (the page and
/// `questions.parquet` written into the copy before it is swapped in, so `eval/<name>/` is
/// never seen without them; the old folder stays until the new one is in place). Only a
/// previous evaluation folder (its manifest's stage is `evaluate`) is replaced; another run
/// that put the same evaluation in place first makes this a no-op.
pub fn copy_to_eval(dir: &Path, dest: &Path) -> anyhow::Result<()> {
    let kind = gauge_core::artifact::ResultKind { what: "an evaluation folder (manifest.json of stage `evaluate`)", holds: &|d: &Path| gauge_core::artifact::manifest_of_stage(d, "evaluate") };
    let page = |staged: &Path| {
        // The same results as those in place (a cached rerun): their recorded questions go into
        // the copy first, so that where the golden set is absent the record is kept (the page
        // rewrites it where the golden set is present).
        let recorded = dest.join(crate::report_page::QUESTIONS_FILE);
        if recorded.is_file() && std::fs::read(dest.join("manifest.json")).ok() == std::fs::read(staged.join("manifest.json")).ok() {
            std::fs::copy(&recorded, staged.join(crate::report_page::QUESTIONS_FILE)).with_context(|| format!("{}: cannot copy the recorded questions", recorded.display()))?;
        }
        crate::report_page::write(staged, Path::new(".")).map(|_| ()).context("writing the report page into the copy")
    };
    gauge_core::artifact::replace_dir_with_finished_copy(dir, dest, &kind, &page).with_context(|| format!("{}: the results are not in place (the previous ones are kept)", dest.display()))
}
