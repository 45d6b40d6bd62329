//! The README documents every Parquet column exactly as the schema module defines it.
use gauge_core::schema::{markdown_table, ANSWER_COLUMNS, CHUNK_COLUMNS, EMBEDDING_COLUMNS, EMBED_TEXT_COLUMN, ERROR_COLUMNS, JUDGED_ANSWER_COLUMNS, SUMMARY_COLUMNS, METRIC_COLUMNS, FAILURE_COLUMNS, PAGE_COLUMNS, PER_QUERY_COLUMNS, RUN_COLUMNS, SEARCH_COLUMNS, SFT_COLUMNS, LOSS_CURVE_COLUMNS};

#[test]
fn readme_schema_tables_match_the_code() {
    let readme = std::fs::read_to_string(gauge::repo_root().join("README.md")).unwrap();
    for (name, cols) in [
        ("pages.parquet", PAGE_COLUMNS.to_vec()),
        ("errors.parquet", ERROR_COLUMNS.to_vec()),
        ("chunks.parquet", [CHUNK_COLUMNS, &[EMBED_TEXT_COLUMN], SUMMARY_COLUMNS].concat()),
        ("embeddings.parquet", EMBEDDING_COLUMNS.to_vec()),
        ("metrics.parquet", METRIC_COLUMNS.to_vec()),
        ("per_query.parquet", PER_QUERY_COLUMNS.to_vec()),
        ("failures.parquet", FAILURE_COLUMNS.to_vec()),
        ("runs.parquet", RUN_COLUMNS.to_vec()),
        ("search.parquet", SEARCH_COLUMNS.to_vec()),
        ("answers.parquet", ANSWER_COLUMNS.to_vec()),
        ("answers.parquet (evaluate)", JUDGED_ANSWER_COLUMNS.to_vec()),
        ("sft.parquet", SFT_COLUMNS.to_vec()),
        ("loss_curve.parquet", LOSS_CURVE_COLUMNS.to_vec()),
    ] {
        let table = markdown_table(&cols);
        assert!(readme.contains(&table), "README is missing or has a stale schema table for {name}; expected:\n{table}");
    }
}
