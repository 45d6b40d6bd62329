//! RAPTOR summary nodes end to end, with a scripted OpenAI-compatible server writing the
//! summaries: `raptor` clusters the chunk embeddings (MiniLM) and asks for one summary per
//! cluster, the output chunk artifact carries `level` and `children`, a rebuild asks the
//! model nothing (content-addressed cache), `evaluate` builds chunk → embed → raptor → embed →
//! index for a config with `raptor`, judges a summary by its leaves, and the engine keeps,
//! expands or excludes summaries. A model that refuses fails the stage, committing nothing.
use std::path::{Path, PathBuf};

use gauge::chat_server::{ChatServer, Reply};
use gauge::pipeline::{merged, pipeline, scripted_api, small_corpus_stages};
use gauge::{last_line, ok, run, write_golden, write_markdown_corpus};
use serde_json::json;

const DOCS: [(&str, &str); 8] = [
    ("gates1", "Crossing gate arms must be fully lowered before the train reaches the crossing."),
    ("gates2", "Flashing lights at a highway crossing flash between thirty five and sixty five times per minute."),
    ("gates3", "Each crossing bell shall sound while the gate arms descend at the highway crossing."),
    ("gates4", "The inspector records the gate descent time of every highway crossing signal."),
    ("fall1", "A lanyard connects a body harness to an anchorage on the bridge."),
    ("fall2", "Workers on bridges use fall protection above twelve feet."),
    ("fall3", "Safety nets shall be installed below bridge work platforms."),
    ("fall4", "Guardrails on bridge walkways shall be forty two inches high."),
];

/// The scripted summariser: the cluster holding gates1 gets words no chunk has.
fn script(r: &gauge::chat_server::Received) -> Reply {
    if r.message(0).contains("fully lowered") {
        Reply::Content("An overview of grade crossing warning equipment and its upkeep.".into())
    } else {
        Reply::Content("An overview of worker safety equipment used at height.".into())
    }
}

fn setup(root: &Path, url: &str) -> PathBuf {
    write_markdown_corpus(root, &DOCS);
    write_golden(root, &[("q1", "grade crossing warning equipment overview", "gates1.md")]);
    let api = scripted_api(url);
    pipeline("raptor")
        .set("k", json!(3))
        .baseline(merged(small_corpus_stages(), json!({ "name": "Vector", "retrieval": { "dense": true, "bm25": false, "promote_exact": false } })))
        .variant(json!({ "name": "Vector, summaries excluded", "raptor": { "cluster_size": 4, "model": api }, "retrieval": { "summaries": "exclude" } }))
        .variant(json!({ "name": "BM25 + RAPTOR", "base": "Vector, summaries excluded", "retrieval": { "dense": false, "bm25": true, "summaries": "keep" } }))
        .variant(json!({ "name": "BM25 + RAPTOR expanded", "base": "BM25 + RAPTOR", "retrieval": { "summaries": "expand" } }))
        .write(&root.join("p.toml"))
}

type Runs = Vec<(String, String, i32, String, bool)>;

fn runs(dir: &Path) -> Runs {
    let batch = gauge_core::table::read_parquet_any(&dir.join("runs.parquet")).unwrap();
    let c = gauge_core::table::Columns::new(&batch);
    let (config, qid, rank, id, rel) = (c.strings_required("config"), c.strings_required("qid"), c.i32s("rank"), c.strings_required("chunk_id"), c.bools("relevant"));
    (0..batch.num_rows()).map(|i| (config[i].clone(), qid[i].clone(), rank[i], id[i].clone(), rel[i])).collect()
}

