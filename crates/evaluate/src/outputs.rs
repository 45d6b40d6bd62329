//! The last phase of `evaluate`: the run's files — `metrics.parquet`, `per_query.parquet`,
//! `runs.parquet`, `failures.parquet`, the TREC runs and qrels, `ablation.md` and
//! `ablation.png` — and its stats.
use gauge_core::StageRun;

use crate::answering::AnswerPhase;
use crate::failures::FailureRow;
use crate::gate::GateRow;
use crate::planning::EvaluatePlan;
use crate::relevance::RelevanceMode;
use crate::report;
use crate::retrieve::Retrieved;
use crate::rows::{MetricRow, QueryRow, RunRow};
use crate::tables::RetrievalTables;

/// Everything an evaluation computed, for its files.
pub struct Evaluation<'a> {
    /// The plan (pipeline, golden set as evaluated, skipped configs, notes).
    pub plan: &'a EvaluatePlan,
    /// The searches' rows.
    pub retrieved: &'a Retrieved,
    /// The retrieval tables.
    pub tables: &'a RetrievalTables,
    /// The answer rows' tables and deltas.
    pub answers: &'a AnswerPhase,
    /// Retrieval and answer failures, in that order.
    pub failures: &'a [FailureRow],
    /// The gate's rows.
    pub gate: &'a [GateRow],
    /// The adapted answer rows' secondary metrics against their declared margins.
    pub non_inferiority: &'a [crate::gate::NonInferiorityRow],
    /// The config search's section of `ablation.md` (empty without `[search]`).
    pub search_md: &'a str,
    /// What `[refusal]` measured, when the pipeline has it.
    pub refusal: Option<&'a crate::refusal::RefusalOutcome>,
}

/// Writes the run's files and stats (see the module docs).
pub fn write(e: &Evaluation<'_>, run: &mut StageRun) -> anyhow::Result<()> {
    let (pipeline, golden, mode) = (&e.plan.pipeline, &e.plan.golden, e.plan.mode);
    if !e.gate.is_empty() {
        run.set_stat("gate", crate::gate::stat(e.gate));
    }
    if !e.non_inferiority.is_empty() {
        run.set_stat("non_inferiority", crate::gate::non_inferiority_stat(e.non_inferiority));
    }
    let mut metrics: Vec<MetricRow> = e.tables.metrics.clone();
    metrics.extend(e.answers.metric_rows.iter().cloned());
    let n = report::write_metrics(&run.path("metrics.parquet"), &metrics)?;
    run.add_output("metrics.parquet", Some(n))?;
    let n = report::write_per_query(&run.path("per_query.parquet"), &e.retrieved.query_rows)?;
    run.add_output("per_query.parquet", Some(n))?;
    let n = report::write_runs(&run.path("runs.parquet"), &e.retrieved.run_rows)?;
    run.add_output("runs.parquet", Some(n))?;
    let n = crate::failures::write_failures(&run.path("failures.parquet"), e.failures)?;
    run.add_output("failures.parquet", Some(n))?;
    write_trec(e, run)?;
    if let Some(r) = e.refusal {
        let n = crate::refusal::write_rows(&run.path(crate::refusal::REFUSAL_FILE), &r.rows)?;
        run.add_output(crate::refusal::REFUSAL_FILE, Some(n))?;
        run.set_stat("refusal", crate::refusal::stat(&r.summaries));
    }
    let context = report::ReportContext {
        pipeline,
        golden_len: golden.len(),
        mode,
        metrics: &e.tables.metrics,
        skipped: &e.plan.skipped,
        notes: &e.plan.notes,
        named: &e.tables.named,
        registry: &e.tables.registry,
        correction: pipeline.stats.correction,
        family_size: e.tables.family_size,
        power: &e.tables.power,
        provenance: &e.plan.provenance,
        same_family: &e.plan.same_family,
    };
    let answers_md = report::answers_markdown(pipeline.answer.as_ref(), &e.answers.tables, &e.answers.deltas, pipeline.judge.is_some());
    let failures_md = crate::failures::markdown(e.failures, &e.tables.names, pipeline.judge_depth);
    std::fs::write(run.path("ablation.md"), report::ablation_markdown(&context) + &answers_md + &e.answers.split_report + &e.answers.judge_report + &failures_md + e.refusal.map_or("", |r| r.markdown.as_str()) + &crate::gate::markdown(e.gate) + &crate::gate::non_inferiority_markdown(e.non_inferiority) + e.search_md)?;
    run.add_output("ablation.md", None)?;
    report::ablation_png(&run.path("ablation.png"), &context)?;
    run.add_output("ablation.png", None)?;
    run.set_stat("questions", golden.len());
    run.set_stat("configs", e.tables.names.len());
    run.set_stat("skipped", serde_json::to_value(&e.plan.skipped)?);
    run.set_stat("relevance", mode.name());
    run.set_stat("question_provenance", serde_json::to_value(&e.plan.provenance)?);
    run.set_stat("same_family", serde_json::to_value(e.plan.same_family.iter().map(|(c, why)| serde_json::json!({"config": c, "why": why})).collect::<Vec<_>>())?);
    Ok(())
}

/// Per evaluated config its TREC run, qrels and (unless keyword relevance) its gold-item run;
/// the gold-item qrels once.
fn write_trec(e: &Evaluation<'_>, run: &mut StageRun) -> anyhow::Result<()> {
    let (pipeline, golden, mode) = (&e.plan.pipeline, &e.plan.golden, e.plan.mode);
    std::fs::create_dir_all(run.path("trec"))?;
    for (i, v) in pipeline.variants.iter().enumerate().filter(|(_, v)| e.tables.names.contains(&v.name)) {
        let slug = report::slug(i, &v.name);
        let mine: Vec<&RunRow> = e.retrieved.run_rows.iter().filter(|r| r.config == v.name).collect();
        report::write_trec_run(&run.path(&format!("trec/{slug}.run")), &mine, &slug)?;
        run.add_output(&format!("trec/{slug}.run"), Some(mine.len() as u64))?;
        let q = &e.retrieved.qrels[i];
        report::write_qrels(&run.path(&format!("trec/{slug}.qrels")), q)?;
        run.add_output(&format!("trec/{slug}.qrels"), Some(q.len() as u64))?;
        if mode != RelevanceMode::Keyword {
            let queries: Vec<&QueryRow> = e.retrieved.query_rows.iter().filter(|r| r.config == v.name).collect();
            report::write_item_run(&run.path(&format!("trec/{slug}.items.run")), &queries, &mine, golden, &slug)?;
            run.add_output(&format!("trec/{slug}.items.run"), Some(queries.iter().map(|q| q.scores.items.len() as u64).sum()))?;
        }
    }
    if mode != RelevanceMode::Keyword {
        let n = report::write_item_qrels(&run.path("trec/items.qrels"), golden)?;
        run.add_output("trec/items.qrels", Some(n as u64))?;
    }
    Ok(())
}
