//! Answer rows of an ablation (a pipeline's `[answer]` section): the `answer` stage run on
//! chosen configs, and deterministic answer metrics from its `answers.parquet` — no judge.
use std::path::Path;

use gauge_answer::{AnswerConfig, GeneratorConfig, StructureConfig};
use gauge_core::golden::GoldenQuestion;
use gauge_core::table::Columns;
use gauge_chat::GenerateOptions;
use serde::{Deserialize, Serialize};

use crate::rows::MetricRow;
use crate::stats::{bootstrap_ci, mean};

/// The `[answer]` section of a pipeline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AnswerSection {
    /// Configs whose retrieval feeds the generator (default: the baseline).
    pub configs: Vec<String>,
    /// The generator (local model or API).
    pub generator: GeneratorConfig,
    /// Prompt template (`plain`, `four_phase`).
    pub template: String,
    /// Generation settings.
    pub generation: GenerateOptions,
    /// The refusal sentence.
    pub refusal: String,
    /// The form replies are held to (default free; `four_phase`: the four phases by
    /// constrained decoding, [`gauge_answer::StructureConfig`]); a generator row may set its own.
    #[serde(skip_serializing_if = "StructureConfig::is_free")]
    pub structure: StructureConfig,
    /// At most this many questions (0: all).
    pub limit: usize,
    /// Several generators compared on the same retrieved contexts (e.g. a base model and the
    /// base with a `train-lora` adapter): each config gets one answer row per generator, and
    /// each generator after the first is compared with the first on the same questions
    /// (paired). Empty: `generator` alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub generators: Vec<NamedGenerator>,
    /// Also report every answer metric on two halves of the questions split by page group
    /// ([`gauge_core::golden::page_halves`] with this seed): choose settings on the tuning
    /// half, judge them on the held-out half, whose pages the choice never saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_seed: Option<u64>,
    /// The gate of the rows whose generator has an adapter, declared before the run (default:
    /// token F1 against the reference answers, else answers with a verified citation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<AnswerGate>,
}

/// What an adapter must show against its base, declared in the pipeline before the run: a
/// family of metrics on which it must be **better** (each a gate row, the family's p-values
/// adjusted together), and secondary metrics on which it must not be worse than its base by
/// more than a stated margin (non-inferiority: the lower end of the paired 95 % interval above
/// −margin). Metric names are `answers.parquet`'s (`grounded_answer`, `out_of_corpus_refusal`,
/// `reference_token_f1`, `format_compliance`, …); every one is higher-is-better.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerGate {
    /// The metrics judged for superiority, the primary one first.
    pub family: Vec<String>,
    /// Secondary metrics and their non-inferiority margins (in the metric's units).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub non_inferiority: std::collections::BTreeMap<String, f64>,
}

/// Whether a generator loads a LoRA adapter.
fn has_adapter(g: &GeneratorConfig) -> bool {
    matches!(g, GeneratorConfig::Local { adapter: Some(_), .. })
}

/// Every answer metric name a gate may name (higher is better for each of them).
pub const GATE_METRICS: [&str; 10] = ["answer_verified_citation", "citation_precision", "citation_accuracy", "answer_cites_gold", "grounded_answer", "refusal_accuracy", "out_of_corpus_refusal", "format_compliance", "reference_token_f1", "answer_keyword_recall"];

impl AnswerGate {
    /// Refuses an empty family, an unknown or lower-is-better metric, a negative margin, or a
    /// metric both in the family and among the secondary ones.
    pub fn validate(&self) -> Result<(), String> {
        if self.family.is_empty() {
            return Err("answer.gate.family is empty: name the primary metric (e.g. \"grounded_answer\")".into());
        }
        for m in self.family.iter().chain(self.non_inferiority.keys()) {
            if !GATE_METRICS.contains(&m.as_str()) {
                return Err(format!("answer.gate: `{m}` is not a higher-is-better answer metric (one of {})", GATE_METRICS.join(", ")));
            }
        }
        for (m, margin) in &self.non_inferiority {
            if !(margin.is_finite() && *margin >= 0.0) {
                return Err(format!("answer.gate.non_inferiority.{m} = {margin}: a margin is a finite number ≥ 0"));
            }
            if self.family.contains(m) {
                return Err(format!("answer.gate: `{m}` is both in the family and a non-inferiority metric"));
            }
        }
        Ok(())
    }
}

