//! The standard benchmark formats end to end, each written here as a small fixture: a BEIR
//! folder (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`), a TREC collection (`<DOC>`
//! records, a `topics` file, a `qrels` file) and an MS MARCO folder (`collection.tsv`,
//! `queries.dev.tsv`, `qrels.dev.tsv`), all with graded judgements. Each evaluates with BM25,
//! and gauge's per-question MRR, Hit@1/5/10, nDCG@10 and recall@10 equal pytrec_eval's
//! (`recip_rank`, `success`, `ndcg_cut_10`, `recall_10`) on the run and qrels files gauge
//! wrote, ties included (gauge writes strictly decreasing scores in its own order): both on the
//! chunk run (`<config>.run` with `<config>.qrels`) and on the gold-item run
//! (`<config>.items.run` with `items.qrels`, the document ranking the passages imply).
//! `just test` installs pytrec-eval-terrier (`just refs-venv`).
use std::path::{Path, PathBuf};
use std::process::Command;

use gauge::{last_line, ok, repo_root, run, shared};
use gauge_core::table::{read_parquet_any, Columns};
use serde_json::json;

const DOCS: [(&str, &str); 10] = [
    ("d1", "Crossing gate arms must be fully lowered before the train reaches the crossing; the gate descent time is recorded."),
    ("d2", "Flashing lights at a highway crossing flash between thirty five and sixty five times per minute."),
    ("d3", "A leaking tank car of hazardous materials may be moved only to the nearest place of repair."),
    ("d4", "Roadway workers need on track safety before fouling a track; a watchman warns them of approaching trains."),
    ("d5", "Air brakes are tested before a train departs the yard and the brake pipe pressure is written on the test form."),
    ("d6", "A lanyard connects a body harness to an anchorage; bridge workers use fall protection above twelve feet."),
    ("d7", "Highway crossing warning systems combine gate arms, flashing lights and a bell, inspected monthly."),
    ("d8", "Hazardous materials shipping papers travel with the train crew and list every tank car in the train."),
    ("d9", "Brake tests at the yard: the inspector records the brake pipe leakage and the air pressure at the rear car."),
    ("d10", "Bridge workers must wear a harness when working above the water; the anchorage is inspected first."),
];

/// A query: id, text, judgements (doc, grade).
type Query = (&'static str, &'static str, &'static [(&'static str, i32)]);

const QUERIES: [Query; 6] = [
    ("q1", "how fast do crossing flashing lights flash", &[("d2", 2), ("d7", 1)]),
    ("q2", "moving a leaking hazardous materials tank car", &[("d3", 2), ("d8", 1)]),
    ("q3", "brake pipe pressure recorded in the yard test", &[("d9", 1), ("d5", 2)]),
    ("q4", "bridge worker harness anchorage fall protection", &[("d6", 1), ("d10", 1), ("d1", 0)]),
    ("q5", "crossing gate arms lowered", &[("d1", 1), ("d7", 3)]),
    ("q6", "watchman warns roadway workers on the track", &[("d4", 1)]),
];

fn pipeline(dir: &Path, name: &str, corpus: &str, golden: &str, extract: Option<serde_json::Value>) -> PathBuf {
    let fixture = shared().join("fixtures/tiny-bert-cross-encoder");
    let mut baseline = json!({
        "name": "BM25",
        "chunk": { "strategy": "recursive", "size": 2000, "overlap": 0, "filters": { "min_chars": 0 } },
        "embed": { "model": fixture.to_str().unwrap() },
        "retrieval": { "dense": false, "bm25": true, "promote_exact": false, "candidates": 10 },
    });
    if let Some(extract) = extract {
        baseline["extract"] = extract;
    }
    gauge::pipeline::pipeline(name).set("corpus", json!(corpus)).set("golden", json!(golden)).set("k", json!(10)).baseline(baseline).write(&dir.join(format!("{name}.toml")))
}

