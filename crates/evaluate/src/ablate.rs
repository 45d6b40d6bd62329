//! Orchestration of `evaluate`: build every config's upstream chain ([`crate::chain`]), run
//! every config's searches through the engine, score them with the metric registry
//! ([`crate::metric`]) and write the tables ([`crate::report`]).
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use gauge_core::golden::{load_golden, GoldenQuestion};
use gauge_core::stage::{Dag, Plan, Stage};
use gauge_core::{ArtifactStore, FileEntry, StageRun};
use gauge_engine::{Engine, EngineOptions, Passage};
use serde::{Deserialize, Serialize};

use crate::chain::{upstream, Upstream};
use crate::metric::{registry, Metric};
use crate::pipeline::Pipeline;
use crate::relevance::{score_question, PassageSpan, RelevanceMode};
use crate::report;
use crate::rows::{MetricRow, QueryRow, RunRow};
use crate::stats::{bootstrap_ci, mean, paired_comparison, percentile};

/// Stage name of evaluation artifacts.
pub const STAGE: &str = "evaluate";
/// Output format version (4: adjusted p-values, wins/ties/losses; 5: graded nDCG over gold
/// items, graded TREC qrels; 6: that nDCG capped at 1 for passages covering several items;
/// 7: nDCG and recall over the gold-item ranking the passages imply, written as
/// `trec/<config>.items.run` + `trec/items.qrels`).
pub const FORMAT_VERSION: u32 = 7;

/// Settings of `evaluate` beyond the pipeline file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EvaluateConfig {
    /// Overrides the pipeline's relevance mode.
    pub relevance: Option<RelevanceMode>,
}

/// Run settings that do not change the numbers.
#[derive(Debug, Clone)]
pub struct EvaluateOptions {
    /// Where `<pipeline name>/` is copied (usually `eval/`).
    pub eval_dir: PathBuf,
    /// Device of query embedders and rerankers: `cpu` or `cuda[:N]`.
    pub device: String,
    /// The artifact root upstream stages are built in (the run's own store).
    pub artifacts: PathBuf,
}

impl Default for EvaluateOptions {
    fn default() -> Self {
        EvaluateOptions { eval_dir: PathBuf::from("eval"), device: "cpu".into(), artifacts: PathBuf::from("artifacts") }
    }
}

/// What planning an evaluation found (upstream built, golden set checked).
pub struct EvaluatePlan {
    pipeline: Pipeline,
    golden: Vec<GoldenQuestion>,
    mode: RelevanceMode,
    upstream: Vec<Upstream>,
    skipped: Vec<(String, String)>,
    /// Notes for the report (restricted golden set, reranker fallbacks).
    notes: Vec<String>,
    /// Answer artifacts: (config, directory).
    answers: Vec<crate::answers::AnswerRun>,
    /// Upstream artifacts built by this run.
    pub built: Vec<String>,
    /// The config search's questions (the search split), when the pipeline has `[search]`.
    search_questions: Option<Vec<GoldenQuestion>>,
}

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
/// `ablation.md` and `ablation.png` (upstream stages built through the [`Dag`]).
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
        plan_evaluation(config, pipeline_path, options)
    }

    fn build(plan: EvaluatePlan, run: &mut StageRun, _: &EvaluateConfig, _: &PathBuf, options: &EvaluateOptions) -> anyhow::Result<EvaluateSummary> {
        let started = Instant::now();
        for b in &plan.built {
            eprintln!("evaluate: built {b}");
        }
        let mut plan = plan;
        let search_md = match plan.search_questions.take() {
            Some(questions) => run_search(&mut plan, questions, run, options)?,
            None => String::new(),
        };
        let (configs, skipped) = write_evaluation(&plan, run, options, &search_md)?;
        Ok(EvaluateSummary { configs, skipped, seconds: started.elapsed().as_secs_f64() })
    }

    fn summary_line(s: &EvaluateSummary) -> String {
        let skipped = if s.skipped > 0 { format!(" ({} skipped, see ablation.md)", s.skipped) } else { String::new() };
        format!("{} configs evaluated{skipped} in {:.1} s", s.configs, s.seconds)
    }
}

/// The judged units of a search: each distinct passage (a merged window counts once, at the
/// rank of its best hit) with the span the engine resolved.
fn judged_passages(result: &gauge_engine::SearchResult) -> Vec<(String, f64, PassageSpan)> {
    result.distinct().into_iter().map(|p: &Passage| (p.chunk.chunk_id.clone(), p.candidate.score as f64, p.span.clone())).collect()
}

/// The metrics with intervals and paired comparisons, per config and category, for every
/// metric of the registry (each with its own seed offset, in registry order).
pub fn summarize(rows: &[QueryRow], configs: &[String], baseline: &str, metrics: &[Metric], resamples: usize, seed: u64) -> Vec<MetricRow> {
    let mut categories: Vec<String> = vec!["all".into()];
    let cats: BTreeSet<&str> = rows.iter().map(|r| r.category.as_str()).filter(|c| !c.is_empty()).collect();
    categories.extend(cats.into_iter().map(str::to_string));
    let mut out = Vec::new();
    for config in configs {
        for cat in &categories {
            let sel = |name: &str| rows_of(rows, name, cat);
            let mine = sel(config);
            let base = sel(baseline);
            for (mi, metric) in metrics.iter().enumerate() {
                let values: Vec<f64> = mine.iter().map(|r| metric.value(r)).collect();
                let mseed = seed.wrapping_add(mi as u64);
                let b: Vec<f64> = base.iter().map(|r| metric.value(r)).collect();
                let paired = config != baseline && base.len() == mine.len();
                let delta = paired.then(|| paired_comparison(&values, &b, resamples, mseed));
                let wtl = paired.then(|| crate::stats::win_tie_loss(&values, &b));
                out.push(MetricRow {
                    config: config.clone(),
                    category: cat.clone(),
                    metric: metric.name.clone(),
                    n: values.len(),
                    value: mean(&values),
                    ci: Some(bootstrap_ci(&values, resamples, mseed)),
                    delta,
                    wtl,
                });
            }
            let mut lat: Vec<f64> = mine.iter().map(|r| r.latency_ms).collect();
            lat.sort_by(f64::total_cmp);
            for (name, p) in [("latency_p50_ms", 0.5), ("latency_p95_ms", 0.95)] {
                out.push(MetricRow { config: config.clone(), category: cat.clone(), metric: name.into(), n: lat.len(), value: if lat.is_empty() { 0.0 } else { percentile(&lat, p) }, ci: None, delta: None, wtl: None });
            }
            let mut cold: Vec<f64> = mine.iter().map(|r| r.cold_latency_ms).collect();
            cold.sort_by(f64::total_cmp);
            out.push(MetricRow { config: config.clone(), category: cat.clone(), metric: "latency_p50_without_cache_ms".into(), n: cold.len(), value: if cold.is_empty() { 0.0 } else { percentile(&cold, 0.5) }, ci: None, delta: None, wtl: None });
        }
    }
    out
}

