//! The scale curve of the retrieval indexes (`just bench-scale` → bench/scale.json): build
//! time, size, query latency and recall@10 (against exact search) of faiss Flat, HNSW32 and
//! IVF-PQ over synthetic 384-d vectors, and tantivy BM25 over synthetic passages, at growing
//! corpus sizes on this machine, in one run.
//!
//! Vectors: a mixture of 1,000 Gaussian clusters in 384-d (unit centres, isotropic noise of
//! norm ≈ 0.6), normalised — embeddings have such structure, and uniform random vectors would make every
//! approximate index look worse than it is on real data. Queries: 200 other points of the same
//! mixture. Passages: 60 words drawn from a Zipf(1.0) vocabulary of 50,000 words, queries 3
//! words of the same distribution.
//!
//! `cargo run --release -p gauge-index --example bench_scale -- OUT.json [SIZES] [HNSW_MAX]`
use std::time::Instant;

use faiss::Index;
use gauge_core::rng::SplitMix64;

const DIM: usize = 384;
const CLUSTERS: usize = 1000;
const QUERIES: usize = 200;
const K: usize = 10;

fn gaussian(rng: &mut SplitMix64) -> f32 {
    // Box–Muller.
    let u1 = ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n.max(1e-12));
}

/// `n` points of the cluster mixture.
fn points(centres: &[f32], n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    let mut out = vec![0f32; n * DIM];
    for row in out.chunks_mut(DIM) {
        let c = rng.below(CLUSTERS);
        for (x, m) in row.iter_mut().zip(&centres[c * DIM..(c + 1) * DIM]) {
            *x = m + 0.6 * gaussian(&mut rng) / (DIM as f32).sqrt();
        }
        normalize(row);
    }
    out
}

fn dir_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path).map(|rd| rd.flatten().map(|e| if e.path().is_dir() { dir_size(&e.path()) } else { e.metadata().map(|m| m.len()).unwrap_or(0) }).sum()).unwrap_or(0)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}

fn top_k(index: &mut faiss::index::IndexImpl, queries: &[f32]) -> (Vec<Vec<i64>>, f64) {
    let started = Instant::now();
    let mut out = Vec::with_capacity(QUERIES);
    for q in queries.chunks(DIM) {
        let r = index.search(q, K).expect("search");
        out.push(r.labels.iter().map(|l| l.get().map_or(-1, |x| x as i64)).collect());
    }
    (out, started.elapsed().as_secs_f64() * 1e3 / QUERIES as f64)
}

fn recall(found: &[Vec<i64>], exact: &[Vec<i64>]) -> f64 {
    let hits: usize = found.iter().zip(exact).map(|(f, e)| f.iter().filter(|x| e.contains(x)).count()).sum();
    hits as f64 / (exact.len() * K) as f64
}

