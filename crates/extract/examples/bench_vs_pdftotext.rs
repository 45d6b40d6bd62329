//! Extraction speed and quality against poppler's `pdftotext`: the gauge side of the
//! `bench-extract` harness (`scripts/bench-extract.sh`, `gauge-bench`; the reference side is
//! `scripts/bench_pdftotext.py`). Usage: `bench_vs_pdftotext side CORPUS_DIR [PASSES]`.
//!
//! Speed: pages per second of gauge's whole extract stage (parse, lay out, clean; all cores,
//! forced into a scratch artifact root), the median of PASSES timed passes (default 3) after a
//! warm-up pass. Quality (untimed): per page, the share of pdftotext's words (lower-cased
//! alphanumeric runs, NFKC) that gauge also produced, counted with multiplicity, with default
//! cleaning and with header/footer removal off. Prints `{"figures": {...}, "describe": {...}}`.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gauge_core::ArtifactStore;
use gauge_extract::{Extract, ExtractConfig};
use unicode_normalization::UnicodeNormalization;

fn words(text: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    let norm: String = text.nfkc().collect::<String>().to_lowercase();
    for w in norm.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        *out.entry(w.to_string()).or_default() += 1;
    }
    out
}

fn pdftotext_pages(path: &Path) -> Vec<String> {
    let out = Command::new("pdftotext").arg("-enc").arg("UTF-8").arg(path).arg("-").output().expect("pdftotext runs (apt-get install poppler-utils)");
    assert!(out.status.success(), "pdftotext failed on {}", path.display());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut pages: Vec<String> = text.split('\u{c}').map(str::to_string).collect();
    if pages.last().is_some_and(|p| p.trim().is_empty()) {
        pages.pop();
    }
    pages
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_vs_pdftotext side CORPUS_DIR [PASSES]";
    anyhow::ensure!(args.get(1).map(String::as_str) == Some("side") && (3..=4).contains(&args.len()), "{usage}");
    let corpus = PathBuf::from(&args[2]);
    let passes: usize = args.get(3).map_or(Ok(3), |s| s.parse())?;
    anyhow::ensure!(passes > 0, "PASSES must be at least 1: {usage}");
    let mut pdfs: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .map_err(|e| anyhow::anyhow!("{}: {e}", corpus.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pdf"))
        .collect();
    pdfs.sort();
    let scratch = tempfile::tempdir()?;
    let store = ArtifactStore::new(scratch.path());
    let inputs = vec![corpus.clone()];
    let mut seconds = Vec::new();
    let mut pages_dir = PathBuf::new();
    for pass in 0..=passes {
        let t = Instant::now();
        let out = gauge_core::stage::run::<Extract>(&store, &ExtractConfig::default(), &inputs, &Default::default(), true)?;
        if pass > 0 {
            seconds.push(t.elapsed().as_secs_f64());
        }
        pages_dir = out.dir;
    }
    let pages = gauge_core::schema::read_pages(&pages_dir.join("pages.parquet"))?;
    let poppler: HashMap<String, Vec<String>> = pdfs.iter().map(|f| (f.file_name().unwrap_or_default().to_string_lossy().to_string(), pdftotext_pages(f))).collect();
    let cleaned = quality(&pages, &poppler);
    let mut raw_config = ExtractConfig::default();
    raw_config.cleaning.headers_footers = false;
    let raw_dir = gauge_core::stage::run::<Extract>(&store, &raw_config, &inputs, &Default::default(), false)?.dir;
    let raw = quality(&gauge_core::schema::read_pages(&raw_dir.join("pages.parquet"))?, &poppler);
    let s = median(seconds);
    let figures: std::collections::BTreeMap<&str, f64> = [
        ("pages", pages.len() as f64),
        ("seconds", s),
        ("pages_per_s", pages.len() as f64 / s),
        ("pages_compared", cleaned.compared as f64),
        ("word_share_mean", cleaned.mean),
        ("word_share_median", cleaned.median),
        ("pages_below_0_95", cleaned.below as f64),
        ("headers_footers_kept_word_share_mean", raw.mean),
        ("headers_footers_kept_word_share_median", raw.median),
        ("headers_footers_kept_pages_below_0_95", raw.below as f64),
    ]
    .into_iter()
    .collect();
    let describe = serde_json::json!({ "passes": passes, "threads": std::thread::available_parallelism().map_or(1, |n| n.get()), "worst_pages": cleaned.worst, "headers_footers_kept_worst_pages": raw.worst });
    println!("{}", serde_json::json!({ "figures": figures, "describe": describe }));
    Ok(())
}

/// Word-level agreement with pdftotext over the pages with at least 5 of its words.
struct Quality {
    mean: f64,
    median: f64,
    below: usize,
    worst: Vec<serde_json::Value>,
    compared: usize,
}

fn quality(pages: &[gauge_core::schema::PageRecord], poppler: &HashMap<String, Vec<String>>) -> Quality {
    let mut shares: Vec<(f64, String, i32, usize)> = Vec::new();
    for p in pages {
        let Some(ref_pages) = poppler.get(&p.source) else { continue };
        let Some(reference) = ref_pages.get(p.page as usize - 1) else { continue };
        let want = words(reference);
        let total: usize = want.values().sum();
        if total < 5 {
            continue;
        }
        let have = words(&p.text);
        let found: usize = want.iter().map(|(w, n)| (*n).min(*have.get(w).unwrap_or(&0))).sum();
        shares.push((found as f64 / total as f64, p.source.clone(), p.page, total));
    }
    let mean = shares.iter().map(|s| s.0).sum::<f64>() / shares.len() as f64;
    let med = median(shares.iter().map(|s| s.0).collect());
    shares.sort_by(|a, b| a.0.total_cmp(&b.0));
    let worst = shares
        .iter()
        .take(5)
        .map(|(s, src, page, n)| serde_json::json!({"source": src, "page": page, "share": (s * 1e4).round() / 1e4, "pdftotext_words": n}))
        .collect();
    Quality { mean, median: med, below: shares.iter().filter(|s| s.0 < 0.95).count(), worst, compared: shares.len() }
}
