//! Rerank latency for 25 and 50 candidates over the FRA dev questions: the tiny cross-encoder
//! fixture, a cross-encoder of the ms-marco-MiniLM-L-6-v2 shape with random weights (timing
//! only), and MaxSim over all-MiniLM-L6-v2; hybrid retrieval of the same questions in the
//! same run is the reference. Usage:
//! `bench_rerank INDEX_DIR GOLDEN_JSONL TINY_FIXTURE_DIR MINILM_DIR OUT_JSON`.
use std::path::{Path, PathBuf};
use std::time::Instant;

use gauge_engine::{Engine, EngineOptions, RetrievalConfig};
use gauge_rank::{RerankConfig, RerankKind, Reranker};

fn percentiles(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    let pick = |p: f64| ms[((p * (ms.len() - 1) as f64).round() as usize).min(ms.len() - 1)];
    serde_json::json!({ "p50_ms": pick(0.5), "p95_ms": pick(0.95), "n": ms.len() })
}

/// A `BertForSequenceClassification` folder of the cross-encoder/ms-marco-MiniLM-L-6-v2 shape
/// (6 layers, 384 hidden, 12 heads, 1536 feed-forward) with seeded random weights and
/// MiniLM's tokenizer.
fn random_minilm_cross_encoder(dir: &Path, minilm: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (h, i, layers, vocab, pos) = (384usize, 1536usize, 6usize, 30522usize, 512usize);
    std::fs::write(
        dir.join("config.json"),
        serde_json::json!({
            "architectures": ["BertForSequenceClassification"], "model_type": "bert", "hidden_size": h,
            "num_hidden_layers": layers, "num_attention_heads": 12, "intermediate_size": i,
            "max_position_embeddings": pos, "type_vocab_size": 2, "vocab_size": vocab,
            "layer_norm_eps": 1e-12, "pad_token_id": 0, "id2label": { "0": "LABEL_0" }
        })
        .to_string(),
    )?;
    std::fs::copy(minilm.join("tokenizer.json"), dir.join("tokenizer.json"))?;
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("bert.embeddings.word_embeddings.weight".into(), vec![vocab, h]),
        ("bert.embeddings.position_embeddings.weight".into(), vec![pos, h]),
        ("bert.embeddings.token_type_embeddings.weight".into(), vec![2, h]),
        ("bert.embeddings.LayerNorm.weight".into(), vec![h]),
        ("bert.embeddings.LayerNorm.bias".into(), vec![h]),
        ("bert.pooler.dense.weight".into(), vec![h, h]),
        ("bert.pooler.dense.bias".into(), vec![h]),
        ("classifier.weight".into(), vec![1, h]),
        ("classifier.bias".into(), vec![1]),
    ];
    for l in 0..layers {
        let p = format!("bert.encoder.layer.{l}");
        for n in ["query", "key", "value"] {
            shapes.push((format!("{p}.attention.self.{n}.weight"), vec![h, h]));
            shapes.push((format!("{p}.attention.self.{n}.bias"), vec![h]));
        }
        shapes.push((format!("{p}.attention.output.dense.weight"), vec![h, h]));
        shapes.push((format!("{p}.attention.output.dense.bias"), vec![h]));
        shapes.push((format!("{p}.attention.output.LayerNorm.weight"), vec![h]));
        shapes.push((format!("{p}.attention.output.LayerNorm.bias"), vec![h]));
        shapes.push((format!("{p}.intermediate.dense.weight"), vec![i, h]));
        shapes.push((format!("{p}.intermediate.dense.bias"), vec![i]));
        shapes.push((format!("{p}.output.dense.weight"), vec![h, i]));
        shapes.push((format!("{p}.output.dense.bias"), vec![h]));
        shapes.push((format!("{p}.output.LayerNorm.weight"), vec![h]));
        shapes.push((format!("{p}.output.LayerNorm.bias"), vec![h]));
    }
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut bytes: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        let ones = name.ends_with("LayerNorm.weight");
        let data: Vec<u8> = (0..n)
            .flat_map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                (if ones { 1.0 } else { u * 0.04 }).to_le_bytes()
            })
            .collect();
        bytes.push((name, shape, data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        bytes.iter().map(|(n, s, d)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).expect("valid view"))).collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors"))?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_rerank INDEX_DIR GOLDEN_JSONL TINY_FIXTURE_DIR MINILM_DIR OUT_JSON";
    let index_dir = PathBuf::from(args.get(1).expect(usage));
    let golden = PathBuf::from(args.get(2).expect(usage));
    let tiny = PathBuf::from(args.get(3).expect(usage));
    let minilm = PathBuf::from(args.get(4).expect(usage));
    let out_path = PathBuf::from(args.get(5).expect(usage));
    let questions: Vec<String> = std::fs::read_to_string(&golden)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).map(|v| v["question"].as_str().unwrap_or_default().to_string()))
        .collect::<Result<_, _>>()?;
    let engine = Engine::open(&index_dir, &EngineOptions { model: Some(minilm.display().to_string()), ..Default::default() })?;
    let tmp = std::env::temp_dir().join(format!("gauge-bench-rerank-{}", std::process::id()));
    random_minilm_cross_encoder(&tmp, &minilm)?;
    let rerankers: Vec<(&str, Box<dyn Reranker>)> = vec![
        ("tiny cross-encoder fixture (2 layers, 32 hidden)", gauge_rerank::load_reranker(&RerankConfig { model: tiny.display().to_string(), ..Default::default() }, "cpu")?),
        ("cross-encoder, ms-marco-MiniLM-L-6-v2 shape (random weights)", gauge_rerank::load_reranker(&RerankConfig { model: tmp.display().to_string(), ..Default::default() }, "cpu")?),
        ("MaxSim, all-MiniLM-L6-v2", gauge_rerank::load_reranker(&RerankConfig { kind: RerankKind::MaxSim, model: minilm.display().to_string(), ..Default::default() }, "cpu")?),
    ];
    let _ = std::fs::remove_dir_all(&tmp);
    // Candidates: the hybrid top 50 of each question (its time is the reference).
    let cfg = RetrievalConfig { candidates: 50, k: 50, ..Default::default() };
    engine.search(&questions[0], &cfg)?;
    let mut hybrid_ms = Vec::new();
    let mut candidates: Vec<Vec<String>> = Vec::new();
    for q in &questions {
        let t = Instant::now();
        let r = engine.search(q, &cfg)?;
        hybrid_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        candidates.push(r.passages.iter().map(|p| p.chunk.text.clone()).collect());
    }
    let hybrid = percentiles(hybrid_ms);
    let mut results = Vec::new();
    for (name, r) in &rerankers {
        r.score(&questions[0], &candidates[0].iter().take(5).map(String::as_str).collect::<Vec<_>>()).map_err(anyhow::Error::msg)?;
        for n in [25usize, 50] {
            let mut ms = Vec::new();
            for (q, c) in questions.iter().zip(&candidates) {
                let texts: Vec<&str> = c.iter().take(n).map(String::as_str).collect();
                let t = Instant::now();
                r.score(q, &texts).map_err(anyhow::Error::msg)?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            let p = percentiles(ms);
            let ratio = p["p50_ms"].as_f64().unwrap() / hybrid["p50_ms"].as_f64().unwrap();
            eprintln!("{name}, {n} candidates: p50 {:.1} ms, p95 {:.1} ms ({ratio:.1}× hybrid retrieval)", p["p50_ms"].as_f64().unwrap(), p["p95_ms"].as_f64().unwrap());
            results.push(serde_json::json!({ "reranker": name, "candidates": n, "latency": p, "p50_vs_hybrid_retrieval": ratio }));
        }
    }
    let out = serde_json::json!({
        "questions": questions.len(),
        "index": index_dir.display().to_string(),
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "reference_hybrid_retrieval_top50": hybrid,
        "rerank": results,
        "note": "per question: score the top-n hybrid candidates (FRA chunks, recursive 1000/150) against the question; passages truncated to 512 pair tokens",
    });
    let tmp_out = out_path.with_extension("json.partial");
    std::fs::write(&tmp_out, serde_json::to_string_pretty(&out)? + "\n")?;
    std::fs::rename(&tmp_out, &out_path)?;
    Ok(())
}
