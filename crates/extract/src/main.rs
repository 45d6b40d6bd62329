//! `extract`: documents (PDF, Markdown, text, JSONL) → `pages.parquet`.
fn main() {
    gauge_core::cli::stage_main::<gauge_extract::Extract>();
}
