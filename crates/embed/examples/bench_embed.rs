//! Embedding throughput of gauge against the sentence-transformers-equivalent reference
//! (`../shared/reference/embed_throughput.py`, ONNX EmbedOptions, 2 threads) on the same chunk
//! texts, in the same run. Usage: `bench_embed CHUNKS_DIR OUT_JSON [MODEL] [REFERENCE_SCRIPT]`.
//! `bench_embed side CHUNKS_DIR MODEL [N]` is one run of the `bench-embed` harness
//! (`gauge-bench`): a warm-up on 64 chunks, then one timed pass over every chunk (the first N
//! when given; tokenization included, as the reference times it), printed as `{"figures": …}`
//! (`vector_sum`: every component of every vector summed, to check both sides agree).
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use gauge_core::schema::read_chunks;
use gauge_embed::{load_embedder, EmbedConfig, EmbedOptions};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Peak f32 GFLOP/s: cores × FMA pipes × lanes × 2 × GHz, with how it was derived.
fn machine_peak() -> (f64, String) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| cpuinfo.lines().find(|l| l.starts_with(name)).and_then(|l| l.split(':').nth(1)).map(|v| v.trim().to_string()).unwrap_or_default();
    let flags = field("flags");
    let vendor = field("vendor_id");
    let model = field("model name");
    let mhz: f64 = field("cpu MHz").parse().unwrap_or(0.0);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    // AMD Zen 4 runs AVX-512 on 256-bit pipes; Intel server cores have 512-bit FMA units.
    let datapath_bits = if has("avx512f") && vendor == "GenuineIntel" { 512.0 } else if has("avx2") && has("fma") { 256.0 } else { 128.0 };
    let lanes = datapath_bits / 32.0;
    let fma_pipes = 2.0;
    let peak = cores * fma_pipes * lanes * 2.0 * mhz / 1000.0;
    let how = format!(
        "{cores} cores × {fma_pipes} FMA pipes × {lanes} f32 lanes ({datapath_bits}-bit datapath; {vendor} {model}, avx512f={}) × 2 FLOP per FMA × {:.3} GHz (cpu MHz in /proc/cpuinfo)",
        has("avx512f"),
        mhz / 1000.0
    );
    (peak, how)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("side") {
        return side(&args[2..]);
    }
    let usage = "usage: bench_embed CHUNKS_DIR OUT_JSON [MODEL] [REFERENCE_SCRIPT]";
    let chunks_dir = PathBuf::from(args.get(1).expect(usage));
    let out_path = PathBuf::from(args.get(2).expect(usage));
    let model = args.get(3).cloned().unwrap_or_else(|| gauge_embed::DEFAULT_MODEL.to_string());
    let reference = args.get(4).cloned().unwrap_or_else(|| "../shared/reference/embed_throughput.py".to_string());
    let chunks_path = chunks_dir.join("chunks.parquet");
    let chunks = read_chunks(&chunks_path)?;
    let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
    let config = EmbedConfig { model, ..Default::default() };
    let (peak, peak_how) = machine_peak();
    // burn-flex always; burn-ndarray too in a build with the `ndarray` feature.
    let devices: &[(&str, &str)] = if cfg!(feature = "ndarray") {
        &[("cpu", "burn-flex"), ("ndarray", "burn-ndarray")]
    } else {
        &[("cpu", "burn-flex")]
    };
    let mut backends = serde_json::Map::new();
    for (device, name) in devices {
        let embedder = load_embedder(&config, &EmbedOptions { device: device.to_string(), ..EmbedOptions::default() })?;
        // Warm-up, then one timed pass over every chunk (tokenization included, as in the reference).
        let warm = embedder.tokenize(&texts[..texts.len().min(64)])?;
        embedder.embed_ids(&warm, |_| {});
        let started = Instant::now();
        let ids = embedder.tokenize(&texts)?;
        let (_, stats) = embedder.embed_ids(&ids, |_| {});
        let seconds = started.elapsed().as_secs_f64();
        // FLOPs: 2 × matmul parameters × tokens, plus attention (QKᵀ and AV: 4·L²·H per layer).
        let cfg = embedder.encoder().config();
        let (p, h, layers) = (cfg.matmul_parameter_count() as f64, cfg.hidden_size() as f64, cfg.num_hidden_layers() as f64);
        let useful: f64 = ids.iter().map(|t| { let l = t.len() as f64; 2.0 * p * l + 4.0 * layers * l * l * h }).sum();
        let result = serde_json::json!({
            "seconds": seconds,
            "texts": stats.texts,
            "tokens": stats.tokens,
            "chunks_per_second": stats.texts as f64 / seconds,
            "tokens_per_second": stats.tokens as f64 / seconds,
            "padding_share": stats.padding_share(),
            "batches": stats.batches,
            "token_budget": EmbedOptions::default().token_budget,
            "peak_rss_mib_so_far": peak_rss_mib(),
            "useful_gflops_per_second": useful / seconds / 1e9,
            "share_of_peak": useful / seconds / 1e9 / peak,
        });
        eprintln!("{name}: {result}");
        backends.insert(name.to_string(), result);
    }
    let gauge = backends["burn-flex"].clone();

    let out = Command::new("python3")
        .args([reference.as_str(), chunks_path.to_str().unwrap(), "--column", "text", "--threads", "2", "--runs", "1"])
        .output()?;
    anyhow::ensure!(out.status.success(), "reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference_result: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("{}"))?;
    let ratio = gauge["tokens_per_second"].as_f64().unwrap() / reference_result["tokens_per_s"].as_f64().unwrap_or(f64::NAN);
    let result = serde_json::json!({
        "model": config.model,
        "chunks": chunks_dir.display().to_string(),
        "machine_peak_gflops_per_second": peak,
        "machine_peak_derivation": peak_how,
        "gauge": backends,
        "reference_onnxruntime_sentence_transformers": reference_result,
        "ratio_burn_flex_over_reference_tokens_per_second": ratio,
        "note": "same chunk texts (`text` column), same max length (256), both on this machine in this run; the reference is ../shared/reference/embed_throughput.py (ONNX EmbedOptions, 2 threads, sentence-transformers preprocessing and pooling), best of one run after a warm-up",
    });
    let text = serde_json::to_string_pretty(&result)?;
    if let Some(parent) = out_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out_path, text.clone() + "\n")?;
    println!("{text}");
    Ok(())
}

