//! Pipeline files (`pipelines/*.toml`): a corpus, a golden set, a baseline config covering
//! every stage, and named variants overriding any of its fields.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::relevance::RelevanceMode;
pub use crate::variant::{StageConfigs, Variant};

/// Errors in a pipeline file.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PipelineError {
    /// The pipeline file.
    pub path: PathBuf,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// A parsed pipeline with its variants resolved (the baseline first).
#[derive(Debug, Clone, Serialize)]
pub struct Pipeline {
    /// Name (the `eval/<name>/` folder).
    pub name: String,
    /// Corpus folder or files (relative paths are relative to the pipeline file).
    pub corpus: PathBuf,
    /// Golden set (JSONL or Parquet).
    pub golden: PathBuf,
    /// Who wrote and judged the golden set's questions, as the pipeline declares it (for a
    /// set whose folder cannot hold a `<set>.provenance.json`); see
    /// [`gauge_core::golden::provenance`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub golden_provenance: Option<gauge_core::golden::Provenance>,
    /// Questions the corpus cannot answer (JSON Lines, no gold), asked by the answer rows only
    /// and scored only by the answer metrics (a refusal is right).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_corpus: Option<PathBuf>,
    /// How passages are judged.
    pub relevance: RelevanceMode,
    /// Passages judged per question (the metrics' depth): the file's `judge_depth`, else its
    /// `k`, else the baseline's `retrieval.k`. What each config *retrieves* is its own
    /// `retrieval.k`, at least this.
    pub judge_depth: usize,
    /// Seed of every bootstrap and randomisation test.
    pub seed: u64,
    /// Bootstrap resamples (at least 1000).
    pub resamples: usize,
    /// The baseline, then every variant in file order.
    pub variants: Vec<Variant>,
    /// Answer rows (`[answer]`), when the pipeline has them.
    pub answer: Option<crate::answers::AnswerSection>,
    /// The LLM judge of the answer rows (`[judge]`), when the pipeline has one.
    pub judge: Option<crate::judge::JudgeSection>,
    /// The pipeline file's folder (judge templates are relative to it).
    pub dir: PathBuf,
    /// Folder of the prompt templates (`prompts/` beside the pipeline file).
    pub prompts: PathBuf,
    /// Trained-model folders (or their `training_pages.json`) whose training pages are taken
    /// out of the golden set: only questions with no gold page among them are evaluated.
    pub exclude_trained_pages: Vec<PathBuf>,
    /// How the family's p-values are adjusted (`[stats]` / `stats = { … }`).
    pub stats: StatsSection,
    /// The config search (`[search]`), when the pipeline has one.
    pub search: Option<crate::search::SearchPlan>,
    /// Whether the golden set's page numbers are exact (a page past its document's end is an
    /// error) or approximate (a warning with a count).
    pub gold_pages: GoldPages,
    /// What a model of `exclude_trained_pages` trained on a page of the golden set's held-out
    /// split does: refused (default) or its questions there left out.
    pub held_out_split: HeldOutSplit,
    /// Refusal by score cutoff (`[refusal]`), when the pipeline measures it: paths resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<crate::refusal::RefusalSection>,
}

/// `held_out_split`: a held-out question set (one with a page split beside it,
/// `<set>.pages.json`) and a listed model trained on some of the split's pages.
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HeldOutSplit {
    /// The evaluation is refused: the set exists to measure pages no training run touched
    /// (retrain with `--hold-out`).
    #[default]
    Refuse,
    /// The set is used as the dev set is: the questions with a gold page among the model's
    /// training pages are left out, and `ablation.md` says how many of the split's pages it
    /// trained on. For a model whose training data cannot avoid the split (a small teacher set
    /// written on the same pages); the questions left still sit on pages it never read.
    Restrict,
}

/// `gold_pages`: how far the golden set's page numbers are trusted.
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoldPages {
    /// Every gold page lies inside its document (`extract`'s numbering): one that does not is an
    /// error naming the question.
    #[default]
    Exact,
    /// Page numbers are approximate (a golden set written against another edition or another
    /// page numbering): pages past a document's end are counted in a warning and judged as they
    /// are (they match nothing).
    Approximate,
}

