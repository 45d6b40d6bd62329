//! A BEIR folder evaluates end to end: `corpus.jsonl` as the corpus (records named
//! `corpus.jsonl#<_id>` by `extract`), the folder itself as the golden set (`queries.jsonl` +
//! `qrels/test.tsv`; queries without a positive judgement left out). The fixture is written
//! here. BM25 ranks each query's document first, so every metric is known by hand; a folder
//! without qrels is refused naming it.
use std::path::PathBuf;

use gauge::pipeline::pipeline;
use gauge::{last_line, ok, run, shared};
use serde_json::json;
use gauge_core::table::{read_parquet_any, Columns};

const DOCS: [(&str, &str); 6] = [
    ("d1", "Crossing gate arms must be fully lowered before the train reaches the crossing. The gate descent time is recorded on the inspection form."),
    ("d2", "Flashing lights at a highway crossing flash between thirty five and sixty five times per minute and are aimed at approaching drivers."),
    ("d3", "A leaking tank car of hazardous materials may be moved only to the nearest place of repair with its shipping papers."),
    ("d4", "Roadway workers need on track safety before fouling a track; a watchman warns them of approaching trains."),
    ("d5", "Air brakes are tested before a train departs the yard and the brake pipe pressure is written on the test form."),
    ("d6", "A lanyard connects a body harness to an anchorage; bridge workers use fall protection above twelve feet."),
];

#[test]
fn a_beir_folder_is_a_corpus_and_a_golden_set() {
    let tmp = tempfile::tempdir().unwrap();
    let beir = tmp.path().join("tiny-beir");
    std::fs::create_dir_all(beir.join("qrels")).unwrap();
    let corpus: String = DOCS.iter().map(|(id, text)| serde_json::json!({"_id": id, "title": "", "text": text}).to_string() + "\n").collect();
    std::fs::write(beir.join("corpus.jsonl"), corpus).unwrap();
    let queries = [("q1", "how fast do the flashing lights flash per minute"), ("q2", "moving a leaking hazardous materials tank car"), ("q3", "brake pipe pressure test before departure"), ("q4", "fall protection harness lanyard anchorage"), ("q9", "a query judged in another split")];
    std::fs::write(beir.join("queries.jsonl"), queries.iter().map(|(id, t)| serde_json::json!({"_id": id, "text": t}).to_string() + "\n").collect::<String>()).unwrap();
    std::fs::write(beir.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td3\t2\nq3\td5\t1\nq4\td6\t1\nq4\td1\t0\n").unwrap();
    let fixture = shared().join("fixtures/tiny-bert-cross-encoder");
    let pipeline = pipeline("tiny-beir")
        .set("corpus", json!("tiny-beir/corpus.jsonl"))
        .set("golden", json!("tiny-beir"))
        .baseline(json!({
            "name": "BM25",
            "extract": { "jsonl": { "id": "_id" } },
            "chunk": { "strategy": "recursive", "size": 500, "overlap": 0, "filters": { "min_chars": 0 } },
            "embed": { "model": fixture.to_str().unwrap() },
            "retrieval": { "dense": false, "bm25": true, "promote_exact": false },
        }))
        .write(&tmp.path().join("beir.toml"));
    let art = tmp.path().join("artifacts");
    let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", tmp.path().join("eval").to_str().unwrap()]));
    let dir = PathBuf::from(last_line(&out));
    let pq = read_parquet_any(&dir.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let mut qids = c.strings_required("qid");
    qids.sort();
    assert_eq!(qids, ["q1", "q2", "q3", "q4"], "q9 has no judgement in test.tsv");
    assert!(c.f64s("hit_1").iter().all(|h| *h == Some(1.0)), "each query's own document first: {:?}", c.f64s("hit_1"));
    // The run names records as extract does, and the qrels hold exactly the judged documents.
    let runs = read_parquet_any(&dir.join("runs.parquet")).unwrap();
    let r = Columns::new(&runs);
    let (rq, rank, src) = (r.strings_required("qid"), r.i32s("rank"), r.strings_required("source"));
    let first = |q: &str| (0..runs.num_rows()).find(|&i| rq[i] == q && rank[i] == 1).map(|i| src[i].clone()).unwrap();
    assert_eq!(first("q2"), "corpus.jsonl#d3");
    assert_eq!(first("q4"), "corpus.jsonl#d6");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let golden = manifest["inputs"].as_array().unwrap().iter().find(|i| i["name"] == "golden").unwrap();
    assert_eq!(golden["rows"], 4);

    // A folder without qrels: one line naming it.
    std::fs::remove_file(beir.join("qrels/test.tsv")).unwrap();
    let out = run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", tmp.path().join("eval").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tiny-beir") && err.contains("qrels/test.tsv"), "{err}");
}