/// A generator with the name its answer rows carry, and optionally its own generation
/// settings (an A/B test of sampling controls on one model).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedGenerator {
    /// Short name (`base`, `+ adapter`, `dry 0.8`).
    pub name: String,
    /// The generator (default: the section's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorConfig>,
    /// Generation settings replacing the section's `generation` for this row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<GenerateOptions>,
    /// The form this row's replies are held to, replacing the section's `structure` (a
    /// structured row against the same model free: `compare_to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structure: Option<StructureConfig>,
    /// The generator (by name) this row is paired against (default: the first): an option's
    /// row against the same model without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_to: Option<String>,
}

/// An answer row: the retrieval config, the generator's name (`None` for a single
/// generator), and the answers' artifact directory.
#[derive(Debug, Clone)]
pub struct AnswerRun {
    /// Retrieval config name.
    pub config: String,
    /// Generator name, when the section names several.
    pub generator: Option<String>,
    /// The generator its paired differences are against (`None`: the first).
    pub compare_to: Option<String>,
    /// The answer artifact.
    pub dir: std::path::PathBuf,
}

impl AnswerRun {
    /// The row's name in tables: `config` or `config · generator`.
    pub fn name(&self) -> String {
        match &self.generator {
            Some(g) => format!("{} · {g}", self.config),
            None => self.config.clone(),
        }
    }
}

impl Default for AnswerSection {
    fn default() -> Self {
        let a = AnswerConfig::default();
        AnswerSection { configs: Vec::new(), generator: a.generator, template: a.template, generation: a.generation, refusal: a.refusal, structure: a.structure, limit: 0, generators: Vec::new(), split_seed: None, gate: None }
    }
}

impl AnswerSection {
    /// The answer stage's config for a retrieval config and a generator row.
    pub fn config_for(&self, retrieval: &gauge_engine::RetrievalConfig, row: &GeneratorRow) -> AnswerConfig {
        AnswerConfig { retrieval: retrieval.clone(), generator: row.generator.clone(), template: self.template.clone(), generation: row.generation.clone(), refusal: self.refusal.clone(), structure: row.structure.clone() }
    }

    /// The form the named generator row's replies are held to.
    pub fn structure_of(&self, name: &Option<String>) -> StructureConfig {
        self.generators.iter().find(|g| Some(&g.name) == name.as_ref()).and_then(|g| g.structure.clone()).unwrap_or_else(|| self.structure.clone())
    }

    /// Whether the section's rows are asked for the four phases (the template asks for them, or a
    /// row's structure holds them): `format_compliance` is measured on every row then, so a
    /// structured row and its free base are compared on it.
    pub fn asks_four_phases(&self) -> bool {
        self.template == "four_phase" || std::iter::once(&self.structure).chain(self.generators.iter().filter_map(|g| g.structure.as_ref())).any(|s| s.kind == gauge_answer::StructureKind::FourPhase)
    }

    /// Whether the gate judges answer row `a`: its generator has an adapter (a trained model
    /// against its base), or its replies are held to a form its base's are not (a grammar
    /// against the same model free).
    pub fn is_gated(&self, a: &AnswerRun) -> bool {
        let base = a.compare_to.clone().or_else(|| self.generators.first().map(|g| g.name.clone()));
        let mine = self.structure_of(&a.generator);
        let structured = a.generator.is_some() && a.generator != base && !mine.is_free() && mine != self.structure_of(&base);
        self.is_adapted(a) || structured
    }

    /// The generator a named row is paired against, when not the first.
    pub fn compare_to(&self, name: &Option<String>) -> Option<String> {
        self.generators.iter().find(|g| Some(&g.name) == name.as_ref()).and_then(|g| g.compare_to.clone())
    }

    /// Whether the answer row `a` comes from a generator with a LoRA adapter (a trained model the
    /// gate judges).
    pub fn is_adapted(&self, a: &AnswerRun) -> bool {
        self.generators.iter().any(|g| Some(&g.name) == a.generator.as_ref() && g.generator.as_ref().is_some_and(has_adapter))
    }