/// `stats = { correction = "holm" | "bh" | "none" }`: the multiple-comparison correction over
/// the declared family (every variant's paired Δ on the primary metrics — those with a Δ column —
/// and every `compare_to` comparison; the answer rows' deltas form a family of their own).
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StatsSection {
    /// Holm (default), Benjamini–Hochberg or none.
    pub correction: crate::stats::Correction,
}

/// A pipeline file (`pipelines/*.toml`): a corpus, a golden set, a baseline config and its
/// variants, and optional answer rows, judge, statistics and config search. Every stage table
/// is typed; any config field may be left out: defaults fill it (and in a variant, the config
/// it is based on). Read with the stage tables as TOML (each config is merged over its base
/// before it is typed); the JSON Schema shows them typed.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct PipelineFile {
    /// Name of the evaluation (the `eval/<name>/` folder; default: the file's stem).
    name: Option<String>,
    /// Corpus folder or file (relative to this file): PDFs, Markdown, text, JSONL, or a BEIR,
    /// TREC or MS MARCO collection.
    corpus: PathBuf,
    /// Golden set: JSONL or Parquet, or a BEIR / TREC / MS MARCO folder (relative to this file).
    golden: PathBuf,
    /// Who wrote and who judged the golden set's questions (`{ written_by = ["human" or a
    /// model], judged_by = [...], prompt, note }`), when the set has no
    /// `<set>.provenance.json` beside it (a read-only folder). Default: that sidecar, a
    /// benchmark folder's people, the rows' `teacher_model`, else unknown.
    golden_provenance: Option<gauge_core::golden::Provenance>,
    /// Questions the corpus cannot answer (relative to this file): JSON Lines of `qid`,
    /// `question` and optionally `reference_answer`, no `gold` or `keywords`. Needs `[answer]`:
    /// the answer rows ask them after the golden set's, and only the answer metrics score them
    /// (`out_of_corpus_refusal`, `refusal_accuracy`); retrieval metrics never see them.
    out_of_corpus: Option<PathBuf>,
    /// How passages are judged: `auto` (from the golden set's fields), `page`, `span`, `keyword`.
    #[serde(default)]
    relevance: RelevanceMode,
    /// The baseline's `retrieval.k` (passages retrieved), and the judged depth unless
    /// `judge_depth` is set (default: the baseline's `retrieval.k`, 10).
    k: Option<usize>,
    /// Passages judged per question: the metrics' depth (`MRR@n`, `nDCG@n` …); every config
    /// must retrieve at least this many (default: the pipeline's `k`, else the baseline's
    /// `retrieval.k`).
    judge_depth: Option<usize>,
    /// Seed of every bootstrap and randomisation test.
    #[serde(default = "default_seed")]
    seed: u64,
    /// Bootstrap resamples, at least 1000.
    #[serde(default = "default_resamples")]
    resamples: usize,
    /// The baseline config: every stage's settings (the first row of the tables).
    #[schemars(with = "ConfigRowSchema")]
    baseline: toml::Table,
    /// Variants: each the baseline (or `base`) with some fields overridden.
    #[serde(default)]
    #[schemars(with = "Vec<ConfigRowSchema>")]
    variants: Vec<toml::Table>,
    /// Answer rows: generated answers for some configs, with citation checks.
    #[schemars(with = "Option<crate::answers::AnswerSection>")]
    answer: Option<toml::Table>,
    /// The LLM judge of the answer rows.
    #[schemars(with = "Option<crate::judge::JudgeSection>")]
    judge: Option<toml::Table>,
    /// Trained-model folders (or their `training_pages.json`) whose training pages are taken
    /// out of the golden set.
    #[serde(default)]
    exclude_trained_pages: Vec<PathBuf>,
    /// The multiple-comparison correction.
    #[serde(default)]
    stats: StatsSection,
    /// A config search over a space of fields, confirmed on held-out questions.
    #[schemars(with = "Option<crate::search::SearchSection>")]
    search: Option<toml::Table>,
    /// `exact` (default): a gold page past its document's end is an error naming the question;
    /// `approximate`: a warning with a count.
    #[serde(default)]
    gold_pages: GoldPages,
    /// A model of `exclude_trained_pages` trained on pages of the golden set's held-out split
    /// (`<set>.pages.json`): `refuse` (default) or `restrict` (its questions on those pages are
    /// left out, as for a set without a split).
    #[serde(default)]
    held_out_split: HeldOutSplit,
    /// Refusal by score cutoff: each config's cutoff calibrated on answerable questions
    /// (`calibrate_on`, e.g. the dev set), then its false refusals on the golden set and its
    /// refusals of `out_of_corpus` files measured with intervals (no generation).
    refusal: Option<crate::refusal::RefusalSection>,
}

