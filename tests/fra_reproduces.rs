//! A fresh clone reproduces what is committed: `evaluate pipelines/fra.toml` from nothing (an
//! empty artifacts folder, so every page, chunk, vector and index is rebuilt) writes
//! `eval/fra` again — every TREC run and qrels file byte for byte, `runs.parquet` whole, every
//! metric and per-question value except the latency figures, and `ablation.md` except its
//! latency table. Latency is the only number allowed to change between runs.
//!
//! The same holds between machines: the encoder sums every output of its matrix products in
//! one order on every CPU (`gauge_encoder::matmul`: k in order, one FMA per step, on the AVX2
//! body and the portable one alike) and pools and normalises in plain loops, so the vectors are
//! the same bits on an AVX2 machine, an AVX-512 one or one without either. The manifest's index
//! fingerprints hash the embeddings' bytes: they are checked first, so a change that makes the
//! vectors depend on the CPU again is named as such.
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
    assert!(
        want == got,
        "this machine's embeddings differ in their bytes from those eval/fra was made with (index fingerprints {:?} vs committed {:?}): \
         the encoder's vectors must not depend on the CPU (see gauge_encoder::matmul); if the model or the chunking changed on purpose, \
         regenerate eval/fra with `just ablate`",
        got.values().collect::<BTreeSet<_>>(),
        want.values().collect::<BTreeSet<_>>()
    );
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
