//! `[search]` end to end on a Markdown corpus written here: a grid over chunk size, the
//! candidate pool and small-to-big is searched on the search split; search.parquet holds every
//! config with its fields as columns; the tables hold the baseline and the best configs on the
//! confirmation split only (no searched question among them); a rerun is a cache hit; a
//! space naming a field no config has is one line naming the pipeline file.
use std::collections::BTreeSet;
use std::path::PathBuf;

use gauge::{last_line, ok, run, shared, write_golden, write_markdown_corpus};
use gauge_core::table::{read_parquet_any, Columns};

const DOCS: [(&str, &str); 12] = [
    ("gates", "Crossing gate arms must be fully lowered before the train reaches the crossing. The gate descent time is recorded on the inspection form."),
    ("lights", "Flashing lights at a highway crossing flash between thirty five and sixty five times per minute and are aimed at approaching drivers."),
    ("tanks", "A leaking tank car of hazardous materials may be moved only to the nearest place of repair with its shipping papers."),
    ("roadway", "Roadway workers need on track safety before fouling a track; a watchman warns them of approaching trains."),
    ("brakes", "Air brakes are tested before a train departs the yard and the brake pipe pressure is written on the test form."),
    ("bridges", "A lanyard connects a body harness to an anchorage; bridge workers use fall protection above twelve feet."),
    ("signals", "A signal aspect displaying red means stop; the engineer must stop before the signal and wait for permission."),
    ("radio", "Radio communications must identify the railroad, the unit and the location before any instruction is given."),
    ("hours", "Train employees may not remain on duty for more than twelve consecutive hours and need ten hours off after."),
    ("track", "Track inspections for class three track happen twice weekly with at least one calendar day between them."),
    ("horns", "The locomotive horn sounds two long, one short and one long blast when approaching a public crossing."),
    ("cars", "Freight car safety appliances such as handholds and sill steps must be secure and not bent or broken."),
];

const QUESTIONS: [(&str, &str, &str); 12] = [
    ("q01", "when must crossing gate arms be lowered", "gates.md"),
    ("q02", "how many times per minute do crossing lights flash", "lights.md"),
    ("q03", "where may a leaking hazardous materials tank car be moved", "tanks.md"),
    ("q04", "what protects roadway workers fouling a track", "roadway.md"),
    ("q05", "when are air brakes tested and what pressure is recorded", "brakes.md"),
    ("q06", "what fall protection do bridge workers use", "bridges.md"),
    ("q07", "what does a red signal aspect mean", "signals.md"),
    ("q08", "what must a radio communication identify first", "radio.md"),
    ("q09", "how many consecutive hours may train employees stay on duty", "hours.md"),
    ("q10", "how often is class three track inspected", "track.md"),
    ("q11", "what horn pattern is sounded at a public crossing", "horns.md"),
    ("q12", "which freight car safety appliances must be secure", "cars.md"),
];

fn pipeline_text(space: &str) -> String {
    let fixture = shared().join("fixtures/tiny-bert-cross-encoder");
    format!(
        "name = \"tiny-search\"\ncorpus = \"corpus\"\ngolden = \"golden.jsonl\"\nk = 3\nresamples = 1000\n[baseline]\nname = \"BM25\"\nchunk = {{ strategy = \"recursive\", size = 400, overlap = 0, filters = {{ min_chars = 0 }} }}\nembed = {{ model = {:?} }}\nretrieval = {{ dense = false, bm25 = true, promote_exact = false, candidates = 10 }}\n[search]\nstrategy = \"grid\"\nbudget = 20\nconfirm_share = 0.5\nconfirm_top = 2\n[search.space]\n{space}",
        fixture.display().to_string()
    )
}

#[test]
fn a_grid_search_is_confirmed_on_questions_it_never_saw() {
    let tmp = tempfile::tempdir().unwrap();
    write_markdown_corpus(tmp.path(), &DOCS);
    write_golden(tmp.path(), &QUESTIONS);
    let pipeline = tmp.path().join("search.toml");
    std::fs::write(&pipeline, pipeline_text("\"chunk.size\" = [60, 400]\n\"retrieval.candidates\" = [3, 10]\n\"retrieval.window\" = { values = [0, 1], when = { \"chunk.size\" = 60 } }\n")).unwrap();
    let art = tmp.path().join("artifacts");
    let eval = tmp.path().join("eval");
    let args = [pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
    let out = ok(run("evaluate", &args));
    let dir = PathBuf::from(last_line(&out));

    // Every config of the space once (size 60 × pool × window, size 400 × pool: 6), one rung.
    let search = read_parquet_any(&dir.join("search.parquet")).unwrap();
    let s = Columns::new(&search);
    assert_eq!(search.num_rows(), 6);
    assert!(s.i32s("rung").iter().all(|r| *r == 0));
    let sizes = s.f64s("field:chunk.size");
    let windows = s.f64s("field:retrieval.window");
    for (size, window) in sizes.iter().zip(&windows) {
        assert_eq!(window.is_some(), *size == Some(60.0), "the window is set only with 60-character chunks");
    }
    let searched_n = s.i32s("questions")[0] as usize;
    let ranks: BTreeSet<i32> = s.i32s_nullable("rank").into_iter().flatten().collect();
    assert_eq!(ranks, (1..=6).collect(), "the last rung ranks every finalist");

    // The tables: the baseline and the two best, on the confirmation split only.
    let pq = read_parquet_any(&dir.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let configs: BTreeSet<String> = c.strings_required("config").into_iter().collect();
    assert_eq!(configs.len(), 3, "{configs:?}");
    assert!(configs.contains("BM25") && configs.iter().filter(|n| n.starts_with("search #")).count() == 2, "{configs:?}");
    let confirmed: BTreeSet<String> = c.strings_required("qid").into_iter().collect();
    assert_eq!(confirmed.len() + searched_n, QUESTIONS.len(), "the two splits partition the golden set");
    let best = s.strings_required("config")[s.i32s_nullable("rank").iter().position(|r| *r == Some(1)).unwrap()].clone();
    assert!(configs.contains(&best), "the search's winner is confirmed: {best}");
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    assert!(md.contains("## Config search") && md.contains(&format!("{searched_n} questions searched, {} kept for confirmation", confirmed.len())), "{md}");
    assert!(md.contains("confirmation split"), "{md}");

    // A rerun is a cache hit: the same artifact, untouched.
    let before = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let again = ok(run("evaluate", &args));
    assert_eq!(PathBuf::from(last_line(&again)), dir);
    assert_eq!(std::fs::read_to_string(dir.join("manifest.json")).unwrap(), before);

    // A field no config has: one line naming the pipeline file and the field.
    std::fs::write(&pipeline, pipeline_text("\"retrieval.candidats\" = [3, 10]\n")).unwrap();
    let bad = run("evaluate", &args);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("search.toml") && err.contains("candidats"), "{err}");
}