/// One config of a pipeline (`[baseline]` or `[[variants]]`).
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Config")]
#[allow(dead_code)]
struct ConfigRowSchema {
    /// Row name in the tables (unique).
    name: String,
    /// One line on what the row tests.
    description: Option<String>,
    /// The config this one starts from (default: the baseline); defined above it.
    base: Option<String>,
    /// Another config this one is also compared with, question by question.
    compare_to: Option<String>,
    /// Restrict retrieval to each question's gold sources (an oracle: it uses the answer key).
    oracle_source_filter: Option<bool>,
    /// Every stage's settings.
    #[serde(flatten)]
    stages: StageConfigs,
}

/// The JSON Schema of pipeline files (draft 2020-12), as committed in
/// `pipelines/pipeline.schema.json`: every field with its doc comment. No field below the top
/// level is required (defaults fill what a file leaves out).
pub fn json_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(PipelineFile)).expect("a schema serialises");
    fn optional_below_top(v: &mut serde_json::Value, top: bool) {
        match v {
            serde_json::Value::Object(map) => {
                if !top {
                    map.remove("required");
                }
                for (_, x) in map.iter_mut() {
                    optional_below_top(x, false);
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|x| optional_below_top(x, false)),
            _ => {}
        }
    }
    optional_below_top(&mut schema, true);
    // Row names are required wherever a row is written.
    if let Some(row) = schema.pointer_mut("/$defs/Config") {
        row["required"] = serde_json::json!(["name"]);
    }
    schema
}

fn default_seed() -> u64 {
    42
}
fn default_resamples() -> usize {
    2000
}

/// The most bootstrap resamples a pipeline may ask for (each costs a pass over the questions).
pub const MAX_RESAMPLES: usize = 1_000_000;

/// The most embedding shards a config may ask for.
pub const MAX_EMBED_SHARDS: usize = 4096;

const STAGE_KEYS: [&str; 7] = ["extract", "chunk", "embed", "embed_shards", "raptor", "index", "retrieval"];

const ROW_KEYS: [&str; 5] = ["name", "base", "description", "oracle_source_filter", "compare_to"];


