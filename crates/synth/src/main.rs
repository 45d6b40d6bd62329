//! `synth-data`: questions with gold passages from a chunk artifact, by a teacher LLM or by
//! inverse cloze.
fn main() {
    gauge_core::cli::stage_main::<gauge_synth::Synth>();
}
