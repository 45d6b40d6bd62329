//! `index` and `query` end to end: exact identifiers, filters, the model check. Needs `just models`.
use std::path::Path;

use gauge::{last_line, ok, repo_root, run, shared};

fn minilm() -> String {
    let dir = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(dir.join("model.safetensors").is_file(), "{}: missing; run `just models`", dir.display());
    dir.to_string_lossy().to_string()
}

/// extract → chunk → embed → index over `input`; returns the index directory.
fn build_index(input: &Path, art: &str, chunk_args: &[&str]) -> String {
    let pages = last_line(&ok(run("extract", &[input.to_str().unwrap(), "--artifacts", art])));
    let mut args = vec![pages.as_str(), "--artifacts", art];
    args.extend_from_slice(chunk_args);
    let chunks = last_line(&ok(run("chunk", &args)));
    let emb = last_line(&ok(run("embed", &[&chunks, "--model", &minilm(), "--artifacts", art])));
    let out = ok(run("index", &["--chunks", &chunks, "--embeddings", &emb, "--artifacts", art]));
    let dir = last_line(&out);
    let again = ok(run("index", &["--chunks", &chunks, "--embeddings", &emb, "--artifacts", art]));
    assert_eq!(last_line(&again), dir);
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));
    dir
}

fn query(index: &str, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["--index", index, "--json"];
    full.extend_from_slice(args);
    let out = ok(run("query", &full));
    serde_json::from_slice(&out.stdout).expect("query --json prints JSON")
}

