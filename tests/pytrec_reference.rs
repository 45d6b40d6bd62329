//! gauge's per-question MRR, Hit@1/5/10 (trec_eval's `success` cutoffs), nDCG@k and Recall@k
//! against pytrec_eval (trec_eval's code) on the TREC files of the committed `eval/fra`:
//! - on every config's gold-item run (`trec/<config>.items.run` + `trec/items.qrels`: the
//!   ranking of gold pages the passages imply, from which gauge computes nDCG and recall), all
//!   four measures, every config, small-to-big included;
//! - on the chunk runs (`<config>.run` + `<config>.qrels`), MRR and hits, for every config whose
//!   judged passage is the chunk itself (small-to-big judges its window, which a chunk qrels
//!   line cannot say).
//!
//! The runs' scores are written strictly decreasing in gauge's order, so trec_eval's tie rule
//! (score, then document id) ranks them as gauge did. `just test` installs pytrec-eval-terrier.
use std::process::Command;

use gauge::repo_root;
use gauge_core::table::{read_parquet_any, Columns};

#[test]
fn mrr_and_hits_equal_pytrec_evals_on_the_committed_runs() {
    let python = gauge::refs_python();
    let root = repo_root();
    let ev = root.join("eval/fra");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(ev.join("manifest.json")).unwrap()).unwrap();
    let k = manifest["config"]["k"].as_u64().unwrap();
    let out = Command::new(&python).arg(root.join("scripts/pytrec_per_query.py")).arg(&ev).arg("recip_rank,success,ndcg_cut,recall").output().unwrap();
    assert!(out.status.success(), "pytrec_eval failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let variants = manifest["config"]["variants"].as_array().unwrap();
    let pq = read_parquet_any(&ev.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let (config, qid) = (c.strings_required("config"), c.strings_required("qid"));
    let ranks = [("recip_rank".to_string(), "reciprocal_rank"), ("success_1".into(), "hit_1"), ("success_5".into(), "hit_5"), ("success_10".into(), "hit_10")];
    let graded = [(format!("ndcg_cut_{k}"), "ndcg_10"), (format!("recall_{k}"), "recall")];
    let columns: Vec<(String, &str, Vec<Option<f64>>)> = ranks.iter().chain(&graded).map(|(m, col)| (m.clone(), *col, c.f64s(col))).collect();
    let (mut on_items, mut on_chunks, mut partial) = (0, 0, 0);
    for (i, v) in variants.iter().enumerate() {
        let name = v["name"].as_str().unwrap();
        let slug = gauge_evaluate::report::slug(i, name);
        let window = v["stages"]["retrieval"]["window"].as_u64().unwrap_or(0) > 0;
        for (run, measures) in [(format!("{slug}.items"), columns.len()), (slug.clone(), if window { 0 } else { ranks.len() })] {
            if measures == 0 {
                continue;
            }
            let runs = &reference[&run];
            assert!(runs.is_object(), "no pytrec_eval result for {run}");
            for row in (0..pq.num_rows()).filter(|&r| config[r] == name) {
                let theirs = &runs[&qid[row]];
                for (m, col, mine) in &columns[..measures] {
                    let (got, want) = (mine[row].unwrap(), theirs[m].as_f64().unwrap_or(0.0));
                    assert!((got - want).abs() < 1e-9, "{run} {}: {col} {got} (gauge) vs {m} {want} (trec_eval)", qid[row]);
                    partial += usize::from(*col == "ndcg_10" && got > 0.0 && got < 1.0);
                }
                if measures == columns.len() { on_items += 1 } else { on_chunks += 1 }
            }
        }
    }
    assert_eq!(on_items, pq.num_rows(), "every question row is compared on the gold-item runs");
    assert!(on_items >= 14 * 41 && on_chunks >= 13 * 41, "only {on_items} + {on_chunks} question rows compared");
    assert!(partial > 100, "only {partial} rows with 0 < nDCG < 1: the comparison would not see a wrong discount");
}