impl Pipeline {
    /// Reads and resolves a pipeline file.
    pub fn load(path: &Path) -> Result<Pipeline, PipelineError> {
        let err = |message: String| PipelineError { path: path.to_path_buf(), message };
        let text = gauge_core::read::read_bounded_string(path, gauge_core::read::CONFIG_LIMIT).map_err(|e| err(format!("cannot read pipeline ({e})")))?;
        let file: PipelineFile = toml::from_str(&text).map_err(|e| err(format!("invalid pipeline {}", gauge_core::config::toml_error(&text, &e))))?;
        let here = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { normalize(&here.join(p)) };
        ensure_or(file.resamples >= 1000, || err(format!("resamples = {} is too few for a 95 % interval; use at least 1000", file.resamples)))?;
        ensure_or(file.resamples <= MAX_RESAMPLES, || err(format!("resamples = {} is more than {MAX_RESAMPLES}; an interval's Monte Carlo error is already below 0.001 at 10 000", file.resamples)))?;
        ensure_or(file.k.is_none_or(|k| k >= 1), || err("k must be at least 1".into()))?;
        ensure_or(file.judge_depth.is_none_or(|k| k >= 1), || err("judge_depth must be at least 1".into()))?;
        let mut resolved: Vec<(String, serde_json::Value)> = Vec::new();
        let mut variants = Vec::new();
        let rows = std::iter::once((true, file.baseline)).chain(file.variants.into_iter().map(|v| (false, v)));
        for (is_baseline, row) in rows {
            for key in row.keys() {
                if !STAGE_KEYS.contains(&key.as_str()) && !ROW_KEYS.contains(&key.as_str()) {
                    return Err(err(format!("unknown key `{key}` in a config; expected {} or {}", ROW_KEYS.join(", "), STAGE_KEYS.join(", "))));
                }
            }
            let name = match row.get("name") {
                Some(toml::Value::String(s)) => s.clone(),
                None if is_baseline => "baseline".to_string(),
                _ => return Err(err("every [[variants]] entry needs a `name` string".into())),
            };
            if resolved.iter().any(|(n, _)| *n == name) {
                return Err(err(format!("two configs are named `{name}`; names must be unique")));
            }
            let mut table = if is_baseline {
                // The pipeline's `k` is the baseline's `retrieval.k` unless it sets one.
                match file.k {
                    Some(k) => serde_json::json!({ "retrieval": { "k": k } }),
                    None => serde_json::json!({}),
                }
            } else {
                let base = match row.get("base") {
                    None => resolved[0].0.clone(),
                    Some(toml::Value::String(s)) => s.clone(),
                    Some(_) => return Err(err(format!("`base` of `{name}` must be a config name"))),
                };
                resolved
                    .iter()
                    .find(|(n, _)| *n == base)
                    .map(|(_, t)| t.clone())
                    .ok_or_else(|| err(format!("`{name}` is based on `{base}`, which is not defined above it")))?
            };
            let mut over = row.clone();
            for k in ["name", "base", "description", "compare_to"] {
                over.remove(k);
            }
            // The one merge path of every config (see gauge_core::config).
            gauge_core::config::merge(&mut table, &gauge_core::config::toml_to_json(toml::Value::Table(over)));
            // The judged depth, once known: set in the file, or the baseline's `retrieval.k`.
            let judged = file.judge_depth.or(file.k).or_else(|| variants.first().map(|v: &Variant| v.stages.retrieval.k));
            let (stages, oracle) = resolve_stages(&name, table.clone(), judged).map_err(err)?;
            let description = row.get("description").and_then(|d| d.as_str()).unwrap_or_default().to_string();
            let compare_to = match row.get("compare_to") {
                None => None,
                Some(toml::Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(err(format!("`compare_to` of `{name}` must be a config name"))),
            };
            variants.push(Variant { name: name.clone(), description, oracle_source_filter: oracle, stages, compare_to });
            resolved.push((name, table));
        }
        if let Some((v, other)) = variants.iter().find_map(|v: &Variant| v.compare_to.as_ref().filter(|c| !variants.iter().any(|w| &w.name == *c)).map(|c| (v.name.clone(), c.clone()))) {
            return Err(err(format!("`{v}` is compared to `{other}`, which is not defined")));
        }
        let name = file.name.unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "pipeline".into()));
        // The name is the folder under the eval dir that evaluate replaces: one plain component.
        gauge_core::names::plain_name(&name).map_err(|why| err(format!("`name` {why} (it names the folder eval/<name>/)")))?;
        let judge_depth = file.judge_depth.or(file.k).unwrap_or(variants[0].stages.retrieval.k);
        let answer = match file.answer {
            None => None,
            Some(t) => {
                let mut section: crate::answers::AnswerSection =
                    gauge_core::config::resolve(&[gauge_core::config::Layer::new("[answer]", gauge_core::config::toml_to_json(toml::Value::Table(t)))]).map_err(|e| err(e.to_string()))?;
                if section.configs.is_empty() {
                    section.configs.push(variants[0].name.clone());
                }
                section.generation.validate().map_err(|e| err(format!("[answer] {e}")))?;
                if let Some(gate) = &section.gate {
                    gate.validate().map_err(err)?;
                    section.check_gate_bases(gate).map_err(err)?;
                    let names_ooc = gate.family.iter().chain(gate.non_inferiority.keys()).any(|m| m == "out_of_corpus_refusal");
                    ensure_or(!names_ooc || file.out_of_corpus.is_some(), || err("[answer] gate names `out_of_corpus_refusal`, which only the `out_of_corpus` questions give values to; add `out_of_corpus = \"FILE\"` (top level) or take it out of the gate".into()))?;
                }
                // Each row's form against its own reply length (the section's alone when no row is named).
                for row in section.generator_list() {
                    let at = row.name.as_ref().map_or("[answer]".to_string(), |n| format!("[[answer.generators]] `{n}`:"));
                    row.structure.validate(row.generation.max_new_tokens).map_err(|e| err(format!("{at} {e}")))?;
                }
                for g in &section.generators {
                    if let Some(gen) = &g.generation {
                        gen.validate().map_err(|e| err(format!("[[answer.generators]] `{}`: {e}", g.name)))?;
                    }
                    if let Some(c) = &g.compare_to {
                        let known: Vec<&str> = section.generators.iter().map(|o| o.name.as_str()).filter(|n| *n != g.name).collect();
                        ensure_or(known.contains(&c.as_str()), || err(format!("[[answer.generators]] `{}`: compare_to = `{c}` names no other generator (known: {})", g.name, known.join(", "))))?;
                    }
                }
                if let Some(unknown) = section.configs.iter().find(|c| !variants.iter().any(|v: &Variant| &v.name == *c)) {
                    return Err(err(format!("[answer] names config `{unknown}`, which is not defined")));
                }
                Some(section)
            }
        };
        ensure_or(file.out_of_corpus.is_none() || answer.is_some(), || err("`out_of_corpus` questions are asked by the answer rows only; add an [answer] section or remove it".into()))?;
        let judge = match file.judge {
            None => None,
            Some(t) => {
                ensure_or(answer.is_some(), || err("[judge] grades answer rows; add an [answer] section".into()))?;
                let section: crate::judge::JudgeSection =
                    gauge_core::config::resolve(&[gauge_core::config::Layer::new("[judge]", gauge_core::config::toml_to_json(toml::Value::Table(t)))]).map_err(|e| err(e.to_string()))?;
                ensure_or((1..=5).contains(&section.faithful_at), || err(format!("[judge] faithful_at = {} must be a grade from 1 to 5", section.faithful_at)))?;
                Some(section)
            }
        };
        let search = match file.search {
            None => None,
            Some(t) => {
                let section: crate::search::SearchSection =
                    gauge_core::config::resolve(&[gauge_core::config::Layer::new("[search]", gauge_core::config::toml_to_json(toml::Value::Table(t)))]).map_err(|e| err(e.to_string()))?;
                let seed = section.seed.unwrap_or(file.seed);
                let resolve = |name: &str, table: serde_json::Value| -> Result<StageConfigs, String> {
                    let (stages, oracle) = resolve_stages(name, table, Some(judge_depth))?;
                    if oracle {
                        return Err(format!("config `{name}`: a searched config cannot use the oracle source filter"));
                    }
                    Ok(stages)
                };
                Some(crate::search::plan(section, &resolved[0].1, seed, &resolve).map_err(err)?)
            }
        };
        let refusal = match file.refusal {
            None => None,
            Some(mut r) => {
                let configs: Vec<(String, bool)> = variants.iter().map(|v: &Variant| (v.name.clone(), v.oracle_source_filter)).collect();
                r.validate(&configs).map_err(err)?;
                r.calibrate_on = resolve(&r.calibrate_on);
                r.out_of_corpus = r.out_of_corpus.iter().map(|p| resolve(p)).collect();
                Some(r)
            }
        };
        let prompts = here.join("prompts");
        Ok(Pipeline {
            search, name, corpus: resolve(&file.corpus), golden: resolve(&file.golden), golden_provenance: file.golden_provenance, out_of_corpus: file.out_of_corpus.as_deref().map(resolve), relevance: file.relevance, judge_depth, seed: file.seed, resamples: file.resamples, variants, answer, judge, dir: here.to_path_buf(), prompts, exclude_trained_pages: file.exclude_trained_pages.iter().map(|p| resolve(p)).collect(), stats: file.stats, gold_pages: file.gold_pages, held_out_split: file.held_out_split, refusal })
    }
}

