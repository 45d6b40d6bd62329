//! Sharded stages: `embed --shard i/n` partitions the chunks stably by id, `index` over every
//! shard's embeddings writes the same faiss file and chunk table (byte for byte) and the same
//! BM25 rankings as the unsharded build, `index --shard i/n` builds one index per shard, and
//! `query` over the shard indexes returns the unsharded dense ranking exactly. Bad shard
//! arguments are one-line errors.
use std::path::{Path, PathBuf};

use gauge::{last_line, ok, refused, refused_arguments, repo_root, run};

const SUBJECTS: [&str; 6] = ["Gate arms", "Flashing lights", "Crossing bells", "Track circuits", "Tank cars", "Bridge walkways"];
const RULES: [&str; 5] = [
    "must be inspected every month and the result recorded",
    "shall be tested after any repair that affects their function",
    "are maintained by the railroad that owns the crossing",
    "need a written plan approved before work begins",
    "are described in section 234.{} of the regulation",
];

fn corpus(root: &Path) -> PathBuf {
    let dir = root.join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, s) in SUBJECTS.iter().enumerate() {
        for (j, r) in RULES.iter().enumerate() {
            let text = format!("{s} {}. Identifier ERA{i}{j}LA{}.", r.replace("{}", &(200 + i * 10 + j).to_string()), 100 + i * 5 + j);
            std::fs::write(dir.join(format!("doc{i}{j}.md")), format!("# doc {i}{j}\n\n{text}\n")).unwrap();
        }
    }
    dir
}

fn query(indexes: &[&str], extra: &[&str], q: &str) -> Vec<(String, f64)> {
    let mut args: Vec<&str> = Vec::new();
    for i in indexes {
        args.extend(["--index", i]);
    }
    args.extend(extra);
    args.extend(["--json", "-k", "8", q]);
    let out = ok(run("query", &args));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["passages"].as_array().unwrap().iter().map(|p| (p["chunk_id"].as_str().unwrap().to_string(), p["score"].as_f64().unwrap())).collect()
}

#[test]
fn sharded_embeddings_and_indexes_match_the_unsharded_build() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let a = art.to_str().unwrap();
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    let m = minilm.to_str().unwrap();
    let pages = last_line(&ok(run("extract", &[corpus(tmp.path()).to_str().unwrap(), "--artifacts", a])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", a, "--strategy", "page", "--min-chars", "0"])));
    let full_emb = last_line(&ok(run("embed", &[&chunks, "--model", m, "--artifacts", a])));
    let full = last_line(&ok(run("index", &["--embeddings", &full_emb, "--artifacts", a])));

    // Three embed shards: disjoint, together every chunk, each its own artifact.
    let shards: Vec<String> = (0..3).map(|i| last_line(&ok(run("embed", &[&chunks, "--model", m, "--shard", &format!("{i}/3"), "--artifacts", a])))).collect();
    let ids = |dir: &str| gauge_core::schema::read_embeddings(&Path::new(dir).join("embeddings.parquet")).unwrap().ids;
    let mut union: Vec<String> = shards.iter().flat_map(|s| ids(s)).collect();
    assert!(shards.iter().all(|s| !ids(s).is_empty() && ids(s).len() < 30), "each shard holds part of the 30 chunks");
    union.sort();
    let mut all = ids(&full_emb);
    all.sort();
    assert_eq!(union, all);

    // The index of all shards' embeddings is the unsharded index: same bytes, same rankings.
    let mut args = vec!["--artifacts", a];
    for s in &shards {
        args.extend(["--embeddings", s.as_str()]);
    }
    let merged = last_line(&ok(run("index", &args)));
    assert_ne!(merged, full, "another artifact (other inputs)");
    for f in ["dense.faiss", "chunks.parquet"] {
        assert_eq!(std::fs::read(Path::new(&merged).join(f)).unwrap(), std::fs::read(Path::new(&full).join(f)).unwrap(), "{f}");
    }
    for q in ["When must gate arms be inspected?", "ERA31LA116 tank cars", "section 234.241"] {
        assert_eq!(query(&[&merged], &[], q), query(&[&full], &[], q), "{q}");
    }

    // One index per shard, searched together: the dense ranking is the unsharded one exactly;
    // BM25 (per-shard statistics) still finds an exact identifier first.
    let shard_indexes: Vec<String> = (0..3).map(|i| last_line(&ok(run("index", &["--embeddings", &shards[i], "--shard", &format!("{i}/3"), "--artifacts", a])))).collect();
    let refs: Vec<&str> = shard_indexes.iter().map(String::as_str).collect();
    for q in ["When must gate arms be inspected?", "written plan for bridge walkways"] {
        let (sharded, single) = (query(&refs, &["--no-bm25"], q), query(&[&full], &["--no-bm25"], q));
        assert_eq!(sharded.iter().map(|x| &x.0).collect::<Vec<_>>(), single.iter().map(|x| &x.0).collect::<Vec<_>>(), "{q}");
        for (x, y) in sharded.iter().zip(&single) {
            assert!((x.1 - y.1).abs() < 1e-6, "{q}: {x:?} vs {y:?}");
        }
    }
    let top = query(&refs, &["--no-dense"], "ERA31LA116");
    let want = query(&[&full], &["--no-dense"], "ERA31LA116");
    assert_eq!(top[0].0, want[0].0);

    // Bad input: a shard past the count, a missing shard, the same shard twice.
    refused_arguments(&run("embed", &[&chunks, "--model", m, "--shard", "3/3", "--artifacts", a]), "shard 3/3: the index must be below the count");
    refused(&run("index", &["--embeddings", &shards[0], "--embeddings", &shards[1], "--artifacts", a]), "pass every shard");
    refused(&run("query", &["--index", refs[0], "--index", refs[0], "x"]), "pass each shard once");
}