/// One config's rows in one category (`all`: every question), in question-id order: the
/// order every paired comparison pairs them in.
fn rows_of<'r>(rows: &'r [QueryRow], config: &str, category: &str) -> Vec<&'r QueryRow> {
    let mut v: Vec<&QueryRow> = rows.iter().filter(|r| r.config == config && (category == "all" || r.category == category)).collect();
    v.sort_by(|a, b| a.qid.cmp(&b.qid));
    v
}

/// Builds (or finds cached) every config's upstream artifacts of a pipeline and returns each
/// evaluated config's index fingerprint (`evaluate --verify --rebuild`).
pub fn upstream_indexes(pipeline_path: &Path, artifacts: &Path, device: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let options = EvaluateOptions { artifacts: artifacts.to_path_buf(), device: device.to_string(), ..Default::default() };
    let plan = plan_evaluation(&EvaluateConfig::default(), pipeline_path, &options)?;
    let state = plan.state;
    Ok(state.pipeline.variants.iter().zip(&state.upstream).map(|(v, u)| (v.name.clone(), u.fingerprint.clone())).collect())
}

/// Loads the pipeline and its golden set, builds every config's upstream artifacts, and says
/// what the evaluation depends on.
fn plan_evaluation(config: &EvaluateConfig, pipeline_path: &Path, options: &EvaluateOptions) -> anyhow::Result<Plan<EvaluatePlan>> {
    let mut pipeline = Pipeline::load(pipeline_path)?;
    if let Some(m) = config.relevance {
        pipeline.relevance = m;
    }
    let golden = load_golden(&pipeline.golden)?;
    let mut notes = Vec::new();
    let (golden, exclusion_inputs) = restrict_to_untrained_pages(golden, &pipeline.exclude_trained_pages, &mut notes)?;
    anyhow::ensure!(!golden.is_empty(), "{}: no question is left once the training pages of {:?} are taken out", pipeline.golden.display(), pipeline.exclude_trained_pages);
    // Configs whose embedder adapter is not there yet are skipped (like a missing reranker).
    let mut skipped: Vec<(String, String)> = Vec::new();
    let mut i = 1;
    while i < pipeline.variants.len() {
        match pipeline.variants[i].stages.embed.adapter.clone().filter(|a| !Path::new(a).join("adapter_config.json").is_file()) {
            Some(a) => {
                let v = pipeline.variants.remove(i);
                skipped.push((v.name, format!("embedder adapter `{a}` not found (run `just train-retrievers`)")));
            }
            None => i += 1,
        }
    }
    // Reranker fallbacks: a config whose model does not resolve uses its `fallback`, said in the report.
    for v in pipeline.variants.iter_mut() {
        if let Some(rc) = v.stages.retrieval.rerank.as_mut() {
            if let (Err(e), Some(fallback)) = (gauge_encoder::resolve_model(&rc.model), rc.fallback.clone()) {
                let reason = e.to_string();
                if gauge_encoder::resolve_model(&fallback).is_ok() {
                    let why = reason.lines().next().unwrap_or("").split(" (looked in").next().unwrap_or("").to_string();
                    notes.push(format!("**{}** reranks with `{fallback}` (its `fallback`): `{}` is not available ({why})", v.name, rc.model));
                    rc.model = fallback;
                    rc.fallback = None;
                }
            }
        }
    }
    for n in &notes {
        eprintln!("evaluate: {n}");
    }
    let mode = pipeline.relevance.resolve(&golden).map_err(|e| anyhow::anyhow!("{}: {e}", pipeline.golden.display()))?;
    // A config search: the golden set split by page groups into the search split and the
    // confirmation split; the tables are the confirmation split's.
    let (golden, search_questions) = match &pipeline.search {
        None => (golden, None),
        Some(sp) => {
            let seed = sp.section.seed.unwrap_or(pipeline.seed);
            let second = gauge_core::golden::page_split(&golden, sp.section.confirm_share, seed);
            let (mut confirm, mut search) = (Vec::new(), Vec::new());
            for (q, held_out) in golden.into_iter().zip(second) {
                if held_out { confirm.push(q) } else { search.push(q) }
            }
            anyhow::ensure!(confirm.len() >= 5 && search.len() >= 5, "{}: a config search needs at least 5 questions in each split (search {}, confirmation {}); add questions or change [search] confirm_share", pipeline.golden.display(), search.len(), confirm.len());
            notes.push(format!("Config search: the golden set split by page groups (seed {seed}); **these rows are the confirmation split: {} questions the search never saw** ({} searched).", confirm.len(), search.len()));
            (confirm, Some(search))
        }
    };
    anyhow::ensure!(pipeline.corpus.exists(), "{}: corpus not found (set `corpus` in {})", pipeline.corpus.display(), pipeline_path.display());
    let store = ArtifactStore::new(&options.artifacts);
    let mut dag = Dag::new(&store);
    let mut ups = Vec::new();
    for v in &pipeline.variants {
        tracing::debug!("config `{}`: upstream artifacts", v.name);
        ups.push(upstream(&mut dag, &pipeline.corpus, v)?);
    }
    check_gold_sources(&golden, &pipeline, &ups[0])?;
    let mut inputs = vec![FileEntry::hashed("golden", pipeline.golden.display(), gauge_core::golden::golden_hash(&pipeline.golden)?).with_rows(golden.len())];
    inputs.extend(exclusion_inputs);
    // Each reranker model's weights are read (hashed) once, however many configs use it.
    let mut identities: HashMap<String, Result<String, String>> = HashMap::new();
    for (i, (v, u)) in pipeline.variants.iter().zip(&ups).enumerate() {
        inputs.push(FileEntry::hashed(format!("index:{}", v.name), u.index.display(), u.fingerprint.clone()));
        if let Some(rc) = &v.stages.retrieval.rerank {
            // The reranker's weights are an input: a config skipped for a missing model runs
            // once the model is there, and a changed model re-evaluates.
            let identity = identities.entry(rc.model.clone()).or_insert_with(|| gauge_rerank::reranker_identity(rc)).clone();
            let hash = match identity {
                Ok(h) => h,
                Err(reason) => {
                    anyhow::ensure!(i > 0, "the baseline config's reranker is not available: {reason}");
                    skipped.push((v.name.clone(), reason));
                    "missing".to_string()
                }
            };
            inputs.push(FileEntry::hashed(format!("reranker:{}", v.name), &rc.model, hash));
        }
        if let Some(rw) = &v.stages.retrieval.rewrite {
            // The rewrites depend on the model's weights (or endpoint) and the template's text.
            let identity = rw.identity().with_context(|| format!("config `{}`: rewrite", v.name))?;
            inputs.push(FileEntry::text(format!("rewrite:{}", v.name), rw.template.as_deref().unwrap_or("built-in"), &identity));
        }
    }
    if let Some(sp) = &pipeline.search {
        // The searched rerankers' weights are inputs too (each model hashed once).
        for c in &sp.candidates {
            if let Some(rc) = &c.variant.stages.retrieval.rerank {
                if !identities.contains_key(&rc.model) {
                    let identity = gauge_rerank::reranker_identity(rc);
                    identities.insert(rc.model.clone(), identity.clone());
                    let hash = identity.map_err(|reason| anyhow::anyhow!("[search] config `{}`: {reason}", c.variant.name))?;
                    inputs.push(FileEntry::hashed(format!("reranker:search:{}", rc.model), &rc.model, hash));
                }
            }
        }
    }
    for (name, reason) in &skipped {
        eprintln!("evaluate: skipping config `{name}`: {reason}");
    }
    // Answer rows: the answer stage on each chosen config's index (built and cached like any stage).
    let mut answers = Vec::new();
    if let Some(section) = &pipeline.answer {
        let answer_options = gauge_answer::AnswerOptions { device: options.device.clone(), prompts: pipeline.prompts.clone(), stream: false };
        for name in &section.configs {
            let i = pipeline.variants.iter().position(|v| &v.name == name).expect("checked at load");
            let (v, u) = (&pipeline.variants[i], &ups[i]);
            let inputs = gauge_answer::AnswerInputs { index: u.index.clone(), golden: Some(pipeline.golden.clone()), question: None, limit: section.limit };
            for (generator_name, generator, generation) in section.generator_list() {
                let row = crate::answers::AnswerRun { config: name.clone(), generator: generator_name, dir: PathBuf::new() };
                let dir = dag.ensure_with::<gauge_answer::Answer>(&section.config_for(&v.stages.retrieval, &generator, &generation), &inputs, &answer_options).with_context(|| format!("[answer] `{}`", row.name()))?;
                answers.push(crate::answers::AnswerRun { dir, ..row });
            }
        }
    }
    for a in &answers {
        inputs.push(FileEntry::hashed(format!("answers:{}", a.name()), a.dir.display(), gauge_core::Manifest::read(&a.dir)?.fingerprint));
    }
    let mut echo = serde_json::json!({
        "pipeline": pipeline.name, "relevance": mode, "k": pipeline.k, "resamples": pipeline.resamples,
        "variants": pipeline.variants, "stats": pipeline.stats,
    });
    if let Some(sp) = &pipeline.search {
        echo["search"] = serde_json::to_value(sp)?;
    }
    if let Some(section) = &pipeline.answer {
        echo["answer"] = serde_json::to_value(section)?;
    }
    if let Some(judge) = &pipeline.judge {
        // The grades depend on the judge's weights (or endpoint) and both templates' text.
        let identity = judge.identity(&pipeline.dir).context("[judge]")?;
        inputs.push(FileEntry::text("judge", judge.template.as_deref().unwrap_or("built-in"), &identity));
        echo["judge"] = serde_json::to_value(judge)?;
    }
    let seed = pipeline.seed;
    let built = dag.built.clone();
    Ok(Plan::new(inputs, EvaluatePlan { pipeline, golden, mode, upstream: ups, skipped, notes, answers, built, search_questions }).echo(echo).seed(seed))
}

