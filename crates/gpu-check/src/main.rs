//! `gauge-gpu-check`: see the library docs.
fn main() -> anyhow::Result<()> {
    gauge_gpu_check::run(std::env::args().collect())
}
