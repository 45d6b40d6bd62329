//! Prefill and decode speed of the Burn decoder on a GGUF, single stream, with the machine's
//! limits measured in the same run; llama.cpp's figures (from `llama-bench`, same GGUF and
//! prompt lengths) are merged in by the `bench-generate` recipe.
//! Usage: `bench_generate MODEL REFERENCE_JSONL DECODE_TOKENS OUT_JSON [--dequantize] [--device D]`
//! (MODEL: a GGUF or a Hugging Face folder; `--dequantize`: f32 weights instead of the GGUF's
//! blocks; `--device cuda`: the Burn CUDA path, as the GPU check runs it).
//!
//! One side of the `bench-generate` harness (`gauge-bench`), one timed window per run, as
//! `llama-bench` and `llama-batched-bench` time theirs (token ids are synthetic, as theirs are
//! random: speed does not depend on them):
//! - `bench_generate side decode MODEL N [DEPTH]`: N single-token steps from position DEPTH
//!   (the cache prefilled with DEPTH tokens first, untimed) — llama-bench `-n N -d DEPTH`;
//! - `bench_generate side prefill MODEL N`: one N-token forward pass — llama-bench `-p N`;
//! - `bench_generate side batched MODEL PROMPT GEN B…`: B sequences of PROMPT tokens each
//!   (prefilled, untimed), then GEN lock-step steps — llama-batched-bench `-npp PROMPT -ntg GEN
//!   -npl B,…`, figure `tg_pl<B>` = B · GEN / seconds.
//!
//! `--seeded-adapter R` (any side): the model with a seeded rank-R LoRA adapter on all seven
//! projections of every layer (alpha = R), as `train-lora` writes one — its pairs kept beside
//! the quantised blocks — to time what an adapter costs a step.
use std::time::Instant;

use gauge_decoder::generate::argmax;
use gauge_decoder::LanguageModel;

fn main() -> anyhow::Result<()> {
    main_with(std::env::args().collect())
}

