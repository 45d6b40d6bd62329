//! `[refusal]`: can a config's retrieval score tell a question the corpus answers from one it
//! does not — measured, with the cutoff set on one set of questions and judged on others.
//!
//! For each measured config, every question is searched with no cutoff and its **best score**
//! kept: by default (`score = "auto"`) the reranker's score of the rank-1 passage when the config
//! reranks, else the best score of its dense retriever's own list (a cosine), else BM25's — never
//! a fused score, which comes from ranks alone (reciprocal rank fusion gives every question's
//! first passage nearly the same score, so it cannot refuse). The cutoff is **calibrated on answerable questions only** (the
//! section's `calibrate_on`, e.g. the dev set): the highest score that refuses at most
//! `max_false_refusal` of them (nearest rank, ties kept). Then, on questions the cutoff never saw:
//! - **false refusals** on the pipeline's golden set (answerable; lower is better), and
//! - **refusals** of each out-of-corpus file (no gold; higher is better),
//!
//! each a share with its 95 % Wilson interval, and the threshold-free **AUROC** of the best score
//! separating the golden set's questions from the out-of-corpus ones (95 % bootstrap interval,
//! both groups resampled, the pipeline's seed). No out-of-corpus question touches the cutoff, so
//! the refusal figures are not tuned to the questions they are measured on. `refusal.parquet` has
//! every (config, question) with its set, best score and verdict; `ablation.md` the table.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, StringArray};
use gauge_core::golden::GoldenQuestion;
use gauge_core::schema::{ColumnDoc, ColumnType};
use serde::{Deserialize, Serialize};

/// `[refusal]` in a pipeline file (see the module docs).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefusalSection {
    /// Answerable questions the cutoff is set on (a golden set, relative to the pipeline file):
    /// the dev set, never the questions the refusals are measured on. The same file as the
    /// pipeline's `golden` is allowed but marked in-sample.
    pub calibrate_on: PathBuf,
    /// Files of questions the corpus cannot answer (JSON Lines of `qid` and `question`, no gold;
    /// rows with `"in_corpus": true`, as in a four-phase SFT file, are skipped), relative to the
    /// pipeline file. Each is reported on its own and all together.
    pub out_of_corpus: Vec<PathBuf>,
    /// The share of the calibration questions the cutoff may refuse (default 0.05).
    #[serde(default = "default_max_false_refusal")]
    pub max_false_refusal: f64,
    /// Configs measured (default: every config but the oracle source filter, which reads the
    /// gold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<String>,
    /// Which score decides: `auto` (default: the reranker's when the config reranks, else the
    /// dense retriever's cosine, else BM25's), `final` (the rank-1 passage's final score, a
    /// fused one included), `dense` or `bm25` (that retriever's best, before fusion).
    #[serde(default)]
    pub score: ScoreKind,
}

/// `[refusal] score`: which score a config's cutoff is set on.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScoreKind {
    /// The reranker's score when the config reranks, else `dense` when it retrieves densely,
    /// else `bm25`.
    #[default]
    Auto,
    /// The rank-1 passage's final score (after fusion and reranking).
    Final,
    /// The dense retriever's best cosine, before fusion.
    Dense,
    /// BM25's best score, before fusion.
    Bm25,
}

impl ScoreKind {
    /// The kind a config uses (`auto` resolved), or why it cannot.
    pub fn for_config(self, name: &str, r: &gauge_engine::RetrievalConfig) -> Result<ScoreKind, String> {
        match self {
            ScoreKind::Auto if r.rerank.is_some() => Ok(ScoreKind::Final),
            ScoreKind::Auto if r.dense => Ok(ScoreKind::Dense),
            ScoreKind::Auto => Ok(ScoreKind::Bm25),
            ScoreKind::Dense if !r.dense => Err(format!("[refusal] score = \"dense\", but config `{name}` does not retrieve densely")),
            ScoreKind::Bm25 if !r.bm25 => Err(format!("[refusal] score = \"bm25\", but config `{name}` does not use BM25")),
            k => Ok(k),
        }
    }

