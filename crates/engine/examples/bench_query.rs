//! Query latency per stage and end to end, index build time per faiss type, and rank_bm25
//! (Python) on the same chunks and questions. Usage:
//! `bench_query INDEX_DIR EMBEDDINGS_DIR GOLDEN_JSONL OUT_JSON [PYTHON]`.
use std::path::PathBuf;
use std::time::Instant;

use gauge_engine::{Engine, EngineOptions, RetrievalConfig};
use gauge_rank::{fuse, Fusion};

fn percentiles(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    let pick = |p: f64| ms[((p * (ms.len() - 1) as f64).round() as usize).min(ms.len() - 1)];
    serde_json::json!({ "p50_ms": pick(0.5), "p95_ms": pick(0.95), "n": ms.len() })
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_query INDEX_DIR EMBEDDINGS_DIR GOLDEN_JSONL OUT_JSON [PYTHON]";
    let index_dir = PathBuf::from(args.get(1).expect(usage));
    let emb_dir = PathBuf::from(args.get(2).expect(usage));
    let golden = PathBuf::from(args.get(3).expect(usage));
    let out_path = PathBuf::from(args.get(4).expect(usage));
    let python = args.get(5).cloned().unwrap_or_else(|| "python3".into());
    let questions: Vec<String> = std::fs::read_to_string(&golden)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).map(|v| v["question"].as_str().unwrap_or_default().to_string()))
        .collect::<Result<_, _>>()?;
    let engine = Engine::open(&index_dir, &EngineOptions::default())?;
    let n = 50;
    let per_retriever = RetrievalConfig { candidates: n, ..Default::default() };
    // Warm-up.
    engine.search(&questions[0], &RetrievalConfig::default())?;
    let (mut dense_ms, mut bm25_ms, mut fusion_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (mut e2e_dense, mut e2e_bm25, mut e2e_hybrid) = (Vec::new(), Vec::new(), Vec::new());
    for q in &questions {
        let t = Instant::now();
        let d = engine.retrieve("dense", q, &per_retriever)?;
        dense_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let b = engine.retrieve("bm25", q, &per_retriever)?;
        bm25_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let _ = fuse(&[d, b], &Fusion::default());
        fusion_ms.push(t.elapsed().as_secs_f64() * 1e3);
        for (cfg, out) in [
            (RetrievalConfig { bm25: false, fusion: Fusion::None, ..Default::default() }, &mut e2e_dense),
            (RetrievalConfig { dense: false, fusion: Fusion::None, ..Default::default() }, &mut e2e_bm25),
            (RetrievalConfig::default(), &mut e2e_hybrid),
        ] {
            let t = Instant::now();
            engine.search(q, &cfg)?;
            out.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    // Index build time per faiss type on the same embeddings.
    let emb = gauge_core::schema::read_embeddings(&emb_dir.join("embeddings.parquet"))?;
    let mut builds = serde_json::Map::new();
    for desc in ["Flat", "HNSW32", "IVF64,Flat", "IVF64,PQ16"] {
        let t = Instant::now();
        gauge_index::build_faiss(&emb.vectors, emb.dim, desc)?;
        builds.insert(desc.to_string(), serde_json::json!(t.elapsed().as_secs_f64()));
    }
    let t = Instant::now();
    let tmp = std::env::temp_dir().join(format!("gauge-bench-bm25-{}", std::process::id()));
    gauge_index::write_bm25(&tmp, &engine.chunks().chunks, false)?;
    let tantivy_build = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&tmp);
    // rank_bm25 on the same chunks and questions.
    let script = PathBuf::from("scripts/bench_rank_bm25.py");
    let out = std::process::Command::new(&python).arg(&script).arg(index_dir.join("chunks.parquet")).arg(&golden).output()?;
    anyhow::ensure!(out.status.success(), "rank_bm25 reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let rank_bm25: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("{}"))?;
    let gauge_bm25 = percentiles(bm25_ms.clone());
    let result = serde_json::json!({
        "chunks": engine.chunks().chunks.len(),
        "questions": questions.len(),
        "candidates_per_retriever": n,
        "stages": { "dense_embed_and_search": percentiles(dense_ms), "bm25": gauge_bm25, "rrf_fusion": percentiles(fusion_ms) },
        "end_to_end": { "dense": percentiles(e2e_dense), "bm25": percentiles(e2e_bm25), "hybrid_rrf": percentiles(e2e_hybrid) },
        "build_seconds": { "faiss": builds, "tantivy_bm25": tantivy_build },
        "rank_bm25_python": rank_bm25,
        "ratio_rank_bm25_over_gauge_bm25_p50": rank_bm25["p50_ms"].as_f64().unwrap_or(f64::NAN) / gauge_bm25["p50_ms"].as_f64().unwrap_or(f64::NAN),
        "ratio_rank_bm25_over_gauge_bm25_build": rank_bm25["build_seconds"].as_f64().unwrap_or(f64::NAN) / tantivy_build,
    });
    let text = serde_json::to_string_pretty(&result)?;
    std::fs::write(&out_path, text.clone() + "\n")?;
    println!("{text}");
    Ok(())
}
