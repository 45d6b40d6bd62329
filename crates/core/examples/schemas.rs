//! Prints the README's schema tables: `cargo run --example schemas -p gauge-core`.
use gauge_core::schema::{markdown_table, ANSWER_COLUMNS, CHUNK_COLUMNS, EMBEDDING_COLUMNS, EMBED_TEXT_COLUMN, ERROR_COLUMNS, JUDGED_ANSWER_COLUMNS, SUMMARY_COLUMNS, METRIC_COLUMNS, FAILURE_COLUMNS, PAGE_COLUMNS, PER_QUERY_COLUMNS, RUN_COLUMNS};

fn main() {
    println!("### pages.parquet\n\n{}", markdown_table(PAGE_COLUMNS));
    println!("### errors.parquet\n\n{}", markdown_table(ERROR_COLUMNS));
    println!("### chunks.parquet\n\n{}", markdown_table(&[CHUNK_COLUMNS, &[EMBED_TEXT_COLUMN], SUMMARY_COLUMNS].concat()));
    println!("### embeddings.parquet\n\n{}", markdown_table(EMBEDDING_COLUMNS));
    println!("### metrics.parquet\n\n{}", markdown_table(METRIC_COLUMNS));
    println!("### per_query.parquet\n\n{}", markdown_table(PER_QUERY_COLUMNS));
    println!("### failures.parquet\n\n{}", markdown_table(FAILURE_COLUMNS));
    println!("### runs.parquet\n\n{}", markdown_table(RUN_COLUMNS));
    println!("### answers.parquet\n\n{}", markdown_table(ANSWER_COLUMNS));
    println!("### answers.parquet (evaluate)\n\n{}", markdown_table(JUDGED_ANSWER_COLUMNS));
}