    /// Its name in the tables.
    pub fn label(self) -> &'static str {
        match self {
            ScoreKind::Auto => "auto",
            ScoreKind::Final => "final",
            ScoreKind::Dense => "dense",
            ScoreKind::Bm25 => "bm25",
        }
    }
}

/// One config's searches of `[refusal]`: which score, and the (set, question) pairs.
pub struct Ask<'a> {
    /// The config.
    pub config: &'a str,
    /// The score kept (resolved).
    pub score: ScoreKind,
    /// (set, question) pairs.
    pub questions: Vec<(String, &'a GoldenQuestion)>,
}

fn default_max_false_refusal() -> f64 {
    0.05
}

impl RefusalSection {
    /// Refuses a section that cannot be measured: no out-of-corpus file, a share outside
    /// (0, 0.5], a config that is not defined or reads the gold.
    pub fn validate(&self, configs: &[(String, bool)]) -> Result<(), String> {
        if self.out_of_corpus.is_empty() {
            return Err("[refusal] out_of_corpus is empty; name at least one file of questions the corpus cannot answer".into());
        }
        if !(self.max_false_refusal > 0.0 && self.max_false_refusal <= 0.5) {
            return Err(format!("[refusal] max_false_refusal = {} must lie in (0, 0.5] (the share of answerable calibration questions the cutoff may refuse)", self.max_false_refusal));
        }
        for c in &self.configs {
            match configs.iter().find(|(n, _)| n == c) {
                None => return Err(format!("[refusal] names config `{c}`, which is not defined (known: {})", configs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "))),
                Some((_, true)) => return Err(format!("[refusal] config `{c}` uses the oracle source filter, which reads the gold; out-of-corpus questions have none")),
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The measured configs, in pipeline order: those named, else every config without the
    /// oracle source filter.
    pub fn measured<'a>(&self, configs: &'a [(String, bool)]) -> Vec<&'a str> {
        configs.iter().filter(|(n, oracle)| if self.configs.is_empty() { !oracle } else { self.configs.contains(n) }).map(|(n, _)| n.as_str()).collect()
    }
}

/// The questions of `[refusal]`, loaded and checked at planning.
#[derive(Debug, Clone, Default)]
pub struct RefusalQuestions {
    /// The calibration set (answerable).
    pub calibration: Vec<GoldenQuestion>,
    /// Each out-of-corpus file with its questions.
    pub out_of_corpus: Vec<(PathBuf, Vec<GoldenQuestion>)>,
}

/// Reads an out-of-corpus file ([`gauge_answer::load_out_of_corpus`]: rows marked
/// `"in_corpus": true` skipped, every other row checked, a qid in `taken` an error naming the
/// line); a file left with no out-of-corpus question cannot measure a refusal and is refused.
pub fn load_out_of_corpus(path: &Path, taken: &BTreeSet<String>) -> anyhow::Result<Vec<GoldenQuestion>> {
    let out = gauge_answer::load_out_of_corpus(path, taken.iter().map(String::as_str))?;
    anyhow::ensure!(!out.is_empty(), "{}: no out-of-corpus question (every row is in corpus, or the file is empty)", path.display());
    Ok(out)
}

/// The cutoff that refuses at most `share` of `calibration`'s best scores: the score at rank
/// ⌊share·n⌋ from the bottom (a question refused when its best is under it). A question with no
/// passage at all counts as −∞ (always refused). `None` with no calibration question.
pub fn calibrate(calibration: &[Option<f64>], share: f64) -> Option<f64> {
    let mut s: Vec<f64> = calibration.iter().map(|b| b.unwrap_or(f64::NEG_INFINITY)).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let m = ((share * s.len() as f64) + 1e-9).floor() as usize;
    Some(s[m.min(s.len() - 1)])
}

/// Whether a best score is refused by the cutoff (no passage: refused).
pub fn refused(best: Option<f64>, threshold: f64) -> bool {
    best.is_none_or(|b| b < threshold)
}

/// The 95 % Wilson score interval of `k` of `n` (`(0, 1)` for `n = 0`).
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (z, n, p) = (1.959_963_984_540_054_f64, n as f64, k as f64 / n as f64);
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * ((p * (1.0 - p) / n) + z * z / (4.0 * n * n)).sqrt() / denom;
    // At 0 of n and n of n the ends are exactly 0 and 1 (not a rounding error away).
    (if k == 0 { 0.0 } else { (centre - half).max(0.0) }, if k as f64 == n { 1.0 } else { (centre + half).min(1.0) })
}

/// The probability that a random positive scores above a random negative (ties half): the
/// area under the ROC curve. `None` when a group is empty.
pub fn auroc(positive: &[f64], negative: &[f64]) -> Option<f64> {
    if positive.is_empty() || negative.is_empty() {
        return None;
    }
    let mut wins = 0.0;
    for p in positive {
        for n in negative {
            wins += if p > n { 1.0 } else if p == n { 0.5 } else { 0.0 };
        }
    }
    Some(wins / (positive.len() * negative.len()) as f64)
}

/// 95 % percentile-bootstrap interval of [`auroc`], each group resampled on its own.
pub fn auroc_interval(positive: &[f64], negative: &[f64], resamples: usize, seed: u64) -> Option<(f64, f64)> {
    if positive.is_empty() || negative.is_empty() {
        return None;
    }
    let mut rng = crate::stats::SplitMix64::new(seed);
    let mut draws: Vec<f64> = (0..resamples)
        .map(|_| {
            let p: Vec<f64> = (0..positive.len()).map(|_| positive[rng.below(positive.len())]).collect();
            let n: Vec<f64> = (0..negative.len()).map(|_| negative[rng.below(negative.len())]).collect();
            auroc(&p, &n).unwrap_or(0.5)
        })
        .collect();
    draws.sort_by(f64::total_cmp);
    Some((crate::stats::percentile(&draws, 0.025), crate::stats::percentile(&draws, 0.975)))
}

/// Which set a question of `refusal.parquet` belongs to.
pub const CALIBRATION: &str = "calibration";
/// The pipeline's golden set (answerable, never seen by the cutoff).
pub const ANSWERABLE: &str = "answerable";

/// One (config, question) of `refusal.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusalRow {
    /// The config.
    pub config: String,
    /// The score kept (`final`, `dense`, `bm25`).
    pub score: &'static str,
    /// `calibration`, `answerable`, or the out-of-corpus file's name.
    pub set: String,
    /// The question id.
    pub qid: String,
    /// The corpus answers it (calibration and golden set).
    pub answerable: bool,
    /// The rank-1 passage's final score (`None`: no passage).
    pub best_score: Option<f64>,
    /// Under the config's calibrated cutoff.
    pub refused: bool,
}

/// `k` of `n` with its Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Share {
    /// Questions counted.
    pub k: usize,
    /// Questions.
    pub n: usize,
    /// `k / n`.
    pub value: f64,
    /// 95 % Wilson interval.
    pub ci: (f64, f64),
}