/// The example's body on an argument list (program name first): also the `generate` subcommand of
/// `gauge-gpu-check`, the GPU bundle's one binary.
pub fn main_with(args: Vec<String>) -> anyhow::Result<()> {
    if args.get(1).map(String::as_str) == Some("side") {
        return side(&args[2..]);
    }
    let usage = "usage: bench_generate MODEL.gguf REFERENCE_JSONL DECODE_TOKENS OUT_JSON";
    let (model, reference, n_decode, out) = (args.get(1).expect(usage), args.get(2).expect(usage), args.get(3).expect(usage).parse::<usize>()?, args.get(4).expect(usage));
    let t = Instant::now();
    let dequantize = args.iter().any(|a| a == "--dequantize");
    let keep_quantized = !dequantize;
    let device_name = args.iter().position(|a| a == "--device").and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| "cpu".into());
    let device = gauge_tensor::device::parse(&device_name).map_err(|e| anyhow::anyhow!("{e}"))?;
    let lm = LanguageModel::load_with(model, &device, &gauge_decoder::LoadOptions { dequantize, ..Default::default() })?;
    let load_s = t.elapsed().as_secs_f64();
    let bytes = lm.model.weight_bytes() as f64;
    let params = lm.model.matrix_parameters() as f64;
    let bandwidth = gauge_bench::machine::read_bandwidth();
    let (peak, peak_how) = gauge_core::machine::peak_f32_flops();
    let mut prompts = Vec::new();
    for line in std::fs::read_to_string(reference)?.lines().filter(|l| !l.trim().is_empty()) {
        let r: serde_json::Value = serde_json::from_str(line)?;
        let ids: Vec<u32> = r["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        // Warm-up, then three measured runs: the median prefill and decode times (llama-bench
        // averages its three repetitions).
        lm.model.forward(&ids[..ids.len().min(8)], &mut lm.model.new_cache())?;
        let (mut prefills, mut decodes) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let mut cache = lm.model.new_cache();
            let t = Instant::now();
            let mut logits = lm.model.forward(&ids, &mut cache)?;
            prefills.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for _ in 0..n_decode {
                let next = argmax(&logits);
                logits = lm.model.forward(&[next], &mut cache)?;
            }
            decodes.push(t.elapsed().as_secs_f64());
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (prefill, decode) = (median(&mut prefills), median(&mut decodes));
        let (pp, tg) = (ids.len() as f64 / prefill, n_decode as f64 / decode);
        eprintln!("{:>24}: {:>4} prompt tokens {pp:>8.1} tok/s, decode {tg:>6.1} tok/s", r["name"].as_str().unwrap_or("?"), ids.len());
        prompts.push(serde_json::json!({
            "name": r["name"], "prompt_tokens": ids.len(), "prefill_tokens_per_s": pp, "decode_tokens_per_s": tg,
            "prefill_share_of_peak_flops": pp * 2.0 * params / peak,
            "decode_share_of_memory_bandwidth": tg * bytes / bandwidth,
        }));
    }
    // Batched decoding, as llama-batched-bench measures it: B sequences of a 128-token prompt,
    // then 64 tokens each in lock-step; throughput = B · 64 / decode seconds.
    let first: serde_json::Value = serde_json::from_str(std::fs::read_to_string(reference)?.lines().last().expect("a prompt"))?;
    let long: Vec<u32> = first["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let (pp, tg) = (128usize, 64usize);
    let mut batched = Vec::new();
    for b in [1usize, 4, 8] {
        let mut caches: Vec<_> = (0..b).map(|_| lm.model.new_cache_with_capacity(pp + tg)).collect();
        let mut tokens = Vec::with_capacity(b);
        for (j, c) in caches.iter_mut().enumerate() {
            let ids = &long[j * 8..j * 8 + pp];
            tokens.push(argmax(&lm.model.forward(ids, c)?));
        }
        let t = Instant::now();
        for _ in 0..tg {
            let mut refs: Vec<_> = caches.iter_mut().collect();
            let logits = lm.model.forward_batch(&tokens, &mut refs)?;
            tokens = logits.iter().map(|l| argmax(l)).collect();
        }
        let secs = t.elapsed().as_secs_f64();
        let tps = (b * tg) as f64 / secs;
        eprintln!("{:>24}: batch {b}, {pp}-token prompts, {tg} tokens each: {tps:>6.1} tok/s", "batched decode");
        batched.push(serde_json::json!({ "batch": b, "prompt_tokens": pp, "decode_tokens": tg, "decode_tokens_per_s": tps }));
    }
    // Decoding after 40 and after 600 positions (the KV cache's share of a step).
    let mut depth = Vec::new();
    for d in [40usize, 600] {
        let mut cache = lm.model.new_cache_with_capacity(d + n_decode);
        let mut next = argmax(&lm.model.forward(&long[..d.min(long.len())], &mut cache)?);
        let t = Instant::now();
        for _ in 0..n_decode {
            next = argmax(&lm.model.forward(&[next], &mut cache)?);
        }
        let tps = n_decode as f64 / t.elapsed().as_secs_f64();
        eprintln!("{:>24}: after {d} positions: {tps:>6.1} tok/s", "decode depth");
        depth.push(serde_json::json!({ "depth": d, "decode_tokens_per_s": tps }));
    }
    let result = serde_json::json!({
        "model": model, "device": device_name, "load_seconds": load_s, "keep_quantized": keep_quantized, "kernel_path": lm.model.kernel_path().map(|p| p.name()), "decode_tokens": n_decode,
        "threads": rayon::current_num_threads(),
        "weight_bytes_read_per_token": bytes, "matrix_parameters": params,
        "machine": { "read_bandwidth_bytes_per_s": bandwidth, "peak_f32_flops": peak, "peak_how": peak_how },
        "prompts": prompts,
        "batched": batched,
        "depth": depth,
    });
    std::fs::write(out, serde_json::to_string_pretty(&result)? + "\n")?;
    Ok(())
}

/// Writes a seeded rank-`r` adapter (alpha `r`) on all seven projections of every layer of a
/// model of `config`'s shape into `dir`.
fn seeded_adapter(config: &gauge_decoder::LlamaConfig, r: usize, dir: &std::path::Path) -> anyhow::Result<()> {
    use gauge_decoder::adapter::{module_path, PROJECTIONS};
    let (h, q, kv, ff) = (config.hidden_size, config.num_attention_heads * config.head_dim(), config.kv_heads() * config.head_dim(), config.intermediate_size);
    let mut state = 42u64;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02
    };
    let mut modules = std::collections::BTreeMap::new();
    for l in 0..config.num_hidden_layers {
        for p in PROJECTIONS {
            let (d_in, d_out) = match p {
                "q_proj" => (h, q),
                "k_proj" | "v_proj" => (h, kv),
                "o_proj" => (q, h),
                "gate_proj" | "up_proj" => (h, ff),
                _ => (ff, h),
            };
            let a = (0..r * d_in).map(|_| next()).collect();
            let b = (0..d_out * r).map(|_| next()).collect();
            modules.insert(module_path(l, p), gauge_decoder::LoraPair { a, b, d_in, d_out });
        }
    }
    let targets: Vec<String> = PROJECTIONS.iter().map(|s| s.to_string()).collect();
    gauge_decoder::LoraAdapter { config: gauge_decoder::AdapterConfig::new(r, r as f64, 0.0, &targets, false, None), modules }.save(dir)?;
    Ok(())
}

