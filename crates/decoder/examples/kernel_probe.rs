//! The integer kernels alone, one thread: nanoseconds of CPU time per weight block for
//! SmolLM2-135M's matrix shapes, on every kernel path this machine runs, for 1 and 4
//! activation rows, ggml's row-major blocks and the repacked groups ([`repack`]); and, for the
//! K-quants, the int8 prompt GEMM ([`prompt_k`]) over 64 prompt rows. CPU time (the thread's own, from `/proc/thread-self/schedstat`), so a busy
//! machine changes the figures little. A probe for kernel work, not a benchmark of record
//! (`just bench-generate` is that).
//!
//! `cargo run --release --example kernel_probe [milliseconds per figure]`
use gauge_decoder::gguf::GgmlType;
use gauge_decoder::kernels::{dot_matrix, KernelPath, Q8Rows, Row};
use gauge_decoder::{prompt_k, repack};

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// Nanoseconds of this thread's CPU time per call of `run`, after one warm-up call. The CPU
/// time advances in scheduler ticks: runs until ≥ `ms` of it.
fn cpu_ns_per_run(ms: u64, mut run: impl FnMut()) -> f64 {
    run();
    let (t0, mut runs) = (cpu_ns(), 0u64);
    while cpu_ns() - t0 < ms * 1_000_000 {
        run();
        runs += 1;
    }
    (cpu_ns() - t0) as f64 / runs as f64
}

fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let (per, bytes) = ty.block();
    let nb = rows * cols / per;
    let mut out = Vec::with_capacity(nb * bytes);
    for _ in 0..nb {
        let start = out.len();
        for _ in 0..bytes {
            out.push(next() as u8);
        }
        // Sane f16 scales (and Q4_1's minimum; Q6_K's scale ends its block).
        let d = half::f16::from_f32(0.01 + (next() % 100) as f32 * 1e-4).to_le_bytes();
        let at = if ty == GgmlType::Q6K { start + 208 } else { start };
        out[at..at + 2].copy_from_slice(&d);
        if ty == GgmlType::Q4_1 {
            let m = half::f16::from_f32(-0.05).to_le_bytes();
            out[start + 2..start + 4].copy_from_slice(&m);
        }
    }
    out
}

fn main() {
    let ms: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let shapes = [("q4_1 gate_up 3072x576", GgmlType::Q4_1, 3072, 576), ("q4_1 down 576x1536", GgmlType::Q4_1, 576, 1536), ("q8_0 head 49152x576", GgmlType::Q8_0, 49152, 576), ("q4_k gate_up 512x1536", GgmlType::Q4K, 512, 1536), ("q6_k down 256x8960", GgmlType::Q6K, 256, 8960)];
    let only = std::env::args().nth(2);
    for (name, ty, rows, cols) in shapes {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        let w = random_matrix(ty, rows, cols, 7);
        let packed = repack::pack(ty, &w, rows);
        let rb = cols / ty.block().0 * ty.block().1;
        for n in [1usize, 4] {
            let x: Vec<f32> = (0..n * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
            let mut q8 = Q8Rows::default();
            q8.quantize(&x, cols);
            let xs: Vec<Row<'_>> = (0..n).map(|r| q8.row(r)).collect();
            let mut out = vec![0f32; rows * n];
            for (path, layout) in KernelPath::available().into_iter().flat_map(|p| [(p, "rows"), (p, "packed")]) {
                let run = |out: &mut [f32]| match layout {
                    "rows" => dot_matrix(path, ty, &w, rb, &xs, out),
                    _ => repack::dot_packed(path, ty, &packed, cols / ty.block().0, &xs, out),
                };
                let ns = cpu_ns_per_run(ms, || run(&mut out));
                // Per 32 weights, whatever the format's block.
                let blocks = (rows * cols / 32) as f64;
                println!("{name:24} rows {n}  {:10} {layout:6}  {:6.2} ns/block  {:6.2} ns/block/row  {:5.1} GB/s of weights", path.name(), ns / blocks, ns / blocks / n as f64, w.len() as f64 / ns);
            }
        }
        // The prompt GEMM (one 8-bit level, tiles of prompt rows): K-quants only.
        if !KernelPath::available().into_iter().any(|p| prompt_k::runs(ty, p)) {
            continue;
        }
        let n = 64;
        let x: Vec<f32> = (0..n * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let mut pr = prompt_k::PromptRows::default();
        pr.quantize(&x, cols);
        let xs: Vec<prompt_k::PromptRow<'_>> = (0..n).map(|r| pr.row(r)).collect();
        let mut out = vec![0f32; rows * n];
        for path in KernelPath::available().into_iter().filter(|&p| prompt_k::runs(ty, p)) {
            // SAFETY: `out` is n × rows, written by this call only.
            let run = |out: &mut [f32]| unsafe { prompt_k::gemm(path, ty, &packed, cols / 256, &xs, out.as_mut_ptr(), rows) };
            let ns = cpu_ns_per_run(ms, || run(&mut out));
            let blocks = (rows * cols / 32) as f64;
            println!("{name:24} rows {n} {:10} prompt  {:6.2} ns/block/row  {:5.1} G multiply-adds/s", path.name(), ns / blocks / n as f64, (rows * cols * n) as f64 / ns);
        }
    }
}
