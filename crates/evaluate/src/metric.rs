//! The metric registry: each metric's name, how it is computed from a question's row, and
//! where the report prints it. Adding a metric is one entry in [`registry`]; `summarize`,
//! `metrics.parquet`, the Markdown tables and the chart follow.
use crate::metrics::hit_at;
use crate::rows::QueryRow;

/// Where a metric is printed in `ablation.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The main table (with a 95 % interval).
    Main,
    /// The coverage, refusals and latency table.
    Coverage,
}

/// One metric.
pub struct Metric {
    /// Name in `metrics.parquet` (`hit@1`, `mrr@10`, …).
    pub name: String,
    /// Column header in `ablation.md` and the chart.
    pub label: String,
    /// Which table prints it.
    pub placement: Placement,
    /// Also printed as a paired delta against the baseline in the main table.
    pub delta_column: bool,
    /// Drawn in `ablation.png`.
    pub chart: bool,
    /// Printed with its 95 % interval (otherwise the bare mean).
    pub interval: bool,
    value: Box<dyn Fn(&QueryRow) -> f64 + Send + Sync>,
}

impl Metric {
    fn new(name: String, label: String, placement: Placement, value: impl Fn(&QueryRow) -> f64 + Send + Sync + 'static) -> Metric {
        Metric { name, label, placement, delta_column: false, chart: false, interval: true, value: Box::new(value) }
    }

    fn with_delta(mut self) -> Metric {
        self.delta_column = true;
        self
    }

    fn charted(mut self) -> Metric {
        self.chart = true;
        self
    }

    fn bare(mut self) -> Metric {
        self.interval = false;
        self
    }

    /// The metric's value for one question.
    pub fn value(&self, row: &QueryRow) -> f64 {
        (self.value)(row)
    }
}

/// The hit cutoffs reported for a `k`: 1, 3, 5 and `k` (those up to `k`).
pub fn hit_cutoffs(k: usize) -> Vec<usize> {
    let mut c: Vec<usize> = [1, 3, 5, k].into_iter().filter(|&n| n <= k).collect();
    c.dedup();
    c
}

/// The metrics of an evaluation judging `k` passages per question, in report order
/// (`keyword_coverage` only when some question has keywords).
pub fn registry(k: usize, has_keywords: bool) -> Vec<Metric> {
    let mut out: Vec<Metric> = Vec::new();
    for n in hit_cutoffs(k) {
        let placement = if n == k && n > 5 { Placement::Coverage } else { Placement::Main };
        let mut m = Metric::new(format!("hit@{n}"), format!("Hit@{n}"), placement, move |r: &QueryRow| hit_at(&r.scores.relevant, n));
        if n == 1 {
            m = m.with_delta();
        }
        if n == 1 || n == 5 {
            m = m.charted();
        }
        out.push(m);
    }
    out.push(Metric::new(format!("mrr@{k}"), format!("MRR@{k}"), Placement::Main, |r| r.scores.reciprocal_rank).with_delta().charted());
    out.push(Metric::new(format!("ndcg@{k}"), format!("nDCG@{k}"), Placement::Main, |r| r.scores.ndcg).charted());
    out.push(Metric::new(format!("recall@{k}"), format!("Recall@{k}"), Placement::Coverage, |r| r.scores.recall));
    if has_keywords {
        out.push(Metric::new(format!("keyword_coverage@{k}"), format!("Keyword coverage@{k}"), Placement::Coverage, |r| r.scores.keyword_coverage.unwrap_or(0.0)));
    }
    out.push(Metric::new("refusal_rate".into(), "Refusal rate".into(), Placement::Coverage, |r| if r.refused { 1.0 } else { 0.0 }).bare());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_k() {
        let names: Vec<String> = registry(10, false).into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["hit@1", "hit@3", "hit@5", "hit@10", "mrr@10", "ndcg@10", "recall@10", "refusal_rate"]);
        let names: Vec<String> = registry(3, true).into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["hit@1", "hit@3", "mrr@3", "ndcg@3", "recall@3", "keyword_coverage@3", "refusal_rate"]);
        assert_eq!(hit_cutoffs(5), vec![1, 3, 5]);
    }
}