#[test]
fn hybrid_retrieval_finds_the_exact_report_id_among_look_alikes() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("reports");
    std::fs::create_dir_all(&input).unwrap();
    let ids = ["ERA22LA157", "ERA22LA176", "ERA21LA175", "CEN22LA175", "ERA22LA175", "WPR22LA175", "ERA23LA175"];
    for (i, id) in ids.iter().enumerate() {
        let text = format!(
            "# Report {id}\n\nAccident report {id}. The pilot reported a loss of engine power during cruise flight and \
             performed a forced landing in a field; the airplane sustained substantial damage to the wings. Case {i}.\n"
        );
        std::fs::write(input.join(format!("{id}.md")), text).unwrap();
    }
    let art = tmp.path().join("artifacts");
    let index = build_index(&input, art.to_str().unwrap(), &["--strategy", "page", "--min-chars", "0"]);
    let hybrid = query(&index, &["What happened in ERA22LA175?", "-k", "3"]);
    let top = &hybrid["passages"][0];
    assert!(top["text"].as_str().unwrap().contains("ERA22LA175"), "{hybrid:#}");
    let stages: Vec<&str> = top["stages"].as_array().unwrap().iter().map(|s| s["stage"].as_str().unwrap()).collect();
    assert!(stages.contains(&"dense") && stages.contains(&"bm25") && stages.contains(&"exact"), "hybrid keeps every stage's rank: {top:#}");
    // Reciprocal rank fusion alone (no exact-identifier promotion) already puts it first.
    let rrf_only = query(&index, &["What happened in ERA22LA175?", "-k", "3", "--no-exact"]);
    assert!(rrf_only["passages"][0]["text"].as_str().unwrap().contains("ERA22LA175"), "{rrf_only:#}");
    let bm25 = query(&index, &["ERA22LA175", "--no-dense", "-k", "1"]);
    assert!(bm25["passages"][0]["text"].as_str().unwrap().contains("ERA22LA175"));

    // A cutoff above every score refuses with the reason instead of returning noise.
    let refused = query(&index, &["What happened in ERA22LA175?", "--cutoff", "5"]);
    assert_eq!(refused["passages"].as_array().unwrap().len(), 0);
    assert_eq!(refused["refusal"]["threshold"], 5.0);

    // faiss query-time parameters are checked against the index type.
    let out = run("query", &["--index", &index, "ERA22LA175", "--nprobe", "4"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nprobe applies to IVF indexes; this index is `Flat`"));

    // GPU devices in a CPU build are one-line errors naming the feature that provides them.
    let out = run("query", &["--index", &index, "ERA22LA175", "--faiss-device", "cuda"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--features faiss-gpu"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run("query", &["--index", &index, "ERA22LA175", "--device", "cuda:0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--features cuda"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run("query", &["--index", &index, "ERA22LA175", "--faiss-device", "tpu"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown faiss device `tpu`"), "{}", String::from_utf8_lossy(&out.stderr));

    // An empty question is a one-line error, not ten arbitrary passages.
    for empty in ["", "   "] {
        let out = run("query", &["--index", &index, empty]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("question is empty") && err.trim().lines().count() == 1, "{err}");
    }
    // The config language: --set and a config file set retrieval fields like the flags do.
    let two = query(&index, &["ERA22LA175", "--set", "k=2"]);
    assert_eq!(two["passages"].as_array().unwrap().len(), 2);
    let cfg = tmp.path().join("retrieval.toml");
    std::fs::write(&cfg, "k = 4\ndense = false\nfusion = { kind = \"none\" }\n").unwrap();
    let from_file = query(&index, &["ERA22LA175", "--config", cfg.to_str().unwrap()]);
    assert_eq!(from_file["passages"].as_array().unwrap().len(), 4);
    assert_eq!(from_file["config"]["dense"], false);
    // Flags come after the file.
    let flagged = query(&index, &["ERA22LA175", "--config", cfg.to_str().unwrap(), "-k", "1"]);
    assert_eq!(flagged["passages"].as_array().unwrap().len(), 1);
    let out = run("query", &["--index", &index, "ERA22LA175", "--set", "fusion.kind=bogus"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--set fusion.kind=bogus") && err.contains("bogus"), "{err}");

    // The index refuses a query embedder of another dimension.
    let fake = tmp.path().join("fake-index");
    std::fs::create_dir_all(&fake).unwrap();
    for entry in std::fs::read_dir(&index).unwrap().flatten() {
        std::os::unix::fs::symlink(entry.path(), fake.join(entry.file_name())).unwrap();
    }
    std::fs::remove_file(fake.join("manifest.json")).unwrap();
    let manifest = std::fs::read_to_string(Path::new(&index).join("manifest.json")).unwrap().replace("\"dimension\": 384", "\"dimension\": 768");
    std::fs::write(fake.join("manifest.json"), manifest).unwrap();
    let out = run("query", &["--index", fake.to_str().unwrap(), "anything"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dimension 768") && err.contains("dimension 384"), "{err}");

    // BM25-only queries load no model: an index whose model is gone still answers them, and a
    // dense query names the missing model.
    let gone = tmp.path().join("gone-model-index");
    std::fs::create_dir_all(&gone).unwrap();
    for entry in std::fs::read_dir(&index).unwrap().flatten() {
        if entry.file_name() != "manifest.json" {
            std::os::unix::fs::symlink(entry.path(), gone.join(entry.file_name())).unwrap();
        }
    }
    let manifest = std::fs::read_to_string(Path::new(&index).join("manifest.json")).unwrap().replace(&minilm(), "/nonexistent/minilm");
    std::fs::write(gone.join("manifest.json"), manifest).unwrap();
    let bm25 = query(gone.to_str().unwrap(), &["ERA22LA175", "--no-dense", "-k", "1"]);
    assert_eq!(bm25["passages"].as_array().unwrap().len(), 1);
    let out = run("query", &["--index", gone.to_str().unwrap(), "ERA22LA175"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("/nonexistent/minilm") && err.contains("query embedder"), "{err}");
}

#[test]
fn fra_rule_numbers_and_source_filters() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let index = build_index(&shared().join("corpora/fra"), art.to_str().unwrap(), &["--size", "1000", "--overlap", "150"]);
    for args in [&["§ 174.63", "--no-dense", "-k", "1"][..], &["§ 174.63", "-k", "1"][..]] {
        let r = query(&index, args);
        assert!(r["passages"][0]["text"].as_str().unwrap().contains("174.63"), "{args:?}: {r:#}");
    }
    // A source filter never starves the list: k results whenever the source has k chunks.
    let hrgc = "FRA-HRGC-Compliance Manual 11-8-19 Final.pdf";
    for fusion in ["rrf", "union", "weighted", "none"] {
        let r = query(&index, &["hazardous materials tank car placards", "--source", hrgc, "-k", "10", "--fusion", fusion]);
        let passages = r["passages"].as_array().unwrap();
        assert_eq!(passages.len(), 10, "{fusion}");
        assert!(passages.iter().all(|p| p["source"] == hrgc), "{fusion}");
    }
    // Per-document dedup and small-to-big windows.
    let r = query(&index, &["grade crossing warning time", "--max-per-doc", "1", "-k", "4"]);
    let passages = r["passages"].as_array().unwrap();
    let sources: std::collections::HashSet<&str> = passages.iter().map(|p| p["source"].as_str().unwrap()).collect();
    assert_eq!(sources.len(), passages.len(), "one passage per document");
    assert!(passages.len() >= 2);
    let r = query(&index, &["grade crossing warning time", "--window", "1", "-k", "3"]);
    let w = &r["passages"][0]["window"];
    assert!(w["chunk_ids"].as_array().unwrap().len() >= 2, "{w:#}");
}

/// A retriever from outside the engine: a fixed list, as an API retriever would return.
struct FixedRetriever(Vec<String>);

impl gauge_engine::Retriever for FixedRetriever {
    fn name(&self) -> &str {
        "fixed"
    }
    fn enabled(&self, _cfg: &gauge_engine::RetrievalConfig) -> bool {
        true
    }
    fn retrieve(&self, _query: &str, cfg: &gauge_engine::RetrievalConfig, table: &gauge_engine::ChunkTable) -> anyhow::Result<gauge_rank::RankedList> {
        let hits = self.0.iter().filter(|id| table.get(id).is_some_and(|c| cfg.filter.accepts(c))).map(|id| (id.clone(), 1.0)).collect();
        Ok(gauge_rank::RankedList { stage: "fixed".into(), hits })
    }
}

#[test]
fn a_third_retriever_is_fused_without_touching_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs");
    std::fs::create_dir_all(&input).unwrap();
    for (name, text) in [("gates", "Gate arms must be lowered before the train arrives."), ("lights", "Crossing lights flash alternately at 45 to 65 times a minute."), ("bells", "Bells ring until the gate arms reach the horizontal.")] {
        std::fs::write(input.join(format!("{name}.md")), format!("# {name}\n\n{text}\n")).unwrap();
    }
    let art = tmp.path().join("artifacts");
    let index = build_index(&input, art.to_str().unwrap(), &["--strategy", "page", "--min-chars", "0"]);
    // BM25 only (no model loaded) plus the outside retriever, fused by RRF.
    let engine = gauge_engine::Engine::open(Path::new(&index), &gauge_engine::EngineOptions { dense: false, ..Default::default() }).unwrap();
    let lights = engine.chunks().chunks.iter().find(|c| c.text.contains("flash")).unwrap().chunk_id.clone();
    let engine = engine.with_retriever(Box::new(FixedRetriever(vec![lights.clone()])));
    let cfg = gauge_engine::RetrievalConfig { dense: false, promote_exact: false, k: 3, ..Default::default() };
    let r = engine.search("when are gate arms lowered", &cfg).unwrap();
    let top_lights = r.passages.iter().find(|p| p.chunk.chunk_id == lights).expect("the fixed retriever's chunk is among the results");
    assert!(top_lights.candidate.stages.iter().any(|s| s.stage == "fixed" && s.rank == 1), "{:?}", top_lights.candidate.stages);
    // Filters reach it like the built-in retrievers.
    let filtered = gauge_engine::RetrievalConfig { filter: gauge_engine::Filter { sources: vec!["gates.md".into()], ..Default::default() }, ..cfg };
    let r = engine.search("when are gate arms lowered", &filtered).unwrap();
    assert!(r.passages.iter().all(|p| p.chunk.source == "gates.md") && !r.passages.is_empty());
}