impl Share {
    fn of(k: usize, n: usize) -> Share {
        Share { k, n, value: if n == 0 { 0.0 } else { k as f64 / n as f64 }, ci: wilson(k, n) }
    }

    fn cell(&self) -> String {
        format!("{:.2} [{:.2}, {:.2}] ({}/{})", self.value, self.ci.0, self.ci.1, self.k, self.n)
    }
}

/// One measured config's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusalSummary {
    /// The config.
    pub config: String,
    /// The score its cutoff is set on (`final`, `dense`, `bm25`).
    pub score: String,
    /// The calibrated cutoff (`None`: no calibration question had a passage).
    pub threshold: Option<f64>,
    /// Calibration questions refused (in-sample: at most the declared share).
    pub calibration_refused: Share,
    /// Golden-set questions refused (false refusals; lower is better).
    pub false_refusals: Share,
    /// Per out-of-corpus file (its name), questions refused (higher is better).
    pub refusals: Vec<(String, Share)>,
    /// Every out-of-corpus question refused.
    pub refusals_all: Share,
    /// AUROC of the best score, golden set against all out-of-corpus questions, with its
    /// bootstrap interval.
    pub auroc: Option<(f64, (f64, f64))>,
}

/// The name a file is reported under: its file name.
pub fn set_name(path: &Path) -> String {
    path.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_else(|| path.display().to_string())
}