/// Keeps the questions none of whose gold pages a listed trained model was trained on (its
/// `training_pages.json`, written by `train-lora --target embedder|reranker`). A listed model
/// not trained yet restricts nothing (the configs using it are skipped). Returns the kept
/// questions and the records as fingerprint inputs; says how many questions remain.
fn restrict_to_untrained_pages(golden: Vec<GoldenQuestion>, models: &[PathBuf], notes: &mut Vec<String>) -> anyhow::Result<(Vec<GoldenQuestion>, Vec<FileEntry>)> {
    let mut pages: BTreeSet<String> = BTreeSet::new();
    let mut inputs = Vec::new();
    let mut used = Vec::new();
    for m in models {
        let file = if m.is_file() { m.clone() } else { m.join("training_pages.json") };
        if !file.is_file() {
            eprintln!("evaluate: {}: not trained yet, so it restricts no question (configs using it are skipped)", m.display());
            continue;
        }
        let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file)?).map_err(|e| anyhow::anyhow!("{}: not a training_pages.json ({e})", file.display()))?;
        let list = record["pages"].as_array().ok_or_else(|| anyhow::anyhow!("{}: no `pages` list", file.display()))?;
        pages.extend(list.iter().filter_map(|p| p.as_str().map(str::to_string)));
        inputs.push(FileEntry::file(format!("trained_pages:{}", inputs.len()), &file)?.with_rows(list.len()));
        used.push(format!("`{}`", m.display()));
    }
    if used.is_empty() {
        return Ok((golden, inputs));
    }
    let total = golden.len();
    let kept: Vec<GoldenQuestion> = golden
        .into_iter()
        .filter(|q| !q.gold.iter().any(|g| g.pages().is_some_and(|(a, b)| (a..=b).any(|p| pages.contains(&format!("{}#{p}", g.source()))))))
        .collect();
    let note = format!("Golden set restricted to questions whose gold pages are outside the training pages of {}: **{} of {total} questions remain**.", used.join(", "), kept.len());
    println!("evaluate: {} of {total} questions have no gold page among the {} training pages of {}", kept.len(), pages.len(), used.join(", "));
    notes.push(note);
    Ok((kept, inputs))
}

/// Paired differences of each config with a `compare_to` against that config, for the main
/// metrics that get a Δ column: (config, other, metric label, comparison). Both must have run.
pub(crate) fn named_comparisons(rows: &[QueryRow], pairs: &[(String, Option<String>)], evaluated: &[String], metrics: &[Metric], resamples: usize, seed: u64) -> Vec<(String, String, String, crate::stats::PairedComparison)> {
    let sel = |name: &str| rows_of(rows, name, "all");
    let mut out = Vec::new();
    for (name, compare_to) in pairs {
        let Some(other) = compare_to.as_ref().filter(|o| evaluated.contains(o) && evaluated.contains(name)) else { continue };
        let (mine, theirs) = (sel(name), sel(other));
        if mine.len() != theirs.len() {
            continue;
        }
        for (mi, metric) in metrics.iter().enumerate().filter(|(_, m)| m.delta_column) {
            let a: Vec<f64> = mine.iter().map(|r| metric.value(r)).collect();
            let b: Vec<f64> = theirs.iter().map(|r| metric.value(r)).collect();
            out.push((name.clone(), other.clone(), metric.label.clone(), paired_comparison(&a, &b, resamples, seed.wrapping_add(mi as u64))));
        }
    }
    out
}

