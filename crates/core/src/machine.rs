//! The machine's limits, for benchmarks that report a share of them.

/// Peak f32 FLOP/s of this machine: cores × clock × FLOPs per cycle (two FMA units of 16 lanes
/// with AVX-512, 8 with AVX2; an FMA is 2 FLOPs), and how it was computed.
pub fn peak_f32_flops() -> (f64, String) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mhz = info.lines().find(|l| l.starts_with("cpu MHz")).and_then(|l| l.split(':').nth(1)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(2000.0);
    let lanes = if info.contains("avx512f") { 16.0 } else { 8.0 };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    (cores * mhz * 1e6 * lanes * 2.0 * 2.0, format!("{cores} cores × {mhz:.0} MHz × {lanes} f32 lanes × 2 FMA units × 2"))
}
