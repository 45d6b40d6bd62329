//! Evaluation outputs: Parquet tables, TREC run/qrels files, the Markdown ablation table and
//! its chart.
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int32Array, StringArray};
use gauge_core::schema::{arrow_schema, METRIC_COLUMNS, PER_QUERY_COLUMNS, RUN_COLUMNS};
use gauge_core::golden::GoldenQuestion;
use gauge_core::table::write_parquet;

use crate::metric::{Metric, Placement};
use crate::metrics::hit_at;
use crate::rows::{MetricRow, QueryRow, RunRow};
use crate::pipeline::Pipeline;
use crate::relevance::RelevanceMode;

fn strings<'a>(it: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(it))
}
fn floats(it: impl Iterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(it))
}
fn opt_floats(it: impl Iterator<Item = Option<f64>>) -> ArrayRef {
    Arc::new(Float64Array::from_iter(it))
}

/// Writes `metrics.parquet`.
pub fn write_metrics(path: &Path, rows: &[MetricRow]) -> anyhow::Result<u64> {
    let cols = vec![
        strings(rows.iter().map(|r| r.config.as_str())),
        strings(rows.iter().map(|r| r.category.as_str())),
        strings(rows.iter().map(|r| r.metric.as_str())),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.n as i32))) as ArrayRef,
        floats(rows.iter().map(|r| r.value)),
        opt_floats(rows.iter().map(|r| r.ci.map(|c| c.0))),
        opt_floats(rows.iter().map(|r| r.ci.map(|c| c.1))),
        opt_floats(rows.iter().map(|r| r.delta.map(|d| d.delta))),
        opt_floats(rows.iter().map(|r| r.delta.map(|d| d.ci_low))),
        opt_floats(rows.iter().map(|r| r.delta.map(|d| d.ci_high))),
        opt_floats(rows.iter().map(|r| r.delta.map(|d| d.p_value))),
        opt_floats(rows.iter().map(|r| r.delta.and_then(|d| d.p_adjusted))),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| r.delta.map(|d| d.significant())))) as ArrayRef,
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.wtl.map(|w| w.0 as i32)))) as ArrayRef,
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.wtl.map(|w| w.1 as i32)))) as ArrayRef,
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.wtl.map(|w| w.2 as i32)))) as ArrayRef,
    ];
    Ok(write_parquet(path, arrow_schema(METRIC_COLUMNS), cols)?)
}

/// Writes `per_query.parquet`.
pub fn write_per_query(path: &Path, rows: &[QueryRow]) -> anyhow::Result<u64> {
    let cols = vec![
        strings(rows.iter().map(|r| r.config.as_str())),
        strings(rows.iter().map(|r| r.qid.as_str())),
        strings(rows.iter().map(|r| r.category.as_str())),
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.scores.first_relevant_rank.map(|x| x as i32)))) as ArrayRef,
        floats(rows.iter().map(|r| r.scores.reciprocal_rank)),
        floats(rows.iter().map(|r| hit_at(&r.scores.relevant, 1))),
        floats(rows.iter().map(|r| hit_at(&r.scores.relevant, 3))),
        floats(rows.iter().map(|r| hit_at(&r.scores.relevant, 5))),
        floats(rows.iter().map(|r| hit_at(&r.scores.relevant, 10))),
        floats(rows.iter().map(|r| r.scores.ndcg)),
        floats(rows.iter().map(|r| r.scores.recall)),
        opt_floats(rows.iter().map(|r| r.scores.keyword_coverage)),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.refused)))) as ArrayRef,
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.n_results as i32))) as ArrayRef,
        floats(rows.iter().map(|r| r.latency_ms)),
        floats(rows.iter().map(|r| r.cold_latency_ms)),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.model_calls as i32))) as ArrayRef,
    ];
    Ok(write_parquet(path, arrow_schema(PER_QUERY_COLUMNS), cols)?)
}

