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
    /// `p_value` adjusted for the comparisons of its family (Holm or Benjamini–Hochberg, see
    /// [`Correction`]); `None` outside a family or with `correction = "none"`.
    pub p_adjusted: Option<f64>,
}

impl PairedComparison {
    /// The p-value that decides significance: the adjusted one when there is one.
    pub fn decisive_p(&self) -> f64 {
        self.p_adjusted.unwrap_or(self.p_value)
    }

    /// Significant at 0.05 after the family's correction.
    pub fn significant(&self) -> bool {
        self.decisive_p() < 0.05
    }
}

/// How the p-values of a family of comparisons are adjusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Correction {
    /// Holm's step-down (controls the family-wise error rate; uniformly more powerful than
    /// Bonferroni).
    #[default]
    Holm,
    /// Benjamini–Hochberg's step-up (controls the false discovery rate).
    Bh,
    /// No adjustment.
    None,
}

impl Correction {
    /// The name printed in reports.
    pub fn label(self) -> &'static str {
        match self {
            Correction::Holm => "Holm",
            Correction::Bh => "Benjamini–Hochberg",
            Correction::None => "none",
        }
    }
}

/// Adjusted p-values, in the input order, as statsmodels' `multipletests` computes them
/// (`holm`, `fdr_bh`): Holm `max_{j≤i} min(1, (m−j+1)·p_(j))`, BH
/// `min_{j≥i} min(1, m·p_(j)/j)` over the sorted p-values. `None` returns them unchanged.
pub fn adjust(p: &[f64], correction: Correction) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let mut out = vec![0.0; m];
    match correction {
        Correction::None => return p.to_vec(),
        Correction::Holm => {
            let mut running: f64 = 0.0;
            for (j, &i) in order.iter().enumerate() {
                running = running.max(((m - j) as f64 * p[i]).min(1.0));
                out[i] = running;
            }
        }
        Correction::Bh => {
            let mut running: f64 = 1.0;
            for (j, &i) in order.iter().enumerate().rev() {
                running = running.min((m as f64 * p[i] / (j + 1) as f64).min(1.0));
                out[i] = running;
            }
        }
    }
    out
}

/// Wins, ties and losses of a variant against the baseline, question by question.
pub fn win_tie_loss(variant: &[f64], baseline: &[f64]) -> (usize, usize, usize) {
    variant.iter().zip(baseline).fold((0, 0, 0), |(w, t, l), (a, b)| {
        if (a - b).abs() <= 1e-12 {
            (w, t + 1, l)
        } else if a > b {
            (w + 1, t, l)
        } else {
            (w, t, l + 1)
        }
    })
}

/// Sample standard deviation (0 for fewer than two values).
pub fn std_dev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The smallest mean paired difference a two-sided test at level 0.05 detects with 80 %
/// power on `n` questions whose paired differences have standard deviation `sd` (normal
/// approximation: `(z_0.975 + z_0.8) · sd / √n`, 2.802 · sd / √n).
pub fn minimum_detectable_effect(sd: f64, n: usize) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    (1.959_964 + 0.841_621) * sd / (n as f64).sqrt()
}

/// The smallest mean paired difference a two-sided test at level `alpha` detects with 80 %
/// power on `n` questions whose paired differences have standard deviation `sd` (normal
/// approximation: `(z_{1−α/2} + z_0.8) · sd / √n`).
pub fn minimum_detectable_effect_at(sd: f64, n: usize, alpha: f64) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    (normal_quantile(1.0 - alpha / 2.0) + normal_quantile(0.8)) * sd / (n as f64).sqrt()
}

/// The power of a two-sided test at level `alpha` to detect a mean paired difference of
/// `effect` on `n` questions whose differences have standard deviation `sd` (normal
/// approximation: `Φ(effect · √n / sd − z_{1−α/2})`; NaN when `n` or `sd` is 0).
pub fn power_at(effect: f64, sd: f64, n: usize, alpha: f64) -> f64 {
    if n == 0 || sd <= 0.0 || !sd.is_finite() {
        return f64::NAN;
    }
    normal_cdf(effect.abs() * (n as f64).sqrt() / sd - normal_quantile(1.0 - alpha / 2.0))
}

