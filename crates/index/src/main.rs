//! `index`: chunks + embeddings → a faiss index and a tantivy BM25 index.
fn main() {
    gauge_core::cli::stage_main::<gauge_index::Index>();
}
