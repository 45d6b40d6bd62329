//! Seeded bootstrap intervals and paired tests on per-question values.

pub use gauge_core::rng::SplitMix64;

/// Mean of values (0 for none).
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// The `p` quantile (nearest rank) of sorted, non-empty values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// 95 % percentile-bootstrap interval of the mean: `(low, high)`.
pub fn bootstrap_ci(values: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mut rng = SplitMix64::new(seed);
    let n = values.len();
    let mut means: Vec<f64> = (0..resamples).map(|_| (0..n).map(|_| values[rng.below(n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    (percentile(&means, 0.025), percentile(&means, 0.975))
}

/// A paired comparison of a variant against the baseline on the same questions.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PairedComparison {
    /// Mean of variant − baseline.
    pub delta: f64,
    /// 95 % paired-bootstrap interval of the delta.
    pub ci_low: f64,
    /// Upper end of the interval.
    pub ci_high: f64,
    /// Two-sided p-value of a paired randomisation (sign-flip) test.
    pub p_value: f64,
}

/// Compares per-question values of a variant with the baseline's (same question order).
pub fn paired_comparison(variant: &[f64], baseline: &[f64], resamples: usize, seed: u64) -> PairedComparison {
    assert_eq!(variant.len(), baseline.len(), "paired values need the same questions");
    let diffs: Vec<f64> = variant.iter().zip(baseline).map(|(a, b)| a - b).collect();
    let delta = mean(&diffs);
    let (ci_low, ci_high) = bootstrap_ci(&diffs, resamples, seed);
    let mut rng = SplitMix64::new(seed ^ 0x5A5A_5A5A);
    let observed = delta.abs();
    let mut extreme = 0usize;
    for _ in 0..resamples {
        let m = mean(&diffs.iter().map(|d| if rng.next_u64() & 1 == 0 { *d } else { -*d }).collect::<Vec<_>>());
        if m.abs() >= observed - 1e-12 {
            extreme += 1;
        }
    }
    PairedComparison { delta, ci_low, ci_high, p_value: (extreme + 1) as f64 / (resamples + 1) as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_mean() {
        let v: Vec<f64> = (0..41).map(|i| if i % 3 == 0 { 1.0 } else { 0.0 }).collect();
        let (lo, hi) = bootstrap_ci(&v, 1000, 7);
        assert!(lo < mean(&v) && mean(&v) < hi);
        assert_eq!(bootstrap_ci(&v, 1000, 7), (lo, hi));
        assert_eq!(bootstrap_ci(&[0.5; 10], 1000, 1), (0.5, 0.5));
    }

    #[test]
    fn paired_tests_find_real_differences_only() {
        let base: Vec<f64> = (0..40).map(|i| (i % 2) as f64).collect();
        let same = paired_comparison(&base, &base, 1000, 3);
        assert_eq!(same.delta, 0.0);
        assert!(same.p_value > 0.5);
        let better: Vec<f64> = base.iter().map(|_| 1.0).collect();
        let c = paired_comparison(&better, &base, 1000, 3);
        assert!((c.delta - 0.5).abs() < 1e-12);
        assert!(c.p_value < 0.01 && c.ci_low > 0.0, "{c:?}");
    }
}
