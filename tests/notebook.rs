//! The committed analysis notebook stays diff-friendly: no stored outputs or execution counts,
//! and it reads every Parquet table the README documents for an evaluation.
#[test]
fn the_notebook_is_committed_without_outputs() {
    let path = gauge::repo_root().join("notebooks/analysis.ipynb");
    let nb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let cells = nb["cells"].as_array().unwrap();
    assert!(cells.len() >= 8);
    for (i, c) in cells.iter().enumerate().filter(|(_, c)| c["cell_type"] == "code") {
        assert_eq!(c["outputs"], serde_json::json!([]), "cell {i} has stored outputs; clear them before committing");
        assert!(c["execution_count"].is_null(), "cell {i} has an execution count");
    }
    let text: String = cells.iter().map(|c| match &c["source"] { serde_json::Value::String(s) => s.clone(), v => v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default() }).collect();
    for table in ["metrics.parquet", "per_query.parquet", "runs.parquet", "chunks.parquet", "pages.parquet", "answers.parquet", "manifest.json"] {
        assert!(text.contains(table), "the notebook never reads {table}");
    }
}