/// Adjusts the retrieval family's p-values in place: every config's Δ against the baseline on
/// the primary metrics (those with a Δ column; category `all`) and every `compare_to`
/// comparison. Returns the family's size.
pub(crate) fn correct_retrieval_family(metrics: &mut [MetricRow], named: &mut [(String, String, String, crate::stats::PairedComparison)], registry: &[Metric], correction: crate::stats::Correction) -> usize {
    let primary: BTreeSet<&str> = registry.iter().filter(|m| m.delta_column).map(|m| m.name.as_str()).collect();
    let mut family: Vec<&mut crate::stats::PairedComparison> = metrics.iter_mut().filter(|m| m.category == "all" && primary.contains(m.metric.as_str())).filter_map(|m| m.delta.as_mut()).collect();
    family.extend(named.iter_mut().map(|(_, _, _, d)| d));
    set_adjusted(family, correction)
}

/// Adjusts the answer rows' deltas as one family.
fn correct_answer_family(deltas: &mut [crate::answers::AnswerDelta], correction: crate::stats::Correction) {
    set_adjusted(deltas.iter_mut().map(|d| &mut d.comparison).collect(), correction);
}

fn set_adjusted(mut family: Vec<&mut crate::stats::PairedComparison>, correction: crate::stats::Correction) -> usize {
    let p: Vec<f64> = family.iter().map(|c| c.p_value).collect();
    let adjusted = crate::stats::adjust(&p, correction);
    for (c, a) in family.iter_mut().zip(adjusted) {
        c.p_adjusted = (correction != crate::stats::Correction::None).then_some(a);
    }
    family.len()
}

/// The minimum detectable effect of the golden set per primary metric: (label, median standard
/// deviation of the paired differences against the baseline over the configs, questions, the
/// effect detected with 80 % power at α 0.05).
fn detectable_effects(rows: &[QueryRow], configs: &[String], registry: &[Metric]) -> Vec<(String, f64, usize, f64)> {
    let Some(baseline) = configs.first() else { return Vec::new() };
    let sel = |name: &str| rows_of(rows, name, "all");
    let base = sel(baseline);
    let mut out = Vec::new();
    for metric in registry.iter().filter(|m| m.delta_column) {
        let mut sds: Vec<f64> = configs[1..]
            .iter()
            .map(|c| sel(c))
            .filter(|mine| mine.len() == base.len())
            .map(|mine| crate::stats::std_dev(&mine.iter().zip(&base).map(|(a, b)| metric.value(a) - metric.value(b)).collect::<Vec<_>>()))
            .collect();
        if sds.is_empty() {
            continue;
        }
        sds.sort_by(f64::total_cmp);
        let sd = sds[sds.len() / 2];
        out.push((metric.label.clone(), sd, base.len(), crate::stats::minimum_detectable_effect(sd, base.len())));
    }
    out
}

/// Refuses a golden set naming sources the corpus does not hold (a typo would score 0
/// silently), naming the closest existing ones.
fn check_gold_sources(golden: &[GoldenQuestion], pipeline: &Pipeline, up: &Upstream) -> anyhow::Result<()> {
    let pages = gauge_core::schema::read_pages(&up.pages.join("pages.parquet"))?;
    let sources: BTreeSet<&str> = pages.iter().map(|p| p.source.as_str()).collect();
    let unknown = gauge_core::golden::unknown_sources(golden, sources.iter().copied());
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(|(s, near)| format!("`{s}` (closest: {})", near.join(", "))).collect();
        anyhow::bail!("{}: gold sources not in the corpus {}: {}; fix the golden set or the pipeline's corpus", pipeline.golden.display(), pipeline.corpus.display(), list.join("; "));
    }
    // A page past its document's end would score 0 silently.
    let mut last_pages: std::collections::BTreeMap<String, i32> = std::collections::BTreeMap::new();
    for p in &pages {
        let last = last_pages.entry(p.source.clone()).or_insert(p.page);
        *last = (*last).max(p.page);
    }
    let past = gauge_core::golden::pages_out_of_range(golden, &last_pages);
    if pipeline.gold_pages == crate::pipeline::GoldPages::Approximate {
        if let Some((qid, source, page, last)) = past.first() {
            tracing::warn!("{}: {} gold page(s) lie past their document's end (e.g. question `{qid}`: page {page} of `{source}`, which has {last}); judged as they are (gold_pages = \"approximate\")", pipeline.golden.display(), past.len());
        }
        return Ok(());
    }
    if let Some((qid, source, page, last)) = past.first() {
        anyhow::bail!(
            "{}: question `{qid}` names page {page} of `{source}`, which has {last} page(s){}; fix the golden set (pages are 1-based, as `extract` numbers them), or set gold_pages = \"approximate\" in the pipeline",
            pipeline.golden.display(),
            if past.len() > 1 { format!(" ({} gold pages in all lie past their document's end)", past.len()) } else { String::new() }
        );
    }
    Ok(())
}

