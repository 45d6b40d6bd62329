//! The Rust half of `scripts/gpu-check.sh`: embedding and faiss on a chosen device, with
//! timings, for comparison with PyTorch / sentence-transformers in the same run.
//!
//! ```text
//! gpu_check embed MODEL_DIR TEXTS_JSONL DEVICE OUT_F32 [MAX_LENGTH]
//!     embeds every line's "text" on DEVICE (cpu, cuda[:N]); writes the vectors as raw
//!     little-endian f32 (rows × dim) to OUT_F32 and prints one JSON line of timings
//!     (a warm-up pass first, so CUDA kernel compilation is not timed).
//! gpu_check faiss N DIM QUERIES DEVICES OUT_JSON
//!     N random unit vectors around random centres (seeded), Flat and IVF-PQ built and searched on each of DEVICES
//!     (comma-separated: cpu,cuda); recall@10 against exact search; writes OUT_JSON.
//! ```
//! Built by `just build-gpu` with `--features cuda,faiss-gpu`, and by the CPU half of the
//! check without them.
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gauge_core::rng::SplitMix64;
use gauge_embed::{load_embedder, EmbedConfig, EmbedOptions};
use gauge_index::dense::{self, DenseIndex, FaissDevice};

fn main() -> Result<()> {
    main_with(std::env::args().collect())
}

/// The example's body on an argument list (program name first): also the `embed` and `faiss`
/// subcommands of `gauge-gpu-check`, the GPU bundle's one binary.
pub fn main_with(args: Vec<String>) -> Result<()> {
    let args: Vec<String> = args.into_iter().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("embed") if args.len() >= 5 => embed(&args[1..]),
        Some("faiss") if args.len() == 6 => faiss_bench(&args[1..]),
        _ => bail!("usage: gpu_check embed MODEL_DIR TEXTS_JSONL DEVICE OUT_F32 [MAX_LENGTH] | gpu_check faiss N DIM QUERIES DEVICES OUT_JSON"),
    }
}

fn embed(args: &[String]) -> Result<()> {
    let (model, texts_path, device, out) = (&args[0], PathBuf::from(&args[1]), &args[2], PathBuf::from(&args[3]));
    let max_length = args.get(4).map(|s| s.parse::<usize>()).transpose().context("MAX_LENGTH")?;
    let file = std::fs::File::open(&texts_path).with_context(|| format!("{}: cannot open", texts_path.display()))?;
    let mut texts = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        let value: serde_json::Value = serde_json::from_str(&line).with_context(|| format!("{}:{}: not JSON", texts_path.display(), i + 1))?;
        texts.push(value["text"].as_str().with_context(|| format!("{}:{}: no \"text\"", texts_path.display(), i + 1))?.to_string());
    }
    let t = Instant::now();
    let config = EmbedConfig { model: model.clone(), max_length, ..EmbedConfig::default() };
    let embedder = load_embedder(&config, &EmbedOptions { device: device.clone(), ..EmbedOptions::default() })?;
    let load_s = t.elapsed().as_secs_f64();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // Warm-up: one pass over a slice of the texts (CUDA compiles its kernels on first use).
    let warm = embedder.tokenize(&refs[..refs.len().min(256)])?;
    let t = Instant::now();
    embedder.embed_ids(&warm, |_| {});
    let warmup_s = t.elapsed().as_secs_f64();
    // The timed region is text in, vectors out — tokenisation included, as in
    // sentence-transformers' `encode`, the reference it is compared with.
    let t = Instant::now();
    let ids = embedder.tokenize(&refs)?;
    let tokenize_s = t.elapsed().as_secs_f64();
    let (vectors, stats) = embedder.embed_ids(&ids, |_| {});
    let seconds = t.elapsed().as_secs_f64();
    let dim = embedder.info.dimension;
    let tmp = out.with_extension("partial");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?);
    for v in &vectors {
        anyhow::ensure!(v.len() == dim, "vector of {} values, expected {dim}", v.len());
        for x in v {
            w.write_all(&x.to_le_bytes())?;
        }
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, &out)?;
    println!(
        "{}",
        serde_json::json!({
            "device": device, "texts": texts.len(), "dim": dim, "tokens": stats.tokens, "padded_tokens": stats.padded_tokens,
            "batches": stats.batches, "load_seconds": load_s, "warmup_seconds": warmup_s, "seconds": seconds, "tokenize_seconds": tokenize_s,
            "timed": "tokenisation + embedding",
            // Burn's CUDA matmuls (cubecl) may use TF32 tensor cores for f32 inputs; the CPU is strict f32.
            "math": if device.starts_with("cuda") { "f32 storage, TF32-capable matmuls" } else { "strict f32" },
            "texts_per_second": texts.len() as f64 / seconds, "tokens_per_second": stats.tokens as f64 / seconds,
        })
    );
    Ok(())
}