    /// Refuses a gate that cannot be judged: an adapted generator with no base to compare with
    /// (the first generator, or the only one, without `compare_to`), or `format_compliance`
    /// without the `four_phase` template.
    pub fn check_gate_bases(&self, gate: &AnswerGate) -> Result<(), String> {
        let adapted = |g: &Option<GeneratorConfig>| g.as_ref().is_some_and(has_adapter);
        if self.generators.is_empty() && has_adapter(&self.generator) {
            return Err("answer.gate: the only generator has an adapter and nothing to be compared with; list the base and the adapted model under [[answer.generators]]".into());
        }
        if let Some(first) = self.generators.first().filter(|g| adapted(&g.generator) && g.compare_to.is_none()) {
            return Err(format!("answer.gate: generator `{}` has an adapter but is the first one, the default base; put its base first or give it `compare_to`", first.name));
        }
        if !self.asks_four_phases() && gate.family.iter().chain(gate.non_inferiority.keys()).any(|m| m == "format_compliance") {
            return Err(format!("answer.gate: `format_compliance` is measured only with template = \"four_phase\" or a four_phase structure (this section's template is \"{}\")", self.template));
        }
        Ok(())
    }

    /// The generators to run with their settings: the named list, or `generator` alone
    /// (unnamed).
    pub fn generator_list(&self) -> Vec<GeneratorRow> {
        if self.generators.is_empty() {
            vec![GeneratorRow { name: None, generator: self.generator.clone(), generation: self.generation.clone(), structure: self.structure.clone() }]
        } else {
            self.generators
                .iter()
                .map(|g| GeneratorRow {
                    name: Some(g.name.clone()),
                    generator: g.generator.clone().unwrap_or_else(|| self.generator.clone()),
                    generation: g.generation.clone().unwrap_or_else(|| self.generation.clone()),
                    structure: g.structure.clone().unwrap_or_else(|| self.structure.clone()),
                })
                .collect()
        }
    }
}

/// One generator row of an `[answer]` section with its settings resolved.
#[derive(Debug, Clone)]
pub struct GeneratorRow {
    /// The row's name (`None`: the section's single generator).
    pub name: Option<String>,
    /// The generator.
    pub generator: GeneratorConfig,
    /// Its generation settings.
    pub generation: GenerateOptions,
    /// The form its replies are held to.
    pub structure: StructureConfig,
}