/// The standard normal distribution function, `erfc(−x/√2) / 2` (Numerical Recipes' `erfcc`,
/// fractional error < 1.2e-7).
pub fn normal_cdf(x: f64) -> f64 {
    let z = (x / std::f64::consts::SQRT_2).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23 + t * (1.000_023_68 + t * (0.374_091_96 + t * (0.096_784_18 + t * (-0.186_288_06 + t * (0.278_868_07 + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 { 1.0 - 0.5 * erfc } else { 0.5 * erfc }
}

/// The standard normal distribution's quantile (Acklam's rational approximation, relative
/// error < 1.2e-9), for 0 < p < 1.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
    const B: [f64; 5] = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    let tail = |q: f64| (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5]) / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0);
    if p <= 0.0 || p >= 1.0 {
        return if p <= 0.0 { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
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
    PairedComparison { delta, ci_low, ci_high, p_value: (extreme + 1) as f64 / (resamples + 1) as f64, p_adjusted: None }
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

    #[test]
    fn adjustments_match_statsmodels_multipletests() {
        // statsmodels.stats.multitest.multipletests(p, method="holm" / "fdr_bh")[1].
        let p = [0.01, 0.04, 0.03, 0.005, 0.20, 0.04];
        let holm = adjust(&p, Correction::Holm);
        let want_holm = [0.05, 0.12, 0.12, 0.03, 0.20, 0.12];
        let bh = adjust(&p, Correction::Bh);
        let want_bh = [0.03, 0.048, 0.048, 0.03, 0.20, 0.048];
        for i in 0..p.len() {
            assert!((holm[i] - want_holm[i]).abs() < 1e-12, "holm {holm:?}");
            assert!((bh[i] - want_bh[i]).abs() < 1e-12, "bh {bh:?}");
        }
        assert_eq!(adjust(&p, Correction::None), p.to_vec());
        assert!(adjust(&[], Correction::Holm).is_empty());
        assert_eq!(adjust(&[0.6, 0.9], Correction::Holm), vec![1.0, 1.0], "capped at 1");
    }

    #[test]
    fn wins_ties_losses_and_the_detectable_effect() {
        assert_eq!(win_tie_loss(&[1.0, 0.5, 0.0, 0.2], &[0.0, 0.5, 1.0, 0.1]), (2, 1, 1));
        let mde = minimum_detectable_effect(0.5, 41);
        assert!((mde - 0.2188).abs() < 1e-3, "{mde}");
        assert!((std_dev(&[1.0, 0.0, 1.0, 0.0]) - 0.57735).abs() < 1e-4);
        // scipy.stats.norm.ppf at 0.975, 0.8, 0.995, 1e-4 (both tails and the centre).
        for (p, z) in [(0.975, 1.959963984540054), (0.8, 0.8416212335729143), (0.995, 2.5758293035489004), (1e-4, -3.719016485455709), (0.5, 0.0)] {
            assert!((normal_quantile(p) - z).abs() < 1e-8, "{p}: {}", normal_quantile(p));
        }
        assert!((minimum_detectable_effect_at(0.5, 41, 0.05) - mde).abs() < 1e-4, "α 0.05 is the plain MDE");
        assert!(minimum_detectable_effect_at(0.5, 41, 0.01) > mde);
    }

    #[test]
    fn power_by_hand() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
        assert!((normal_cdf(-1.0) - 0.158_655_25).abs() < 1e-6);
        // At the MDE the power is 80 % by construction.
        let mde = minimum_detectable_effect_at(0.3, 41, 0.05 / 6.0);
        assert!((power_at(mde, 0.3, 41, 0.05 / 6.0) - 0.8).abs() < 1e-6);
        // sd 0.296, n 165, α 0.05: 0.04 · √165 / 0.296 − 1.96 = −0.224 → 41 %.
        assert!((power_at(0.04, 0.296, 165, 0.05) - 0.411).abs() < 0.002, "{}", power_at(0.04, 0.296, 165, 0.05));
        assert!(power_at(0.04, 0.0, 10, 0.05).is_nan() && power_at(0.04, 0.3, 0, 0.05).is_nan());
    }
}