/// `n` unit vectors drawn around `clusters` random centres (centre + noise of the same
/// scale, normalised): random data with the cluster structure real embeddings have, so that
/// recall@10 of an approximate index means something (on uniform noise every index is lost).
/// Seeded: the same `seed` gives the same vectors.
fn clustered_unit_vectors(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    let mut uniform = move || ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
    let mut centres: Vec<f32> = (0..clusters * dim).map(|_| uniform()).collect();
    normalise_rows(&mut centres, dim);
    let mut pick = SplitMix64::new(seed ^ 0x9e37_79b9);
    let mut v = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = pick.below(clusters);
        for j in 0..dim {
            v.push(centres[c * dim + j] + 0.06 * uniform());
        }
    }
    normalise_rows(&mut v, dim);
    v
}

fn normalise_rows(v: &mut [f32], dim: usize) {
    for row in v.chunks_exact_mut(dim) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        row.iter_mut().for_each(|x| *x /= norm);
    }
}

fn labels(res: &faiss::index::SearchResult, k: usize) -> Vec<Vec<i64>> {
    res.labels.chunks(k).map(|row| row.iter().map(|l| l.get().map_or(-1, |x| x as i64)).collect()).collect()
}

fn recall_at(found: &[Vec<i64>], exact: &[Vec<i64>]) -> f64 {
    let hits: usize = found.iter().zip(exact).map(|(f, e)| f.iter().filter(|x| **x >= 0 && e.contains(x)).count()).sum();
    hits as f64 / exact.iter().map(Vec::len).sum::<usize>().max(1) as f64
}

fn faiss_bench(args: &[String]) -> Result<()> {
    let n: usize = args[0].parse().context("N")?;
    let dim: usize = args[1].parse().context("DIM")?;
    let nq: usize = args[2].parse().context("QUERIES")?;
    let devices: Vec<FaissDevice> = args[3].split(',').map(|d| d.parse().map_err(anyhow::Error::msg)).collect::<Result<_>>()?;
    let out = PathBuf::from(&args[4]);
    let k = 10;
    let t = Instant::now();
    let clusters = (n / 100).clamp(8, 10_000);
    let base = clustered_unit_vectors(n, dim, clusters, 42);
    let queries = clustered_unit_vectors(nq, dim, clusters, 42 ^ 7);
    eprintln!("gpu_check faiss: {n} × {dim} random vectors around {clusters} centres in {:.1} s", t.elapsed().as_secs_f64());
    // nlist ≈ 4·√n (faiss's guideline) up to 1024 (k-means training time grows with it), PQ
    // with 12 dimensions per sub-quantizer.
    let nlist = ((4.0 * (n as f64).sqrt()) as usize).clamp(16, 1024);
    // `np`: no polysemous training (faiss's default for IVF-PQ factory strings, minutes of
    // simulated annealing on the CPU that plain PQ search never uses; the GPU skips it too).
    let ivfpq = format!("IVF{nlist},PQ{}np", dim / 12);
    let nprobe = 32.min(nlist);
    let mut exact: Option<Vec<Vec<i64>>> = None;
    let mut rows = Vec::new();
    for description in ["Flat", ivfpq.as_str()] {
        for &device in &devices {
            let t = Instant::now();
            let cpu = dense::build(&base, dim, description, device).with_context(|| format!("{description} on {device}"))?;
            let build_s = t.elapsed().as_secs_f64();
            if description != "Flat" {
                dense::set_parameter(&cpu, "nprobe", nprobe as f64)?;
            }
            let t = Instant::now();
            let mut index = if device.is_cpu() { DenseIndex::Cpu(cpu) } else { DenseIndex::copy_to(&cpu, device)? };
            let place_s = t.elapsed().as_secs_f64();
            // One warm-up query (GPU streams and scratch memory), then the timed batch.
            index.search(&queries[..dim], k)?;
            let t = Instant::now();
            let res = index.search(&queries, k)?;
            let search_s = t.elapsed().as_secs_f64();
            let found = labels(&res, k);
            if description == "Flat" && device.is_cpu() {
                exact = Some(found.clone());
            }
            let recall = exact.as_ref().map(|e| recall_at(&found, e));
            eprintln!("gpu_check faiss: {description} on {device}: build {build_s:.2} s, search {nq} × top-{k} {search_s:.3} s, recall@10 {recall:?}");
            rows.push(serde_json::json!({
                "index": description, "device": device.to_string(), "vectors": n, "dim": dim, "queries": nq, "k": k,
                "nprobe": if description == "Flat" { None } else { Some(nprobe) },
                "build_seconds": build_s, "to_device_seconds": place_s, "search_seconds": search_s,
                "queries_per_second": nq as f64 / search_s, "recall_at_10": recall,
            }));
        }
    }
    let report = serde_json::json!({ "exact_reference": "Flat on cpu", "data": format!("{n} unit vectors around {clusters} random centres (seeded)"), "runs": rows });
    std::fs::write(&out, serde_json::to_string(&report)? + "\n").with_context(|| format!("{}: cannot write", out.display()))?;
    Ok(())
}
