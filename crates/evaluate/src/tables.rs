//! The tables every evaluation computes from its per-question rows — shared with
//! `evaluate --verify`, which recomputes them from a folder's Parquet files: per config and
//! category the metrics with seeded bootstrap intervals and paired differences against the
//! baseline, the `compare_to` comparisons, the correction of each family of comparisons, and
//! the golden set's minimum detectable effects.
use std::collections::BTreeSet;

use crate::metric::Metric;
use crate::rows::{MetricRow, QueryRow};
use crate::stats::{bootstrap_ci, mean, paired_comparison, percentile, PairedComparison};

/// A paired comparison of one config with the config it names in `compare_to`: (config, other,
/// metric label, comparison).
pub type NamedComparison = (String, String, String, PairedComparison);

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

/// The per-question differences `config − other` on `metric` (category `all`, questions in id
/// order); `None` when either config lacks rows for the same questions.
pub fn paired_differences(rows: &[QueryRow], config: &str, other: &str, metric: &Metric) -> Option<Vec<f64>> {
    let (mine, theirs) = (rows_of(rows, config, "all"), rows_of(rows, other, "all"));
    (mine.len() == theirs.len() && !mine.is_empty()).then(|| mine.iter().zip(&theirs).map(|(a, b)| metric.value(a) - metric.value(b)).collect())
}

/// Paired differences of each config with a `compare_to` against that config, for the main
/// metrics that get a Δ column: (config, other, metric label, comparison). Both must have run.
pub fn named_comparisons(rows: &[QueryRow], pairs: &[(String, Option<String>)], evaluated: &[String], metrics: &[Metric], resamples: usize, seed: u64) -> Vec<NamedComparison> {
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
pub fn correct_retrieval_family(metrics: &mut [MetricRow], named: &mut [NamedComparison], registry: &[Metric], correction: crate::stats::Correction) -> usize {
    let primary: BTreeSet<&str> = registry.iter().filter(|m| m.delta_column).map(|m| m.name.as_str()).collect();
    let mut family: Vec<&mut PairedComparison> = metrics.iter_mut().filter(|m| m.category == "all" && primary.contains(m.metric.as_str())).filter_map(|m| m.delta.as_mut()).collect();
    family.extend(named.iter_mut().map(|(_, _, _, d)| d));
    set_adjusted(family, correction)
}

/// Adjusts the answer rows' deltas as one family (in place).
pub fn correct_answer_family(deltas: &mut [crate::answers::AnswerDelta], correction: crate::stats::Correction) {
    set_adjusted(deltas.iter_mut().map(|d| &mut d.comparison).collect(), correction);
}

fn set_adjusted(mut family: Vec<&mut PairedComparison>, correction: crate::stats::Correction) -> usize {
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
pub fn detectable_effects(rows: &[QueryRow], configs: &[String], registry: &[Metric]) -> Vec<(String, f64, usize, f64)> {
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


/// The retrieval tables of one evaluation, computed from its per-question rows.
pub struct RetrievalTables {
    /// The configs evaluated (not skipped), the baseline first.
    pub names: Vec<String>,
    /// The metric registry at the pipeline's judged depth.
    pub registry: Vec<Metric>,
    /// Per config and category, every metric; answer rows join later.
    pub metrics: Vec<MetricRow>,
    /// The `compare_to` comparisons.
    pub named: Vec<NamedComparison>,
    /// The retrieval family's size (for the correction's header).
    pub family_size: usize,
    /// The golden set's minimum detectable effects.
    pub power: Vec<(String, f64, usize, f64)>,
}

impl RetrievalTables {
    /// The tables of `rows` over the evaluated configs `names` (the baseline first).
    pub fn of(pipeline: &crate::pipeline::Pipeline, golden: &[gauge_core::golden::GoldenQuestion], rows: &[QueryRow], names: Vec<String>) -> RetrievalTables {
        let has_keywords = golden.iter().any(|q| !q.keywords.is_empty());
        let registry = crate::metric::registry(pipeline.judge_depth, has_keywords);
        let mut metrics = summarize(rows, &names, &names[0], &registry, pipeline.resamples, pipeline.seed);
        let pairs: Vec<(String, Option<String>)> = pipeline.variants.iter().map(|v| (v.name.clone(), v.compare_to.clone())).collect();
        let mut named = named_comparisons(rows, &pairs, &names, &registry, pipeline.resamples, pipeline.seed);
        let family_size = correct_retrieval_family(&mut metrics, &mut named, &registry, pipeline.stats.correction);
        let power = detectable_effects(rows, &names, &registry);
        RetrievalTables { names, registry, metrics, named, family_size, power }
    }
}