/// Resolves one config's merged table into its stage settings and oracle flag, with the
/// checks every config passes (some retriever on; at least `judged` passages retrieved).
fn resolve_stages(name: &str, mut table: serde_json::Value, judged: Option<usize>) -> Result<(StageConfigs, bool), String> {
    let oracle = match table.as_object_mut().and_then(|t| t.remove("oracle_source_filter")) {
        None => false,
        Some(serde_json::Value::Bool(b)) => b,
        Some(_) => return Err(format!("`oracle_source_filter` of `{name}` must be true or false")),
    };
    let mut stages: StageConfigs = gauge_core::config::resolve(&[gauge_core::config::Layer::new(format!("config `{name}`"), table)]).map_err(|e| e.to_string())?;
    if !stages.retrieval.dense && !stages.retrieval.bm25 {
        return Err(format!("config `{name}` turns off both dense and BM25 retrieval"));
    }
    // Every stage's own checks, here where the file is read, before anything is built.
    stages.retrieval.validate().map_err(|e| format!("config `{name}`: retrieval: {e}"))?;
    stages.chunk.validate().map_err(|e| format!("config `{name}`: chunk: {e}"))?;
    if let Some(r) = &stages.raptor {
        r.validate().map_err(|e| format!("config `{name}`: {e}"))?;
    }
    if stages.embed_shards > MAX_EMBED_SHARDS {
        return Err(format!("config `{name}`: embed_shards = {} is more than {MAX_EMBED_SHARDS}", stages.embed_shards));
    }
    let share = stages.extract.cleaning.header_min_share;
    if !(0.0..=1.0).contains(&share) {
        return Err(format!("config `{name}`: extract.cleaning.header_min_share = {share} must lie in [0, 1]"));
    }
    stages.retrieval = stages.retrieval.normalize();
    if let Some(judged) = judged.filter(|&j| stages.retrieval.k < j) {
        return Err(format!(
            "config `{name}` retrieves k = {} passages but the pipeline judges the top {judged}; the metrics compare lists of one length, so give every config a `retrieval.k` of at least {judged} (or lower the pipeline's `judge_depth`)",
            stages.retrieval.k
        ));
    }
    Ok((stages, oracle))
}

