//! `raptor`: a chunk artifact and its embeddings → the chunks plus RAPTOR summary nodes.
fn main() {
    gauge_core::cli::stage_main::<gauge_raptor::Raptor>();
}
