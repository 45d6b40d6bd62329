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
//!
//! The same binary is gauge's side of the harness comparison with faiss's own Python wheel
//! (`scripts/bench-scale.sh`, `gauge-bench`; the reference side is `scripts/bench_faiss_python.py`):
//! `bench_scale vectors DIR N` writes N mixture points and the 200 queries as raw little-endian
//! f32 (`DIR/data.f32`, `DIR/queries.f32`); `bench_scale side DIR IVF_N` reads them, builds and
//! searches Flat and HNSW32 over all of them and IVF-PQ over the first IVF_N, and prints one flat
//! JSON object of figures (the harness's `json` format).
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
    gauge_index::write_bm25(&path, &chunks, Default::default()).expect("bm25");
    let build = started.elapsed().as_secs_f64();
    let bytes = dir_size(&path);
    let index = tantivy::Index::open_in_dir(&path).expect("open");
    gauge_index::register_tokenizer(&index, Default::default());
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

/// Writes `v` as raw little-endian f32.
fn write_f32(path: &std::path::Path, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e} (write it with `bench_scale vectors DIR N`)", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// `vectors DIR N`: the mixture's first N points and its queries, for both sides.
fn write_vectors(dir: &std::path::Path, n: usize) {
    std::fs::create_dir_all(dir).expect("vectors dir");
    let centres = mixture_centres();
    write_f32(&dir.join("data.f32"), &points(&centres, n, n as u64));
    write_f32(&dir.join("queries.f32"), &points(&centres, QUERIES, 99));
}

/// Times `f` in seconds.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed().as_secs_f64())
}

/// `side DIR IVF_N`: one run of gauge's side of the faiss comparison, printed as one flat JSON
/// object (what `scripts/bench_faiss_python.py` prints for the wheel).
fn side(dir: &std::path::Path, ivf_n: usize) {
    let data = read_f32(&dir.join("data.f32"));
    let queries = read_f32(&dir.join("queries.f32"));
    let n = data.len() / DIM;
    let ivf_n = ivf_n.min(n);
    let build = |factory: &str, rows: &[f32]| timed(|| gauge_index::build_faiss(rows, DIM, factory).expect("build"));
    let (mut flat, flat_build) = build("Flat", &data);
    let (exact, flat_ms) = top_k(&mut flat, &queries);
    drop(flat);
    let (mut hnsw, hnsw_build) = build("HNSW32", &data);
    gauge_index::dense::set_parameter(&hnsw, "efSearch", 64.0).expect("efSearch");
    let (found, hnsw_ms) = top_k(&mut hnsw, &queries);
    drop(hnsw);
    let nlist = ((ivf_n as f64).sqrt().round() as usize).clamp(16, 4096);
    let (mut ivf, ivf_build) = build(&format!("IVF{nlist},PQ48np"), &data[..ivf_n * DIM]);
    gauge_index::dense::set_parameter(&ivf, "nprobe", 16.0f64.min(nlist as f64)).expect("nprobe");
    let (ivf_found, ivf_ms) = top_k(&mut ivf, &queries);
    let (mut ivf_flat, _) = build("Flat", &data[..ivf_n * DIM]);
    let (ivf_exact, _) = top_k(&mut ivf_flat, &queries);
    let figures = serde_json::json!({
        "vectors": n, "ivf_vectors": ivf_n, "queries": queries.len() / DIM,
        "flat_build_s": flat_build, "flat_query_ms": flat_ms,
        "flat_top1_sum": exact.iter().map(|r| r[0]).sum::<i64>(),
        "hnsw_build_s": hnsw_build, "hnsw_query_ms": hnsw_ms, "hnsw_recall_at_10": recall(&found, &exact),
        "ivfpq_build_s": ivf_build, "ivfpq_query_ms": ivf_ms, "ivfpq_recall_at_10": recall(&ivf_found, &ivf_exact),
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    });
    println!("{figures}");
}

fn mixture_centres() -> Vec<f32> {
    let mut rng = SplitMix64::new(1);
    let mut centres: Vec<f32> = (0..CLUSTERS * DIM).map(|_| gaussian(&mut rng)).collect();
    centres.chunks_mut(DIM).for_each(normalize);
    centres
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_scale vectors DIR N | bench_scale side DIR IVF_N | bench_scale OUT.json [SIZES] [HNSW_MAX]";
    let count = |what: &str| -> usize { args.get(3).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{usage} ({what}: a count)")) };
    let dir = || std::path::PathBuf::from(args.get(2).unwrap_or_else(|| panic!("{usage}")));
    match args.get(1).map(String::as_str) {
        Some("vectors") => return write_vectors(&dir(), count("N")),
        Some("side") => return side(&dir(), count("IVF_N")),
        _ => {}
    }
    let out = args.get(1).cloned().unwrap_or_else(|| "bench/scale.json".into());
    let sizes: Vec<usize> = args.get(2).map_or("10000,100000,1000000".into(), |s| s.clone()).split(',').map(|s| s.trim().parse().expect("sizes: comma-separated counts")).collect();
    let hnsw_max: usize = args.get(3).map_or(100_000, |s| s.parse().expect("HNSW_MAX: a count"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let centres = mixture_centres();
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
