//! gauge's per-question MRR and Hit@1/5/10 (trec_eval's `success` cutoffs) against pytrec_eval (trec_eval's code) on the TREC run
//! and qrels files of the committed `eval/fra`: equal for every config whose judged passage is
//! the chunk itself (small-to-big judges its window, which trec_eval cannot see). The runs'
//! scores are written strictly decreasing in gauge's order, so trec_eval's tie rule (score,
//! then document id) ranks them as gauge did. `just test` installs pytrec-eval-terrier.
use std::process::Command;

use gauge::repo_root;
use gauge_core::table::{read_parquet_any, Columns};

#[test]
fn mrr_and_hits_equal_pytrec_evals_on_the_committed_runs() {
    let python = gauge::refs_python();
    let root = repo_root();
    let ev = root.join("eval/fra");
    let out = Command::new(&python).arg(root.join("scripts/pytrec_per_query.py")).arg(&ev).output().unwrap();
    assert!(out.status.success(), "pytrec_eval failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(ev.join("manifest.json")).unwrap()).unwrap();
    let variants = manifest["config"]["variants"].as_array().unwrap();
    let pq = read_parquet_any(&ev.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let (config, qid, rr) = (c.strings_required("config"), c.strings_required("qid"), c.f64s("reciprocal_rank"));
    let hits: Vec<(&str, Vec<Option<f64>>)> = [("success_1", "hit_1"), ("success_5", "hit_5"), ("success_10", "hit_10")].into_iter().map(|(m, col)| (m, c.f64s(col))).collect();
    let mut compared = 0;
    for (i, v) in variants.iter().enumerate() {
        let name = v["name"].as_str().unwrap();
        if v["stages"]["retrieval"]["window"].as_u64().unwrap_or(0) > 0 {
            continue;
        }
        let slug = gauge_evaluate::report::slug(i, name);
        let runs = &reference[&slug];
        assert!(runs.is_object(), "no pytrec_eval result for {slug}");
        for row in (0..pq.num_rows()).filter(|&r| config[r] == name) {
            let theirs = &runs[&qid[row]];
            let get = |m: &str| theirs[m].as_f64().unwrap_or(0.0);
            assert!((get("recip_rank") - rr[row].unwrap()).abs() < 1e-9, "{name} {}: MRR {} (gauge) vs {} (trec_eval)", qid[row], rr[row].unwrap(), get("recip_rank"));
            for (m, col) in &hits {
                assert!((get(m) - col[row].unwrap()).abs() < 1e-9, "{name} {}: {m} {} (gauge) vs {} (trec_eval)", qid[row], col[row].unwrap(), get(m));
            }
            compared += 1;
        }
    }
    assert!(compared >= 12 * 41, "only {compared} question rows compared");
}
