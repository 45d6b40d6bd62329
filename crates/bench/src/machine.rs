//! The machine's state, recorded before and after a bench: what could make a figure move.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// What the host is and how busy it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineState {
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// The SIMD flags of /proc/cpuinfo that matter to the kernels (sse…, avx…, fma, f16c, amx…).
    pub cpu_flags: Vec<String>,
    /// Logical cores this process may use.
    pub cores: usize,
    /// The first core's cpufreq governor, where readable.
    pub governor: Option<String>,
    /// /proc/loadavg's 1-, 5- and 15-minute load averages.
    pub load_average: [f64; 3],
    /// When it was observed (UTC, RFC 3339).
    pub at: String,
}

impl MachineState {
    /// The state now.
    pub fn observe() -> MachineState {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| info.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string());
        let simd = ["sse", "ssse3", "avx", "fma", "f16c", "amx", "vnni", "bmi2", "neon", "asimd", "sve"];
        let cpu_flags = field("flags").or_else(|| field("Features")).unwrap_or_default().split_whitespace().filter(|f| simd.iter().any(|p| f.starts_with(p) || f.contains("vnni"))).map(str::to_string).collect();
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut l = load.split_whitespace().map(|v| v.parse::<f64>().unwrap_or(f64::NAN));
        MachineState {
            cpu_model: field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
            cpu_flags,
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            governor: std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").ok().map(|g| g.trim().to_string()),
            load_average: [l.next().unwrap_or(f64::NAN), l.next().unwrap_or(f64::NAN), l.next().unwrap_or(f64::NAN)],
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }
}

/// This process's resident memory now, MiB (/proc/self/statm; NaN where unreadable): the
/// baseline that "memory above baseline" figures subtract from the peak.
pub fn current_rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// Read bandwidth in bytes/s: summing a 512 MiB buffer (far past the caches) on every core; the
/// best of five passes.
pub fn read_bandwidth() -> f64 {
    use rayon::prelude::*;
    let n = 128 << 20;
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

/// The machine's limits for "share of" figures: read bandwidth (measured now) and peak f32
/// FLOP/s (computed, with how).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limits {
    /// Measured read bandwidth, bytes/s.
    pub read_bandwidth_bytes_per_s: f64,
    /// Peak f32 FLOP/s.
    pub peak_f32_flops: f64,
    /// How the peak was computed.
    pub peak_how: String,
}

impl Limits {
    /// Measures the bandwidth and computes the peak.
    pub fn measure() -> Limits {
        let (peak, how) = gauge_core::machine::peak_f32_flops();
        Limits { read_bandwidth_bytes_per_s: read_bandwidth(), peak_f32_flops: peak, peak_how: how }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observes_this_host() {
        let m = MachineState::observe();
        assert!(m.cores >= 1);
        assert!(!m.cpu_model.is_empty());
        if std::path::Path::new("/proc/loadavg").exists() {
            assert!(m.load_average.iter().all(|l| l.is_finite() && *l >= 0.0), "{:?}", m.load_average);
        }
        assert!(read_bandwidth() > 1e8);
    }
}
