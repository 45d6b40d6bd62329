//! `gauge-bench`: runs a benchmark plan in interleaved A/B pairs, lists stale bench files, and
//! regenerates the README's speed table ([`gauge_bench::cli`]).
fn main() -> anyhow::Result<()> {
    gauge_bench::cli::main()
}