/// One answered config for the report: name, questions, and each metric's label and row.
pub type AnswerTable = (String, usize, Vec<(&'static str, MetricRow)>);

/// One answered question, as read back from `answers.parquet`.
#[derive(Debug, Clone)]
pub struct AnsweredQuestion {
    /// Question id.
    pub qid: String,
    /// Answer text.
    pub answer: String,
    /// Refused by the cutoff.
    pub refused: bool,
    /// Citations.
    pub citations: Vec<gauge_cite::Citation>,
    /// Generated tokens (0 when refused).
    pub completion_tokens: i64,
    /// Seconds generating (prompt and decoding).
    pub seconds: f64,
    /// Why generation ended (`eos`, `stop`, `loop`, `length`, `refused`, `api`).
    pub finish_reason: String,
}

/// Reads an `answers.parquet` (its `qid`, `answer`, `refused` and `citations` columns checked
/// first; a citation that is not `{source, page_start, page_end, verified}` is an error naming
/// the row).
pub fn read_answers(path: &Path) -> anyhow::Result<Vec<AnsweredQuestion>> {
    let required: Vec<gauge_core::schema::ColumnDoc> = gauge_core::schema::ANSWER_COLUMNS.iter().filter(|c| ["qid", "answer", "refused", "citations"].contains(&c.name)).copied().collect();
    let batch = gauge_core::table::read_parquet(path, &gauge_core::schema::arrow_schema(&required))?;
    let c = Columns::new(&batch);
    let (qid, answer, refused, cites) = (c.strings_required("qid"), c.strings_required("answer"), c.bools("refused"), c.strings_required("citations"));
    let n = batch.num_rows();
    let tokens = if c.has("completion_tokens") { c.i32s("completion_tokens").into_iter().map(i64::from).collect() } else { vec![0; n] };
    let seconds = if c.has("generation_seconds") { c.f64s("generation_seconds").into_iter().map(|s| s.unwrap_or(0.0)).collect() } else { vec![0.0; n] };
    let finish = if c.has("finish_reason") { c.strings_required("finish_reason") } else { vec![String::new(); n] };
    (0..batch.num_rows())
        .map(|i| {
            let bad = |what: String| anyhow::anyhow!("{}: row {} (`{}`): {what}", path.display(), i + 1, qid[i]);
            let citations = gauge_cite::read_citations(&cites[i]).map_err(|e| bad(e.to_string()))?;
            Ok(AnsweredQuestion { qid: qid[i].clone(), answer: answer[i].clone(), refused: refused[i], citations, completion_tokens: tokens[i], seconds: seconds[i], finish_reason: finish[i].clone() })
        })
        .collect()
}

/// Whether the model itself declined: its answer holds the configured refusal sentence
/// (case and spacing ignored).
pub fn says_refusal(answer: &str, refusal: &str) -> bool {
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let r = norm(refusal.trim_end_matches('.'));
    !r.is_empty() && norm(answer).contains(&r)
}

/// The four phases of the `four_phase` template, in order.
pub const PHASES: [&str; 4] = ["contextual audit", "evidence map", "synthesis", "verification"];

/// Whether the four phases appear, in order.
pub fn four_phases_in_order(answer: &str) -> bool {
    let lower = answer.to_lowercase();
    let mut from = 0;
    for p in PHASES {
        match lower[from..].find(p) {
            Some(i) => from += i + p.len(),
            None => return false,
        }
    }
    true
}

fn tokens(s: &str) -> Vec<String> {
    s.to_lowercase().split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_string).collect()
}

/// Token-level F1 between an answer and a reference (SQuAD-style bag of words).
pub fn token_f1(answer: &str, reference: &str) -> f64 {
    let (a, r) = (tokens(answer), tokens(reference));
    if a.is_empty() || r.is_empty() {
        return 0.0;
    }
    let mut pool: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for t in &r {
        *pool.entry(t.as_str()).or_default() += 1;
    }
    let mut common = 0usize;
    for t in &a {
        if let Some(n) = pool.get_mut(t.as_str()).filter(|n| **n > 0) {
            *n -= 1;
            common += 1;
        }
    }
    if common == 0 {
        return 0.0;
    }
    let (p, rc) = (common as f64 / a.len() as f64, common as f64 / r.len() as f64);
    2.0 * p * rc / (p + rc)
}

/// The answer metrics (name, label, per-question value or `None` where it does not apply).
pub fn answer_metrics(answers: &[AnsweredQuestion], golden: &[GoldenQuestion], four_phase: bool, refusal_sentence: &str) -> Vec<(&'static str, &'static str, Vec<Option<f64>>)> {
    let q_of = |qid: &str| golden.iter().find(|q| q.qid == qid);
    let per = |f: &dyn Fn(&AnsweredQuestion, Option<&GoldenQuestion>) -> Option<f64>| answers.iter().map(|a| f(a, q_of(&a.qid))).collect::<Vec<_>>();
    let frac = |a: &AnsweredQuestion, keep: &dyn Fn(&gauge_cite::Citation) -> bool| (!a.citations.is_empty()).then(|| a.citations.iter().filter(|c| keep(c)).count() as f64 / a.citations.len() as f64);
    let mut out: Vec<(&'static str, &'static str, Vec<Option<f64>>)> = vec![
        ("answer_verified_citation", "Answers with a verified citation", per(&|a, _| (!a.refused).then(|| if a.citations.iter().any(|c| c.verified) { 1.0 } else { 0.0 }))),
        ("citation_precision", "Citation precision", per(&|a, _| frac(a, &|c| c.verified))),
        ("invented_citation_rate", "Invented citations", per(&|a, _| frac(a, &|c| !c.verified))),
        ("citation_accuracy", "Citation accuracy (gold pages)", per(&|a, q| q.filter(|q| !q.gold.is_empty()).and_then(|q| frac(a, &|c| c.cites_gold(&q.gold))))),
        ("answer_cites_gold", "Answers citing a gold page", per(&|a, q| q.filter(|q| !q.gold.is_empty() && !a.refused).map(|q| if a.citations.iter().any(|c| c.cites_gold(&q.gold)) { 1.0 } else { 0.0 }))),
        ("grounded_answer", "Grounded answers", per(&|a, q| q.filter(|q| !q.gold.is_empty()).map(|q| if a.citations.iter().any(|c| c.verified && c.cites_gold(&q.gold)) { 1.0 } else { 0.0 }))),
        ("refusal_accuracy", "Refusal accuracy", per(&|a, q| q.map(|q| if (a.refused || says_refusal(&a.answer, refusal_sentence)) == (q.gold.is_empty() && q.keywords.is_empty()) { 1.0 } else { 0.0 }))),
    ];
    // Questions the corpus cannot answer (no gold, no keywords): refusing them is right.
    if golden.iter().any(|q| q.gold.is_empty() && q.keywords.is_empty()) {
        out.push(("out_of_corpus_refusal", "Refusals of out-of-corpus questions", per(&|a, q| q.filter(|q| q.gold.is_empty() && q.keywords.is_empty()).map(|_| if a.refused || says_refusal(&a.answer, refusal_sentence) { 1.0 } else { 0.0 }))));
    }
    if four_phase {
        // A refusal (the cutoff's, or the model's own: a legal first move under a structure) is
        // not an answer in phases; refusal_accuracy and grounded_answer count it.
        out.push(("format_compliance", "Four phases in order", per(&|a, _| (!a.refused && !says_refusal(&a.answer, refusal_sentence)).then(|| if four_phases_in_order(&a.answer) { 1.0 } else { 0.0 }))));
    }
    if golden.iter().any(|q| q.reference_answer.is_some()) {
        out.push(("reference_token_f1", "Token F1 vs reference", per(&|a, q| q.and_then(|q| q.reference_answer.as_ref()).map(|r| token_f1(&a.answer, r)))));
    }
    out.push(("tokens_generated", "Tokens generated", per(&|a, _| (!a.refused).then_some(a.completion_tokens as f64))));
    out.push(("loop_rate", "Ended in a loop", per(&|a, _| (!a.refused).then(|| if a.finish_reason == "loop" { 1.0 } else { 0.0 }))));
    out.push(("length_rate", "Ran out of tokens", per(&|a, _| (!a.refused).then(|| if a.finish_reason == "length" { 1.0 } else { 0.0 }))));
    out.push(("seconds_per_answer", "Seconds per answer", per(&|a, _| (!a.refused).then_some(a.seconds))));
    if golden.iter().any(|q| !q.keywords.is_empty()) {
        out.push(("answer_keyword_recall", "Keywords in the answer", per(&|a, q| q.filter(|q| !q.keywords.is_empty()).map(|q| {
            let lower = a.answer.to_lowercase();
            q.keywords.iter().filter(|k| lower.contains(&k.to_lowercase())).count() as f64 / q.keywords.len() as f64
        }))));
    }
    out
}

/// One answer metric of a generator compared with the first generator of the same config,
/// question by question.
#[derive(Debug, Clone)]
pub struct AnswerDelta {
    /// The compared row (`config · generator`).
    pub run: String,
    /// The row it is compared with.
    pub baseline: String,
    /// Metric name (without `answer/`).
    pub metric: &'static str,
    /// Metric label.
    pub label: &'static str,
    /// Questions where the metric applies to both.
    pub n: usize,
    /// Mean difference, paired-bootstrap interval and sign-flip p-value.
    pub comparison: crate::stats::PairedComparison,
    /// Standard deviation of the per-question differences (what the detectable effect needs).
    pub sd: f64,
}

/// Per-question answers and metric values of one answer row.
pub type RunMetrics = (AnswerRun, Vec<AnsweredQuestion>, Vec<(&'static str, &'static str, Vec<Option<f64>>)>);

/// Paired differences of every answer metric between each generator and the first generator
/// of its config, over the questions where the metric applies to both rows.
pub fn paired_deltas(runs: &[RunMetrics], resamples: usize, seed: u64) -> Vec<AnswerDelta> {
    let mut out = Vec::new();
    for (run, answered, metrics) in runs {
        let base = match &run.compare_to {
            Some(g) => runs.iter().find(|(r, _, _)| r.config == run.config && r.generator.as_ref() == Some(g)),
            None => runs.iter().find(|(r, _, _)| r.config == run.config && r.generator.is_some()),
        };
        let Some((base, base_answered, base_metrics)) = base else { continue };
        if base.name() == run.name() {
            continue;
        }
        for (i, (name, label, values)) in metrics.iter().enumerate() {
            let Some((_, _, base_values)) = base_metrics.iter().find(|(n, _, _)| n == name) else { continue };
            let mut pairs = (Vec::new(), Vec::new());
            for (q, v) in answered.iter().zip(values) {
                let Some(j) = base_answered.iter().position(|b| b.qid == q.qid) else { continue };
                if let (Some(a), Some(b)) = (v, base_values[j]) {
                    pairs.0.push(*a);
                    pairs.1.push(b);
                }
            }
            if pairs.0.is_empty() {
                continue;
            }
            let comparison = crate::stats::paired_comparison(&pairs.0, &pairs.1, resamples, seed.wrapping_add(2000 + i as u64));
            let sd = crate::stats::std_dev(&pairs.0.iter().zip(&pairs.1).map(|(a, b)| a - b).collect::<Vec<_>>());
            out.push(AnswerDelta { run: run.name(), baseline: base.name(), metric: name, label, n: pairs.0.len(), comparison, sd });
        }
    }
    out
}

/// The metrics of `run` with every value outside `keep` (question ids) dropped: the same
/// rows on a subset of the questions.
pub fn restrict(run: &RunMetrics, keep: &std::collections::BTreeSet<String>) -> RunMetrics {
    let (r, answered, metrics) = run;
    let inside: Vec<bool> = answered.iter().map(|a| keep.contains(&a.qid)).collect();
    let metrics = metrics.iter().map(|(n, l, v)| (*n, *l, v.iter().zip(&inside).map(|(v, &i)| if i { *v } else { None }).collect())).collect();
    (r.clone(), answered.clone(), metrics)
}

/// Metric rows (category `all`) for one answered config.
pub fn metric_rows(config: &str, metrics: &[(&'static str, &'static str, Vec<Option<f64>>)], resamples: usize, seed: u64) -> Vec<MetricRow> {
    metric_rows_in(config, "all", metrics, resamples, seed)
}

/// Metric rows of one answered config under `category` (`all`, or a half of a split).
pub fn metric_rows_in(config: &str, category: &str, metrics: &[(&'static str, &'static str, Vec<Option<f64>>)], resamples: usize, seed: u64) -> Vec<MetricRow> {
    metrics
        .iter()
        .enumerate()
        .map(|(i, (name, _, values))| {
            let v: Vec<f64> = values.iter().flatten().copied().collect();
            MetricRow {
                config: config.to_string(),
                category: category.into(),
                metric: format!("answer/{name}"),
                n: v.len(),
                value: if v.is_empty() { f64::NAN } else { mean(&v) },
                ci: (!v.is_empty()).then(|| bootstrap_ci(&v, resamples, seed.wrapping_add(1000 + i as u64))),
                delta: None,
                wtl: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gauge_core::golden::GoldItem;

    fn cite(source: &str, page: i32, verified: bool) -> gauge_cite::Citation {
        gauge_cite::Citation { source: source.into(), page_start: page, page_end: page, verified }
    }

    #[test]
    fn a_bad_answers_table_is_an_error_naming_it_not_a_panic() {
        use arrow::array::{ArrayRef, BooleanArray, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, cites: Option<&str>| {
            let path = dir.path().join(name);
            let mut fields = vec![Field::new("qid", DataType::Utf8, false), Field::new("answer", DataType::Utf8, false), Field::new("refused", DataType::Boolean, false)];
            let mut cols: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec!["q1"])), Arc::new(StringArray::from(vec!["yes [a.pdf, p. 3]"])), Arc::new(BooleanArray::from(vec![false]))];
            if let Some(c) = cites {
                fields.push(Field::new("citations", DataType::Utf8, false));
                cols.push(Arc::new(StringArray::from(vec![c])));
            }
            gauge_core::table::write_parquet(&path, Arc::new(Schema::new(fields)), cols).unwrap();
            path
        };
        let good = read_answers(&write("good.parquet", Some(r#"[{"source":"a.pdf","page_start":3,"page_end":3,"verified":true}]"#))).unwrap();
        assert_eq!(good[0].citations, vec![gauge_cite::Citation { source: "a.pdf".into(), page_start: 3, page_end: 3, verified: true }]);
        let e = read_answers(&write("no-citations.parquet", None)).unwrap_err().to_string();
        assert!(e.contains("no-citations.parquet") && e.contains("citations"), "{e}");
        let e = read_answers(&write("bad-citation.parquet", Some(r#"[{"source":"a.pdf"}]"#))).unwrap_err().to_string();
        assert!(e.contains("bad-citation.parquet") && e.contains("row 1") && e.contains("q1"), "{e}");
        let e = read_answers(&write("not-json.parquet", Some("[a.pdf p3]"))).unwrap_err().to_string();
        assert!(e.contains("not a JSON list"), "{e}");
    }

    #[test]
    fn a_gate_needs_a_base_for_every_adapter_and_the_template_its_metrics_need() {
        let local = |adapter: Option<&str>| GeneratorConfig::Local { model: "m.gguf".into(), adapter: adapter.map(Into::into) };
        let named = |name: &str, adapter: Option<&str>, compare_to: Option<&str>| NamedGenerator { name: name.into(), generator: Some(local(adapter)), generation: None, structure: None, compare_to: compare_to.map(Into::into) };
        let gate = AnswerGate { family: vec!["grounded_answer".into()], non_inferiority: [("format_compliance".to_string(), 0.1)].into_iter().collect() };
        let four = |generators: Vec<NamedGenerator>| AnswerSection { template: "four_phase".into(), generators, ..Default::default() };
        assert_eq!(four(vec![named("base", None, None), named("+ a", Some("a"), None)]).check_gate_bases(&gate), Ok(()));
        assert_eq!(four(vec![named("+ a", Some("a"), Some("base")), named("base", None, None)]).check_gate_bases(&gate), Ok(()));
        let e = four(vec![named("+ a", Some("a"), None), named("base", None, None)]).check_gate_bases(&gate).unwrap_err();
        assert!(e.contains("`+ a`") && e.contains("compare_to"), "{e}");
        let e = AnswerSection { generator: local(Some("a")), template: "four_phase".into(), ..Default::default() }.check_gate_bases(&gate).unwrap_err();
        assert!(e.contains("only generator"), "{e}");
        let e = AnswerSection { template: "plain".into(), ..four(vec![named("base", None, None), named("+ a", Some("a"), None)]) }.check_gate_bases(&gate).unwrap_err();
        assert!(e.contains("format_compliance") && e.contains("four_phase"), "{e}");
    }

    #[test]
    fn metrics_by_hand() {
        assert!(four_phases_in_order("1. Contextual audit ... 2. Evidence map ... 3. Synthesis ... 4. Verification ok"));
        assert!(!four_phases_in_order("Synthesis first, then contextual audit, evidence map, verification"));
        assert!((token_f1("the gate arm is lowered", "gate arms are lowered") - 2.0 * (2.0 / 5.0) * (2.0 / 4.0) / (2.0 / 5.0 + 2.0 / 4.0)).abs() < 1e-12);
        let q = GoldenQuestion { qid: "a".into(), question: "q".into(), gold: vec![GoldItem::Page { source: "m.pdf".into(), page: 3, grade: None }], keywords: vec!["gate".into()], reference_answer: None, category: None };
        let answers = vec![
            AnsweredQuestion { qid: "a".into(), answer: "Gate down [m.pdf p. 3] [m.pdf p. 9]".into(), refused: false, citations: vec![cite("m.pdf", 3, true), cite("m.pdf", 9, false)], completion_tokens: 12, seconds: 0.5, finish_reason: "eos".into() },
        ];
        let m = answer_metrics(&answers, std::slice::from_ref(&q), false, "The documents do not say.");
        let get = |n: &str| m.iter().find(|x| x.0 == n).unwrap().2[0];
        assert_eq!(get("answer_verified_citation"), Some(1.0));
        assert_eq!(get("citation_precision"), Some(0.5));
        assert_eq!(get("invented_citation_rate"), Some(0.5));
        assert_eq!(get("citation_accuracy"), Some(0.5));
        assert_eq!(get("answer_cites_gold"), Some(1.0));
        assert_eq!(get("refusal_accuracy"), Some(1.0));
        assert_eq!(get("answer_keyword_recall"), Some(1.0));
        assert_eq!((get("tokens_generated"), get("loop_rate"), get("length_rate"), get("seconds_per_answer")), (Some(12.0), Some(0.0), Some(0.0), Some(0.5)));
        // A model refusal on an answerable question is a wrong refusal.
        let declined = vec![AnsweredQuestion { qid: "a".into(), answer: "The documents  do not say".into(), refused: false, citations: vec![], completion_tokens: 5, seconds: 0.1, finish_reason: "loop".into() }];
        let m = answer_metrics(&declined, std::slice::from_ref(&q), false, "The documents do not say.");
        assert_eq!(m.iter().find(|x| x.0 == "refusal_accuracy").unwrap().2[0], Some(0.0));
        assert_eq!(m.iter().find(|x| x.0 == "loop_rate").unwrap().2[0], Some(1.0));
        assert!(!says_refusal("anything", ""));
        // Grounded: a verified citation of a gold page. An unverified one on the gold page, a
        // verified one elsewhere, or a refusal of an answerable question is not grounded; an
        // out-of-corpus question (no gold, no keywords) is not counted there, but in the
        // out-of-corpus refusals, which exist only when the set has such questions.
        assert_eq!(get("grounded_answer"), Some(1.0));
        let outside = GoldenQuestion { qid: "o".into(), question: "q".into(), gold: vec![], keywords: vec![], reference_answer: None, category: None };
        let q3 = GoldenQuestion { keywords: vec![], ..q.clone() };
        let rows = [("unverified gold", vec![cite("m.pdf", 3, false)], "a"), ("verified elsewhere", vec![cite("m.pdf", 9, true)], "a"), ("refused", vec![], "a"), ("answered outside", vec![cite("m.pdf", 3, true)], "o"), ("refused outside", vec![], "o")];
        let answered: Vec<AnsweredQuestion> = rows.iter().map(|(text, c, qid)| AnsweredQuestion { qid: qid.to_string(), answer: if text.starts_with("refused") { "The documents do not say.".into() } else { text.to_string() }, refused: false, citations: c.clone(), completion_tokens: 1, seconds: 0.1, finish_reason: "eos".into() }).collect();
        let m = answer_metrics(&answered, &[q3.clone(), outside], false, "The documents do not say.");
        let col = |n: &str| m.iter().find(|x| x.0 == n).unwrap().2.clone();
        assert_eq!(col("grounded_answer"), vec![Some(0.0), Some(0.0), Some(0.0), None, None]);
        assert_eq!(col("out_of_corpus_refusal"), vec![None, None, None, Some(0.0), Some(1.0)]);
        assert!(answer_metrics(&answered, &[q3], false, "x").iter().all(|x| x.0 != "out_of_corpus_refusal"), "no out-of-corpus question, no such metric");
        // A restricted run keeps the questions asked for and drops the others' values.
        let run: RunMetrics = (AnswerRun { config: "c".into(), generator: None, compare_to: None, dir: std::path::PathBuf::new() }, [answers.clone(), declined.clone()].concat().into_iter().enumerate().map(|(i, mut a)| { a.qid = format!("q{i}"); a }).collect(), vec![("x", "X", vec![Some(1.0), Some(0.0)])]);
        let only = restrict(&run, &["q1".to_string()].into_iter().collect());
        assert_eq!(only.2[0].2, vec![None, Some(0.0)]);
    }
}
