//! `chunk`: `pages.parquet` → `chunks.parquet`.
fn main() {
    gauge_core::cli::stage_main::<gauge_chunk::Chunk>();
}