/// Evaluates a pipeline and compares every question's metrics with pytrec_eval's on the TREC
/// files written; returns how many rows had 0 < nDCG < 1 (the graded cases).
fn agrees_with_pytrec(dir: &Path, pipeline: &Path) -> usize {
    let art = dir.join("artifacts");
    let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", dir.join("eval").to_str().unwrap()]));
    let ev = PathBuf::from(last_line(&out));
    let python = gauge::refs_python();
    let out = Command::new(&python).arg(repo_root().join("scripts/pytrec_per_query.py")).arg(&ev).arg("recip_rank,success,ndcg_cut,recall").output().unwrap();
    assert!(out.status.success(), "pytrec_eval failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let chunk_runs = reference["00-bm25"].clone();
    let item_runs = reference["00-bm25.items"].clone();
    let qrels = std::fs::read_to_string(ev.join("trec/00-bm25.qrels")).unwrap();
    assert!(qrels.lines().any(|l| l.ends_with(" 2")), "graded judgements reach the qrels:\n{qrels}");
    let pq = read_parquet_any(&ev.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let qid = c.strings_required("qid");
    assert_eq!(pq.num_rows(), QUERIES.len(), "every judged query is a question");
    let pairs = [("recip_rank", "reciprocal_rank"), ("success_1", "hit_1"), ("success_5", "hit_5"), ("success_10", "hit_10"), ("ndcg_cut_10", "ndcg_10"), ("recall_10", "recall")];
    let mut graded = 0;
    for ((m, col), theirs) in pairs.iter().flat_map(|p| [(p, &chunk_runs), (p, &item_runs)]) {
        let mine = c.f64s(col);
        for (i, q) in qid.iter().enumerate() {
            let want = theirs[q][m].as_f64().unwrap_or_else(|| panic!("{}: no {m} for {q}", pipeline.display()));
            let got = mine[i].unwrap();
            assert!((got - want).abs() < 1e-9, "{} {q}: {col} {got} (gauge) vs {m} {want} (trec_eval)", pipeline.display());
            if *m == "ndcg_cut_10" && theirs == &item_runs && got > 0.0 && got < 1.0 {
                graded += 1;
            }
        }
    }
    graded
}

#[test]
fn beir_trec_and_ms_marco_evaluate_as_trec_eval_scores_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let judged = |line: &dyn Fn(&str, &str, i32) -> String| -> String {
        QUERIES.iter().flat_map(|(q, _, js)| js.iter().map(move |(d, g)| line(q, d, *g))).collect()
    };

    // BEIR: corpus.jsonl + queries.jsonl + qrels/test.tsv (a header line).
    let beir = root.join("beir");
    std::fs::create_dir_all(beir.join("qrels")).unwrap();
    std::fs::write(beir.join("corpus.jsonl"), DOCS.iter().map(|(id, t)| serde_json::json!({"_id": id, "title": "", "text": t}).to_string() + "\n").collect::<String>()).unwrap();
    std::fs::write(beir.join("queries.jsonl"), QUERIES.iter().map(|(id, t, _)| serde_json::json!({"_id": id, "text": t}).to_string() + "\n").collect::<String>()).unwrap();
    std::fs::write(beir.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\n".to_string() + &judged(&|q, d, g| format!("{q}\t{d}\t{g}\n"))).unwrap();
    let p = pipeline(root, "beir", "beir/corpus.jsonl", "beir", Some(json!({ "jsonl": { "id": "_id" } })));
    let mut graded = agrees_with_pytrec(root, &p);

    // TREC: <DOC> records (split over two files, one without a <TEXT> section), topics, qrels.
    let trec = root.join("trec");
    std::fs::create_dir_all(trec.join("docs")).unwrap();
    let doc = |(id, t): &(&str, &str)| if *id == "d4" { format!("<DOC>\n<DOCNO> {id} </DOCNO>\n{t}\n</DOC>\n") } else { format!("<DOC>\n<DOCNO> {id} </DOCNO>\n<HEADLINE> {id} </HEADLINE>\n<TEXT>\n<P>{t}</P>\n</TEXT>\n</DOC>\n") };
    std::fs::write(trec.join("docs/part1.trec"), DOCS[..5].iter().map(doc).collect::<String>()).unwrap();
    std::fs::write(trec.join("docs/part2.txt"), DOCS[5..].iter().map(doc).collect::<String>()).unwrap();
    std::fs::write(trec.join("topics.robust"), QUERIES.iter().map(|(id, t, _)| format!("<top>\n<num> Number: {id}\n<title> {t}\n<desc> Description:\nfind documents about {t}\n</top>\n\n")).collect::<String>()).unwrap();
    std::fs::write(trec.join("qrels.robust"), judged(&|q, d, g| format!("{q} 0 {d} {g}\n"))).unwrap();
    let p = pipeline(root, "trec", "trec/docs", "trec", None);
    graded += agrees_with_pytrec(root, &p);

    // MS MARCO: collection.tsv + queries.dev.tsv + qrels.dev.tsv (TREC qrels, tab-separated).
    let marco = root.join("msmarco");
    std::fs::create_dir_all(&marco).unwrap();
    std::fs::write(marco.join("collection.tsv"), DOCS.iter().map(|(id, t)| format!("{}\t{t}\n", id.trim_start_matches('d'))).collect::<String>()).unwrap();
    std::fs::write(marco.join("queries.dev.tsv"), QUERIES.iter().map(|(id, t, _)| format!("{}\t{t}\n", id.trim_start_matches('q'))).collect::<String>()).unwrap();
    std::fs::write(marco.join("qrels.dev.tsv"), judged(&|q, d, g| format!("{}\t0\t{}\t{g}\n", q.trim_start_matches('q'), d.trim_start_matches('d')))).unwrap();
    let p = pipeline(root, "msmarco", "msmarco/collection.tsv", "msmarco", None);
    graded += agrees_with_pytrec(root, &p);
    assert!(graded >= 3, "only {graded} questions with 0 < nDCG < 1: the fixture tests too little");

    // A folder that is none of them: one line naming it and the three layouts.
    std::fs::remove_file(marco.join("queries.dev.tsv")).unwrap();
    let out = run("evaluate", &[p.to_str().unwrap(), "--artifacts", root.join("artifacts").to_str().unwrap(), "--eval-dir", root.join("eval").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("msmarco") && err.contains("BEIR") && err.contains("TREC") && err.contains("MS MARCO"), "{err}");
}