/// One row of the evaluation's `answers.parquet`.
pub struct JudgedAnswerRow<'a> {
    /// Answer row name.
    pub config: String,
    /// The answered question.
    pub answered: &'a crate::answers::AnsweredQuestion,
    /// The question text.
    pub question: String,
    /// The judge's verdict, when there is a judge and the answer was graded.
    pub verdict: Option<&'a crate::judge::Verdict>,
}

/// Writes the evaluation's `answers.parquet` (every answer row's answers, with grades).
pub fn write_judged_answers(path: &Path, rows: &[JudgedAnswerRow]) -> anyhow::Result<u64> {
    fn reply<'a>(r: &JudgedAnswerRow<'a>) -> Option<&'a crate::judge::JudgeReply> {
        r.verdict.and_then(|v| v.reply.as_ref())
    }
    let grade = |i: usize| -> ArrayRef { Arc::new(Int32Array::from_iter(rows.iter().map(|r| reply(r).map(|j| j.scores()[i] as i32)))) };
    let count = |f: &dyn Fn(&crate::answers::AnsweredQuestion) -> usize| -> ArrayRef { Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| f(r.answered) as i32))) };
    let cols = vec![
        strings(rows.iter().map(|r| r.config.as_str())),
        strings(rows.iter().map(|r| r.answered.qid.as_str())),
        strings(rows.iter().map(|r| r.question.as_str())),
        strings(rows.iter().map(|r| r.answered.answer.as_str())),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.answered.refused)))) as ArrayRef,
        count(&|a| a.citations.len()),
        count(&|a| a.citations.iter().filter(|c| c.verified).count()),
        count(&|a| a.citations.iter().filter(|c| !c.verified).count()),
        grade(0),
        grade(1),
        grade(2),
        grade(3),
        grade(4),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| reply(r).map(|j| j.reason.clone())))) as ArrayRef,
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.verdict.and_then(|v| v.error.clone())))) as ArrayRef,
    ];
    Ok(write_parquet(path, arrow_schema(gauge_core::schema::JUDGED_ANSWER_COLUMNS), cols)?)
}

/// Writes `runs.parquet`.
pub fn write_runs(path: &Path, rows: &[RunRow]) -> anyhow::Result<u64> {
    let cols = vec![
        strings(rows.iter().map(|r| r.config.as_str())),
        strings(rows.iter().map(|r| r.qid.as_str())),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.rank as i32))) as ArrayRef,
        strings(rows.iter().map(|r| r.chunk_id.as_str())),
        floats(rows.iter().map(|r| r.score)),
        strings(rows.iter().map(|r| r.source.as_str())),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.page_start))) as ArrayRef,
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.page_end))) as ArrayRef,
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.relevant)))) as ArrayRef,
    ];
    Ok(write_parquet(path, arrow_schema(RUN_COLUMNS), cols)?)
}

/// A file-name-safe tag for a config: its position and name (`03-hybrid-rrf`).
pub fn slug(i: usize, name: &str) -> String {
    let mut s = String::new();
    for c in name.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    format!("{i:02}-{}", s.trim_matches('-'))
}

/// Writes a TREC run file: `qid Q0 docid rank score tag`.
///
/// trec_eval (and pytrec_eval, ranx) rank by score and break ties by document id, ignoring
/// the rank column; gauge ranks by its own order (fusion, rerank and caps are stable). So that
/// every tool ranks a run as gauge did, the written score is made strictly decreasing within a
/// question: a score that would tie or exceed the previous one, at the 6 decimals written, is
/// written one millionth below it (`runs.parquet` keeps the engine's scores).
pub fn write_trec_run(path: &Path, rows: &[&RunRow], tag: &str) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut prev: Option<(&str, i64)> = None;
    for r in rows {
        let mut micros = (r.score * 1e6).round() as i64;
        if let Some((_, p)) = prev.filter(|(q, _)| *q == r.qid.as_str()) {
            micros = micros.min(p - 1);
        }
        prev = Some((r.qid.as_str(), micros));
        let sign = if micros < 0 { "-" } else { "" };
        writeln!(f, "{} Q0 {} {} {sign}{}.{:06} {}", r.qid, r.chunk_id, r.rank, micros.unsigned_abs() / 1_000_000, micros.unsigned_abs() % 1_000_000, tag)?;
    }
    f.flush()?;
    Ok(())
}

