//! The first phase of `evaluate`: the pipeline and its golden set loaded and checked, every
//! config's upstream artifacts built (or found cached) through the stage DAG, the answer rows'
//! artifacts built, and what the evaluation depends on (its fingerprint inputs and echo).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Context;
use gauge_core::golden::{load_golden, GoldenQuestion};
use gauge_core::stage::{Dag, Plan};
use gauge_core::{ArtifactStore, FileEntry};
use serde::{Deserialize, Serialize};

use crate::chain::{upstream, Upstream};
use crate::pipeline::Pipeline;
use crate::relevance::RelevanceMode;

/// Settings of `evaluate` beyond the pipeline file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EvaluateConfig {
    /// Overrides the pipeline's relevance mode.
    pub relevance: Option<RelevanceMode>,
    /// Overrides the pipeline's golden set (the same configs on another question set, e.g.
    /// the held-out synthetic one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden: Option<PathBuf>,
    /// Overrides the pipeline's name (the results go to `eval/<name>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
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

/// What planning an evaluation found (upstream built, golden set checked): the hand-off to
/// the searches.
pub struct EvaluatePlan {
    pub(crate) pipeline: Pipeline,
    pub(crate) golden: Vec<GoldenQuestion>,
    /// The pipeline's `out_of_corpus` questions (no gold): the answer rows' only.
    pub(crate) out_of_corpus: Vec<GoldenQuestion>,
    pub(crate) mode: RelevanceMode,
    pub(crate) upstream: Vec<Upstream>,
    pub(crate) skipped: Vec<(String, String)>,
    /// Notes for the report (restricted golden set, reranker fallbacks).
    pub(crate) notes: Vec<String>,
    /// Who wrote and judged the golden set's questions.
    pub(crate) provenance: gauge_core::golden::Provenance,
    /// The configs (and `answers`, `judge`) using a model of that family, with why.
    pub(crate) same_family: Vec<(String, String)>,
    /// Answer artifacts: (config, directory).
    pub(crate) answers: Vec<crate::answers::AnswerRun>,
    /// Upstream artifacts built by this run.
    pub built: Vec<String>,
    /// The config search's questions (the search split), when the pipeline has `[search]`.
    pub(crate) search_questions: Option<Vec<GoldenQuestion>>,
    /// `[refusal]`'s calibration and out-of-corpus questions.
    pub(crate) refusal: Option<crate::refusal::RefusalQuestions>,
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
pub fn plan_evaluation(config: &EvaluateConfig, pipeline_path: &Path, options: &EvaluateOptions) -> anyhow::Result<Plan<EvaluatePlan>> {
    let mut pipeline = Pipeline::load(pipeline_path)?;
    if let Some(m) = config.relevance {
        pipeline.relevance = m;
    }
    anyhow::ensure!(config.golden.is_none() || config.name.is_some(), "--golden needs --name NAME: the results on another question set must not replace eval/{}/", pipeline.name);
    if let Some(g) = &config.golden {
        anyhow::ensure!(g.is_file(), "--golden {}: no such file (a golden set, JSON Lines)", g.display());
        pipeline.golden = g.clone();
        // The pipeline's declared provenance is its own set's, not this one's.
        pipeline.golden_provenance = None;
    }
    if let Some(n) = &config.name {
        gauge_core::names::plain_name(n).map_err(|why| anyhow::anyhow!("--name {why} (it names the folder eval/<name>/)"))?;
        pipeline.name = n.clone();
    }
    let golden = load_golden(&pipeline.golden)?;
    let provenance = gauge_core::golden::resolve_provenance(&pipeline.golden, pipeline.golden_provenance.as_ref())?;
    // Checked against the whole golden set (the answer stage reads the whole file).
    let out_of_corpus = pipeline.out_of_corpus.as_ref().map(|o| gauge_answer::load_out_of_corpus(o, golden.iter().map(|q| q.qid.as_str())).map(|q| (o.clone(), q))).transpose()?;
    let mut notes = Vec::new();
    let (golden, exclusion_inputs) = restrict_to_untrained_pages(golden, &pipeline.golden, &pipeline.exclude_trained_pages, pipeline.held_out_split, &mut notes)?;
    anyhow::ensure!(!golden.is_empty(), "{}: no question is left once the training pages of {:?} are taken out", pipeline.golden.display(), pipeline.exclude_trained_pages);
    let mut skipped = skip_untrained_adapters(&mut pipeline);
    use_reranker_fallbacks(&mut pipeline, &mut notes);
    for n in &notes {
        eprintln!("evaluate: {n}");
    }
    let mode = pipeline.relevance.resolve(&golden).map_err(|e| anyhow::anyhow!("{}: {e}", pipeline.golden.display()))?;
    let (golden, search_questions) = split_for_search(&pipeline, golden, &mut notes)?;
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
    // A provenance sidecar is an input (editing it changes the reports); a declared one is
    // echoed below; one read from the rows or a folder's kind follows the golden set's hash.
    let sidecar = gauge_core::golden::provenance::provenance_path(&pipeline.golden);
    if provenance.source == sidecar.display().to_string() {
        inputs.push(FileEntry::file("golden_provenance", &sidecar)?);
    }
    let out_of_corpus = match out_of_corpus {
        Some((o, questions)) => {
            inputs.push(FileEntry::file("out_of_corpus", &o)?.with_rows(questions.len()));
            questions
        }
        None => Vec::new(),
    };
    let refusal = match &pipeline.refusal {
        Some(section) => Some(refusal_questions(section, &golden, &mut inputs)?),
        None => None,
    };
    inputs.extend(model_inputs(&pipeline, &ups, &mut skipped)?);
    for (name, reason) in &skipped {
        eprintln!("evaluate: skipping config `{name}`: {reason}");
    }
    let answers = build_answer_runs(&pipeline, &ups, &mut dag, options)?;
    for a in &answers {
        inputs.push(FileEntry::hashed(format!("answers:{}", a.name()), a.dir.display(), gauge_core::Manifest::read(&a.dir)?.fingerprint));
    }
    let echo = echo_and_judge_input(&pipeline, mode, &mut inputs)?;
    let seed = pipeline.seed;
    let built = dag.built.clone();
    let same_family = crate::provenance::same_family(&pipeline, &provenance);
    for (config, why) in &same_family {
        eprintln!("evaluate: `{config}` shares a model family with the questions' writer or judge ({why})");
    }
    Ok(Plan::new(inputs, EvaluatePlan { pipeline, golden, out_of_corpus, mode, upstream: ups, skipped, notes, provenance, same_family, answers, built, search_questions, refusal }).echo(echo).seed(seed))
}

/// Loads `[refusal]`'s questions (the calibration set as a golden set, each out-of-corpus
/// file checked against every answerable qid) and lists them as inputs.
fn refusal_questions(section: &crate::refusal::RefusalSection, golden: &[GoldenQuestion], inputs: &mut Vec<FileEntry>) -> anyhow::Result<crate::refusal::RefusalQuestions> {
    let calibration = load_golden(&section.calibrate_on).with_context(|| format!("[refusal] calibrate_on = {}", section.calibrate_on.display()))?;
    anyhow::ensure!(!calibration.is_empty(), "[refusal] calibrate_on = {}: no question to set the cutoff on", section.calibrate_on.display());
    inputs.push(FileEntry::hashed("refusal_calibration", section.calibrate_on.display(), gauge_core::golden::golden_hash(&section.calibrate_on)?).with_rows(calibration.len()));
    let mut taken: std::collections::BTreeSet<String> = golden.iter().chain(&calibration).map(|q| q.qid.clone()).collect();
    let mut out_of_corpus = Vec::new();
    for (i, path) in section.out_of_corpus.iter().enumerate() {
        let questions = crate::refusal::load_out_of_corpus(path, &taken)?;
        taken.extend(questions.iter().map(|q| q.qid.clone()));
        inputs.push(FileEntry::file(format!("refusal_out_of_corpus_{}", i + 1), path)?.with_rows(questions.len()));
        out_of_corpus.push((path.clone(), questions));
    }
    Ok(crate::refusal::RefusalQuestions { calibration, out_of_corpus })
}

/// Takes out the configs whose embedder adapter is not there yet (like a missing reranker,
/// they are skipped, with the reason).
fn skip_untrained_adapters(pipeline: &mut Pipeline) -> Vec<(String, String)> {
    let mut skipped = Vec::new();
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
    skipped
}

/// A config whose reranker model does not resolve uses its `fallback`, said in the report.
fn use_reranker_fallbacks(pipeline: &mut Pipeline, notes: &mut Vec<String>) {
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
}

/// A config search: the golden set split by page groups into the confirmation split (the
/// tables' questions) and the search split (returned second).
fn split_for_search(pipeline: &Pipeline, golden: Vec<GoldenQuestion>, notes: &mut Vec<String>) -> anyhow::Result<(Vec<GoldenQuestion>, Option<Vec<GoldenQuestion>>)> {
    let Some(sp) = &pipeline.search else { return Ok((golden, None)) };
    let seed = sp.section.seed.unwrap_or(pipeline.seed);
    let second = gauge_core::golden::page_split(&golden, sp.section.confirm_share, seed);
    let (mut confirm, mut search) = (Vec::new(), Vec::new());
    for (q, held_out) in golden.into_iter().zip(second) {
        if held_out { confirm.push(q) } else { search.push(q) }
    }
    anyhow::ensure!(confirm.len() >= 5 && search.len() >= 5, "{}: a config search needs at least 5 questions in each split (search {}, confirmation {}); add questions or change [search] confirm_share", pipeline.golden.display(), search.len(), confirm.len());
    notes.push(format!("Config search: the golden set split by page groups (seed {seed}); **these rows are the confirmation split: {} questions the search never saw** ({} searched).", confirm.len(), search.len()));
    Ok((confirm, Some(search)))
}

/// The models' identities as fingerprint inputs: each config's index, reranker weights (a
/// config whose reranker is missing is skipped) and rewrite model, and the searched
/// rerankers'.
fn model_inputs(pipeline: &Pipeline, ups: &[Upstream], skipped: &mut Vec<(String, String)>) -> anyhow::Result<Vec<FileEntry>> {
    let mut inputs = Vec::new();
    // Each reranker model's weights are read (hashed) once, however many configs use it.
    let mut identities: HashMap<String, Result<String, String>> = HashMap::new();
    for (i, (v, u)) in pipeline.variants.iter().zip(ups).enumerate() {
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
    Ok(inputs)
}

/// Answer rows: the answer stage on each chosen config's index (built and cached like any
/// stage), one artifact per (config, generator).
fn build_answer_runs(pipeline: &Pipeline, ups: &[Upstream], dag: &mut Dag<'_>, options: &EvaluateOptions) -> anyhow::Result<Vec<crate::answers::AnswerRun>> {
    let mut answers = Vec::new();
    let Some(section) = &pipeline.answer else { return Ok(answers) };
    let answer_options = gauge_answer::AnswerOptions { device: options.device.clone(), prompts: pipeline.prompts.clone(), stream: false };
    for name in &section.configs {
        let i = pipeline.variants.iter().position(|v| &v.name == name).expect("checked at load");
        let (v, u) = (&pipeline.variants[i], &ups[i]);
        let inputs = gauge_answer::AnswerInputs { index: u.index.clone(), golden: Some(pipeline.golden.clone()), question: None, out_of_corpus: pipeline.out_of_corpus.clone(), limit: section.limit };
        for generator in section.generator_list() {
            let row = crate::answers::AnswerRun { config: name.clone(), compare_to: section.compare_to(&generator.name), generator: generator.name.clone(), dir: PathBuf::new() };
            let dir = dag.ensure_with::<gauge_answer::Answer>(&section.config_for(&v.stages.retrieval, &generator), &inputs, &answer_options).with_context(|| format!("[answer] `{}`", row.name()))?;
            answers.push(crate::answers::AnswerRun { dir, ..row });
        }
    }
    Ok(answers)
}

/// The settings echoed into the manifest; the judge's identity joins the inputs.
fn echo_and_judge_input(pipeline: &Pipeline, mode: RelevanceMode, inputs: &mut Vec<FileEntry>) -> anyhow::Result<serde_json::Value> {
    // `k` is the judged depth (the key is kept so existing evaluations keep their fingerprint);
    // each config's retrieval depth is its `retrieval.k` in `variants`.
    let mut echo = serde_json::json!({
        "pipeline": pipeline.name, "relevance": mode, "k": pipeline.judge_depth, "resamples": pipeline.resamples,
        "variants": pipeline.variants, "stats": pipeline.stats,
    });
    // Echoed only when set, so the evaluations before the setting keep their fingerprints.
    if pipeline.held_out_split != crate::pipeline::HeldOutSplit::default() {
        echo["held_out_split"] = serde_json::to_value(pipeline.held_out_split)?;
    }
    if let Some(sp) = &pipeline.search {
        echo["search"] = serde_json::to_value(sp)?;
    }
    if let Some(p) = &pipeline.golden_provenance {
        echo["golden_provenance"] = serde_json::to_value(p)?;
    }
    if let Some(section) = &pipeline.refusal {
        // The files are inputs (by content); their paths depend on the checkout.
        echo["refusal"] = serde_json::json!({ "max_false_refusal": section.max_false_refusal, "configs": section.configs, "score": section.score });
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
    Ok(echo)
}

/// Keeps the questions none of whose gold pages a listed trained model was trained on (its
/// `training_pages.json`, written by `train-lora --target embedder|reranker`). A listed model
/// not trained yet restricts nothing (the configs using it are skipped). Returns the kept
/// questions and the records as fingerprint inputs; says how many questions remain. A golden
/// set with a page split beside it (`<set>.pages.json`, from `synth-data --mode heldout`) is
/// a held-out set: a model trained on any of its pages is refused (see
/// [`check_held_out_untouched`]) unless `held_out` is [`HeldOutSplit::Restrict`] (then a note
/// says how many of the split's pages it trained on, and the rule above applies).
fn restrict_to_untrained_pages(golden: Vec<GoldenQuestion>, golden_path: &Path, models: &[PathBuf], held_out: crate::pipeline::HeldOutSplit, notes: &mut Vec<String>) -> anyhow::Result<(Vec<GoldenQuestion>, Vec<FileEntry>)> {
    let split = golden_path.with_extension("pages.json");
    let held = if split.is_file() { Some(held_out_pages(&split)?) } else { None };
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
        let trained: BTreeSet<String> = list.iter().filter_map(|p| p.as_str().map(str::to_string)).collect();
        if let Some(held) = &held {
            match held_out {
                crate::pipeline::HeldOutSplit::Refuse => check_held_out_untouched(&trained, &file, held, &split)?,
                crate::pipeline::HeldOutSplit::Restrict => {
                    let touched = trained.intersection(held).count();
                    if touched > 0 {
                        notes.push(format!("`{}` was trained on {touched} of the {} pages of the held-out split `{}` (held_out_split = \"restrict\"): its questions there are left out below, so this set measures it on the split's other pages only.", m.display(), held.len(), split.display()));
                    }
                }
            }
        }
        pages.extend(trained);
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
    gauge_core::outln!("evaluate: {} of {total} questions have no gold page among the {} training pages of {}", kept.len(), pages.len(), used.join(", "));
    notes.push(note);
    Ok((kept, inputs))
}

/// The `pages` of a held-out page split (`heldout_pages.json`).
fn held_out_pages(path: &Path) -> anyhow::Result<BTreeSet<String>> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?).map_err(|e| anyhow::anyhow!("{}: not a held-out page split ({e})", path.display()))?;
    let list = v["pages"].as_array().ok_or_else(|| anyhow::anyhow!("{}: no `pages` list (a held-out page split, as `synth-data --mode heldout` writes it)", path.display()))?;
    Ok(list.iter().filter_map(|p| p.as_str().map(str::to_string)).collect())
}

/// Refuses a trained model (its `training_pages.json` at `record`) that touched a page of a
/// held-out split: the held-out set would no longer measure unseen pages.
pub(crate) fn check_held_out_untouched(trained: &BTreeSet<String>, record: &Path, held: &BTreeSet<String>, split: &Path) -> anyhow::Result<()> {
    let both: Vec<&String> = trained.intersection(held).collect();
    if let Some(first) = both.first() {
        anyhow::bail!(
            "{}: trained on {} page(s) of the held-out split {} (first: {first}); retrain with `synth-data --hold-out {}` and `train-lora --hold-out <the held-out set>`, evaluate it on another set, or set held_out_split = \"restrict\" in the pipeline (its questions on those pages left out)",
            record.display(),
            both.len(),
            split.display(),
            split.display()
        );
    }
    Ok(())
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


#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::HeldOutSplit;

    #[test]
    fn a_model_trained_on_a_held_out_page_is_refused_and_one_that_was_not_restricts() {
        let tmp = tempfile::tempdir().unwrap();
        let golden_path = tmp.path().join("fra-heldout.jsonl");
        let q = |id: &str, page: i32| GoldenQuestion::new(id.into(), "Why?".into(), vec![gauge_core::golden::GoldItem::Page { source: "a.pdf".into(), page, grade: None }]);
        let golden = vec![q("h1", 10), q("h2", 11)];
        std::fs::write(tmp.path().join("fra-heldout.pages.json"), r#"{"format": 1, "pages": ["a.pdf#9", "a.pdf#10", "a.pdf#11", "a.pdf#12"], "question_pages": ["a.pdf#10", "a.pdf#11"]}"#).unwrap();
        let model = |name: &str, pages: &[&str]| {
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("training_pages.json"), serde_json::json!({ "target": "embedder", "pages": pages }).to_string()).unwrap();
            dir
        };
        // Trained away from the split (page 13 is past its guard page 12): evaluated, nothing taken out.
        let clean = model("clean", &["a.pdf#3", "a.pdf#13"]);
        let (kept, inputs) = restrict_to_untrained_pages(golden.clone(), &golden_path, &[clean], HeldOutSplit::Refuse, &mut Vec::new()).unwrap();
        assert_eq!((kept.len(), inputs.len()), (2, 1));
        // Trained on a guard page: refused, naming the record, the split and the page.
        let touched = model("touched", &["a.pdf#3", "a.pdf#12"]);
        let e = restrict_to_untrained_pages(golden.clone(), &golden_path, std::slice::from_ref(&touched), HeldOutSplit::Refuse, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("touched") && e.contains("fra-heldout.pages.json") && e.contains("a.pdf#12") && e.contains("--hold-out"), "{e}");
        // The same model against a set without a split only restricts (the dev set's rule).
        let dev = tmp.path().join("dev.jsonl");
        let (kept, _) = restrict_to_untrained_pages(vec![q("d1", 12), q("d2", 30)], &dev, std::slice::from_ref(&touched), HeldOutSplit::Refuse, &mut Vec::new()).unwrap();
        assert_eq!(kept.iter().map(|q| q.qid.as_str()).collect::<Vec<_>>(), ["d2"]);
        // `held_out_split = "restrict"`: the touching model is used as on a set without a split, with a note.
        let mut notes = Vec::new();
        let trained_on_10 = model("trained-on-10", &["a.pdf#3", "a.pdf#10"]);
        let (kept, _) = restrict_to_untrained_pages(golden.clone(), &golden_path, &[trained_on_10], HeldOutSplit::Restrict, &mut notes).unwrap();
        assert_eq!(kept.iter().map(|q| q.qid.as_str()).collect::<Vec<_>>(), ["h2"]);
        assert!(notes[0].contains("trained on 1 of the 4 pages of the held-out split") && notes[0].contains("restrict"), "{notes:?}");
        // A broken split is a one-line error naming it.
        std::fs::write(tmp.path().join("fra-heldout.pages.json"), "[1, 2]").unwrap();
        let e = restrict_to_untrained_pages(golden, &golden_path, &[], HeldOutSplit::Refuse, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("fra-heldout.pages.json") && e.contains("no `pages` list"), "{e}");
    }
}
