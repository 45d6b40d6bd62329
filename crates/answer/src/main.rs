//! `answer`: questions → retrieved passages → generated answers with checked citations.
fn main() {
    gauge_core::cli::stage_main::<gauge_answer::Answer>();
}
