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
    let refusal = refusal_phase(plan, &retrieved, &skip, &SearchRun { device: &options.device, cache: &cache, trace_and_show: true }).context("[refusal]")?;
    let answers = crate::answering::answer_phase(plan, &retrieved, &cache, &options.device, run)?;
    let mut failures = retrieved.failures.clone();
    failures.extend(answers.failures.iter().cloned());
    let gate = crate::gate::rows(pipeline, &tables, &retrieved.query_rows, &plan.answers, &answers.deltas, plan.golden.len()).context("the gate")?;
    let non_inferiority = crate::gate::non_inferiority_rows(pipeline, &plan.answers, &answers.deltas)?;
    let evaluation = crate::outputs::Evaluation { plan, retrieved: &retrieved, tables: &tables, answers: &answers, failures: &failures, gate: &gate, non_inferiority: &non_inferiority, search_md, refusal: refusal.as_ref() };
    crate::outputs::write(&evaluation, run)?;
    Ok((tables.names.len(), plan.skipped.len()))
}

/// Replaces `eval/<name>/` with a copy of the artifact and its report page (the page and
/// `questions.parquet` written into the copy before it is swapped in, so `eval/<name>/` is
/// never seen without them; the old folder stays until the new one is in place). Only a
/// previous evaluation folder (its manifest's stage is `evaluate`) is replaced; another run
/// that put the same evaluation in place first makes this a no-op.
pub fn copy_to_eval(dir: &Path, dest: &Path) -> anyhow::Result<()> {
    let kind = gauge_core::artifact::ResultKind { what: "an evaluation folder (manifest.json of stage `evaluate`)", holds: &|d: &Path| gauge_core::artifact::manifest_of_stage(d, "evaluate"), derived: &[crate::report_page::REPORT_FILE, crate::report_page::QUESTIONS_FILE, crate::report_page::PASSAGES_FILE] };
    let page = |staged: &Path| {
        // The same results as those in place (a cached rerun): their recorded questions go into
        // the copy first, so that where the golden set is absent the record is kept (the page
        // rewrites it where the golden set is present).
        for file in [crate::report_page::QUESTIONS_FILE, crate::report_page::PASSAGES_FILE] {
            let recorded = dest.join(file);
            if recorded.is_file() && std::fs::read(dest.join("manifest.json")).ok() == std::fs::read(staged.join("manifest.json")).ok() {
                std::fs::copy(&recorded, staged.join(file)).with_context(|| format!("{}: cannot copy the recorded {file}", recorded.display()))?;
            }
        }
        crate::report_page::write(staged, Path::new(".")).map(|_| ()).context("writing the report page into the copy")
    };
    gauge_core::artifact::replace_dir_with_finished_copy(dir, dest, &kind, &page).with_context(|| format!("{}: the results are not in place (the previous ones are kept)", dest.display()))
}

/// The `[refusal]` phase: the golden set's best scores from the searches already made (a
/// question the config's own cutoff refused is searched again without it), the calibration and
/// out-of-corpus questions searched with no cutoff, then [`measure`].
fn refusal_phase(plan: &crate::planning::EvaluatePlan, retrieved: &crate::retrieve::Retrieved, skip: &BTreeSet<&str>, how: &SearchRun<'_>) -> anyhow::Result<Option<crate::refusal::RefusalOutcome>> {
    let (Some(section), Some(questions)) = (&plan.pipeline.refusal, &plan.refusal) else { return Ok(None) };
    let all: Vec<(String, bool)> = plan.pipeline.variants.iter().map(|v| (v.name.clone(), v.oracle_source_filter)).collect();
    let mut configs: Vec<(&str, crate::refusal::ScoreKind)> = Vec::new();
    for name in section.measured(&all).into_iter().filter(|c| !skip.contains(c)) {
        let v = plan.pipeline.variants.iter().find(|v| v.name == name).expect("a measured config is defined");
        configs.push((name, section.score.for_config(name, &v.stages.retrieval).map_err(anyhow::Error::msg)?));
    }
    let mut asked: Vec<(String, &gauge_core::golden::GoldenQuestion)> = questions.calibration.iter().map(|q| (crate::refusal::CALIBRATION.to_string(), q)).collect();
    for (path, qs) in &questions.out_of_corpus {
        asked.extend(qs.iter().map(|q| (crate::refusal::set_name(path), q)));
    }
    // The golden set's final scores are the rank-1 scores its searches already wrote (a
    // question the config's own cutoff refused is searched again without it); a retriever's
    // own score is asked for.
    let mut known: std::collections::HashMap<(String, String, String), Option<f64>> = std::collections::HashMap::new();
    let mut asks = Vec::new();
    // (config, qid) → refused by the config's own cutoff, and → its rank-1 score: indexed once.
    let refused: std::collections::HashMap<(&str, &str), bool> = retrieved.query_rows.iter().map(|r| ((r.config.as_str(), r.qid.as_str()), r.refused)).collect();
    let first: std::collections::HashMap<(&str, &str), f64> = retrieved.run_rows.iter().filter(|x| x.rank == 1).map(|x| ((x.config.as_str(), x.qid.as_str()), x.score)).collect();
    for &(config, kind) in &configs {
        let mut mine = asked.clone();
        for q in &plan.golden {
            match refused.get(&(config, q.qid.as_str())) {
                Some(false) if kind == crate::refusal::ScoreKind::Final => {
                    known.insert((config.to_string(), crate::refusal::ANSWERABLE.to_string(), q.qid.clone()), first.get(&(config, q.qid.as_str())).copied());
                }
                _ => mine.push((crate::refusal::ANSWERABLE.to_string(), q)),
            }
        }
        asks.push(crate::refusal::Ask { config, score: kind, questions: mine });
    }
    let searched = crate::retrieve::best_scores(&plan.pipeline, &plan.upstream, plan.mode, &asks, how)?;
    known.extend(searched);
    let best = |config: &str, set: &str, q: &gauge_core::golden::GoldenQuestion| known.get(&(config.to_string(), set.to_string(), q.qid.clone())).copied().flatten();
    let (rows, summaries) = crate::refusal::measure(section, questions, &plan.golden, &configs, &best, plan.pipeline.resamples, plan.pipeline.seed);
    for s in &summaries {
        eprintln!(
            "evaluate: refusal, `{}` ({} score): cutoff {}, false refusals {}/{}, out-of-corpus refused {}/{}",
            s.config,
            s.score,
            s.threshold.map_or("none".into(), |t| format!("{t:.4}")),
            s.false_refusals.k,
            s.false_refusals.n,
            s.refusals_all.k,
            s.refusals_all.n
        );
    }
    let markdown = crate::refusal::markdown(section, questions, &plan.pipeline.golden, &summaries);
    Ok(Some(crate::refusal::RefusalOutcome { rows, summaries, markdown }))
}
