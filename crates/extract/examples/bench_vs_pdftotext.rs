//! Extraction speed and quality against poppler's `pdftotext`, on the same machine in the
//! same run. Usage: `bench_vs_pdftotext CORPUS_DIR OUT_JSON`.
//!
//! Speed: pages per second for gauge's whole extract pipeline (parse, lay out, clean; all
//! cores) and for `pdftotext` (one process per file, as many at a time as there are cores).
//! Quality: per page, the share of pdftotext's words (lower-cased alphanumeric runs, NFKC)
//! that gauge also produced, counted with multiplicity; mean, median and worst pages.
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
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let corpus = PathBuf::from(args.get(1).expect("usage: bench_vs_pdftotext CORPUS_DIR OUT_JSON"));
    let out_path = PathBuf::from(args.get(2).expect("usage: bench_vs_pdftotext CORPUS_DIR OUT_JSON"));
    let mut pdfs: Vec<PathBuf> = std::fs::read_dir(&corpus).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "pdf")).collect();
    pdfs.sort();
    let reps = 3;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);

    // gauge: the whole stage (forced, into a scratch artifact root), best and median of reps.
    let scratch = tempfile_dir();
    let mut gauge_times = Vec::new();
    let mut pages_dir = PathBuf::new();
    for _ in 0..reps {
        let t = Instant::now();
        let out = gauge_core::stage::run::<Extract>(&ArtifactStore::new(&scratch), &ExtractConfig::default(), &vec![corpus.clone()], &Default::default(), true).unwrap();
        gauge_times.push(t.elapsed().as_secs_f64());
        pages_dir = out.dir;
    }
    let pages = gauge_core::schema::read_pages(&pages_dir.join("pages.parquet")).unwrap();
    let n_pages = pages.len();

    // pdftotext: one process per file, `cores` at a time.
    let mut poppler_times = Vec::new();
    let mut poppler: HashMap<String, Vec<String>> = HashMap::new();
    for _ in 0..reps {
        let t = Instant::now();
        let results: Vec<(String, Vec<String>)> = std::thread::scope(|s| {
            let chunks: Vec<Vec<PathBuf>> = (0..cores).map(|i| pdfs.iter().skip(i).step_by(cores).cloned().collect()).collect();
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|files| s.spawn(move || files.iter().map(|f| (f.file_name().unwrap().to_string_lossy().to_string(), pdftotext_pages(f))).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        poppler_times.push(t.elapsed().as_secs_f64());
        poppler = results.into_iter().collect();
    }

    // Quality per page, with default cleaning and with header/footer removal off.
    let (mean, med, below, worst, compared) = quality(&pages, &poppler);
    let mut raw_config = ExtractConfig::default();
    raw_config.cleaning.headers_footers = false;
    let raw_dir = gauge_core::stage::run::<Extract>(&ArtifactStore::new(&scratch), &raw_config, &vec![corpus.clone()], &Default::default(), false).unwrap().dir;
    let raw_pages = gauge_core::schema::read_pages(&raw_dir.join("pages.parquet")).unwrap();
    let (raw_mean, raw_med, raw_below, raw_worst, _) = quality(&raw_pages, &poppler);
    let g = median(gauge_times.clone());
    let pt = median(poppler_times.clone());
    let result = serde_json::json!({
        "corpus": corpus.file_name().unwrap().to_string_lossy(),
        "pages": n_pages,
        "cores": cores,
        "repetitions": reps,
        "gauge_seconds_median": g,
        "pdftotext_seconds_median": pt,
        "gauge_pages_per_second": n_pages as f64 / g,
        "pdftotext_pages_per_second": n_pages as f64 / pt,
        "speed_ratio_gauge_over_pdftotext": pt / g,
        "pages_compared": compared,
        "default_cleaning": {"word_share_mean": mean, "word_share_median": med, "pages_below_0_95": below, "worst_pages": worst},
        "headers_footers_kept": {"word_share_mean": raw_mean, "word_share_median": raw_med, "pages_below_0_95": raw_below, "worst_pages": raw_worst},
        "note": "word share = share of pdftotext's words per page that gauge also produced; default cleaning removes running headers/footers and page labels that pdftotext keeps",
    });
    let text = serde_json::to_string_pretty(&result).unwrap();
    if let Some(parent) = out_path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&out_path, text.clone() + "\n").unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    println!("{text}");
}

type Quality = (f64, f64, usize, Vec<serde_json::Value>, usize);

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
    (mean, med, shares.iter().filter(|s| s.0 < 0.95).count(), worst, shares.len())
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gauge-bench-extract-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
