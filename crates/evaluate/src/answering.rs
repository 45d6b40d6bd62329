//! The answer phase of `evaluate` (`[answer]`, `[judge]`): each answer row's answers read back
//! (restricted to the golden set as evaluated), scored by the deterministic answer metrics and,
//! with a judge, graded; paired against the first generator's row, corrected as one family,
//! split into page-group halves when the pipeline asks; the evaluation's `answers.parquet`
//! written; where each answer row that cites no gold page lost it.
use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use gauge_core::golden::GoldenQuestion;
use gauge_core::StageRun;
use gauge_generator::cache::CallCache;

use crate::answers::{AnswerDelta, AnswerRun, AnswerSection, AnswerTable, AnsweredQuestion, RunMetrics};
use crate::failures::FailureRow;
use crate::judge::{Agreement, Judge, Verdict};
use crate::planning::EvaluatePlan;
use crate::report;
use crate::retrieve::Retrieved;
use crate::rows::{MetricRow, QueryRow};
use crate::stats::Correction;
use crate::tables::correct_answer_family;

/// What the answer rows add to an evaluation.
#[derive(Default)]
pub struct AnswerPhase {
    /// Per answer row: its name, questions answered, and its metrics (label, row).
    pub tables: Vec<AnswerTable>,
    /// Each answer row against the first generator's, corrected as one family.
    pub deltas: Vec<AnswerDelta>,
    /// The metric rows (category `all`, then the halves'), their deltas set.
    pub metric_rows: Vec<MetricRow>,
    /// Where each answer row's answers without a gold citation lost it.
    pub failures: Vec<FailureRow>,
    /// The judge's agreement section of `ablation.md` (empty without a judge).
    pub judge_report: String,
    /// The halves' section of `ablation.md` (empty without `split_seed`).
    pub split_report: String,
}

/// One answer row scored: its metrics, and the judge's verdict per answer (refusals: none).
struct ScoredRun {
    metrics: RunMetrics,
    verdicts: Vec<Option<Verdict>>,
    agreement: Option<(String, Agreement)>,
}

/// Runs the answer phase (see the module docs); nothing without `[answer]`.
pub fn answer_phase(plan: &EvaluatePlan, retrieved: &Retrieved, cache: &Arc<CallCache>, device: &str, run: &mut StageRun) -> anyhow::Result<AnswerPhase> {
    let pipeline = &plan.pipeline;
    let Some(section) = &pipeline.answer else { return Ok(AnswerPhase::default()) };
    // Every question the answer rows are scored on: the golden set as evaluated, then the
    // out-of-corpus questions (no gold; only the answer metrics see them).
    let golden: Vec<GoldenQuestion> = plan.golden.iter().chain(&plan.out_of_corpus).cloned().collect();
    let golden = &golden;
    let judge = match &pipeline.judge {
        Some(j) => Some(Judge::open(j, cache.clone(), device, &pipeline.dir).context("[judge]")?),
        None => None,
    };
    let calls_before = (cache.misses(), cache.hits());
    let mut phase = AnswerPhase::default();
    let mut scored = Vec::new();
    for a in &plan.answers {
        let s = score_run(a, golden, &plan.golden, section, judge.as_ref().zip(pipeline.judge.as_ref().map(|j| j.faithful_at)), retrieved)?;
        let (_, answered, m) = &s.metrics;
        let rows = crate::answers::metric_rows(&a.name(), m, pipeline.resamples, pipeline.seed);
        phase.tables.push((a.name(), answered.len(), m.iter().map(|(_, label, _)| *label).zip(rows.iter().cloned()).collect::<Vec<_>>()));
        phase.metric_rows.extend(rows);
        scored.push(s);
    }
    // Answer rows that cite no gold page: where each lost it (failures.parquet).
    for (a, answered, _) in scored.iter().map(|s| &s.metrics) {
        let lost: Vec<&FailureRow> = retrieved.failures.iter().filter(|f| f.config == a.config).collect();
        let rows: Vec<&QueryRow> = retrieved.query_rows.iter().filter(|r| r.config == a.config).collect();
        let row = if a.generator.is_some() { a.name() } else { format!("{} · answer", a.config) };
        phase.failures.extend(crate::failures::answer_failures(&row, answered, &plan.golden, &lost, &rows, pipeline.judge_depth));
    }
    write_answers(run, &scored, golden)?;
    if let Some(js) = &pipeline.judge {
        let calls = (cache.misses() - calls_before.0, cache.hits() - calls_before.1);
        let agreements: Vec<(String, Agreement)> = scored.iter().filter_map(|s| s.agreement.clone()).collect();
        let missing: usize = agreements.iter().map(|(_, a)| a.missing).sum();
        run.set_stat("judge_calls", calls.0);
        run.set_stat("judge_calls_cached", calls.1);
        run.set_stat("judge_missing", missing);
        phase.judge_report = crate::judge::agreement_markdown(js, &agreements, calls);
    }
    let per_run: Vec<RunMetrics> = scored.into_iter().map(|s| s.metrics).collect();
    phase.deltas = crate::answers::paired_deltas(&per_run, pipeline.resamples, pipeline.seed);
    correct_answer_family(&mut phase.deltas, pipeline.stats.correction);
    set_deltas(&mut phase.metric_rows, &phase.deltas, "all");
    if let Some(split_seed) = section.split_seed {
        phase.split_report = split_halves(plan, &per_run, split_seed, &mut phase.metric_rows);
    }
    Ok(phase)
}