/// Evaluates every config and writes the tables into the run.
fn write_evaluation(plan: &EvaluatePlan, run: &mut StageRun, options: &EvaluateOptions, search_md: &str) -> anyhow::Result<(usize, usize)> {
    let EvaluatePlan { pipeline, golden, mode, upstream, skipped, notes, answers, .. } = plan;
    let mode = *mode;
    let skip: BTreeSet<&str> = skipped.iter().map(|(n, _)| n.as_str()).collect();
    let cache = std::sync::Arc::new(gauge_generator::cache::CallCache::new(options.artifacts.join("llm-cache")));
    let (query_rows, run_rows, qrels, contexts, mut failures) = evaluate_variants(pipeline, upstream, golden, mode, &skip, &SearchRun { device: &options.device, cache: &cache, trace_and_show: true })?;
    if cache.hits() + cache.misses() > 0 {
        eprintln!("evaluate: {} model calls, {} served from the cache ({})", cache.misses(), cache.hits(), cache.dir().display());
        run.set_stat("model_calls", cache.misses());
        run.set_stat("model_calls_cached", cache.hits());
    }
    let names: Vec<String> = pipeline.variants.iter().filter(|v| !skip.contains(v.name.as_str())).map(|v| v.name.clone()).collect();
    let has_keywords = golden.iter().any(|q| !q.keywords.is_empty());
    let metric_registry = registry(pipeline.k, has_keywords);
    let mut metrics = summarize(&query_rows, &names, &names[0], &metric_registry, pipeline.resamples, pipeline.seed);
    let pairs: Vec<(String, Option<String>)> = pipeline.variants.iter().map(|v| (v.name.clone(), v.compare_to.clone())).collect();
    let mut named = named_comparisons(&query_rows, &pairs, &names, &metric_registry, pipeline.resamples, pipeline.seed);
    let correction = pipeline.stats.correction;
    let family_size = correct_retrieval_family(&mut metrics, &mut named, &metric_registry, correction);
    let power = detectable_effects(&query_rows, &names, &metric_registry);
    let mut answer_tables = Vec::new();
    let mut answer_deltas = Vec::new();
    let mut judge_report = String::new();
    let mut split_report = String::new();
    if let Some(section) = &pipeline.answer {
        let mut per_run = Vec::new();
        let judge = match &pipeline.judge {
            Some(j) => Some(crate::judge::Judge::open(j, cache.clone(), &options.device, &pipeline.dir).context("[judge]")?),
            None => None,
        };
        let calls_before = (cache.misses(), cache.hits());
        let mut verdicts: Vec<Vec<Option<crate::judge::Verdict>>> = Vec::new();
        let mut agreements = Vec::new();
        for a in answers {
            // The golden set as evaluated (after `exclude_trained_pages`): the answer stage
            // reads the whole file, so answers to questions outside it are left out here.
            let mut answered = crate::answers::read_answers(&a.dir.join("answers.parquet"))?;
            answered.retain(|aq| golden.iter().any(|q| q.qid == aq.qid));
            let mut m = crate::answers::answer_metrics(&answered, golden, section.template == "four_phase", &section.refusal);
            let mut row_verdicts = Vec::new();
            if let (Some(judge), Some(js)) = (&judge, &pipeline.judge) {
                let bar = gauge_core::progress::bar(answered.len() as u64, &format!("judge: {}", a.name()));
                // Every answered question's grade in one batch (refusals are not graded).
                let passages: Vec<Vec<crate::judge::JudgedPassage>> = answered.iter().map(|aq| contexts.get(&(a.config.clone(), aq.qid.clone())).cloned().unwrap_or_default()).collect();
                let items: Vec<crate::judge::Graded<'_>> = answered
                    .iter()
                    .zip(&passages)
                    .filter(|(aq, _)| !aq.refused)
                    .map(|(aq, p)| {
                        let q = golden.iter().find(|q| q.qid == aq.qid);
                        crate::judge::Graded { question: q.map_or("", |q| q.question.as_str()), reference: q.and_then(|q| q.reference_answer.as_deref()), passages: p, answer: &aq.answer }
                    })
                    .collect();
                bar.inc((answered.len() - items.len()) as u64);
                let mut graded = judge.grade_all(&items, &|| bar.inc(1)).into_iter();
                for aq in &answered {
                    let verdict = (!aq.refused).then(|| graded.next().expect("one verdict per answered question"));
                    if let Some(e) = verdict.as_ref().and_then(|v| v.error.as_ref()) {
                        eprintln!("evaluate: judge: {} question `{}`: no grade ({e})", a.name(), aq.qid);
                    }
                    row_verdicts.push(verdict);
                }
                bar.finish_and_clear();
                for (i, name) in crate::judge::METRIC_NAMES.iter().enumerate() {
                    let values = row_verdicts.iter().map(|v| v.as_ref().and_then(|v| v.reply.as_ref()).map(|r| r.scores()[i] as f64)).collect();
                    m.push((name, crate::judge::CRITERIA[i].1, values));
                }
                let graded: Vec<(Option<u8>, usize, usize)> = answered
                    .iter()
                    .zip(&row_verdicts)
                    .filter_map(|(aq, v)| v.as_ref().map(|v| (v.reply.as_ref().map(|r| r.faithfulness), aq.citations.iter().filter(|c| c.3).count(), aq.citations.iter().filter(|c| !c.3).count())))
                    .collect();
                agreements.push((a.name(), crate::judge::agreement(&graded, js.faithful_at)));
            }
            verdicts.push(row_verdicts);
            let rows = crate::answers::metric_rows(&a.name(), &m, pipeline.resamples, pipeline.seed);
            answer_tables.push((a.name(), answered.len(), m.iter().map(|(_, label, _)| *label).zip(rows.iter().cloned()).collect::<Vec<_>>()));
            metrics.extend(rows);
            per_run.push((a.clone(), answered, m));
        }
        // Answer rows that cite no gold page: where each lost it (failures.parquet).
        for (a, answered, _) in &per_run {
            let lost: Vec<&crate::failures::FailureRow> = failures.iter().filter(|f| f.config == a.config).collect();
            let rows: Vec<&QueryRow> = query_rows.iter().filter(|r| r.config == a.config).collect();
            let row = if a.generator.is_some() { a.name() } else { format!("{} · answer", a.config) };
            let mine = crate::failures::answer_failures(&row, answered, golden, &lost, &rows, pipeline.k);
            failures.extend(mine);
        }
        // The evaluation's answers.parquet: every answer row's answers, with their grades.
        let mut rows = Vec::new();
        for ((a, answered, _), row_verdicts) in per_run.iter().zip(&verdicts) {
            for (i, aq) in answered.iter().enumerate() {
                let question = golden.iter().find(|q| q.qid == aq.qid).map(|q| q.question.clone()).unwrap_or_default();
                rows.push(report::JudgedAnswerRow { config: a.name(), answered: aq, question, verdict: row_verdicts.get(i).and_then(Option::as_ref) });
            }
        }
        let n = report::write_judged_answers(&run.path("answers.parquet"), &rows)?;
        run.add_output("answers.parquet", Some(n))?;
        if let Some(js) = &pipeline.judge {
            let calls = (cache.misses() - calls_before.0, cache.hits() - calls_before.1);
            let missing: usize = agreements.iter().map(|(_, a)| a.missing).sum();
            run.set_stat("judge_calls", calls.0);
            run.set_stat("judge_calls_cached", calls.1);
            run.set_stat("judge_missing", missing);
            judge_report = crate::judge::agreement_markdown(js, &agreements, calls);
        }
        answer_deltas = crate::answers::paired_deltas(&per_run, pipeline.resamples, pipeline.seed);
        correct_answer_family(&mut answer_deltas, correction);
        for d in &answer_deltas {
            let metric = format!("answer/{}", d.metric);
            if let Some(row) = metrics.iter_mut().find(|m| m.config == d.run && m.metric == metric && m.category == "all") {
                row.delta = Some(d.comparison);
            }
        }
        if let Some(split_seed) = section.split_seed {
            let halves = gauge_core::golden::page_halves(golden, split_seed);
            let mut sections = Vec::new();
            for (half, name) in [(false, "tuning"), (true, "held_out")] {
                let keep: BTreeSet<String> = golden.iter().zip(&halves).filter(|(_, h)| **h == half).map(|(q, _)| q.qid.clone()).collect();
                let runs: Vec<crate::answers::RunMetrics> = per_run.iter().map(|r| crate::answers::restrict(r, &keep)).collect();
                let mut tables = Vec::new();
                for (a, answered, m) in &runs {
                    let rows = crate::answers::metric_rows_in(&a.name(), name, m, pipeline.resamples, pipeline.seed);
                    let asked = answered.iter().filter(|q| keep.contains(&q.qid)).count();
                    tables.push((a.name(), asked, m.iter().map(|(_, label, _)| *label).zip(rows.iter().cloned()).collect::<Vec<_>>()));
                    metrics.extend(rows);
                }
                let mut deltas = crate::answers::paired_deltas(&runs, pipeline.resamples, pipeline.seed);
                correct_answer_family(&mut deltas, correction);
                for d in &deltas {
                    let metric = format!("answer/{}", d.metric);
                    if let Some(row) = metrics.iter_mut().find(|m| m.config == d.run && m.metric == metric && m.category == name) {
                        row.delta = Some(d.comparison);
                    }
                }
                sections.push((name, keep.len(), tables, deltas));
            }
            split_report = report::answers_split_markdown(split_seed, &sections);
        }
    }
    // The gate: every trained model against its untrained base.
    let mut gate_rows = Vec::new();
    for v in pipeline.variants.iter().filter(|v| !skip.contains(v.name.as_str())) {
        let Some(other) = &v.compare_to else { continue };
        if !crate::gate::is_trained(&serde_json::to_value(&v.stages)?) {
            continue;
        }
        let mine: Vec<_> = named.iter().filter(|(c, o, _, _)| c == &v.name && o == other).collect();
        if let Some((c, o, m, d)) = mine.iter().find(|(_, _, m, _)| m.starts_with("MRR")).or(mine.first()) {
            gate_rows.push(crate::gate::GateRow { row: c.clone(), base: o.clone(), metric: m.clone(), n: golden.len(), comparison: *d });
        }
    }
    if let Some(section) = &pipeline.answer {
        for a in answers {
            let adapted = section.generators.iter().any(|g| Some(&g.name) == a.generator.as_ref() && matches!(g.generator, Some(gauge_answer::GeneratorConfig::Local { adapter: Some(_), .. })));
            if !adapted {
                continue;
            }
            let mine: Vec<&crate::answers::AnswerDelta> = answer_deltas.iter().filter(|d| d.run == a.name()).collect();
            if let Some(d) = mine.iter().find(|d| d.metric == "reference_token_f1").or_else(|| mine.iter().find(|d| d.metric == "answer_verified_citation")) {
                gate_rows.push(crate::gate::GateRow { row: d.run.clone(), base: d.baseline.clone(), metric: d.label.to_string(), n: d.n, comparison: d.comparison });
            }
        }
    }
    if !gate_rows.is_empty() {
        let verdicts: Vec<serde_json::Value> = gate_rows.iter().map(|g| serde_json::json!({"row": g.row, "base": g.base, "metric": g.metric, "delta": g.comparison.delta, "p": g.comparison.p_value, "p_adjusted": g.comparison.p_adjusted, "verdict": crate::gate::verdict(&g.comparison)})).collect();
        run.set_stat("gate", verdicts);
    }
    let n = report::write_metrics(&run.path("metrics.parquet"), &metrics)?;
    run.add_output("metrics.parquet", Some(n))?;
    let n = report::write_per_query(&run.path("per_query.parquet"), &query_rows)?;
    run.add_output("per_query.parquet", Some(n))?;
    let n = report::write_runs(&run.path("runs.parquet"), &run_rows)?;
    run.add_output("runs.parquet", Some(n))?;
    let n = crate::failures::write_failures(&run.path("failures.parquet"), &failures)?;
    run.add_output("failures.parquet", Some(n))?;
    std::fs::create_dir_all(run.path("trec"))?;
    for (i, v) in pipeline.variants.iter().enumerate().filter(|(_, v)| !skip.contains(v.name.as_str())) {
        let slug = report::slug(i, &v.name);
        let mine: Vec<&RunRow> = run_rows.iter().filter(|r| r.config == v.name).collect();
        report::write_trec_run(&run.path(&format!("trec/{slug}.run")), &mine, &slug)?;
        run.add_output(&format!("trec/{slug}.run"), Some(mine.len() as u64))?;
        let q = &qrels[i];
        report::write_qrels(&run.path(&format!("trec/{slug}.qrels")), q)?;
        run.add_output(&format!("trec/{slug}.qrels"), Some(q.len() as u64))?;
        if mode != RelevanceMode::Keyword {
            let queries: Vec<&QueryRow> = query_rows.iter().filter(|r| r.config == v.name).collect();
            report::write_item_run(&run.path(&format!("trec/{slug}.items.run")), &queries, &mine, golden, &slug)?;
            run.add_output(&format!("trec/{slug}.items.run"), Some(queries.iter().map(|q| q.scores.items.len() as u64).sum()))?;
        }
    }
    if mode != RelevanceMode::Keyword {
        let n = report::write_item_qrels(&run.path("trec/items.qrels"), golden)?;
        run.add_output("trec/items.qrels", Some(n as u64))?;
    }
    let retrieval_metrics: Vec<MetricRow> = metrics.iter().filter(|m| !m.metric.starts_with("answer/")).cloned().collect();
    let context = report::ReportContext { pipeline, golden_len: golden.len(), mode, metrics: &retrieval_metrics, skipped, notes, named: &named, registry: &metric_registry, correction, family_size, power: &power };
    std::fs::write(run.path("ablation.md"), report::ablation_markdown(&context) + &report::answers_markdown(pipeline.answer.as_ref(), &answer_tables, &answer_deltas, pipeline.judge.is_some()) + &split_report + &judge_report + &crate::failures::markdown(&failures, &names, pipeline.k) + &crate::gate::markdown(&gate_rows) + search_md)?;
    run.add_output("ablation.md", None)?;
    report::ablation_png(&run.path("ablation.png"), &context)?;
    run.add_output("ablation.png", None)?;
    run.set_stat("questions", golden.len());
    run.set_stat("configs", names.len());
    run.set_stat("skipped", serde_json::to_value(skipped)?);
    run.set_stat("relevance", mode.name());
    Ok((names.len(), skipped.len()))
}

