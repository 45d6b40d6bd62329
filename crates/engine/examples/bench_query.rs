//! One run of the `bench-query` harness (`scripts/bench-query.sh`, `gauge-bench`): query latency
//! per retriever and end to end over the golden questions against an index, `ROUNDS` passes
//! over every question after a warm-up pass, and the BM25 index build (tantivy, on disk) timed
//! `BUILDS` times. The reference (`scripts/bench_rank_bm25.py`) runs rank_bm25 over the same
//! chunks and questions. Usage: `bench_query side INDEX_DIR GOLDEN_JSONL [ROUNDS] [BUILDS]`;
//! prints `{"figures": {...}, "describe": {...}}` (per-query medians in ms, queries per
//! second, build seconds).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use gauge_engine::{Engine, EngineOptions, RetrievalConfig};
use gauge_rank::{fuse, Fusion};

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    if n % 2 == 1 {
        ms[n / 2]
    } else {
        (ms[n / 2 - 1] + ms[n / 2]) / 2.0
    }
}

/// The `question` of every line of a golden JSONL file.
fn questions(golden: &PathBuf) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(golden).map_err(|e| anyhow::anyhow!("{}: {e}", golden.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str::<serde_json::Value>(l)?["question"].as_str().unwrap_or_default().to_string()))
        .collect()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_query side INDEX_DIR GOLDEN_JSONL [ROUNDS] [BUILDS]";
    anyhow::ensure!(args.get(1).map(String::as_str) == Some("side") && args.len() >= 4, "{usage}");
    let index_dir = PathBuf::from(&args[2]);
    let questions = questions(&PathBuf::from(&args[3]))?;
    let rounds: usize = args.get(4).map_or(Ok(10), |s| s.parse())?;
    let builds: usize = args.get(5).map_or(Ok(5), |s| s.parse())?;
    anyhow::ensure!(!questions.is_empty() && rounds > 0 && builds > 0, "no questions, rounds or builds: {usage}");
    let engine = Engine::open(&index_dir, &EngineOptions::default())?;
    let per_retriever = RetrievalConfig { candidates: 50, ..Default::default() };
    let dense_only = RetrievalConfig { bm25: false, fusion: Fusion::None, ..Default::default() };
    let bm25_only = RetrievalConfig { dense: false, fusion: Fusion::None, ..Default::default() };
    let hybrid = RetrievalConfig::default();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let mut times: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 0..=rounds {
        for q in &questions {
            let t = Instant::now();
            let d = engine.retrieve("dense", q, &per_retriever)?;
            let dense = ms(t);
            let t = Instant::now();
            let b = engine.retrieve("bm25", q, &per_retriever)?;
            let bm25 = ms(t);
            let t = Instant::now();
            let _ = fuse(&[d, b], &Fusion::default());
            let fusion = ms(t);
            let mut e2e = Vec::new();
            for cfg in [&dense_only, &bm25_only, &hybrid] {
                let t = Instant::now();
                engine.search(q, cfg)?;
                e2e.push(ms(t));
            }
            if round == 0 {
                continue; // the warm-up pass
            }
            for (name, v) in [("dense_ms", dense), ("bm25_ms", bm25), ("rrf_fusion_ms", fusion), ("end_to_end_dense_ms", e2e[0]), ("end_to_end_bm25_ms", e2e[1]), ("end_to_end_hybrid_ms", e2e[2])] {
                times.entry(name).or_default().push(v);
            }
        }
    }
    let mut figures: BTreeMap<String, f64> = times.iter().map(|(k, v)| (format!("p50_{k}"), median(v.clone()))).collect();
    let bm25_total: f64 = times["bm25_ms"].iter().sum();
    figures.insert("bm25_queries_per_s".into(), times["bm25_ms"].len() as f64 / (bm25_total / 1e3));
    let mut build_s = Vec::new();
    for i in 0..builds {
        let dir = std::env::temp_dir().join(format!("gauge-bench-bm25-{}-{i}", std::process::id()));
        let t = Instant::now();
        gauge_index::write_bm25(&dir, &engine.chunks().chunks, Default::default())?;
        build_s.push(t.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&dir)?;
    }
    figures.insert("bm25_build_s".into(), median(build_s));
    figures.insert("chunks".into(), engine.chunks().chunks.len() as f64);
    figures.insert("queries".into(), questions.len() as f64);
    let describe = serde_json::json!({ "candidates_per_retriever": 50, "rounds": rounds, "builds": builds, "threads": std::thread::available_parallelism().map_or(1, |n| n.get()) });
    println!("{}", serde_json::json!({ "figures": figures, "describe": describe }));
    Ok(())
}
