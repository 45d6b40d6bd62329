//! Prefill and decode speed of the Burn decoder on a GGUF, single stream, with the machine's
//! limits measured in the same run; llama.cpp's figures (from `llama-bench`, same GGUF and
//! prompt lengths) are merged in by the `bench-generate` recipe.
//! Usage: `bench_generate MODEL.gguf REFERENCE_JSONL DECODE_TOKENS OUT_JSON [--quantized]`
//! (`--quantized`: keep Q8_0/Q4_1 blocks instead of dequantising at load).
use std::time::Instant;

use gauge_decoder::generate::argmax;
use gauge_decoder::LanguageModel;

/// Read bandwidth of this machine: summing a buffer far larger than the caches, all cores.
fn memory_bandwidth() -> f64 {
    use rayon::prelude::*;
    let n = 256 << 20; // 1 GiB of f32
    let buf: Vec<f32> = (0..n).into_par_iter().map(|i| (i % 7) as f32).collect();
    let mut best: f64 = 0.0;
    for _ in 0..5 {
        let t = Instant::now();
        // Sixteen independent lanes, so the adds vectorise and memory, not the add chain, limits.
        let s: f32 = buf
            .par_chunks(1 << 16)
            .map(|c| {
                let mut acc = [0f32; 16];
                for ch in c.chunks_exact(16) {
                    for i in 0..16 {
                        acc[i] += ch[i];
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        std::hint::black_box(s);
        best = best.max((n * 4) as f64 / t.elapsed().as_secs_f64());
    }
    best
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_generate MODEL.gguf REFERENCE_JSONL DECODE_TOKENS OUT_JSON";
    let (model, reference, n_decode, out) = (args.get(1).expect(usage), args.get(2).expect(usage), args.get(3).expect(usage).parse::<usize>()?, args.get(4).expect(usage));
    let t = Instant::now();
    let keep_quantized = args.get(5).is_some_and(|a| a == "--quantized");
    let lm = LanguageModel::load_with(model, &gauge_encoder::device::cpu(), &gauge_decoder::LoadOptions { keep_quantized, ..Default::default() })?;
    let load_s = t.elapsed().as_secs_f64();
    let bytes = lm.model.weight_bytes() as f64;
    let params = lm.model.matrix_parameters() as f64;
    let bandwidth = memory_bandwidth();
    let (peak, peak_how) = gauge_core::machine::peak_f32_flops();
    let mut prompts = Vec::new();
    for line in std::fs::read_to_string(reference)?.lines().filter(|l| !l.trim().is_empty()) {
        let r: serde_json::Value = serde_json::from_str(line)?;
        let ids: Vec<u32> = r["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        // Warm-up, then the measured run.
        lm.model.forward(&ids[..ids.len().min(8)], &mut lm.model.new_cache())?;
        let mut cache = lm.model.new_cache();
        let t = Instant::now();
        let mut logits = lm.model.forward(&ids, &mut cache)?;
        let prefill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..n_decode {
            let next = argmax(&logits);
            logits = lm.model.forward(&[next], &mut cache)?;
        }
        let decode = t.elapsed().as_secs_f64();
        let (pp, tg) = (ids.len() as f64 / prefill, n_decode as f64 / decode);
        eprintln!("{:>24}: {:>4} prompt tokens {pp:>8.1} tok/s, decode {tg:>6.1} tok/s", r["name"].as_str().unwrap_or("?"), ids.len());
        prompts.push(serde_json::json!({
            "name": r["name"], "prompt_tokens": ids.len(), "prefill_tokens_per_s": pp, "decode_tokens_per_s": tg,
            "prefill_share_of_peak_flops": pp * 2.0 * params / peak,
            "decode_share_of_memory_bandwidth": tg * bytes / bandwidth,
        }));
    }
    let result = serde_json::json!({
        "model": model, "load_seconds": load_s, "keep_quantized": keep_quantized, "decode_tokens": n_decode,
        "threads": rayon::current_num_threads(),
        "weight_bytes_read_per_token": bytes, "matrix_parameters": params,
        "machine": { "read_bandwidth_bytes_per_s": bandwidth, "peak_f32_flops": peak, "peak_how": peak_how },
        "prompts": prompts,
    });
    std::fs::write(out, serde_json::to_string_pretty(&result)? + "\n")?;
    Ok(())
}