/// Writes TREC qrels: `qid 0 docid grade` for every relevant chunk (the highest grade of the
/// gold items it covers, rounded to an integer as trec_eval reads them; at least 1).
pub fn write_qrels(path: &Path, qrels: &[(String, String, f64)]) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (q, d, grade) in qrels {
        writeln!(f, "{q} 0 {d} {}", (grade.round() as i64).max(1))?;
    }
    f.flush()?;
    Ok(())
}

/// Writes the gold-item run of one config (`trec/<config>.items.run`): per question, the
/// gold-item ranking its first k passages imply ([`crate::metrics::item_ranking`]): a gold
/// item's docno where a passage is the first to cover it, the passage's chunk id where it
/// covers nothing new. trec_eval's `ndcg_cut_k` and `recall_k` on this run and
/// `trec/items.qrels` are gauge's nDCG@k and Recall@k. Scores count down from the number of
/// entries (no ties).
pub fn write_item_run(path: &Path, queries: &[&QueryRow], runs: &[&RunRow], golden: &[GoldenQuestion], tag: &str) -> anyhow::Result<()> {
    let by_qid: HashMap<&str, &GoldenQuestion> = golden.iter().map(|q| (q.qid.as_str(), q)).collect();
    let mut chunks: HashMap<&str, Vec<&str>> = HashMap::new();
    for r in runs {
        chunks.entry(r.qid.as_str()).or_default().push(r.chunk_id.as_str());
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for q in queries {
        let (Some(gq), Some(ids)) = (by_qid.get(q.qid.as_str()), chunks.get(q.qid.as_str())) else { continue };
        let n = q.scores.items.len();
        for (rank, (passage, item)) in q.scores.items.iter().enumerate() {
            let docno = match item {
                Some(j) => gq.gold[*j].trec_docno(),
                None => ids[*passage].to_string(),
            };
            writeln!(f, "{} Q0 {docno} {} {} {tag}", q.qid, rank + 1, n - rank)?;
        }
    }
    f.flush()?;
    Ok(())
}

/// Writes the gold-item qrels (`trec/items.qrels`): `qid 0 docno grade` for every gold item
/// with a positive grade (rounded to an integer, at least 1).
pub fn write_item_qrels(path: &Path, golden: &[GoldenQuestion]) -> anyhow::Result<usize> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut n = 0;
    for q in golden {
        for g in q.gold.iter().filter(|g| g.grade() > 0.0) {
            writeln!(f, "{} 0 {} {}", q.qid, g.trec_docno(), (g.grade().round() as i64).max(1))?;
            n += 1;
        }
    }
    f.flush()?;
    Ok(n)
}

/// What the Markdown table and the chart are made from.
pub struct ReportContext<'a> {
    /// The pipeline.
    pub pipeline: &'a Pipeline,
    /// Questions in the golden set.
    pub golden_len: usize,
    /// Relevance mode used.
    pub mode: RelevanceMode,
    /// Every metric row.
    pub metrics: &'a [MetricRow],
    /// Configs not evaluated, with the reason.
    pub skipped: &'a [(String, String)],
    /// Notes printed under the header (golden-set restrictions, reranker fallbacks).
    pub notes: &'a [String],
    /// Paired differences of configs against their `compare_to` config.
    pub named: &'a [(String, String, String, crate::stats::PairedComparison)],
    /// The metrics and where they are printed.
    pub registry: &'a [Metric],
    /// The correction applied over the family.
    pub correction: crate::stats::Correction,
    /// Comparisons in the family.
    pub family_size: usize,
    /// Per primary metric: label, standard deviation of the paired differences, questions,
    /// minimum detectable effect.
    pub power: &'a [(String, f64, usize, f64)],
    /// Who wrote and judged the golden set's questions.
    pub provenance: &'a gauge_core::golden::Provenance,
    /// Configs (and `answers`, `judge`) using a model of the writing or judging family, with why.
    pub same_family: &'a [(String, String)],
}