/// Scores the best scores of every measured config (with the score it keeps):
/// `best(config, set, question)` gives a question's best score. Returns the rows and each config's summary.
pub fn measure(section: &RefusalSection, questions: &RefusalQuestions, golden: &[GoldenQuestion], configs: &[(&str, ScoreKind)], best: &dyn Fn(&str, &str, &GoldenQuestion) -> Option<f64>, resamples: usize, seed: u64) -> (Vec<RefusalRow>, Vec<RefusalSummary>) {
    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    for (ci, &(config, kind)) in configs.iter().enumerate() {
        let cal: Vec<Option<f64>> = questions.calibration.iter().map(|q| best(config, CALIBRATION, q)).collect();
        let threshold = calibrate(&cal, section.max_false_refusal);
        let is_refused = |b: Option<f64>| threshold.is_none_or(|t| refused(b, t));
        let mut push = |set: &str, q: &GoldenQuestion, answerable: bool, b: Option<f64>| rows.push(RefusalRow { config: config.to_string(), score: kind.label(), set: set.to_string(), qid: q.qid.clone(), answerable, best_score: b, refused: is_refused(b) });
        for (q, b) in questions.calibration.iter().zip(&cal) {
            push(CALIBRATION, q, true, *b);
        }
        let ans: Vec<Option<f64>> = golden.iter().map(|q| best(config, ANSWERABLE, q)).collect();
        for (q, b) in golden.iter().zip(&ans) {
            push(ANSWERABLE, q, true, *b);
        }
        let mut per_file = Vec::new();
        let mut all_ooc: Vec<Option<f64>> = Vec::new();
        for (path, qs) in &questions.out_of_corpus {
            let name = set_name(path);
            let scores: Vec<Option<f64>> = qs.iter().map(|q| best(config, &name, q)).collect();
            for (q, b) in qs.iter().zip(&scores) {
                push(&name, q, false, *b);
            }
            per_file.push((name, Share::of(scores.iter().filter(|b| is_refused(**b)).count(), scores.len())));
            all_ooc.extend(scores);
        }
        let count = |v: &[Option<f64>]| v.iter().filter(|b| is_refused(**b)).count();
        // No passage scores below every passage.
        let finite = |v: &[Option<f64>]| v.iter().map(|b| b.unwrap_or(f64::NEG_INFINITY)).collect::<Vec<f64>>();
        let (pos, neg) = (finite(&ans), finite(&all_ooc));
        let auroc = auroc(&pos, &neg).zip(auroc_interval(&pos, &neg, resamples, seed.wrapping_add(ci as u64)));
        summaries.push(RefusalSummary {
            config: config.to_string(),
            score: kind.label().to_string(),
            threshold,
            calibration_refused: Share::of(count(&cal), cal.len()),
            false_refusals: Share::of(count(&ans), ans.len()),
            refusals: per_file,
            refusals_all: Share::of(count(&all_ooc), all_ooc.len()),
            auroc,
        });
    }
    (rows, summaries)
}

/// `refusal.parquet`'s columns.
pub const REFUSAL_COLUMNS: &[ColumnDoc] = &[
    ColumnDoc { name: "config", dtype: ColumnType::Utf8, nullable: false, doc: "the config name" },
    ColumnDoc { name: "score", dtype: ColumnType::Utf8, nullable: false, doc: "the score its cutoff is set on: `final` (the rank-1 passage's final score: a reranker's), `dense` (the dense retriever's best cosine, before fusion) or `bm25` (BM25's best, before fusion)" },
    ColumnDoc { name: "set", dtype: ColumnType::Utf8, nullable: false, doc: "`calibration` (the answerable questions the cutoff was set on), `answerable` (the pipeline's golden set) or the out-of-corpus file's name" },
    ColumnDoc { name: "qid", dtype: ColumnType::Utf8, nullable: false, doc: "the question id" },
    ColumnDoc { name: "answerable", dtype: ColumnType::Bool, nullable: false, doc: "the corpus answers the question (calibration and golden set)" },
    ColumnDoc { name: "best_score", dtype: ColumnType::Float64, nullable: true, doc: "that score of the question's best passage, searched with no cutoff (null: no passage)" },
    ColumnDoc { name: "refused", dtype: ColumnType::Bool, nullable: false, doc: "the best score is under the config's calibrated cutoff" },
];

