//! Query rewriting (`retrieval.rewrite`) through `evaluate`, with a scripted OpenAI-compatible
//! server as the model: expansion, multi-query and HyDE each send one prompt per question
//! (the template rendered with the question), their replies change what is retrieved, every
//! call lands in the content-addressed cache under the artifacts, and a re-evaluation (forced,
//! so nothing else is cached) asks the model nothing and ranks exactly alike. A server error
//! fails the config with its name instead of a silent fallback.
use std::path::Path;

use gauge::chat_server::{ChatServer, Reply};
use gauge::pipeline::{merged, pipeline, scripted_api, small_corpus_stages};
use gauge::{last_line, ok, refused, run, write_golden, write_markdown_corpus};
use serde_json::json;

const DOCS: [(&str, &str); 4] = [
    ("gates", "Crossing gate arms must be fully lowered before the train reaches the crossing. The inspector records the gate descent time."),
    ("lights", "Flashing lights at a highway crossing flash between thirty five and sixty five times per minute."),
    ("tank", "A leaking tank car of hazardous materials may be moved only to the nearest place of repair."),
    ("fall", "A lanyard connects a body harness to an anchorage; workers on bridges use fall protection above twelve feet."),
];

fn setup(root: &Path, url: &str) -> std::path::PathBuf {
    write_markdown_corpus(root, &DOCS);
    let rows = [("q1", "When do the barriers come down?", "gates.md"), ("q2", "How often do the beacons blink?", "lights.md"), ("q3", "What harness rules apply on spans?", "fall.md")];
    write_golden(root, &rows);
    let api = scripted_api(url);
    pipeline("rewrite")
        .set("k", json!(2))
        .baseline(merged(small_corpus_stages(), json!({ "name": "BM25", "retrieval": { "dense": false, "bm25": true, "promote_exact": false } })))
        .variant(json!({ "name": "BM25 + expansion", "retrieval": { "rewrite": { "kind": "expand", "model": api } } }))
        .variant(json!({ "name": "BM25 + multi-query", "retrieval": { "rewrite": { "kind": "multi_query", "n": 2, "model": api } } }))
        .variant(json!({ "name": "Vector + HyDE", "retrieval": { "dense": true, "bm25": false, "rewrite": { "kind": "hyde", "model": api } } }))
        .write(&root.join("p.toml"))
}

/// The scripted model: terms, paraphrases or a passage that name each question's gold topic.
fn script(r: &gauge::chat_server::Received) -> Reply {
    let prompt = r.message(0);
    let topic = if prompt.contains("barriers") { "crossing gate arms lowered" } else if prompt.contains("beacons") { "flashing lights flash per minute" } else { "lanyard harness fall protection bridges" };
    if prompt.contains("different ways") {
        Reply::Content(format!("1. Which rule covers {topic}?\n2. What about {topic}?"))
    } else if prompt.contains("passage") {
        Reply::Content(format!("The manual states that {topic} as required."))
    } else {
        Reply::Content(topic.to_string())
    }
}

#[test]
fn rewrites_are_cached_and_change_retrieval() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ChatServer::start(|_, r| script(r));
    let pipeline = setup(tmp.path(), &server.url);
    let art = tmp.path().join("artifacts");
    let eval = tmp.path().join("eval");
    let args = [pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
    let out = ok(run("evaluate", &args));
    let dir = std::path::PathBuf::from(last_line(&out));
    let requests = server.requests();
    // One call per question and rewriting config: 3 questions × 3 configs.
    assert_eq!(requests.len(), 9, "{} model calls", requests.len());
    assert!(requests.iter().any(|r| r.message(0).contains("Write 2 different ways") && r.message(0).contains("When do the barriers come down?")));
    let cached: usize = walk(&art.join("llm-cache"));
    assert_eq!(cached, 9, "cache entries");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["model_calls"], 9);
    let metrics = std::fs::read(dir.join("runs.parquet")).unwrap();
    // The rewrites matter: the questions share few words with their pages, so BM25 alone
    // misses one; expansion and multi-query rank the gold pages higher, HyDE finds all three.
    let md = std::fs::read_to_string(eval.join("rewrite/ablation.md")).unwrap();
    // Columns: Config | Hit@1 | Hit@2 | MRR@2 | …
    let cell = |name: &str, col: usize| -> f64 {
        let line = md.lines().find(|l| l.starts_with(&format!("| {name} "))).unwrap_or_else(|| panic!("no row {name}:\n{md}"));
        line.split('|').nth(col).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(cell("BM25 + expansion", 2) > cell("BM25 (baseline)", 2), "{md}");
    assert!(cell("BM25 + multi-query", 4) > cell("BM25 (baseline)", 4), "{md}");
    assert_eq!(cell("Vector + HyDE", 2), 1.0, "{md}");

    // `query` with the same config reads the same cache (the artifact root of its index).
    let p = gauge_evaluate::Pipeline::load(&pipeline).unwrap();
    let v = p.variants.iter().find(|v| v.name == "BM25 + expansion").unwrap();
    let index = manifest["inputs"].as_array().unwrap().iter().find(|i| i["name"] == "index:BM25 + expansion").unwrap()["path"].as_str().unwrap().to_string();
    let cfg_path = tmp.path().join("retrieval.json");
    std::fs::write(&cfg_path, serde_json::to_string(&v.stages.retrieval).unwrap()).unwrap();
    let q = ok(run("query", &["--index", &index, "--config", cfg_path.to_str().unwrap(), "--json", "When do the barriers come down?"]));
    let reply: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    assert_eq!(reply["rewrite"]["cache_hits"], 1, "{reply:#}");
    assert_eq!(reply["rewrite"]["queries"][0][0], "When do the barriers come down? crossing gate arms lowered");
    assert_eq!(reply["passages"][0]["source"], "gates.md");
    assert_eq!(server.requests().len(), 9);

    // A forced re-evaluation asks the model nothing and ranks exactly alike.
    let mut forced = args.to_vec();
    forced.push("--force");
    let out = ok(run("evaluate", &forced));
    assert_eq!(server.requests().len(), 9, "the rerun called the model");
    let again = std::path::PathBuf::from(last_line(&out));
    assert_eq!(std::fs::read(again.join("runs.parquet")).unwrap(), metrics);
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(again.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["model_calls"], 0);
    assert_eq!(manifest["stats"]["model_calls_cached"], 9);
    // per_query.parquet: no calls on the rerun, and the cost without the cache is the cached
    // rows' latency plus the recorded model time (the baseline, which rewrites nothing, is equal).
    let batch = gauge_core::table::read_parquet_any(&again.join("per_query.parquet")).unwrap();
    let c = gauge_core::table::Columns::new(&batch);
    let (config, lat, cold, calls) = (c.strings_required("config"), c.f64s("latency_ms"), c.f64s("cold_latency_ms"), c.i32s("model_calls"));
    for i in 0..batch.num_rows() {
        assert_eq!(calls[i], 0);
        let (l, k) = (lat[i].unwrap(), cold[i].unwrap());
        if config[i] == "BM25" {
            assert_eq!(l, k);
        } else {
            assert!(k > l, "{}: cold {k} vs {l}", config[i]);
        }
    }

    // An endpoint that refuses fails the evaluation with the config named (no silent fallback
    // to the unrewritten query).
    let broken = ChatServer::start(|_, _| Reply::Reject(400, "model not loaded".into()));
    let tmp2 = tempfile::tempdir().unwrap();
    let pipeline = setup(tmp2.path(), &broken.url);
    let out = run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", tmp2.path().join("a").to_str().unwrap(), "--eval-dir", tmp2.path().join("e").to_str().unwrap()]);
    let line = refused(&out, "BM25 + expansion");
    assert!(line.contains("model not loaded"), "the endpoint's reason is lost: {line}");
}