impl ReportContext<'_> {
    fn evaluated(&self) -> Vec<&crate::pipeline::Variant> {
        self.pipeline.variants.iter().filter(|v| !self.skipped.iter().any(|(n, _)| *n == v.name)).collect()
    }

    fn get(&self, config: &str, category: &str, metric: &str) -> Option<&MetricRow> {
        self.metrics.iter().find(|m| m.config == config && m.category == category && m.metric == metric)
    }
}

fn cell(m: Option<&MetricRow>) -> String {
    match m {
        Some(MetricRow { value, ci: Some((lo, hi)), .. }) => format!("{value:.3} [{lo:.2}, {hi:.2}]"),
        Some(m) => format!("{:.3}", m.value),
        None => "–".into(),
    }
}

fn delta_cell(m: Option<&MetricRow>) -> String {
    match m.and_then(|m| m.delta) {
        Some(d) => format!("{:+.3} [{:+.2}, {:+.2}]{}", d.delta, d.ci_low, d.ci_high, if d.significant() { " *" } else { "" }),
        None => "–".into(),
    }
}

fn family_text(cx: &ReportContext<'_>) -> String {
    let primary: Vec<&str> = cx.registry.iter().filter(|m| m.delta_column).map(|m| m.label.as_str()).collect();
    if cx.family_size == 0 {
        // One retrieval config: nothing to compare, so no family to adjust over (the answer
        // rows' deltas, when there are any, are adjusted as a family of their own).
        return "(one retrieval config: no retrieval comparisons to adjust; answer rows, if any, are adjusted as their own family below)".to_string();
    }
    match cx.correction {
        crate::stats::Correction::None => format!("(not corrected for the {} comparisons: `stats.correction = \"none\"`)", cx.family_size),
        c => format!("after {} adjustment over the family of {} comparisons (every config's Δ {} and every `compare_to` comparison; `stats.correction`); raw and adjusted p are in metrics.parquet", c.label(), cx.family_size, primary.join(" and ")),
    }
}

fn mode_text(mode: RelevanceMode) -> &'static str {
    match mode {
        RelevanceMode::Page => "page — a passage is relevant when it comes from a gold source and its page range holds a gold page",
        RelevanceMode::Span => "span — a passage is relevant when it overlaps a gold character span",
        RelevanceMode::Keyword => "keyword — judged per keyword (contains it, case-insensitive); MRR and nDCG are means over keywords",
        RelevanceMode::Auto => "auto",
    }
}