/// File name of the rows.
pub const REFUSAL_FILE: &str = "refusal.parquet";

/// Writes `refusal.parquet`; returns the row count.
pub fn write_rows(path: &Path, rows: &[RefusalRow]) -> anyhow::Result<u64> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.config.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.score))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.set.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.qid.as_str()))),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.answerable)))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.best_score))),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.refused)))),
    ];
    Ok(gauge_core::table::write_parquet(path, gauge_core::schema::arrow_schema(REFUSAL_COLUMNS), cols)?)
}

/// The `ablation.md` section.
pub fn markdown(section: &RefusalSection, questions: &RefusalQuestions, golden_path: &Path, summaries: &[RefusalSummary]) -> String {
    if summaries.is_empty() {
        return String::new();
    }
    let in_sample = normalize_eq(&section.calibrate_on, golden_path);
    let mut s = format!(
        "\n## Refusal by score cutoff\n\nEach config's cutoff is set on the {} answerable questions of `{}` alone: the highest score that refuses at most {:.0} % of them (nearest rank). It is then judged on questions it never saw: **false refusals** of the golden set's {} answerable questions (lower is better) and **refusals** of the out-of-corpus questions (higher is better), each with its 95 % Wilson interval; **AUROC** is the threshold-free chance that an answerable question's best score beats an out-of-corpus one's (0.5: the score cannot tell them apart; 95 % bootstrap interval). The score is the config's own: a reranker's score of its first passage when it reranks (**final**), else its dense retriever's best cosine (**dense**) or BM25's best score (**bm25**), before any fusion — a fused score comes from ranks alone and cannot refuse — searched with no cutoff (`refusal.parquet` has every question).{}\n\n",
        questions.calibration.len(),
        set_name(&section.calibrate_on),
        section.max_false_refusal * 100.0,
        summaries[0].false_refusals.n,
        if in_sample { " **The calibration set is the golden set: its false refusals are in-sample (at most the declared share by construction).**" } else { "" },
    );
    let files: Vec<&String> = summaries[0].refusals.iter().map(|(n, _)| n).collect();
    s.push_str("| Config | score | cutoff | refused (calibration) | false refusals | ");
    for f in &files {
        s.push_str(&format!("refused: {f} | "));
    }
    s.push_str(if files.len() > 1 { "refused: all out-of-corpus | AUROC |\n|---|---|---|---|---|" } else { "AUROC |\n|---|---|---|---|---|" });
    s.push_str(&"---|".repeat(files.len() + usize::from(files.len() > 1) + 1));
    s.push('\n');
    for r in summaries {
        let threshold = r.threshold.map_or("—".to_string(), |t| if t.is_finite() { format!("{t:.4}") } else { "none".into() });
        s.push_str(&format!("| {} | {} | {threshold} | {} | {} | ", r.config, r.score, r.calibration_refused.cell(), r.false_refusals.cell()));
        for (_, share) in &r.refusals {
            s.push_str(&format!("{} | ", share.cell()));
        }
        if files.len() > 1 {
            s.push_str(&format!("{} | ", r.refusals_all.cell()));
        }
        s.push_str(&r.auroc.map_or("—".to_string(), |(a, (lo, hi))| format!("{a:.3} [{lo:.3}, {hi:.3}]")));
        s.push_str(" |\n");
    }
    s
}

