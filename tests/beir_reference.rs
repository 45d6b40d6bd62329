//! gauge's dense retrieval on BEIR SciFact equals sentence-transformers + pytrec_eval on the
//! same files: the CI subset recorded in tests/fixtures/scifact-st-reference.json (written by
//! `just beir-reference`: 60 test claims, 300 abstracts of ../shared/corpora/scifact) is
//! rebuilt as a BEIR folder, evaluated by `evaluate` as pipelines/scifact.toml's dense rows are
//! (each abstract one passage, "title, blank line, text" embedded at the model's own length
//! limit), and nDCG@10 and MRR@10 of all-MiniLM-L6-v2 and all-mpnet-base-v2 must be within
//! 0.002 of the reference's. The full-set figures are the recipe's (docs/src/results/scifact.md).
use std::collections::HashSet;
use std::path::PathBuf;

use gauge::pipeline::pipeline;
use gauge::{last_line, ok, run, shared};
use gauge_core::table::{read_parquet_any, Columns};
use serde_json::{json, Value};

fn mean_of(dir: &std::path::Path, config: &str, column: &str) -> f64 {
    let pq = read_parquet_any(&dir.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let (configs, values) = (c.strings_required("config"), c.f64s(column));
    let v: Vec<f64> = (0..pq.num_rows()).filter(|&i| configs[i] == config).map(|i| values[i].unwrap()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn dense_scifact_equals_sentence_transformers_and_pytrec_eval() {
    let root = gauge::repo_root();
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(root.join("tests/fixtures/scifact-st-reference.json")).unwrap()).unwrap();
    let scifact = shared().join("corpora/scifact");
    // ../shared/corpora/scifact/SHA256SUMS pins the files the reference read.
    let corpus_text = std::fs::read_to_string(scifact.join("corpus.jsonl")).unwrap();
    let docs: HashSet<&str> = reference["subset"]["doc_ids"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    let queries: HashSet<&str> = reference["subset"]["query_ids"].as_array().unwrap().iter().map(|q| q.as_str().unwrap()).collect();
    assert_eq!((docs.len(), queries.len()), (300, 60));

    let tmp = tempfile::tempdir().unwrap();
    let beir = tmp.path().join("scifact-subset");
    std::fs::create_dir_all(beir.join("qrels")).unwrap();
    let corpus: String = corpus_text.lines().filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| docs.contains(v["_id"].as_str().unwrap_or("")))).map(|l| format!("{l}\n")).collect();
    assert_eq!(corpus.lines().count(), 300);
    std::fs::write(beir.join("corpus.jsonl"), corpus).unwrap();
    std::fs::copy(scifact.join("queries.jsonl"), beir.join("queries.jsonl")).unwrap();
    let qrels = std::fs::read_to_string(scifact.join("qrels/test.tsv")).unwrap();
    let kept: String = qrels.lines().filter(|l| l.starts_with("query-id") || queries.contains(l.split('\t').next().unwrap_or(""))).map(|l| format!("{l}\n")).collect();
    std::fs::write(beir.join("qrels/test.tsv"), kept).unwrap();

    let stages = json!({
        "extract": { "jsonl": { "id": "_id", "title": "title", "text": "text" } },
        "chunk": { "strategy": "page", "contextual_header": true, "filters": { "min_chars": 0, "toc": false, "duplicates": false } },
        "embed": { "model": "sentence-transformers/all-MiniLM-L6-v2" },
        "index": { "faiss": "Flat" },
        "retrieval": { "dense": true, "bm25": false, "candidates": 100, "promote_exact": false, "k": 10 },
    });
    let mut base = stages.clone();
    base["name"] = json!("Vector (MiniLM)");
    let p = pipeline("scifact-subset")
        .set("corpus", json!("scifact-subset/corpus.jsonl"))
        .set("golden", json!("scifact-subset"))
        .set("relevance", json!("page"))
        .baseline(base)
        .variant(json!({ "name": "Vector (MPNet)", "embed": { "model": "sentence-transformers/all-mpnet-base-v2" } }))
        .write(&tmp.path().join("scifact-subset.toml"));
    let out = ok(run("evaluate", &[p.to_str().unwrap(), "--artifacts", tmp.path().join("artifacts").to_str().unwrap(), "--eval-dir", tmp.path().join("eval").to_str().unwrap()]));
    let dir = PathBuf::from(last_line(&out));
    for (config, model) in [("Vector (MiniLM)", "all-MiniLM-L6-v2"), ("Vector (MPNet)", "all-mpnet-base-v2")] {
        let want = &reference["models"][model]["subset"];
        assert_eq!(want["queries"], 60);
        for (column, key) in [("ndcg_10", "ndcg@10"), ("reciprocal_rank", "mrr@10")] {
            let (ours, theirs) = (mean_of(&dir, config, column), want[key].as_f64().unwrap());
            eprintln!("{config} {key}: gauge {ours:.4}, sentence-transformers + pytrec_eval {theirs:.4}");
            assert!((ours - theirs).abs() <= 0.002, "{config} {key}: gauge {ours:.4} vs sentence-transformers + pytrec_eval {theirs:.4}");
        }
    }
    // The benchmark folder's questions are people's: the manifest and ablation.md say so.
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["question_provenance"]["written_by"], json!(["human"]));
    assert!(std::fs::read_to_string(dir.join("ablation.md")).unwrap().contains("Questions written by people, judged by people"));
}