/// The ablation tables in Markdown: one row per config with the registry's main metrics (with
/// 95 % intervals) and their paired deltas against the baseline, then coverage, refusals and
/// latency.
pub fn ablation_markdown(cx: &ReportContext<'_>) -> String {
    let p = cx.pipeline;
    let base = &p.variants[0].name;
    let mut s = format!("# Ablation: `{}`\n\n", p.name);
    s.push_str(&format!(
        "- Golden set: `{}` ({} questions); relevance: {}.\n- k = {}; every value is a mean over questions with its 95 % percentile-bootstrap interval ({} resamples, seed {}).\n- Δ: mean paired difference against the baseline **{}**, with its paired-bootstrap interval; `*` marks a two-sided paired sign-flip randomisation p < 0.05 {}.\n",
        p.golden.display(),
        cx.golden_len,
        mode_text(cx.mode),
        p.judge_depth,
        p.resamples,
        p.seed,
        base,
        family_text(cx)
    ));
    if cx.provenance.written_by.is_empty() && cx.provenance.judged_by.is_empty() {
        s.push_str("- Questions: who wrote and who judged them is not recorded (put a `<set>.provenance.json` beside the set, or `golden_provenance` in the pipeline).\n");
    } else {
        s.push_str(&format!("- Questions {} (record: {}).\n", cx.provenance.summary(), if cx.provenance.source.is_empty() { "unknown" } else { cx.provenance.source.as_str() }));
    }
    if !cx.same_family.is_empty() {
        s.push_str("- † marks a config using a model of the family that wrote or judged the questions (see \"Same family as the questions\" below): its gain may come from the question set, not the method.\n");
    }
    for note in cx.notes {
        s.push_str(&format!("- {note}\n"));
    }
    s.push('\n');
    let set: std::collections::BTreeSet<&str> = cx.metrics.iter().map(|m| m.category.as_str()).filter(|c| *c != "all").collect();
    // One category is the whole set again: no separate table.
    let cats: Vec<&str> = std::iter::once("all").chain(if set.len() >= 2 { set } else { Default::default() }).collect();
    for &cat in &cats {
        if cat != "all" {
            s.push_str(&format!("\n## Category `{cat}`\n\n"));
        }
        let main: Vec<&Metric> = cx.registry.iter().filter(|m| m.placement == Placement::Main).collect();
        let deltas: Vec<&Metric> = cx.registry.iter().filter(|m| m.delta_column).collect();
        let headers: Vec<String> = main.iter().map(|m| m.label.clone()).chain(deltas.iter().map(|m| format!("Δ {}", m.label))).collect();
        s.push_str(&format!("| Config | {} |\n|---|{}\n", headers.join(" | "), "---|".repeat(headers.len())));
        for v in cx.evaluated() {
            let mark = if cx.same_family.iter().any(|(c, _)| *c == v.name) { " †" } else { "" };
            let name = if v.name == *base { format!("{}{mark} (baseline)", v.name) } else { format!("{}{mark}", v.name) };
            let cells: Vec<String> = main.iter().map(|m| cell(cx.get(&v.name, cat, &m.name))).chain(deltas.iter().map(|m| delta_cell(cx.get(&v.name, cat, &m.name)))).collect();
            s.push_str(&format!("| {} | {} |\n", name.replace('|', "\\|"), cells.join(" | ")));
        }
    }
    if !cx.named.is_empty() {
        s.push_str("\n## Paired differences against the compared config (`compare_to`)\n\n| Config | vs | Metric | Δ [95 % CI] | p | p adjusted |\n|---|---|---|---|---|---|\n");
        for (config, other, metric, d) in cx.named {
            let adj = d.p_adjusted.map_or("–".to_string(), |a| format!("{a:.3}"));
            s.push_str(&format!("| {} | {} | {metric} | {:+.3} [{:+.2}, {:+.2}]{} | {:.3} | {adj} |\n", config.replace('|', "\\|"), other.replace('|', "\\|"), d.delta, d.ci_low, d.ci_high, if d.significant() { " *" } else { "" }, d.p_value));
        }
    }
    s.push_str(&wins_markdown(cx));
    let coverage: Vec<&Metric> = cx.registry.iter().filter(|m| m.placement == Placement::Coverage).collect();
    let headers: Vec<String> = coverage.iter().map(|m| m.label.clone()).chain(["Latency p50 (ms)".to_string(), "Latency p95 (ms)".to_string(), "Without cache p50 (ms)".to_string()]).collect();
    s.push_str(&format!("\n## Coverage, refusals, latency\n\n| Config | {} |\n|---|{}\n", headers.join(" | "), "---|".repeat(headers.len())));
    for v in cx.evaluated() {
        let mut cells: Vec<String> = coverage
            .iter()
            .map(|m| if m.interval { cell(cx.get(&v.name, "all", &m.name)) } else { format!("{:.3}", cx.get(&v.name, "all", &m.name).map(|r| r.value).unwrap_or(0.0)) })
            .collect();
        for lat in ["latency_p50_ms", "latency_p95_ms", "latency_p50_without_cache_ms"] {
            cells.push(format!("{:.1}", cx.get(&v.name, "all", lat).map(|m| m.value).unwrap_or(0.0)));
        }
        s.push_str(&format!("| {} | {} |\n", v.name.replace('|', "\\|"), cells.join(" | ")));
    }
    s.push_str("\nLatency is wall time on the machine that ran the evaluation (query embedding included); it is the only number here that changes between runs. \"Without cache\" adds the recorded time of every query-rewrite reply the model-call cache served (what a first run pays).\n\n## Configs\n\n");
    for v in &p.variants {
        let desc = if v.description.is_empty() { String::new() } else { format!(": {}", v.description) };
        s.push_str(&format!("- **{}**{}{}\n", v.name, desc, if v.oracle_source_filter { " *(oracle: filters on each question's gold source)*" } else { "" }));
    }
    if !cx.same_family.is_empty() {
        s.push_str(&format!("\n## Same family as the questions\n\nThe questions were {}. These rows use a model of a family that wrote or judged them; a question a language model wrote from a passage tends to be likely under a language model given that passage, so their differences need a set of other origin to stand:\n\n", cx.provenance.summary()));
        for (config, why) in cx.same_family {
            s.push_str(&format!("- **{config}** †: {why}\n"));
        }
    }
    if !cx.skipped.is_empty() {
        s.push_str("\n## Skipped\n\n");
        for (name, reason) in cx.skipped {
            s.push_str(&format!("- **{name}**: {}\n", reason.replace('\n', " ")));
        }
    }
    s
}

