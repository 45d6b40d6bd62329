//! Reranking through `query` and `evaluate`: the cross-encoder fixture (random weights of a
//! real `BertForSequenceClassification`) and MaxSim late interaction over MiniLM, prefixes,
//! the cutoff on rerank scores, and configs skipped when their model is missing. Needs
//! `just models`.
use std::path::{Path, PathBuf};

use gauge::pipeline::{merged, pipeline, small_corpus_stages};
use gauge::{last_line, ok, repo_root, run, shared, write_markdown_corpus};
use serde_json::json;
use gauge_encoder::{CrossEncoder, CrossEncoderOptions, ModelSource};

const TOPICS: [(&str, &str); 6] = [
    ("gates", "Crossing gate arms must be fully lowered before the train reaches the crossing; the inspector records the gate descent time."),
    ("lights", "Flashing lights at a highway-rail grade crossing must be visible from the roadway approach and flash 35 to 65 times per minute."),
    ("tank", "A leaking tank car of hazardous materials may be moved only to the nearest place where repairs can be made, under a special permit."),
    ("bells", "Crossing bells sound while the warning system is active and may stop once the gate arms are down."),
    ("track", "Roadway workers need on-track safety before fouling a track; a job briefing names the form of protection."),
    ("fall", "A lanyard connects a body harness to an anchorage; a lifeline hangs from the anchorage and other fall-arrest parts attach to it."),
];

fn fixture() -> PathBuf {
    shared().join("fixtures/tiny-bert-cross-encoder")
}

fn minilm() -> PathBuf {
    let dir = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(dir.join("model.safetensors").is_file(), "{}: missing; run `just models`", dir.display());
    dir
}

/// A small Markdown corpus (one document per topic) indexed with MiniLM.
fn build(root: &Path) -> (PathBuf, String) {
    let corpus = write_markdown_corpus(root, &TOPICS);
    let art = root.join("artifacts");
    let a = art.to_str().unwrap();
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", a])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", a, "--strategy", "page", "--min-chars", "0"])));
    let emb = last_line(&ok(run("embed", &[&chunks, "--model", minilm().to_str().unwrap(), "--artifacts", a])));
    let index = last_line(&ok(run("index", &["--chunks", &chunks, "--embeddings", &emb, "--artifacts", a])));
    (corpus, index)
}

fn query(index: &str, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["--index", index, "--json"];
    full.extend_from_slice(args);
    serde_json::from_slice(&ok(run("query", &full)).stdout).unwrap()
}

fn stage<'a>(p: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    p["stages"].as_array().unwrap().iter().find(|s| s["stage"] == name)
}

