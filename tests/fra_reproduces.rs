//! A fresh clone reproduces what is committed: `evaluate pipelines/fra.toml` from nothing (an
//! empty artifacts folder, so every page, chunk, vector and index is rebuilt) writes
//! `eval/fra` again — every TREC run and qrels file byte for byte, `runs.parquet` whole, every
//! metric and per-question value except the latency figures, and `ablation.md` except its
//! latency table. Latency is the only number allowed to change between runs.
//!
//! Between machines one more thing may change: the vectors. The encoder's matrix products
//! (the `gemm` crate) pick their SIMD kernels and cache blocking from the CPU, so an AVX2-only
//! machine and an AVX-512 one sum in different orders and write embeddings that differ in the
//! last bits. The index fingerprints in the manifest hash the embeddings' bytes, so the test
//! knows: where they equal the committed ones, everything must be byte for byte; where they do
//! not, it says so and checks what float noise cannot excuse (the BM25 run and every qrels file
//! byte for byte, the same questions and passages retrieved, metrics within one question).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use arrow::util::display::{ArrayFormatter, FormatOptions};
use gauge::{last_line, ok, repo_root};
use gauge_core::table::read_parquet_any;

/// Each row as text, the `skip` columns left out, rows failing `keep` dropped.
fn rows(path: &Path, skip: &[&str], keep: &dyn Fn(&[String], &[String]) -> bool) -> Vec<String> {
    let batch = read_parquet_any(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema = batch.schema();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let opts = FormatOptions::default().with_null("null");
    let formatters: Vec<ArrayFormatter> = batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap()).collect();
    (0..batch.num_rows())
        .filter_map(|i| {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(i).to_string()).collect();
            keep(&names, &cells).then(|| names.iter().zip(&cells).filter(|(n, _)| !skip.contains(&n.as_str())).map(|(n, c)| format!("{n}={c}")).collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// `ablation.md` without the coverage/latency table (its rows carry the latency columns).
fn without_latency_table(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            in_table = line.starts_with("## Coverage, refusals, latency");
        }
        if !(in_table && line.starts_with('|')) {
            out.push(line);
        }
    }
    out.join("\n")
}

#[test]
fn a_fresh_evaluation_rewrites_eval_fra_as_committed() {
    let root = repo_root();
    let committed = root.join("eval/fra");
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let eval = tmp.path().join("eval");
    // From the repository root with the relative pipeline path, as `just ablate` runs it (the
    // report names the golden set by the path the pipeline resolves).
    let out = std::process::Command::new(gauge::bin("evaluate")).current_dir(&root).args(["pipelines/fra.toml", "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()]).output().unwrap();
    let out = ok(out);
    let fresh = PathBuf::from(last_line(&out));

    let mut trec: Vec<String> = std::fs::read_dir(committed.join("trec")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    trec.sort();
    let mut fresh_trec: Vec<String> = std::fs::read_dir(fresh.join("trec")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    fresh_trec.sort();
    assert_eq!(trec, fresh_trec, "the TREC files differ in name: the configs changed");
    let (want, got) = (index_inputs(&committed), index_inputs(&fresh));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "the configs' index inputs differ in name");
    if want != got {
        eprintln!(
            "this machine's embeddings differ in their bytes from those eval/fra was made with (index fingerprints {:?} vs committed {:?}): \
             its f32 kernels sum in another order; checking the result within float noise instead of byte for byte",
            got.values().collect::<BTreeSet<_>>(),
            want.values().collect::<BTreeSet<_>>()
        );
        within_float_noise(&committed, &fresh, &trec);
        return;
    }
    for f in &trec {
        assert!(std::fs::read(committed.join("trec").join(f)).unwrap() == std::fs::read(fresh.join("trec").join(f)).unwrap(), "trec/{f} differs from the committed file");
    }
    let all = |_: &[String], _: &[String]| true;
    assert_eq!(rows(&committed.join("runs.parquet"), &[], &all), rows(&fresh.join("runs.parquet"), &[], &all), "runs.parquet differs");
    let not_latency = |names: &[String], cells: &[String]| names.iter().zip(cells).all(|(n, c)| n != "metric" || !c.starts_with("latency"));
    let (a, b) = (rows(&committed.join("metrics.parquet"), &[], &not_latency), rows(&fresh.join("metrics.parquet"), &[], &not_latency));
    assert!(a.len() > 100, "{} metric rows", a.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "metrics.parquet differs");
    }
    assert_eq!(a.len(), b.len());
    let skip = ["latency_ms", "cold_latency_ms"];
    assert_eq!(rows(&committed.join("per_query.parquet"), &skip, &all), rows(&fresh.join("per_query.parquet"), &skip, &all), "per_query.parquet differs");
    let md = |d: &Path| without_latency_table(&std::fs::read_to_string(d.join("ablation.md")).unwrap());
    assert_eq!(md(&committed), md(&fresh), "ablation.md differs outside its latency table");
}

/// The `index:<config>` inputs of an evaluation's manifest: config → index fingerprint (which
/// hashes the embeddings' bytes).
fn index_inputs(dir: &Path) -> BTreeMap<String, String> {
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    m["inputs"].as_array().unwrap().iter().filter(|i| i["name"].as_str().unwrap().starts_with("index:")).map(|i| (i["name"].as_str().unwrap().to_string(), i["hash"].as_str().unwrap().to_string())).collect()
}

/// A TREC run: question → its passages in rank order, with their scores.
fn run_lists(path: &Path) -> BTreeMap<String, Vec<(String, f64)>> {
    let mut out: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 6, "{}: not a TREC run line: {line}", path.display());
        out.entry(f[0].to_string()).or_default().push((f[2].to_string(), f[4].parse().unwrap()));
    }
    out
}

/// The committed result against a fresh one made with vectors that differ in their last bits.
fn within_float_noise(committed: &Path, fresh: &Path, trec: &[String]) {
    let mut same_place = 0usize;
    let mut places = 0usize;
    for f in trec {
        let (a, b) = (committed.join("trec").join(f), fresh.join("trec").join(f));
        // Nothing of the qrels and of the BM25-only run depends on a vector.
        if f.ends_with(".qrels") || f.contains("-bm25.") {
            assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "trec/{f} differs from the committed file, and it does not depend on the vectors");
            continue;
        }
        let (want, got) = (run_lists(&a), run_lists(&b));
        assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "trec/{f}: other questions");
        for (q, w) in &want {
            let g = &got[q];
            // The same passages come back (a near-tie may swap two neighbours or trade the
            // last place); a passage in both has nearly the same score.
            let (ws, gs): (BTreeSet<&String>, BTreeSet<&String>) = (w.iter().map(|p| &p.0).collect(), g.iter().map(|p| &p.0).collect());
            assert!(ws.intersection(&gs).count() + 1 >= ws.len().max(gs.len()), "trec/{f} {q}: other passages retrieved:\n{w:?}\n{g:?}");
            for (p, s) in w {
                if let Some((_, t)) = g.iter().find(|x| &x.0 == p) {
                    assert!((s - t).abs() <= 1e-3 * (1.0 + s.abs()), "trec/{f} {q} {p}: score {t} vs committed {s}");
                }
            }
            places += w.len();
            same_place += w.iter().zip(g).filter(|(x, y)| x.0 == y.0).count();
        }
    }
    assert!(same_place * 100 >= places * 95, "only {same_place} of {places} ranked places hold the committed passage");
    // Metrics: every (config, metric) row still there, each mean within one question of 41.
    let metric_rows = |d: &Path| -> BTreeMap<(String, String, String), (f64, f64)> {
        let batch = read_parquet_any(&d.join("metrics.parquet")).unwrap();
        let opts = FormatOptions::default().with_null("null");
        let cols: Vec<ArrayFormatter> = ["config", "category", "metric", "n", "value"]
            .iter()
            .map(|n| ArrayFormatter::try_new(batch.column(batch.schema().index_of(n).unwrap()).as_ref(), &opts).unwrap())
            .collect();
        let cell = |c: usize, i: usize| cols[c].value(i).to_string();
        (0..batch.num_rows())
            .filter(|&i| !cell(2, i).starts_with("latency"))
            .filter_map(|i| Some(((cell(0, i), cell(1, i), cell(2, i)), (cell(3, i).parse::<f64>().ok()?, cell(4, i).parse::<f64>().ok()?))))
            .collect()
    };
    let (want, got) = (metric_rows(committed), metric_rows(fresh));
    assert!(want.len() > 100, "{} metric rows", want.len());
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "metrics.parquet: other rows");
    let mut moved = 0;
    for (k, (n, w)) in &want {
        let g = got[k].1;
        moved += usize::from(*w != g);
        // A swapped pair of neighbours moves a question's value by at most 1: allow two questions.
        assert!((w - g).abs() <= 2.0 / n.max(1.0) + 1e-9, "metrics.parquet {k:?}: {g} vs committed {w} (n {n})");
    }
    eprintln!("within float noise: {same_place} of {places} ranked places and {} of {} metric means as committed", want.len() - moved, want.len());
}