/// Synthetic token ids (deterministic, spread over the vocabulary).
fn synthetic(n: usize, vocab: usize, salt: usize) -> Vec<u32> {
    (0..n).map(|i| ((7 + 7919 * (i + 131 * salt)) % vocab) as u32).collect()
}

/// One harness run (see the module docs): prints `{"figures": …, "describe": …}`.
fn side(args: &[String]) -> anyhow::Result<()> {
    let usage = "usage: bench_generate side decode MODEL N [DEPTH] | prefill MODEL N | batched MODEL PROMPT GEN B… [--seeded-adapter R]";
    let mut args = args.to_vec();
    let rank = match args.iter().position(|a| a == "--seeded-adapter") {
        Some(i) => {
            let r: usize = args.get(i + 1).ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
            args.drain(i..i + 2);
            Some(r)
        }
        None => None,
    };
    let (kind, model) = (args.first().ok_or_else(|| anyhow::anyhow!(usage))?, args.get(1).ok_or_else(|| anyhow::anyhow!(usage))?);
    let num = |i: usize| -> anyhow::Result<usize> { Ok(args.get(i).ok_or_else(|| anyhow::anyhow!(usage))?.parse()?) };
    let cpu = gauge_tensor::device::parse("cpu").map_err(|e| anyhow::anyhow!("{e}"))?;
    let adapter = tempfile::tempdir()?;
    let mut options = gauge_decoder::LoadOptions::default();
    if let Some(r) = rank {
        seeded_adapter(&gauge_decoder::ModelFiles::open(model, true)?.config, r, adapter.path())?;
        options.adapter = Some(adapter.path().to_path_buf());
    }
    let t = Instant::now();
    let lm = LanguageModel::load_with(model, &cpu, &options)?;
    let load_seconds = t.elapsed().as_secs_f64();
    let vocab = lm.model.config.vocab_size;
    let mut figures = std::collections::BTreeMap::new();
    match kind.as_str() {
        "decode" => {
            let (n, depth) = (num(2)?, if args.len() > 3 { num(3)? } else { 0 });
            let mut cache = lm.model.new_cache_with_capacity(depth + n);
            if depth > 0 {
                lm.model.forward(&synthetic(depth, vocab, 1), &mut cache)?;
            }
            let ids = synthetic(n, vocab, 2);
            let t = Instant::now();
            for id in &ids {
                std::hint::black_box(lm.model.forward(&[*id], &mut cache)?);
            }
            figures.insert("decode_tokens_per_s".to_string(), n as f64 / t.elapsed().as_secs_f64());
        }
        "prefill" => {
            let n = num(2)?;
            let ids = synthetic(n, vocab, 3);
            let mut cache = lm.model.new_cache_with_capacity(n);
            let t = Instant::now();
            std::hint::black_box(lm.model.forward(&ids, &mut cache)?);
            figures.insert("prefill_tokens_per_s".to_string(), n as f64 / t.elapsed().as_secs_f64());
        }
        "batched" => {
            let (pp, tg) = (num(2)?, num(3)?);
            for i in 4..args.len() {
                let b = num(i)?;
                let mut caches: Vec<_> = (0..b).map(|_| lm.model.new_cache_with_capacity(pp + tg)).collect();
                for (j, c) in caches.iter_mut().enumerate() {
                    lm.model.forward(&synthetic(pp, vocab, 10 + j), c)?;
                }
                let steps: Vec<Vec<u32>> = (0..tg).map(|s| synthetic(b, vocab, 100 + s)).collect();
                let t = Instant::now();
                for tokens in &steps {
                    let mut refs: Vec<_> = caches.iter_mut().collect();
                    std::hint::black_box(lm.model.forward_batch(tokens, &mut refs)?);
                }
                figures.insert(format!("tg_pl{b}"), (b * tg) as f64 / t.elapsed().as_secs_f64());
            }
        }
        other => anyhow::bail!("unknown side `{other}`; {usage}"),
    }
    figures.insert("weight_bytes_read_per_token".to_string(), lm.model.weight_bytes() as f64);
    figures.insert("load_seconds".to_string(), load_seconds);
    gauge_bench::side::emit(&figures, serde_json::json!({
        "model": model, "kernel_path": lm.model.kernel_path().map(|p| p.name()), "threads": rayon::current_num_threads(), "seeded_adapter_rank": rank,
        "matrix_parameters": lm.model.matrix_parameters(),
    }));
    Ok(())
}