#[test]
fn summaries_are_built_cached_judged_by_leaves_and_expanded() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ChatServer::start(|_, r| script(r));
    let pipeline = setup(tmp.path(), &server.url);
    let art = tmp.path().join("artifacts");
    let eval = tmp.path().join("eval");
    let args = [pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
    let dir = PathBuf::from(last_line(&ok(run("evaluate", &args))));
    // 8 chunks, clusters of 4 wanted → 2 clusters, one call each.
    assert_eq!(server.requests().len(), 2);
    let prompt = server.requests()[0].message(0);
    assert!(prompt.contains("[gates") || prompt.contains("[fall"), "members are labelled by source and page: {prompt}");

    // The raptor artifact: the leaves unchanged, then two level-1 nodes whose children
    // partition the leaves.
    let raptor_dir = gauge::complete_dirs(&art, "raptor").pop().expect("a raptor artifact");
    let chunks = gauge_core::schema::read_chunks(&raptor_dir.join("chunks.parquet")).unwrap();
    let (leaves, summaries): (Vec<_>, Vec<_>) = chunks.iter().partition(|c| c.level == 0);
    assert_eq!((leaves.len(), summaries.len()), (8, 2));
    let mut children: Vec<&str> = summaries.iter().flat_map(|s| s.children.iter().map(String::as_str)).collect();
    children.sort();
    let mut leaf_ids: Vec<&str> = leaves.iter().map(|c| c.chunk_id.as_str()).collect();
    leaf_ids.sort();
    assert_eq!(children, leaf_ids);
    let gate_summary = summaries.iter().find(|s| s.text.contains("grade crossing")).unwrap();
    let gates1 = leaves.iter().find(|c| c.source == "gates1.md").unwrap();
    assert!(gate_summary.children.contains(&gates1.chunk_id));
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(raptor_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["model_calls"], 2);

    let r = runs(&dir);
    let of = |config: &str| -> Vec<(i32, String, bool)> { r.iter().filter(|x| x.0 == config).map(|x| (x.2, x.3.clone(), x.4)).collect() };
    // Excluding summaries on the same vectors ranks exactly as the index without them.
    assert_eq!(of("Vector"), of("Vector, summaries excluded"));
    // BM25 finds the summary (its words are in no chunk) and it is relevant through gates1.
    let keep = of("BM25 + RAPTOR");
    assert_eq!((keep[0].1.as_str(), keep[0].2), (gate_summary.chunk_id.as_str(), true), "{keep:?}");
    // Expanded, the summary's place goes to its chunks: three leaves of that cluster.
    let expanded = of("BM25 + RAPTOR expanded");
    assert_eq!(expanded.len(), 3);
    assert!(expanded.iter().all(|(_, id, _)| gate_summary.children.contains(id)), "{expanded:?}");

    // `query` agrees, and shows where the expanded chunks came from.
    let index = gauge::complete_dirs(&art, "index").into_iter().find(|d| d.join("chunks.parquet").is_file() && gauge_core::schema::read_chunks(&d.join("chunks.parquet")).unwrap().len() == 10).unwrap();
    let q = ok(run("query", &["--index", index.to_str().unwrap(), "--no-dense", "--no-exact", "-k", "3", "--summaries", "expand", "--json", "grade crossing warning equipment overview"]));
    let reply: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    let passages = reply["passages"].as_array().unwrap();
    assert!(passages.iter().all(|p| p["level"] == 0 && p["stages"].as_array().unwrap().iter().any(|s| s["stage"] == "summary")), "{reply:#}");
    let q = ok(run("query", &["--index", index.to_str().unwrap(), "--no-dense", "--no-exact", "-k", "3", "grade crossing warning equipment overview"]));
    assert!(String::from_utf8_lossy(&q.stdout).contains("summary (level 1) of 4 chunks"), "{}", String::from_utf8_lossy(&q.stdout));

    // A forced rebuild asks the model nothing and writes the same table.
    let emb = manifest["inputs"].as_array().unwrap().iter().find(|i| i["name"] == "embeddings.parquet").unwrap()["path"].as_str().unwrap().to_string();
    let api_cfg = tmp.path().join("raptor.toml");
    std::fs::write(&api_cfg, format!("cluster_size = 4\n[model]\nkind = \"api\"\nbase_url = \"{}\"\nmodel = \"scripted\"\napi_key_env = \"GAUGE_NO_SUCH_KEY\"\n", server.url)).unwrap();
    let out = ok(run("raptor", &[&emb, "--config", api_cfg.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--force"]));
    assert_eq!(server.requests().len(), 2, "the rebuild called the model");
    let again = PathBuf::from(last_line(&out));
    assert_eq!(again, raptor_dir, "same config and inputs, same artifact");
    assert_eq!(gauge_core::schema::read_chunks(&again.join("chunks.parquet")).unwrap(), chunks);

    // A raptor artifact is not summarised again.
    let emb_of_raptor = gauge::complete_dirs(&art, "embed")
        .into_iter()
        .find(|d| std::fs::read_to_string(d.join("manifest.json")).unwrap().contains(raptor_dir.file_name().unwrap().to_str().unwrap()))
        .expect("the summaries' embed artifact");
    let out = run("raptor", &[emb_of_raptor.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already has summary nodes"), "{}", String::from_utf8_lossy(&out.stderr));

    // A model that refuses fails the stage with the summary named, and commits nothing.
    let broken = ChatServer::start(|_, _| Reply::Reject(400, "model not loaded".into()));
    let tmp2 = tempfile::tempdir().unwrap();
    let cfg = tmp2.path().join("raptor.toml");
    std::fs::write(&cfg, format!("cluster_size = 4\n[model]\nkind = \"api\"\nbase_url = \"{}\"\nmodel = \"scripted\"\napi_key_env = \"GAUGE_NO_SUCH_KEY\"\n", broken.url)).unwrap();
    let art2 = tmp2.path().join("a");
    let out = run("raptor", &[&emb, "--config", cfg.to_str().unwrap(), "--artifacts", art2.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("level-1 summary") && err.contains("model not loaded"), "{err}");
    assert!(gauge::complete_dirs(&art2, "raptor").is_empty());
}