#[test]
fn query_reranks_with_the_cross_encoder_and_maxsim() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = build(tmp.path());
    let fixture = fixture();
    let f = fixture.to_str().unwrap();
    let model = CrossEncoder::load(&ModelSource { id: "tiny".into(), dir: fixture.clone() }, &CrossEncoderOptions::default(), &gauge_encoder::device::cpu()).unwrap();
    let q = "when must crossing gate arms be lowered";
    for prefixes in [false, true] {
        let mut args = vec![q, "--rerank", f, "--n-initial", "6", "-k", "4"];
        if prefixes {
            args.push("--rerank-prefixes");
        }
        let r = query(&index, &args);
        let passages = r["passages"].as_array().unwrap();
        assert_eq!(passages.len(), 4);
        // Each passage carries its rerank rank and score; the final order is the rerank order,
        // and the scores are the cross-encoder's logits for exactly the texts the engine built.
        let texts: Vec<String> = passages.iter().map(|p| format!("{}{}", if prefixes { "Passage: " } else { "" }, p["text"].as_str().unwrap())).collect();
        let query_text = format!("{}{q}", if prefixes { "Query: " } else { "" });
        let want = model.score(&query_text, &texts.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        for (i, p) in passages.iter().enumerate() {
            let s = stage(p, "rerank").unwrap_or_else(|| panic!("no rerank stage: {p:#}"));
            assert_eq!(s["rank"], i + 1);
            assert!((s["score"].as_f64().unwrap() as f32 - want[i]).abs() < 1e-5, "prefixes {prefixes}: {} vs {}", s["score"], want[i]);
            assert_eq!(p["score"], s["score"]);
        }
        assert!(want.windows(2).all(|w| w[0] >= w[1]), "sorted by rerank score: {want:?}");
    }
    // The cutoff applies to rerank scores: the fixture's logits are near 0, so their sigmoid
    // is near 0.5, under a 0.9 cutoff.
    let refused = query(&index, &[q, "--rerank", f, "--sigmoid", "--cutoff", "0.9"]);
    assert_eq!(refused["passages"].as_array().unwrap().len(), 0);
    let best = refused["refusal"]["best"].as_f64().unwrap();
    assert!(best > 0.4 && best < 0.6, "{refused:#}");
    // MaxSim with the index's own model: the gate passage shares most query tokens.
    let r = query(&index, &[q, "--rerank-kind", "maxsim", "-k", "3"]);
    let top = &r["passages"][0];
    assert!(stage(top, "maxsim").is_some() && top["text"].as_str().unwrap().contains("gate arms"), "{r:#}");
    // A missing reranker is one clear line.
    let out = run("query", &["--index", &index, q, "--rerank", "nope/missing-reranker"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope/missing-reranker") && err.contains("not found") && err.trim().lines().count() == 1, "{err}");
}

#[test]
fn evaluate_runs_rerank_configs_and_skips_those_without_a_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, _) = build(tmp.path());
    // Keyword-mode questions, one per topic.
    let golden: Vec<String> = [
        ("q1", "When are gate arms lowered?", "gate arms"),
        ("q2", "How often do crossing lights flash?", "flash"),
        ("q3", "Can a leaking tank car be moved?", "special permit"),
        ("q4", "When may the bells stop?", "bells"),
        ("q5", "What must roadway workers have before fouling a track?", "on-track safety"),
        ("q6", "What is a lifeline?", "lifeline"),
    ]
    .iter()
    .map(|(id, q, k)| serde_json::json!({ "qid": id, "question": q, "keywords": [k] }).to_string())
    .collect();
    std::fs::write(tmp.path().join("golden.jsonl"), golden.join("\n")).unwrap();
    let (minilm, tiny) = (minilm().to_str().unwrap().to_string(), fixture().to_str().unwrap().to_string());
    let pipeline = pipeline("rr")
        .set("corpus", json!(corpus.to_str().unwrap()))
        .baseline(merged(small_corpus_stages(), json!({ "name": "Hybrid", "embed": { "model": minilm } })))
        .variant(json!({ "name": "+ tiny cross-encoder", "retrieval": { "rerank": { "model": tiny, "n_initial": 6, "top_n": 6 } } }))
        .variant(json!({ "name": "+ missing cross-encoder", "retrieval": { "rerank": { "model": "nope/missing-cross-encoder" } } }))
        .variant(json!({ "name": "+ MaxSim", "retrieval": { "rerank": { "kind": "max_sim", "model": minilm, "n_initial": 6 } } }))
        .write(&tmp.path().join("rr.toml"));
    let art = tmp.path().join("artifacts");
    let eval = tmp.path().join("eval");
    let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()]));
    let dir = PathBuf::from(last_line(&out));
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    assert!(md.contains("relevance: keyword"), "{md}");
    for row in ["| Hybrid (baseline) |", "| + tiny cross-encoder |", "| + MaxSim |"] {
        assert!(md.contains(row), "{row} missing:\n{md}");
    }
    assert!(!md.contains("| + missing cross-encoder |"));
    let skipped = md.split("## Skipped").nth(1).expect("a Skipped section");
    assert!(skipped.contains("+ missing cross-encoder") && skipped.contains("not found"), "{skipped}");
    // Every ranked passage of the rerank configs went through the reranker.
    let batch = gauge_core::table::read_parquet_any(&dir.join("runs.parquet")).unwrap();
    let c = gauge_core::table::Columns::new(&batch);
    let configs: std::collections::BTreeSet<String> = c.strings_required("config").into_iter().collect();
    assert_eq!(configs.into_iter().collect::<Vec<_>>(), ["+ MaxSim", "+ tiny cross-encoder", "Hybrid"]);
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["skipped"][0][0], "+ missing cross-encoder");
}