fn normalize_eq(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The manifest's `refusal` stat: each config's figures.
pub fn stat(summaries: &[RefusalSummary]) -> serde_json::Value {
    serde_json::to_value(summaries).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_refuses_at_most_the_declared_share_of_the_calibration_set() {
        let scores: Vec<Option<f64>> = (1..=41).map(|i| Some(i as f64)).collect();
        // ⌊0.05 · 41⌋ = 2: the cutoff is the third lowest, two refused.
        assert_eq!(calibrate(&scores, 0.05), Some(3.0));
        assert_eq!(scores.iter().filter(|b| refused(**b, 3.0)).count(), 2);
        // Ties at the cutoff are kept, so fewer may be refused, never more.
        let tied = [Some(1.0), Some(1.0), Some(1.0), Some(2.0)];
        assert_eq!(calibrate(&tied, 0.5), Some(1.0));
        assert_eq!(tied.iter().filter(|b| refused(**b, 1.0)).count(), 0);
        // A question without a passage is refused whatever the cutoff.
        assert_eq!(calibrate(&[None, Some(0.5)], 0.5), Some(0.5));
        assert!(refused(None, f64::NEG_INFINITY));
        assert_eq!(calibrate(&[], 0.1), None);
    }

    #[test]
    fn wilson_matches_the_textbook_values() {
        // 0 of 10: [0, 0.2775]; 5 of 10: [0.2366, 0.7634] (Wilson 1927; Newcombe 1998, table I).
        let (lo, hi) = wilson(0, 10);
        assert!((lo - 0.0).abs() < 1e-4 && (hi - 0.2775).abs() < 1e-4, "{lo} {hi}");
        let (lo, hi) = wilson(5, 10);
        assert!((lo - 0.2366).abs() < 1e-4 && (hi - 0.7634).abs() < 1e-4, "{lo} {hi}");
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn auroc_counts_pairs_and_ties_half() {
        assert_eq!(auroc(&[3.0, 4.0], &[1.0, 2.0]), Some(1.0));
        assert_eq!(auroc(&[1.0], &[2.0]), Some(0.0));
        assert_eq!(auroc(&[1.0, 3.0], &[2.0, 1.0]), Some(0.625));
        assert_eq!(auroc(&[], &[1.0]), None);
        let (lo, hi) = auroc_interval(&[3.0, 4.0, 5.0], &[1.0, 2.0, 3.5], 1000, 7).unwrap();
        assert!(lo <= 0.889 && (0.889..=1.0).contains(&hi), "{lo} {hi}");
        assert_eq!(auroc_interval(&[3.0, 4.0, 5.0], &[1.0, 2.0, 3.5], 1000, 7), Some((lo, hi)), "seeded");
    }

    fn q(id: &str) -> GoldenQuestion {
        GoldenQuestion::new(id.into(), format!("question {id}?"), Vec::new())
    }

    #[test]
    fn measure_calibrates_per_config_and_never_on_the_questions_it_judges() {
        let section = RefusalSection { calibrate_on: "dev.jsonl".into(), out_of_corpus: vec!["ooc.jsonl".into()], max_false_refusal: 0.25, configs: Vec::new(), score: ScoreKind::Auto };
        let questions = RefusalQuestions { calibration: vec![q("c1"), q("c2"), q("c3"), q("c4")], out_of_corpus: vec![("dir/ooc.jsonl".into(), vec![q("o1"), q("o2")])] };
        let golden = vec![q("a1"), q("a2")];
        // "high": answerable questions score 10+, out-of-corpus 1; "flat": everything 5.
        let best = |config: &str, set: &str, q: &GoldenQuestion| -> Option<f64> {
            match (config, set) {
                ("flat", _) => Some(5.0),
                (_, "ooc.jsonl") => Some(1.0),
                (_, CALIBRATION) => Some(10.0 + q.qid[1..].parse::<f64>().unwrap()),
                (_, ANSWERABLE) if q.qid == "a2" => None,
                _ => Some(12.0),
            }
        };
        let (rows, sums) = measure(&section, &questions, &golden, &[("high", ScoreKind::Dense), ("flat", ScoreKind::Final)], &best, 1000, 42);
        assert_eq!(rows.len(), 2 * (4 + 2 + 2));
        let high = &sums[0];
        assert_eq!(high.threshold, Some(12.0), "⌊0.25 · 4⌋ = 1: the second lowest of 11..14");
        assert_eq!((high.calibration_refused.k, high.false_refusals.k, high.refusals_all.k), (1, 1, 2), "a2 has no passage: refused");
        assert_eq!(high.refusals, vec![("ooc.jsonl".to_string(), Share::of(2, 2))]);
        assert_eq!(high.auroc.map(|a| a.0), Some(0.5), "a1 beats both, a2 (no passage) loses to both");
        let flat = &sums[1];
        assert_eq!((flat.false_refusals.k, flat.refusals_all.k), (0, 0), "a flat score refuses nothing");
        assert_eq!(flat.auroc.map(|a| a.0), Some(0.5));
        let md = markdown(&section, &questions, Path::new("golden.jsonl"), &sums);
        assert!(md.contains("| high | dense | 12.0000 | 0.25 [") && md.contains("(2/2)") && !md.contains("in-sample"), "{md}");
    }

    #[test]
    fn out_of_corpus_files_skip_in_corpus_rows_and_refuse_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sft.jsonl");
        std::fs::write(&path, "{\"qid\":\"a\",\"question\":\"In?\",\"in_corpus\":true,\"gold\":[{\"source\":\"x.pdf\",\"page\":1}]}\n{\"qid\":\"b\",\"question\":\"Out?\",\"in_corpus\":false,\"answer\":\"No.\"}\n").unwrap();
        let qs = load_out_of_corpus(&path, &BTreeSet::new()).unwrap();
        assert_eq!(qs.iter().map(|q| q.qid.as_str()).collect::<Vec<_>>(), ["b"]);
        for (text, needle) in [
            ("{\"qid\":\"a\",\"question\":\"In?\",\"gold\":[{\"source\":\"x.pdf\",\"page\":1}]}\n", "has `gold`"),
            ("{\"qid\":\"a b\",\"question\":\"Out?\"}\n", "whitespace"),
            ("{\"qid\":\"a\",\"question\":\"Out?\"}\n{\"qid\":\"a\",\"question\":\"Again?\"}\n", "duplicate qid"),
            ("{\"qid\":\"taken\",\"question\":\"Out?\"}\n", "also an answerable"),
            ("{\"qid\":\"a\",\"question\":\"In?\",\"in_corpus\":true}\n", "no out-of-corpus question"),
            ("not json\n", "sft.jsonl:1"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = load_out_of_corpus(&path, &BTreeSet::from(["taken".to_string()])).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("sft.jsonl"), "{text}: {e}");
        }
    }

    #[test]
    fn a_section_that_cannot_be_measured_is_refused() {
        let configs = vec![("Vector".to_string(), false), ("Oracle".to_string(), true)];
        let ok = RefusalSection { calibrate_on: "dev.jsonl".into(), out_of_corpus: vec!["ooc.jsonl".into()], max_false_refusal: 0.05, configs: Vec::new(), score: ScoreKind::Auto };
        assert_eq!(ok.validate(&configs), Ok(()));
        assert_eq!(ok.measured(&configs), vec!["Vector"], "the oracle reads the gold: left out by default");
        for (bad, needle) in [
            (RefusalSection { out_of_corpus: Vec::new(), ..ok.clone() }, "out_of_corpus is empty"),
            (RefusalSection { max_false_refusal: 0.0, ..ok.clone() }, "max_false_refusal"),
            (RefusalSection { max_false_refusal: 0.9, ..ok.clone() }, "max_false_refusal"),
            (RefusalSection { configs: vec!["Nope".into()], ..ok.clone() }, "not defined"),
            (RefusalSection { configs: vec!["Oracle".into()], ..ok.clone() }, "oracle"),
        ] {
            let e = bad.validate(&configs).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}

/// What `[refusal]` measured, for the run's files.
#[derive(Debug, Clone, Default)]
pub struct RefusalOutcome {
    /// Every (config, question).
    pub rows: Vec<RefusalRow>,
    /// Each measured config's figures.
    pub summaries: Vec<RefusalSummary>,
    /// The `ablation.md` section.
    pub markdown: String,
}