/// Reads one answer row's answers (those of `golden`, the questions as evaluated: the answer
/// stage reads the whole file), scores them and, with a judge, grades every answered question
/// of `answerable` in one batch (refusals and out-of-corpus questions are not graded: the
/// judge sees no passages for them).
fn score_run(a: &AnswerRun, golden: &[GoldenQuestion], answerable: &[GoldenQuestion], section: &AnswerSection, judge: Option<(&Judge, u8)>, retrieved: &Retrieved) -> anyhow::Result<ScoredRun> {
    let mut answered = crate::answers::read_answers(&a.dir.join("answers.parquet"))?;
    answered.retain(|aq| golden.iter().any(|q| q.qid == aq.qid));
    let mut m = crate::answers::answer_metrics(&answered, golden, section.asks_four_phases(), &section.refusal);
    let Some((judge, faithful_at)) = judge else {
        return Ok(ScoredRun { metrics: (a.clone(), answered, m), verdicts: Vec::new(), agreement: None });
    };
    let verdicts = grade(judge, a, &answered, answerable, retrieved);
    for (i, name) in crate::judge::METRIC_NAMES.iter().enumerate() {
        let values = verdicts.iter().map(|v| v.as_ref().and_then(|v| v.reply.as_ref()).map(|r| r.scores()[i] as f64)).collect();
        m.push((name, crate::judge::CRITERIA[i].1, values));
    }
    let graded: Vec<(Option<u8>, usize, usize)> = answered
        .iter()
        .zip(&verdicts)
        .filter_map(|(aq, v)| v.as_ref().map(|v| (v.reply.as_ref().map(|r| r.faithfulness), aq.citations.iter().filter(|c| c.verified).count(), aq.citations.iter().filter(|c| !c.verified).count())))
        .collect();
    let agreement = Some((a.name(), crate::judge::agreement(&graded, faithful_at)));
    Ok(ScoredRun { metrics: (a.clone(), answered, m), verdicts, agreement })
}

