//! Rerank latency, the `bench-rerank` harness's gauge side (`scripts/bench-rerank.sh`,
//! `gauge-bench`): the reference (`scripts/bench_rerank_reference.py`) scores the same
//! candidates with sentence-transformers' `CrossEncoder` and with a PyTorch MaxSim.
//! - `bench_rerank prepare INDEX_DIR GOLDEN_JSONL MINILM_DIR OUT_DIR [QUESTIONS]` writes
//!   `OUT_DIR/candidates.jsonl` (the first QUESTIONS golden questions, default 10, each with its
//!   hybrid top 50 passages, FRA chunks) and `OUT_DIR/ms-marco-shape/`, a cross-encoder of the
//!   ms-marco-MiniLM-L-6-v2 shape with seeded random weights (timing only).
//! - `bench_rerank side cross|maxsim MODEL_DIR CANDIDATES_JSONL` is one run: a warm-up on the
//!   first question, then every question's top 25 and top 50 scored, one call per question;
//!   prints `{"figures": {...}}`: pairs per second and median ms per question at each depth,
//!   and the sum of the top-50 scores (both sides must agree).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gauge_engine::{Engine, EngineOptions, RetrievalConfig};
use gauge_rank::{RerankConfig, RerankKind, Reranker};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
    let usage = "usage: bench_rerank prepare INDEX_DIR GOLDEN_JSONL MINILM_DIR OUT_DIR [QUESTIONS] | bench_rerank side cross|maxsim MODEL_DIR CANDIDATES_JSONL";
    match (args.get(1).map(String::as_str), args.len()) {
        (Some("prepare"), 6 | 7) => prepare(&args[2..]),
        (Some("side"), 5) => side(&args[2], Path::new(&args[3]), Path::new(&args[4])),
        _ => anyhow::bail!("{usage}"),
    }
}

/// Writes the candidates and the random cross-encoder (see the module docs).
fn prepare(args: &[String]) -> anyhow::Result<()> {
    let (index_dir, golden, minilm, out) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]), PathBuf::from(&args[2]), PathBuf::from(&args[3]));
    let n_questions: usize = args.get(4).map_or(Ok(10), |s| s.parse())?;
    let questions: Vec<String> = std::fs::read_to_string(&golden)
        .map_err(|e| anyhow::anyhow!("{}: {e}", golden.display()))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(n_questions)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).map(|v| v["question"].as_str().unwrap_or_default().to_string()))
        .collect::<Result<_, _>>()?;
    let engine = Engine::open(&index_dir, &EngineOptions { model: Some(minilm.display().to_string()), ..Default::default() })?;
    std::fs::create_dir_all(&out)?;
    random_minilm_cross_encoder(&out.join("ms-marco-shape"), &minilm)?;
    let cfg = RetrievalConfig { candidates: 50, k: 50, ..Default::default() };
    let mut lines = String::new();
    for q in &questions {
        let passages: Vec<String> = engine.search(q, &cfg)?.passages.iter().map(|p| p.chunk.text.clone()).collect();
        anyhow::ensure!(passages.len() == 50, "question {q:?}: {} candidates, not 50", passages.len());
        lines += &(serde_json::json!({ "question": q, "passages": passages }).to_string() + "\n");
    }
    std::fs::write(out.join("candidates.jsonl"), lines)?;
    Ok(())
}

/// One harness run (see the module docs).
fn side(kind: &str, model: &Path, candidates: &Path) -> anyhow::Result<()> {
    let kind = match kind {
        "cross" => RerankKind::CrossEncoder,
        "maxsim" => RerankKind::MaxSim,
        other => anyhow::bail!("reranker kind {other:?}: expected cross or maxsim"),
    };
    let rows: Vec<(String, Vec<String>)> = std::fs::read_to_string(candidates)
        .map_err(|e| anyhow::anyhow!("{}: {e}", candidates.display()))?
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)?;
            Ok((v["question"].as_str().unwrap_or_default().to_string(), serde_json::from_value(v["passages"].clone())?))
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!rows.is_empty(), "{}: no questions", candidates.display());
    let reranker: Box<dyn Reranker> = gauge_rerank::load_reranker(&RerankConfig { kind, model: model.display().to_string(), ..Default::default() }, "cpu", None)?;
    let passages = |i: usize, n: usize| rows[i].1.iter().take(n).map(String::as_str).collect::<Vec<_>>();
    reranker.score(&rows[0].0, &passages(0, 50)).map_err(anyhow::Error::msg)?;
    let mut figures = BTreeMap::new();
    for n in [25usize, 50] {
        let (mut ms, mut sum) = (Vec::new(), 0.0f64);
        for (i, (q, _)) in rows.iter().enumerate() {
            let texts = passages(i, n);
            let t = Instant::now();
            let scores = reranker.score(q, &texts).map_err(anyhow::Error::msg)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            sum += scores.iter().map(|&s| s as f64).sum::<f64>();
        }
        let total_s: f64 = ms.iter().sum::<f64>() / 1e3;
        figures.insert(format!("pairs_per_s_{n}"), (rows.len() * n) as f64 / total_s);
        figures.insert(format!("p50_ms_{n}"), median(ms));
        figures.insert(format!("score_sum_{n}"), sum);
    }
    figures.insert("questions".into(), rows.len() as f64);
    let describe = serde_json::json!({ "reranker": reranker.name(), "threads": std::thread::available_parallelism().map_or(1, |n| n.get()) });
    println!("{}", serde_json::json!({ "figures": figures, "describe": describe }));
    Ok(())
}
