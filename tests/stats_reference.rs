//! gauge's multiple-comparison corrections against statsmodels' `multipletests` (the reference
//! implementation researchers use), on seeded random families with ties, tiny and large p,
//! from 1 to 60 comparisons. `just test` installs statsmodels (`just refs-venv`).
use std::path::PathBuf;
use std::process::{Command, Stdio};

use gauge_evaluate::stats::{adjust, Correction, SplitMix64};

fn python() -> PathBuf {
    gauge::refs_python()
}

#[test]
fn holm_and_benjamini_hochberg_match_statsmodels() {
    let mut rng = SplitMix64::new(2026);
    let mut families: Vec<Vec<f64>> = vec![vec![0.01, 0.04, 0.03, 0.005, 0.20, 0.04], vec![0.5], vec![1.0, 1.0, 0.0005]];
    for _ in 0..40 {
        let m = 1 + rng.below(60);
        let fam: Vec<f64> = (0..m)
            .map(|_| match rng.below(4) {
                // Sign-flip p-values come on a grid of (extreme + 1) / 2001: ties are common.
                0 => (1 + rng.below(40)) as f64 / 2001.0,
                1 => (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64,
                2 => 0.0005 * (1 + rng.below(3)) as f64,
                _ => 0.05,
            })
            .collect();
        families.push(fam);
    }
    let script = "import json,sys\nfrom statsmodels.stats.multitest import multipletests\nfams=json.load(sys.stdin)\nprint(json.dumps([[list(multipletests(f, method=m)[1]) for m in ('holm','fdr_bh')] for f in fams]))\n";
    let mut child = Command::new(python()).arg("-c").arg(script).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), &families).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "statsmodels failed: {}", String::from_utf8_lossy(&out.stderr));
    let want: Vec<Vec<Vec<f64>>> = serde_json::from_slice(&out.stdout).unwrap();
    for (fam, refs) in families.iter().zip(&want) {
        for (method, reference) in [Correction::Holm, Correction::Bh].into_iter().zip(refs) {
            let got = adjust(fam, method);
            for (i, (g, r)) in got.iter().zip(reference).enumerate() {
                assert!((g - r).abs() < 1e-12, "{method:?} on {fam:?}: p[{i}] {g} (gauge) vs {r} (statsmodels)");
            }
        }
    }
}