/// (question, chunk, grade) of every chunk relevant on its own.
type Qrels = Vec<(String, String, f64)>;

/// How [`evaluate_variants`] runs the searches: the device, the model-call cache, and whether
/// misses are traced (failure attribution) and progress is shown (a config search does
/// neither).
#[derive(Clone, Copy)]
struct SearchRun<'a> {
    device: &'a str,
    cache: &'a std::sync::Arc<gauge_generator::cache::CallCache>,
    trace_and_show: bool,
}

fn evaluate_variants(
    pipeline: &Pipeline,
    upstream: &[Upstream],
    golden: &[GoldenQuestion],
    mode: RelevanceMode,
    skip: &BTreeSet<&str>,
    how: &SearchRun<'_>,
) -> anyhow::Result<Evaluated> {
    let SearchRun { device, cache, trace_and_show } = *how;
    // The passages the answer rows' configs retrieve, kept for the judge (the answer stage
    // searches with the same engine and config, so they are the passages it was given).
    let judged_configs: BTreeSet<&str> = match (&pipeline.answer, &pipeline.judge) {
        (Some(a), Some(_)) => a.configs.iter().map(String::as_str).collect(),
        _ => BTreeSet::new(),
    };
    let mut contexts: Contexts = HashMap::new();
    // Open each distinct index once, with the query embedder it was built with.
    let mut by_index: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    for (i, u) in upstream.iter().enumerate() {
        if !skip.contains(pipeline.variants[i].name.as_str()) {
            by_index.entry(u.index.clone()).or_default().push(i);
        }
    }
    // Each distinct reranker (what changes its scores: kind, model, max length) is loaded once.
    let mut rerankers: HashMap<String, Box<dyn gauge_rank::Reranker>> = HashMap::new();
    let reranker_key = |rc: &gauge_rank::RerankConfig| serde_json::json!([rc.kind, rc.model, rc.max_length]).to_string();
    // Each distinct rewrite model is loaded once; every call goes through the shared cache.
    let mut rewriters: HashMap<String, gauge_engine::rewrite::LlmRewriter> = HashMap::new();
    let rewriter_key = |rc: &gauge_engine::rewrite::RewriteConfig| serde_json::to_string(&rc.model).expect("generator config serialises");
    let bar = if trace_and_show { gauge_core::progress::bar(((pipeline.variants.len() - skip.len()) * golden.len()) as u64, "searches") } else { gauge_core::progress::hidden() };
    let mut query_rows = Vec::new();
    let mut run_rows = Vec::new();
    let mut qrels: Vec<Qrels> = vec![Vec::new(); pipeline.variants.len()];
    let mut failures = Vec::new();
    for (index, variant_ids) in &by_index {
        let dense = variant_ids.iter().any(|&i| pipeline.variants[i].stages.retrieval.dense);
        let engine = Engine::open(index, &EngineOptions { dense, model: None, device: device.to_string() })?;
        // Qrels: every chunk of this index judged on its own, for trec_eval/ranx users.
        let chunk_qrels: Qrels = golden
            .iter()
            .flat_map(|q| {
                engine
                    .chunks()
                    .chunks
                    .iter()
                    .filter_map(|c| {
                        let grade = crate::relevance::relevance_grade(q, &engine.passage_span(c), mode);
                        (grade > 0.0).then(|| (q.qid.clone(), c.chunk_id.clone(), grade))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut relevant_ids: HashMap<&str, HashSet<String>> = HashMap::new();
        for (q, c, _) in &chunk_qrels {
            relevant_ids.entry(q.as_str()).or_default().insert(c.clone());
        }
        // Which pages came out of extraction with text (failure attribution; a config search,
        // which traces nothing, does not read them on every group and rung).
        let pages: HashMap<(String, i32), bool> = if trace_and_show {
            gauge_core::schema::read_pages(&upstream[variant_ids[0]].pages.join("pages.parquet"))?.into_iter().map(|p| ((p.source, p.page), p.empty)).collect()
        } else {
            HashMap::new()
        };
        for &vi in variant_ids {
            let v = &pipeline.variants[vi];
            qrels[vi] = chunk_qrels.clone();
            if let Some(rc) = &v.stages.retrieval.rerank {
                if let std::collections::hash_map::Entry::Vacant(slot) = rerankers.entry(reranker_key(rc)) {
                    slot.insert(gauge_rerank::load_reranker(rc, device).with_context(|| format!("config `{}`: reranker", v.name))?);
                }
            }
            let reranker = v.stages.retrieval.rerank.as_ref().map(|rc| rerankers[&reranker_key(rc)].as_ref());
            if let Some(rc) = &v.stages.retrieval.rewrite {
                if let std::collections::hash_map::Entry::Vacant(slot) = rewriters.entry(rewriter_key(rc)) {
                    slot.insert(gauge_engine::rewrite::LlmRewriter::open(rc, cache.clone(), device).with_context(|| format!("config `{}`: rewrite model", v.name))?);
                }
            }
            let rewriter = v.stages.retrieval.rewrite.as_ref().map(|rc| &rewriters[&rewriter_key(rc)]);
            for q in golden {
                let cfg = config_for(v, q);
                let started = Instant::now();
                let result = engine.search_full(&q.question, &cfg, reranker, rewriter).with_context(|| format!("config `{}`, question `{}`", v.name, q.qid))?;
                let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                let judged = judged_passages(&result);
                let passages: Vec<PassageSpan> = judged.iter().map(|(_, _, p)| p.clone()).take(pipeline.k).collect();
                if judged_configs.contains(v.name.as_str()) {
                    let given = passages.iter().map(|p| crate::judge::JudgedPassage { label: gauge_generator::answer_prompt::page_tag(&p.source, p.page_start, p.page_end), text: p.text.clone() }).collect();
                    contexts.insert((v.name.clone(), q.qid.clone()), given);
                }
                let scores = score_question(q, &passages, mode, pipeline.k);
                if trace_and_show && !scores.relevant.iter().any(|&r| r) {
                    // Missed: trace the search again to say where the gold was lost.
                    let (_, trace) = engine.search_traced(&q.question, &cfg, reranker, rewriter).with_context(|| format!("config `{}`, question `{}`: tracing the miss", v.name, q.qid))?;
                    let empty = HashSet::new();
                    let relevant = relevant_ids.get(q.qid.as_str()).unwrap_or(&empty);
                    let ranks = crate::failures::stage_ranks(&trace, relevant, crate::failures::gold_has_text(q, &pages), cfg.rerank.as_ref().map(|r| r.n_initial), pipeline.k);
                    failures.push(crate::failures::FailureRow { config: v.name.clone(), qid: q.qid.clone(), lost_at: crate::failures::first_loss(&ranks), ranks });
                }
                for (rank, ((chunk_id, score, p), relevant)) in judged.iter().zip(&scores.relevant).enumerate() {
                    run_rows.push(RunRow {
                        config: v.name.clone(),
                        qid: q.qid.clone(),
                        rank: rank + 1,
                        chunk_id: chunk_id.clone(),
                        score: *score,
                        source: p.source.clone(),
                        page_start: p.page_start,
                        page_end: p.page_end,
                        relevant: *relevant,
                    });
                }
                query_rows.push(QueryRow {
                    config: v.name.clone(),
                    qid: q.qid.clone(),
                    category: q.category.clone().unwrap_or_default(),
                    scores,
                    refused: result.refusal.is_some(),
                    n_results: passages.len(),
                    latency_ms,
                    cold_latency_ms: latency_ms + result.rewrite.as_ref().map_or(0.0, |r| if r.cache_hits > 0 { r.model_ms } else { 0.0 }),
                    model_calls: result.rewrite.as_ref().map_or(0, |r| r.model_calls),
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    // Report order: the pipeline's config order, then question order.
    let order: HashMap<&str, usize> = pipeline.variants.iter().enumerate().map(|(i, v)| (v.name.as_str(), i)).collect();
    let qorder: HashMap<&str, usize> = golden.iter().enumerate().map(|(i, q)| (q.qid.as_str(), i)).collect();
    query_rows.sort_by_key(|r| (order[r.config.as_str()], qorder[r.qid.as_str()]));
    run_rows.sort_by_key(|r| (order[r.config.as_str()], qorder[r.qid.as_str()], r.rank));
    failures.sort_by_key(|f: &crate::failures::FailureRow| (order[f.config.as_str()], qorder[f.qid.as_str()]));
    Ok((query_rows, run_rows, qrels, contexts, failures))
}

/// Runs the pipeline's config search on the search split (journaled in the run's checkpoint
/// folder), writes `search.parquet`, and adds the best configs to the plan (their upstream
/// built) so the tables confirm them on the confirmation split. Returns the report section.
fn run_search(plan: &mut EvaluatePlan, questions: Vec<GoldenQuestion>, run: &mut StageRun, options: &EvaluateOptions) -> anyhow::Result<String> {
    let sp = plan.pipeline.search.clone().expect("a search plan");
    let seed = sp.section.seed.unwrap_or(plan.pipeline.seed);
    let has_keywords = questions.iter().any(|q| !q.keywords.is_empty());
    let metrics = registry(plan.pipeline.k, has_keywords);
    let metric = match &sp.section.metric {
        Some(name) => metrics.iter().find(|m| &m.name == name).ok_or_else(|| anyhow::anyhow!("[search] metric = `{name}` is not one of {}", metrics.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")))?,
        None => metrics.iter().find(|m| m.name.starts_with("mrr@")).expect("the registry has MRR"),
    };
    let store = ArtifactStore::new(&options.artifacts);
    let cache = std::sync::Arc::new(gauge_generator::cache::CallCache::new(options.artifacts.join("llm-cache")));
    let mut journal = crate::search::Journal::open(&run.checkpoint_dir()?.join("search-journal.jsonl"))?;
    let state = std::cell::RefCell::new(SearchUpstream { dag: Dag::new(&store), ups: HashMap::new(), corpus: plan.pipeline.corpus.clone(), plan: &sp });
    let outcome = {
        let base = &plan.pipeline;
        let mode = plan.mode;
        let mut score = |group: &[usize], qs: &[&GoldenQuestion]| -> anyhow::Result<Vec<(usize, String, f64, f64)>> {
            let mut mini = base.clone();
            mini.variants = group.iter().map(|&i| sp.candidates[i].variant.clone()).collect();
            mini.answer = None;
            mini.judge = None;
            mini.search = None;
            let group_ups = group.iter().map(|&i| state.borrow_mut().get(i)).collect::<anyhow::Result<Vec<_>>>()?;
            let golden: Vec<GoldenQuestion> = qs.iter().map(|q| (*q).clone()).collect();
            let (rows, ..) = evaluate_variants(&mini, &group_ups, &golden, mode, &BTreeSet::new(), &SearchRun { device: &options.device, cache: &cache, trace_and_show: false })?;
            Ok(rows.iter().map(|r| (group[mini.variants.iter().position(|v| v.name == r.config).expect("a group config")], r.qid.clone(), metric.value(r), r.latency_ms / 1000.0)).collect())
        };
        let mut cost = |i: usize| -> anyhow::Result<f64> {
            let u = state.borrow_mut().get(i)?;
            Ok(crate::search::build_seconds(&[u.index.as_path()]))
        };
        crate::search::run(&sp, &questions, seed, &mut journal, &mut score, &mut cost, &metric.label)?
    };
    let mut state = state.into_inner();
    let n = crate::search::write_parquet(&run.path("search.parquet"), &sp, &outcome.rows, &metric.name)?;
    run.add_output("search.parquet", Some(n))?;
    run.set_stat("search_configs", outcome.rows.iter().filter(|r| r.rung == 0).count());
    run.set_stat("search_seconds", outcome.seconds);
    // The best configs join the tables (confirmation split), the best first.
    for &i in outcome.ranking.iter().take(sp.section.confirm_top) {
        let u = state.get(i)?;
        plan.pipeline.variants.push(sp.candidates[i].variant.clone());
        plan.upstream.push(u);
    }
    plan.built.extend(state.dag.built.iter().cloned());
    Ok(crate::search::markdown(&sp, &outcome, &metric.label, (questions.len(), plan.golden.len()), seed))
}

/// The searched configs' upstream artifacts, built through the DAG on first use.
struct SearchUpstream<'s, 'a> {
    dag: Dag<'a>,
    ups: HashMap<usize, Upstream>,
    corpus: PathBuf,
    plan: &'s crate::search::SearchPlan,
}

impl SearchUpstream<'_, '_> {
    fn get(&mut self, i: usize) -> anyhow::Result<Upstream> {
        if let Some(u) = self.ups.get(&i) {
            return Ok(u.clone());
        }
        let v = &self.plan.candidates[i].variant;
        let u = upstream(&mut self.dag, &self.corpus, v).with_context(|| format!("[search] config `{}`", v.name))?;
        self.ups.insert(i, u.clone());
        Ok(u)
    }
}

/// The passages each (config, question) retrieved, for the judge.
type Contexts = HashMap<(String, String), Vec<crate::judge::JudgedPassage>>;

/// What the searches of every config give: per-question rows, ranked runs, qrels, and the
/// contexts of the judged answer configs.
type Evaluated = (Vec<QueryRow>, Vec<RunRow>, Vec<Qrels>, Contexts, Vec<crate::failures::FailureRow>);

/// The retrieval config a question is searched with: the config's, restricted to the
/// question's gold sources when the config is the oracle source filter.
pub fn config_for(v: &crate::pipeline::Variant, q: &GoldenQuestion) -> gauge_engine::RetrievalConfig {
    let mut cfg = v.stages.retrieval.clone();
    if v.oracle_source_filter {
        let sources: BTreeSet<String> = q.gold.iter().map(|g| g.source().to_string()).collect();
        cfg.filter.sources = sources.into_iter().collect();
    }
    cfg
}

/// Replaces `eval/<name>/` with a copy of the artifact (through a temporary folder; the old
/// copy stays until the new one is in place). Only a previous evaluation folder (its
/// manifest's stage is `evaluate`) is replaced; another run that put the same evaluation in
/// place first makes this a no-op.
pub fn copy_to_eval(dir: &Path, dest: &Path) -> anyhow::Result<()> {
    let kind = gauge_core::artifact::ResultKind { what: "an evaluation folder (manifest.json of stage `evaluate`)", holds: &|d: &Path| gauge_core::artifact::manifest_of_stage(d, "evaluate") };
    gauge_core::artifact::replace_dir_with_copy(dir, dest, &kind).with_context(|| format!("{}: cannot move the results into place", dest.display()))
}