fn walk(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.flatten().map(|e| if e.path().is_dir() { walk(&e.path()) } else { usize::from(e.path().extension().is_some_and(|x| x == "json")) }).sum()
}

/// Questions a model of the rewriting model's family wrote: `evaluate` reads the set's
/// provenance record (`<set>.provenance.json`), puts it in the manifest, ablation.md and the
/// report page, and marks every config whose rewriting model shares that family (†, with the
/// reason); the baseline, which runs no model, is not marked. Without the record nothing is.
#[test]
fn configs_using_the_question_writers_family_are_marked() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ChatServer::start(|_, r| script(r));
    let pipeline = setup(tmp.path(), &server.url);
    let (eval, art) = (tmp.path().join("eval"), tmp.path().join("artifacts"));
    let args = [pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
    // No record: not recorded, nothing marked.
    let out = ok(run("evaluate", &args));
    let md = std::fs::read_to_string(eval.join("rewrite/ablation.md")).unwrap();
    assert!(md.contains("Questions: who wrote and who judged them is not recorded"), "{md}");
    assert!(!md.contains('†'), "{md}");
    let first = last_line(&out);
    // The set's record: written by a `scripted` model, judged by people.
    let golden = tmp.path().join("golden.jsonl");
    assert!(golden.is_file());
    std::fs::write(tmp.path().join("golden.provenance.json"), r#"{"written_by": ["scripted-7b-instruct.gguf"], "judged_by": ["human"], "prompt": "write a question a passage answers"}"#).unwrap();
    let out = ok(run("evaluate", &args));
    assert_ne!(last_line(&out), first, "the record is an input: a new evaluation");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`BM25 + expansion` shares a model family"), "{stderr}");
    let md = std::fs::read_to_string(eval.join("rewrite/ablation.md")).unwrap();
    assert!(md.contains("Questions written by `scripted-7b-instruct.gguf`, judged by people (prompt `write a question a passage answers`)"), "{md}");
    for row in ["BM25 + expansion †", "BM25 + multi-query †", "Vector + HyDE †"] {
        assert!(md.contains(&format!("| {row} |")), "{row} not marked:\n{md}");
    }
    assert!(md.contains("| BM25 (baseline) |"), "the baseline runs no model:\n{md}");
    assert!(md.contains("## Same family as the questions") && md.contains("query rewriting (expand) uses `scripted`: a scripted model wrote the questions"), "{md}");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(eval.join("rewrite/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["question_provenance"]["written_by"], json!(["scripted-7b-instruct.gguf"]));
    assert_eq!(manifest["stats"]["same_family"].as_array().unwrap().len(), 3);
    assert!(manifest["inputs"].as_array().unwrap().iter().any(|i| i["name"] == "golden_provenance"));
    let html = std::fs::read_to_string(eval.join("rewrite/report.html")).unwrap();
    assert!(html.contains("Questions written by scripted-7b-instruct.gguf, judged by people") && html.matches("† same family").count() == 3, "report.html lacks the marks: {:?} marks, {:?}", html.matches("† same family").count(), html.find("Questions").map(|i| &html[i..(i + 300).min(html.len())]));
    // A malformed record is refused naming it.
    std::fs::write(tmp.path().join("golden.provenance.json"), r#"{"authors": ["me"]}"#).unwrap();
    let line = refused(&run("evaluate", &args), "golden.provenance.json");
    assert!(line.contains("written_by"), "{line}");
}
