//! `embed`: `chunks.parquet` → `embeddings.parquet`.
fn main() {
    gauge_core::cli::stage_main::<gauge_embed::Embed>();
}