/// The judge's verdict on every answered question of `golden` in one row, with a progress bar;
/// `None` for refusals and questions not in `golden`.
fn grade(judge: &Judge, a: &AnswerRun, answered: &[AnsweredQuestion], golden: &[GoldenQuestion], retrieved: &Retrieved) -> Vec<Option<Verdict>> {
    let graded_one = |aq: &AnsweredQuestion| !aq.refused && golden.iter().any(|q| q.qid == aq.qid);
    let bar = gauge_core::progress::ReplyBar::new(answered.len() as u64, &format!("judge: {}", a.name()));
    let passages: Vec<Vec<crate::judge::JudgedPassage>> = answered.iter().map(|aq| retrieved.contexts.get(&(a.config.clone(), aq.qid.clone())).cloned().unwrap_or_default()).collect();
    let items: Vec<crate::judge::Graded<'_>> = answered
        .iter()
        .zip(&passages)
        .filter(|(aq, _)| graded_one(aq))
        .map(|(aq, p)| {
            let q = golden.iter().find(|q| q.qid == aq.qid);
            crate::judge::Graded { question: q.map_or("", |q| q.question.as_str()), reference: q.and_then(|q| q.reference_answer.as_deref()), passages: p, answer: &aq.answer }
        })
        .collect();
    bar.bar.inc((answered.len() - items.len()) as u64);
    let mut graded = judge.grade_all(&items, &|tokens| bar.reply(tokens)).into_iter();
    let mut verdicts = Vec::new();
    for aq in answered {
        let verdict = graded_one(aq).then(|| graded.next().expect("one verdict per answered question"));
        if let Some(e) = verdict.as_ref().and_then(|v| v.error.as_ref()) {
            eprintln!("evaluate: judge: {} question `{}`: no grade ({e})", a.name(), aq.qid);
        }
        verdicts.push(verdict);
    }
    bar.bar.finish_and_clear();
    verdicts
}

/// The evaluation's answers.parquet: every answer row's answers, with their grades.
fn write_answers(run: &mut StageRun, scored: &[ScoredRun], golden: &[GoldenQuestion]) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for s in scored {
        let (a, answered, _) = &s.metrics;
        for (i, aq) in answered.iter().enumerate() {
            let question = golden.iter().find(|q| q.qid == aq.qid).map(|q| q.question.clone()).unwrap_or_default();
            rows.push(report::JudgedAnswerRow { config: a.name(), answered: aq, question, verdict: s.verdicts.get(i).and_then(Option::as_ref) });
        }
    }
    let n = report::write_judged_answers(&run.path("answers.parquet"), &rows)?;
    run.add_output("answers.parquet", Some(n))?;
    Ok(())
}

/// Puts each delta on its answer metric row of `category`.
fn set_deltas(rows: &mut [MetricRow], deltas: &[AnswerDelta], category: &str) {
    for d in deltas {
        let metric = format!("answer/{}", d.metric);
        if let Some(row) = rows.iter_mut().find(|m| m.config == d.run && m.metric == metric && m.category == category) {
            row.delta = Some(d.comparison);
        }
    }
}

/// The answer tables of the two page-group halves (`split_seed`), each half's deltas a family
/// of its own; their rows join `rows` (categories `tuning`, `held_out`). Returns the section.
fn split_halves(plan: &EvaluatePlan, per_run: &[RunMetrics], split_seed: u64, rows: &mut Vec<MetricRow>) -> String {
    let (pipeline, golden) = (&plan.pipeline, &plan.golden);
    let correction: Correction = pipeline.stats.correction;
    let halves = gauge_core::golden::page_halves(golden, split_seed);
    // The out-of-corpus questions (no pages) split in two on their own, so the golden set's
    // halves stay what they were without them.
    let ooc_halves = gauge_core::golden::page_halves(&plan.out_of_corpus, split_seed);
    let mut sections = Vec::new();
    for (half, name) in [(false, "tuning"), (true, "held_out")] {
        let keep: BTreeSet<String> = golden.iter().zip(&halves).chain(plan.out_of_corpus.iter().zip(&ooc_halves)).filter(|(_, h)| **h == half).map(|(q, _)| q.qid.clone()).collect();
        let runs: Vec<RunMetrics> = per_run.iter().map(|r| crate::answers::restrict(r, &keep)).collect();
        let mut tables = Vec::new();
        for (a, answered, m) in &runs {
            let half_rows = crate::answers::metric_rows_in(&a.name(), name, m, pipeline.resamples, pipeline.seed);
            let asked = answered.iter().filter(|q| keep.contains(&q.qid)).count();
            tables.push((a.name(), asked, m.iter().map(|(_, label, _)| *label).zip(half_rows.iter().cloned()).collect::<Vec<_>>()));
            rows.extend(half_rows);
        }
        let mut deltas = crate::answers::paired_deltas(&runs, pipeline.resamples, pipeline.seed);
        correct_answer_family(&mut deltas, correction);
        set_deltas(rows, &deltas, name);
        sections.push((name, keep.len(), tables, deltas));
    }
    report::answers_split_markdown(split_seed, &sections)
}