/// Wins, ties and losses against the baseline per config and primary metric, with raw and
/// adjusted p, and the golden set's minimum detectable effects.
fn wins_markdown(cx: &ReportContext<'_>) -> String {
    let primary: Vec<&Metric> = cx.registry.iter().filter(|m| m.delta_column).collect();
    let base = &cx.pipeline.variants[0].name;
    let rows: Vec<String> = cx
        .evaluated()
        .iter()
        .filter(|v| v.name != *base)
        .map(|v| {
            let cells: Vec<String> = primary
                .iter()
                .map(|m| match cx.get(&v.name, "all", &m.name) {
                    Some(MetricRow { wtl: Some((w, t, l)), delta: Some(d), .. }) => format!("{w} / {t} / {l} | {:.3} | {}", d.p_value, d.p_adjusted.map_or("–".to_string(), |a| format!("{a:.3}{}", if a < 0.05 { " *" } else { "" }))),
                    _ => "– | – | –".to_string(),
                })
                .collect();
            format!("| {} | {} |\n", v.name.replace('|', "\\|"), cells.join(" | "))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let headers: Vec<String> = primary.iter().map(|m| format!("{0} W / T / L | {0} p | {0} p adjusted", m.label)).collect();
    let mut s = format!("\n## Wins, ties, losses against the baseline **{base}**\n\nQuestion by question; p is the paired sign-flip p-value, raw and after {} adjustment over the family of {} comparisons.\n\n| Config | {} |\n|---|{}\n", cx.correction.label(), cx.family_size, headers.join(" | "), "---|".repeat(primary.len() * 3));
    for r in rows {
        s.push_str(&r);
    }
    if !cx.power.is_empty() {
        let parts: Vec<String> = cx.power.iter().map(|(label, sd, _, mde)| format!("{label} ±{mde:.3} (sd of paired differences {sd:.3})")).collect();
        s.push_str(&format!("\nMinimum detectable effect of this golden set ({} questions; 80 % power, two-sided α 0.05, normal approximation 2.80·sd/√n, sd the median over configs of the paired differences' standard deviation): {}. A smaller true difference is more likely missed than found.\n", cx.power[0].2, parts.join("; ")));
    }
    s
}

/// The answer table (a pipeline's `[answer]` rows): one row per answered config, each metric
/// with its 95 % interval and the number of questions it applies to.
pub fn answers_markdown(section: Option<&crate::answers::AnswerSection>, tables: &[crate::answers::AnswerTable], deltas: &[crate::answers::AnswerDelta], judged: bool) -> String {
    let Some(section) = section else { return String::new() };
    let Some((_, _, first)) = tables.first() else { return String::new() };
    let describe = |g: &gauge_answer::GeneratorConfig| g.describe();
    let generator = if section.generators.is_empty() {
        describe(&section.generator)
    } else {
        section
            .generators
            .iter()
            .map(|g| {
                let settings = g.generation.as_ref().map(|o| format!(" ({})", o.describe_controls())).unwrap_or_default();
                let form = match g.structure.as_ref().filter(|s| !s.is_free()) {
                    Some(s) => format!(", held to the four phases by constrained decoding{}", if s.refusal { " (refusal a legal first field)" } else { "" }),
                    None => String::new(),
                };
                format!("**{}** = {}{settings}{form}", g.name, describe(g.generator.as_ref().unwrap_or(&section.generator)))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut s = format!(
        "\n## Answers\n\nGenerator: {generator}; template `{}`; at most {} new tokens{}. {}; `n` is the number of questions a metric applies to (citation metrics: answers with at least one citation).\n\n| Config | Questions | {} |\n|---|---|{}\n",
        section.template,
        section.generation.max_new_tokens,
        if section.generation.temperature > 0.0 { format!(", temperature {}", section.generation.temperature) } else { ", greedy".into() },
        if judged { "Deterministic citation metrics from `answers.parquet`, then the judge's mean grades (answers it graded; see Judge below)" } else { "Deterministic metrics from `answers.parquet` (no judge)" },
        first.iter().map(|(l, _)| l.to_string()).collect::<Vec<_>>().join(" | "),
        "---|".repeat(first.len())
    );
    s.push_str(&answer_rows_markdown(tables, deltas, "Paired differences between generators"));
    s
}

/// One answer table's rows (the header written by the caller), then its paired differences.
fn answer_rows_markdown(tables: &[crate::answers::AnswerTable], deltas: &[crate::answers::AnswerDelta], deltas_title: &str) -> String {
    let mut s = String::new();
    for (name, n, rows) in tables {
        let cells: Vec<String> = rows.iter().map(|(_, m)| if m.n == 0 { "–".into() } else { format!("{} (n {})", cell(Some(m)), m.n) }).collect();
        s.push_str(&format!("| {} | {n} | {} |\n", name.replace('|', "\\|"), cells.join(" | ")));
    }
    if !deltas.is_empty() {
        // Rows paired with another generator than the first (`compare_to`): more baselines
        // than retrieval configs.
        let baselines: std::collections::BTreeSet<&str> = deltas.iter().map(|d| d.baseline.as_str()).collect();
        let configs: std::collections::BTreeSet<&str> = deltas.iter().map(|d| d.baseline.split(" · ").next().unwrap_or("")).collect();
        let against = if baselines.len() > configs.len() { "the first one, or the one its `compare_to` names," } else { "the first one" };
        s.push_str(&format!("\n### {deltas_title}\n\nEach generator against {against} on the same retrieved contexts, over the questions where the metric applies to both: mean difference with its paired-bootstrap 95 % interval, a two-sided sign-flip randomisation p, and that p adjusted over the {} comparisons of this table (the pipeline's `stats.correction`); `*` marks an adjusted p < 0.05.\n\n| Row | vs | Metric | n | Δ | 95 % interval | p | p adjusted |\n|---|---|---|---|---|---|---|---|\n", deltas.len()));
        for d in deltas {
            let c = &d.comparison;
            let adj = c.p_adjusted.map_or("–".to_string(), |a| format!("{a:.3}"));
            s.push_str(&format!("| {} | {} | {} | {} | {:+.3} | [{:+.2}, {:+.2}] | {:.3} | {adj}{} |\n", d.run.replace('|', "\\|"), d.baseline.replace('|', "\\|"), d.label, d.n, c.delta, c.ci_low, c.ci_high, c.p_value, if c.significant() { " *" } else { "" }));
        }
    }
    s
}

/// One half of an answer split: its name, the questions in it, its tables and differences.
pub type SplitHalf = (&'static str, usize, Vec<crate::answers::AnswerTable>, Vec<crate::answers::AnswerDelta>);

/// The answer tables again on each half of the questions split by page group
/// (`[answer] split_seed`): settings are chosen on the tuning half and judged on the held-out
/// half.
pub fn answers_split_markdown(seed: u64, halves: &[SplitHalf]) -> String {
    let mut s = format!("\n## Answers on the two page-group halves\n\nThe questions split by page group (`split_seed = {seed}`: questions whose gold pages are equal or adjacent stay together): choose settings on the **tuning** half, judge them on the **held-out** half, whose pages the choice never saw.\n");
    for (name, n, tables, deltas) in halves {
        let Some((_, _, first)) = tables.first() else { continue };
        let title = if *name == "tuning" { "Tuning half" } else { "Held-out half" };
        s.push_str(&format!("\n### {title} ({n} questions)\n\n| Config | Questions | {} |\n|---|---|{}\n", first.iter().map(|(l, _)| l.to_string()).collect::<Vec<_>>().join(" | "), "---|".repeat(first.len())));
        s.push_str(&answer_rows_markdown(tables, deltas, &format!("{title}: paired differences")));
    }
    s
}

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = gauge_core::font::chart_font()?;
            plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes).map_err(|_| "the chart font is not a usable TrueType font".to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// Draws the registry's charted metrics (Hit@1, Hit@5, MRR, nDCG) per config as horizontal bars with their 95 %
/// interval as whiskers.
pub fn ablation_png(path: &Path, cx: &ReportContext<'_>) -> anyhow::Result<()> {
    use plotters::prelude::*;
    register_font()?;
    const COLORS: [RGBColor; 6] = [RGBColor(0x1f, 0x77, 0xb4), RGBColor(0xff, 0x7f, 0x0e), RGBColor(0x2c, 0xa0, 0x2c), RGBColor(0x94, 0x67, 0xbd), RGBColor(0x8c, 0x56, 0x4b), RGBColor(0x7f, 0x7f, 0x7f)];
    let metrics: Vec<(&str, &str, RGBColor)> = cx.registry.iter().filter(|m| m.chart).zip(COLORS.iter().cycle()).map(|(m, c)| (m.label.as_str(), m.name.as_str(), *c)).collect();
    let names: Vec<String> = cx.evaluated().iter().map(|v| v.name.clone()).collect();
    let n = names.len();
    let height = 120 + 70 * n as u32;
    let tmp = path.with_extension("png.partial.png");
    {
        let root = BitMapBackend::new(&tmp, (1100, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!("{} — {} questions, {} relevance, 95 % bootstrap intervals", cx.pipeline.name, cx.golden_len, cx.mode.name());
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(35)
            .y_label_area_size(260)
            .build_cartesian_2d(0f64..1.2f64, 0f64..n as f64)?;
        let labels = names.clone();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n * 2 + 1)
            .y_label_formatter(&move |y: &f64| {
                let i = (n as f64 - y - 0.5).round();
                if (n as f64 - y - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n { labels[i as usize].clone() } else { String::new() }
            })
            .x_desc("score")
            .x_label_formatter(&|x: &f64| if *x <= 1.0 + 1e-9 { format!("{x:.1}") } else { String::new() })
            .label_style(("sans-serif", 15))
            .draw()?;
        let bar_h = 0.8 / metrics.len() as f64;
        for (mi, (label, key, color)) in metrics.iter().enumerate() {
            let mut rects = Vec::new();
            let mut whiskers = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let Some(m) = cx.get(name, "all", key) else { continue };
                // Config i sits at y in (n-1-i, n-i); metrics stack downwards inside it.
                let top = (n - i) as f64 - 0.1 - bar_h * mi as f64;
                let bottom = top - bar_h * 0.9;
                rects.push(Rectangle::new([(0.0, bottom), (m.value, top)], color.filled()));
                if let Some((lo, hi)) = m.ci {
                    let mid = (top + bottom) / 2.0;
                    whiskers.push(PathElement::new(vec![(lo, mid), (hi, mid)], BLACK.stroke_width(1)));
                    whiskers.push(PathElement::new(vec![(lo, bottom), (lo, top)], BLACK.stroke_width(1)));
                    whiskers.push(PathElement::new(vec![(hi, bottom), (hi, top)], BLACK.stroke_width(1)));
                }
            }
            chart.draw_series(rects)?.label(*label).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
            chart.draw_series(whiskers)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()?;
        root.present()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_safe() {
        assert_eq!(slug(3, "+ source filter (oracle)"), "03-source-filter-oracle");
        assert_eq!(slug(0, "Vector"), "00-vector");
    }
}