/// Removes `.` and `name/..` pairs without touching the file system
/// (`pipelines/../../shared` → `../shared`).
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    if out.is_empty() { PathBuf::from(".") } else { out.iter().collect() }
}

fn ensure_or(ok: bool, e: impl FnOnce() -> PipelineError) -> Result<(), PipelineError> {
    if ok { Ok(()) } else { Err(e()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Pipeline, PipelineError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, text).unwrap();
        Pipeline::load(&p)
    }

    const HEAD: &str = "corpus = \"c\"\ngolden = \"g.jsonl\"\n";

    #[test]
    fn variants_override_the_baseline_or_another_variant() {
        let p = load(&format!(
            "{HEAD}
[baseline]
name = \"Vector\"
retrieval = {{ bm25 = false }}
chunk = {{ size = 800, overlap = 100 }}

[[variants]]
name = \"Hybrid\"
retrieval = {{ bm25 = true, fusion = {{ kind = \"rrf\", k = 60.0 }} }}

[[variants]]
name = \"+ filter\"
base = \"Hybrid\"
oracle_source_filter = true
chunk = {{ size = 500 }}
"
        ))
        .unwrap();
        assert_eq!(p.variants.len(), 3);
        let [base, hybrid, filtered] = [&p.variants[0], &p.variants[1], &p.variants[2]];
        assert_eq!((base.name.as_str(), base.stages.retrieval.bm25, base.stages.chunk.size), ("Vector", false, 800));
        assert!(hybrid.stages.retrieval.bm25 && !hybrid.oracle_source_filter);
        // `+ filter` inherits Hybrid's retrieval and the baseline's overlap, overriding the size.
        assert!(filtered.stages.retrieval.bm25 && filtered.oracle_source_filter);
        assert_eq!((filtered.stages.chunk.size, filtered.stages.chunk.overlap), (500, 100));
        // Untouched stages keep their defaults.
        assert_eq!(filtered.stages.index, gauge_index::IndexConfig::default());
        assert_eq!((p.judge_depth, p.resamples, p.seed), (10, 2000, 42));
        assert_eq!(normalize(Path::new("pipelines/../../shared/./g.jsonl")), PathBuf::from("../shared/g.jsonl"));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("[baseline]\nchunk = { sise = 5 }\n", "sise"),
            ("[baseline]\n[[variants]]\nname = \"a\"\nbase = \"zzz\"\n", "zzz"),
            ("[baseline]\n[[variants]]\nretrieval = { k = 3 }\n", "needs a `name`"),
            ("[baseline]\nretrieval = { dense = false, bm25 = false }\n", "both dense and BM25"),
            ("[baseline]\n[[variants]]\nname = \"baseline\"\n", "unique"),
            ("resamples = 10\n[baseline]\n", "at least 1000"),
            ("[baseline]\nretrievl = {}\n", "unknown key `retrievl`"),
            ("[baseline]\n[[variants]]\nname = \"short\"\nretrieval = { k = 3 }\n", "judges the top 10"),
            ("judge_depth = 20\n[baseline]\n", "retrieves k = 10 passages but the pipeline judges the top 20"),
            ("judge_depth = 0\n[baseline]\n", "judge_depth must be at least 1"),
            ("[baseline]\n[[variants]]\nname = \"a\"\ncompare_to = \"nowhere\"\n", "compared to `nowhere`"),
            ("[baseline]\n[judge]\n", "add an [answer] section"),
            ("[baseline]\n[answer]\n[judge]\nfaithful_at = 9\n", "faithful_at = 9"),
            ("[baseline]\n[answer]\n[judge]\nrubric = \"x.md\"\n", "rubric"),
            ("[baseline]\n[answer]\n[[answer.generators]]\nname = \"a\"\n[[answer.generators]]\nname = \"b\"\ncompare_to = \"b\"\n", "compare_to = `b` names no other generator (known: a)"),
            // A name is one folder under eval/, never a path.
            ("name = \"\"\n[baseline]\n", "`name` is empty"),
            ("name = \".\"\n[baseline]\n", "`name` `.` is not a name"),
            ("name = \"../../somewhere/keep\"\n[baseline]\n", "a name is one folder"),
            ("name = \"/keep\"\n[baseline]\n", "a name is one folder"),
        ];
        for (text, want) in cases {
            let e = load(&format!("{HEAD}{text}")).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("p.toml"), "{want}: {e}");
        }
    }

    #[test]
    fn what_is_retrieved_and_what_is_judged_are_two_fields() {
        // An old file: the top-level `k` is both the baseline's retrieval depth and the
        // judged depth, and every config inherits it.
        let p = load(&format!("{HEAD}k = 5\n[baseline]\n[[variants]]\nname = \"b\"\n")).unwrap();
        assert_eq!((p.judge_depth, p.variants[0].stages.retrieval.k, p.variants[1].stages.retrieval.k), (5, 5, 5));
        // `judge_depth` apart: configs may retrieve more than is judged, never less.
        let p = load(&format!("{HEAD}judge_depth = 5\n[baseline]\nretrieval = {{ k = 20 }}\n[[variants]]\nname = \"deep\"\nretrieval = {{ k = 50 }}\n")).unwrap();
        assert_eq!((p.judge_depth, p.variants[0].stages.retrieval.k, p.variants[1].stages.retrieval.k), (5, 20, 50));
        let e = load(&format!("{HEAD}judge_depth = 5\n[baseline]\n[[variants]]\nname = \"shallow\"\nretrieval = {{ k = 4 }}\n")).unwrap_err().to_string();
        assert!(e.contains("config `shallow` retrieves k = 4 passages but the pipeline judges the top 5"), "{e}");
    }
}