fn faiss_row(kind: &str, factory: &str, data: &[f32], queries: &[f32], exact: Option<&[Vec<i64>]>, params: &[(&str, f64)], dir: &std::path::Path) -> (serde_json::Value, Vec<Vec<i64>>) {
    let n = data.len() / DIM;
    let started = Instant::now();
    let mut index = gauge_index::build_faiss(data, DIM, factory).expect("build");
    let build = started.elapsed().as_secs_f64();
    for (p, v) in params {
        gauge_index::dense::set_parameter(&index, p, *v).expect("parameter");
    }
    let file = dir.join(format!("{kind}-{n}.faiss"));
    faiss::write_index(&index, file.to_str().unwrap()).expect("write");
    let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    std::fs::remove_file(&file).ok();
    let (found, latency) = top_k(&mut index, queries);
    let r = exact.map_or(1.0, |e| recall(&found, e));
    eprintln!("{kind:>7} n={n:>9}: build {build:8.2} s, {:8.1} MiB, {latency:7.3} ms/query, recall@10 {r:.3}", bytes as f64 / 1048576.0);
    (
        serde_json::json!({ "index": kind, "factory": factory, "n": n, "build_seconds": build, "bytes": bytes, "bytes_per_vector": bytes as f64 / n as f64, "query_ms": latency, "recall_at_10": r, "parameters": params.iter().map(|(p, v)| (p.to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>() }),
        found,
    )
}

fn zipf_words(rng: &mut SplitMix64, cdf: &[f64], n: usize) -> String {
    (0..n)
        .map(|_| {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let w = cdf.partition_point(|&c| c < u).min(cdf.len() - 1);
            format!("w{w}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn bm25_row(n: usize, dir: &std::path::Path) -> serde_json::Value {
    let vocab = 50_000;
    let weights: Vec<f64> = (1..=vocab).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    let cdf: Vec<f64> = weights.iter().map(|w| { acc += w / total; acc }).collect();
    let mut rng = SplitMix64::new(7);
    let chunks: Vec<gauge_core::schema::ChunkRecord> = (0..n)
        .map(|i| gauge_core::schema::ChunkRecord {
            chunk_id: format!("{i:016x}"),
            doc_id: format!("d{}", i / 100),
            source: format!("doc{}.pdf", i / 100),
            doc_type: String::new(),
            title: String::new(),
            section: String::new(),
            page_start: 1,
            page_end: 1,
            char_start: 0,
            char_end: 0,
            chunk_index: (i % 100) as i32,
            prev_chunk_id: None,
            next_chunk_id: None,
            text: zipf_words(&mut rng, &cdf, 60),
            embed_text: None,
            level: 0,
            children: Vec::new(),
        })
        .collect();
    let path = dir.join(format!("bm25-{n}"));
    let started = Instant::now();
    gauge_index::write_bm25(&path, &chunks, false).expect("bm25");
    let build = started.elapsed().as_secs_f64();
    let bytes = dir_size(&path);
    let index = tantivy::Index::open_in_dir(&path).expect("open");
    gauge_index::register_tokenizer(&index, false);
    let reader = index.reader().expect("reader");
    let searcher = reader.searcher();
    let (_, fields) = gauge_index::bm25_schema();
    let queries: Vec<String> = (0..QUERIES).map(|_| zipf_words(&mut rng, &cdf, 3)).collect();
    let started = Instant::now();
    for q in &queries {
        let parser = tantivy::query::QueryParser::for_index(&index, vec![fields.text]);
        let query = parser.parse_query(q).expect("query");
        let _ = searcher.search(&query, &tantivy::collector::TopDocs::with_limit(K).order_by_score()).expect("search");
    }
    let latency = started.elapsed().as_secs_f64() * 1e3 / QUERIES as f64;
    drop(chunks);
    std::fs::remove_dir_all(&path).ok();
    eprintln!("   BM25 n={n:>9}: build {build:8.2} s, {:8.1} MiB, {latency:7.3} ms/query", bytes as f64 / 1048576.0);
    serde_json::json!({ "index": "BM25", "n": n, "build_seconds": build, "bytes": bytes, "bytes_per_passage": bytes as f64 / n as f64, "query_ms": latency })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).cloned().unwrap_or_else(|| "bench/scale.json".into());
    let sizes: Vec<usize> = args.get(2).map_or("10000,100000,1000000".into(), |s| s.clone()).split(',').map(|s| s.trim().parse().expect("sizes: comma-separated counts")).collect();
    let hnsw_max: usize = args.get(3).map_or(100_000, |s| s.parse().expect("HNSW_MAX: a count"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut rng = SplitMix64::new(1);
    let mut centres: Vec<f32> = (0..CLUSTERS * DIM).map(|_| gaussian(&mut rng)).collect();
    centres.chunks_mut(DIM).for_each(normalize);
    let queries = points(&centres, QUERIES, 99);
    let mut rows = Vec::new();
    for &n in &sizes {
        let data = points(&centres, n, n as u64);
        let (flat, exact) = faiss_row("Flat", "Flat", &data, &queries, None, &[], tmp.path());
        rows.push(flat);
        if n <= hnsw_max {
            rows.push(faiss_row("HNSW32", "HNSW32", &data, &queries, Some(&exact), &[("efSearch", 64.0)], tmp.path()).0);
        }
        let nlist = ((n as f64).sqrt().round() as usize).clamp(16, 4096);
        let nprobe = 16.0f64.min(nlist as f64);
        rows.push(faiss_row("IVF-PQ", &format!("IVF{nlist},PQ48np"), &data, &queries, Some(&exact), &[("nprobe", nprobe)], tmp.path()).0);
        drop(data);
        rows.push(bm25_row(n, tmp.path()));
    }
    let (peak, how) = gauge_core::machine::peak_f32_flops();
    let report = serde_json::json!({
        "what": "faiss Flat / HNSW32 (efSearch 64) / IVF√n,PQ48 (nprobe 16) over synthetic 384-d vectors (1,000-cluster Gaussian mixture, normalised) and tantivy BM25 over synthetic 60-word Zipf passages; one query at a time, 200 queries, k = 10; recall@10 against Flat on the same vectors; size = the serialised index (faiss file, tantivy directory)",
        "dimension": DIM,
        "machine": { "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), "peak_f32_flops": peak, "peak_how": how, "memory_limit_bytes": 24u64 << 30 },
        "peak_rss_mib": rss_mib(),
        "rows": rows,
    });
    if let Some(parent) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(parent).ok();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap() + "\n").expect("write report");
    println!("{out}");
}
