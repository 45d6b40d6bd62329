//! `evaluate`: runs a pipeline's ablation (upstream stages cached) and writes the tables.
fn main() {
    gauge_core::cli::stage_main::<gauge_evaluate::Evaluate>();
}
