//! The rows of the evaluation tables (`per_query.parquet`, `runs.parquet`,
//! `metrics.parquet`), shared by the orchestration that fills them and the report that
//! writes them.
use serde::Serialize;

use crate::relevance::QuestionScores;

/// One row of `per_query.parquet`.
#[derive(Debug, Clone)]
pub struct QueryRow {
    /// Config name.
    pub config: String,
    /// Question id.
    pub qid: String,
    /// Category ("" when none).
    pub category: String,
    /// The question's scores.
    pub scores: QuestionScores,
    /// Refused by the cutoff.
    pub refused: bool,
    /// Passages returned.
    pub n_results: usize,
    /// Search wall time.
    pub latency_ms: f64,
    /// Wall time plus the recorded time of cached model replies (the cost without the cache).
    pub cold_latency_ms: f64,
    /// Model calls the search made.
    pub model_calls: usize,
}

/// One row of `runs.parquet`.
#[derive(Debug, Clone)]
pub struct RunRow {
    /// Config name.
    pub config: String,
    /// Question id.
    pub qid: String,
    /// 1-based rank.
    pub rank: usize,
    /// Hit chunk.
    pub chunk_id: String,
    /// Final score.
    pub score: f64,
    /// Source.
    pub source: String,
    /// Pages of the passage.
    pub page_start: i32,
    /// Last page.
    pub page_end: i32,
    /// Judged relevant.
    pub relevant: bool,
}

/// One row of `metrics.parquet`.
#[derive(Debug, Clone, Serialize)]
pub struct MetricRow {
    /// Config name.
    pub config: String,
    /// `all` or a category.
    pub category: String,
    /// Metric name.
    pub metric: String,
    /// Questions.
    pub n: usize,
    /// Mean (or percentile for latency).
    pub value: f64,
    /// Bootstrap interval.
    pub ci: Option<(f64, f64)>,
    /// Paired comparison with the baseline.
    pub delta: Option<crate::stats::PairedComparison>,
    /// Wins, ties and losses against the baseline, question by question.
    pub wtl: Option<(usize, usize, usize)>,
}