/// One harness run (see the module docs).
fn side(args: &[String]) -> anyhow::Result<()> {
    let usage = "usage: bench_embed side CHUNKS_DIR MODEL [N]";
    let chunks = read_chunks(&PathBuf::from(args.first().ok_or_else(|| anyhow::anyhow!(usage))?).join("chunks.parquet"))?;
    let model = args.get(1).cloned().ok_or_else(|| anyhow::anyhow!(usage))?;
    let limit = match args.get(2) {
        Some(n) => n.parse::<usize>().map_err(|_| anyhow::anyhow!("{usage}: N must be a count, not `{n}`"))?,
        None => chunks.len(),
    };
    let texts: Vec<&str> = chunks.iter().take(limit).map(|c| c.text.as_str()).collect();
    let embedder = load_embedder(&EmbedConfig { model, ..Default::default() }, &EmbedOptions::default())?;
    let warm = embedder.tokenize(&texts[..texts.len().min(64)])?;
    embedder.embed_ids(&warm, |_| {});
    let started = Instant::now();
    let ids = embedder.tokenize(&texts)?;
    let (vectors, stats) = embedder.embed_ids(&ids, |_| {});
    let seconds = started.elapsed().as_secs_f64();
    let vector_sum: f64 = vectors.iter().flatten().map(|&x| x as f64).sum();
    let cfg = embedder.encoder().config();
    let (p, h, layers) = (cfg.matmul_parameter_count() as f64, cfg.hidden_size() as f64, cfg.num_hidden_layers() as f64);
    let useful: f64 = ids.iter().map(|t| { let l = t.len() as f64; 2.0 * p * l + 4.0 * layers * l * l * h }).sum();
    let (peak, _) = gauge_core::machine::peak_f32_flops();
    let figures: std::collections::BTreeMap<String, f64> = [
        ("tokens_per_s", stats.tokens as f64 / seconds),
        ("texts_per_s", stats.texts as f64 / seconds),
        ("tokens", stats.tokens as f64),
        ("texts", stats.texts as f64),
        ("padding_share", stats.padding_share()),
        ("share_of_peak_flops", useful / seconds / peak),
        ("peak_rss_mib", peak_rss_mib()),
        ("vector_sum", vector_sum),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    gauge_bench::side::emit(&figures, serde_json::json!({ "backend": "burn-flex", "batches": stats.batches, "token_budget": EmbedOptions::default().token_budget, "threads": std::thread::available_parallelism().map_or(1, |n| n.get()) }));
    Ok(())
}
