//! `evaluate` end to end on two real FRA manuals and their dev questions: the tables agree
//! with an independent judgement of every run row, reruns are cache hits with identical
//! numbers, and bad golden sets / pipelines fail with one line naming the file. Needs
//! `just models`.
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use gauge::pipeline::pipeline;
use gauge::{last_line, ok, repo_root, run, shared};
use serde_json::json;
use gauge_core::table::{read_parquet_any, Columns};

const MANUALS: [&str; 2] = [
    "FRA-Track_Structures_CM_2026_Vol_III_Ch1_Railroad_Workplace_Safety_General.pdf",
    "FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf",
];

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    pipeline: PathBuf,
    /// qid → gold (source, page) items.
    gold: BTreeMap<String, Vec<(String, i32)>>,
}

fn setup() -> Setup {
    let model = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(model.join("model.safetensors").is_file(), "{}: missing; run `just models`", model.display());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let corpus = root.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for m in MANUALS {
        std::fs::copy(shared().join("corpora/fra").join(m), corpus.join(m)).unwrap();
    }
    // The dev questions whose gold pages all lie in these two manuals.
    let text = std::fs::read_to_string(shared().join("golden/fra-dev.jsonl")).unwrap();
    let mut lines = Vec::new();
    let mut gold = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let items: Vec<(String, i32)> =
            v["gold"].as_array().unwrap().iter().map(|g| (g["source"].as_str().unwrap().to_string(), g["page"].as_i64().unwrap() as i32)).collect();
        if items.iter().all(|(s, _)| MANUALS.contains(&s.as_str())) {
            gold.insert(v["qid"].as_str().unwrap().to_string(), items);
            lines.push(line.to_string());
        }
    }
    assert!(lines.len() >= 10, "expected the dev set to hold questions on both manuals");
    std::fs::write(root.join("golden.jsonl"), lines.join("\n") + "\n").unwrap();
    let model = model.to_str().unwrap();
    let pipeline = pipeline("small")
        .baseline(json!({ "name": "Vector", "embed": { "model": model }, "retrieval": { "bm25": false, "promote_exact": false } }))
        .variant(json!({ "name": "BM25", "retrieval": { "dense": false, "bm25": true } }))
        .variant(json!({ "name": "Hybrid RRF", "retrieval": { "bm25": true } }))
        .variant(json!({ "name": "Hybrid RRF + small-to-big", "base": "Hybrid RRF", "retrieval": { "window": 1 } }))
        .variant(json!({ "name": "Hybrid RRF + source filter (oracle)", "base": "Hybrid RRF", "oracle_source_filter": true }))
        .variant(json!({ "name": "Hybrid RRF, chunks 500/100", "base": "Hybrid RRF", "chunk": { "size": 500, "overlap": 100 } }))
        .write(&root.join("small.toml"));
    Setup { _tmp: tmp, root, pipeline, gold }
}

fn evaluate(s: &Setup, extra: &[&str]) -> std::process::Output {
    let art = s.root.join("artifacts");
    let eval = s.root.join("eval");
    let mut args = vec![s.pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
    args.extend_from_slice(extra);
    run("evaluate", &args)
}

/// (config, metric) → (value, ci_low, ci_high, delta, p_value) for category `all`.
type MetricKey = (String, String);
type MetricValues = (f64, Option<f64>, Option<f64>, Option<f64>, Option<f64>);

fn metrics(path: &Path) -> BTreeMap<MetricKey, MetricValues> {
    let batch = read_parquet_any(path).unwrap();
    let c = Columns::new(&batch);
    let (config, category, metric) = (c.strings_required("config"), c.strings_required("category"), c.strings_required("metric"));
    let (value, lo, hi, delta, p) = (c.f64s("value"), c.f64s("ci_low"), c.f64s("ci_high"), c.f64s("delta"), c.f64s("p_value"));
    (0..batch.num_rows())
        .filter(|&i| category[i] == "all")
        .map(|i| ((config[i].clone(), metric[i].clone()), (value[i].unwrap(), lo[i], hi[i], delta[i], p[i])))
        .collect()
}

#[test]
fn ablation_tables_agree_with_an_independent_judgement_and_rerun_identically() {
    let s = setup();
    let out = ok(evaluate(&s, &[]));
    let dir = PathBuf::from(last_line(&out));
    let copy = s.root.join("eval/small");
    for f in ["metrics.parquet", "per_query.parquet", "runs.parquet", "ablation.md", "ablation.png", "manifest.json", "trec/00-vector.run", "trec/00-vector.qrels"] {
        assert!(dir.join(f).is_file() && copy.join(f).is_file(), "{f} missing");
    }
    let configs = ["Vector", "BM25", "Hybrid RRF", "Hybrid RRF + small-to-big", "Hybrid RRF + source filter (oracle)", "Hybrid RRF, chunks 500/100"];
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    assert!(md.contains("| Vector (baseline) |"), "{md}");
    for c in configs {
        assert!(md.contains(&format!("| {c} |")), "{c} missing from\n{md}");
    }
    assert!(std::fs::read(dir.join("ablation.png")).unwrap().starts_with(b"\x89PNG"));

    // Every run row judged again here: relevant ⇔ a gold page of the question lies in the
    // passage's page range of the gold source.
    let batch = read_parquet_any(&dir.join("runs.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (config, qid, rank, chunk, source) = (c.strings_required("config"), c.strings_required("qid"), c.i32s("rank"), c.strings_required("chunk_id"), c.strings_required("source"));
    let (ps, pe, relevant) = (c.i32s("page_start"), c.i32s("page_end"), c.bools("relevant"));
    let mut first_rel: BTreeMap<(String, String), i32> = BTreeMap::new();
    let mut judged_relevant: BTreeMap<String, HashSet<(String, String)>> = BTreeMap::new();
    let mut judged_irrelevant: BTreeMap<String, HashSet<(String, String)>> = BTreeMap::new();
    for i in 0..batch.num_rows() {
        let gold = &s.gold[&qid[i]];
        let expect = gold.iter().any(|(src, p)| *src == source[i] && ps[i] <= *p && *p <= pe[i]);
        assert_eq!(relevant[i], expect, "row {i}: {} {} {} pp. {}-{}", config[i], qid[i], chunk[i], ps[i], pe[i]);
        if config[i] == "Hybrid RRF + source filter (oracle)" {
            assert!(gold.iter().any(|(src, _)| *src == source[i]), "the oracle filter let {} through for {}", source[i], qid[i]);
        }
        if relevant[i] {
            let e = first_rel.entry((config[i].clone(), qid[i].clone())).or_insert(rank[i]);
            *e = (*e).min(rank[i]);
            judged_relevant.entry(config[i].clone()).or_default().insert((qid[i].clone(), chunk[i].clone()));
        } else {
            judged_irrelevant.entry(config[i].clone()).or_default().insert((qid[i].clone(), chunk[i].clone()));
        }
    }
    // The metric table is the mean of those judgements.
    let m = metrics(&dir.join("metrics.parquet"));
    let n = s.gold.len() as f64;
    for (ci, c) in configs.iter().enumerate() {
        let ranks: Vec<i32> = s.gold.keys().filter_map(|q| first_rel.get(&(c.to_string(), q.clone())).copied()).collect();
        let hit1 = ranks.iter().filter(|&&r| r == 1).count() as f64 / n;
        let hit5 = ranks.iter().filter(|&&r| r <= 5).count() as f64 / n;
        let mrr = ranks.iter().map(|&r| 1.0 / r as f64).sum::<f64>() / n;
        let get = |metric: &str| m[&(c.to_string(), metric.to_string())];
        assert!((get("hit@1").0 - hit1).abs() < 1e-9, "{c}: hit@1 {} vs {hit1}", get("hit@1").0);
        assert!((get("hit@5").0 - hit5).abs() < 1e-9, "{c}: hit@5");
        assert!((get("mrr@10").0 - mrr).abs() < 1e-9, "{c}: mrr@10");
        for metric in ["hit@1", "hit@3", "hit@5", "mrr@10", "ndcg@10", "recall@10"] {
            let (v, lo, hi, delta, p) = get(metric);
            assert!(lo.unwrap() <= v + 1e-12 && v <= hi.unwrap() + 1e-12, "{c} {metric}: {v} outside [{lo:?}, {hi:?}]");
            if ci == 0 {
                assert!(delta.is_none() && p.is_none(), "the baseline has no delta");
            } else {
                let d = v - m[&("Vector".to_string(), metric.to_string())].0;
                assert!((delta.unwrap() - d).abs() < 1e-9, "{c} {metric}: delta {delta:?} vs {d}");
                assert!(p.unwrap() > 0.0 && p.unwrap() <= 1.0);
            }
        }
        // TREC files: one line per run row; qrels agree with the run's judgements (small-to-big
        // rows are judged on their window, qrels on single chunks, so they are skipped).
        let slug = std::fs::read_dir(dir.join("trec"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|f| f.starts_with(&format!("{ci:02}-")) && f.ends_with(".run") && !f.ends_with(".items.run"))
            .unwrap_or_else(|| panic!("no TREC run for {c}"))
            .trim_end_matches(".run")
            .to_string();
        let run_text = std::fs::read_to_string(dir.join(format!("trec/{slug}.run"))).unwrap_or_else(|e| panic!("trec/{slug}.run: {e}"));
        assert_eq!(run_text.lines().count(), config.iter().filter(|x| x == c).count());
        if !c.contains("small-to-big") {
            let qrels: HashSet<(String, String)> = std::fs::read_to_string(dir.join(format!("trec/{slug}.qrels")))
                .unwrap()
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    (f[0].to_string(), f[2].to_string())
                })
                .collect();
            for pair in judged_relevant.get(*c).into_iter().flatten() {
                assert!(qrels.contains(pair), "{c}: {pair:?} judged relevant but not in qrels");
            }
            for pair in judged_irrelevant.get(*c).into_iter().flatten() {
                assert!(!qrels.contains(pair), "{c}: {pair:?} in qrels but judged irrelevant");
            }
        }
    }
    // Sanity on real retrieval: hybrid search finds a gold page in the top 10 for most questions.
    assert!(m[&("Hybrid RRF".to_string(), "hit@10".to_string())].0 >= 0.7);

    // A warm rerun is a cache hit with byte-identical tables.
    let before = std::fs::read(dir.join("metrics.parquet")).unwrap();
    let again = ok(evaluate(&s, &[]));
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));
    assert_eq!(last_line(&again), dir.display().to_string());
    assert_eq!(std::fs::read(copy.join("metrics.parquet")).unwrap(), before);
    // Recomputing from scratch reproduces every number but the latencies.
    ok(evaluate(&s, &["--force"]));
    let (a, b) = (metrics(&dir.join("metrics.parquet")), m);
    let strip = |m: BTreeMap<MetricKey, MetricValues>| m.into_iter().filter(|((_, k), _)| !k.starts_with("latency")).collect::<Vec<_>>();
    assert_eq!(strip(a), strip(b));

    // The same configs on another question set (`--golden`, e.g. the held-out synthetic set)
    // go to their own folder (`--name`), the pipeline's results untouched; a question judged
    // the same way gets the same rank.
    let part = s.root.join("part.jsonl");
    let text = std::fs::read_to_string(s.root.join("golden.jsonl")).unwrap();
    let five: Vec<&str> = text.lines().take(5).collect();
    std::fs::write(&part, five.join("\n") + "\n").unwrap();
    let before_copy = std::fs::read(copy.join("metrics.parquet")).unwrap();
    let other = PathBuf::from(last_line(&ok(evaluate(&s, &["--golden", part.to_str().unwrap(), "--name", "small-part"]))));
    assert_ne!(other, dir);
    assert_eq!(std::fs::read(copy.join("metrics.parquet")).unwrap(), before_copy);
    let md = std::fs::read_to_string(s.root.join("eval/small-part/ablation.md")).unwrap();
    assert!(md.starts_with("# Ablation: `small-part`") && md.contains("part.jsonl` (5 questions)"), "{md}");
    let batch = read_parquet_any(&other.join("runs.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (config, qid, rank, relevant) = (c.strings_required("config"), c.strings_required("qid"), c.i32s("rank"), c.bools("relevant"));
    for i in (0..batch.num_rows()).filter(|&i| relevant[i]) {
        assert!(first_rel[&(config[i].clone(), qid[i].clone())] <= rank[i], "{} {}", config[i], qid[i]);
    }
}

#[test]
fn bad_golden_sets_and_pipelines_fail_with_one_line_naming_the_file() {
    let s = setup();
    let golden = s.root.join("golden.jsonl");
    let good = std::fs::read_to_string(&golden).unwrap();
    let check = |out: std::process::Output, wants: &[&str]| {
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
        for w in wants {
            assert!(err.contains(w), "want {w:?} in {err}");
        }
    };
    // Another golden set without a folder of its own, one that is not there, a name that is a path.
    check(evaluate(&s, &["--golden", golden.to_str().unwrap()]), &["--golden needs --name", "eval/small/"]);
    check(evaluate(&s, &["--golden", "nowhere.jsonl", "--name", "x"]), &["nowhere.jsonl", "no such file"]);
    check(evaluate(&s, &["--golden", golden.to_str().unwrap(), "--name", "../eval"]), &["--name", "../eval"]);
    // Forcing keyword mode on a set without keywords.
    check(evaluate(&s, &["--relevance", "keyword"]), &["golden.jsonl", "keywords"]);
    // A malformed line.
    std::fs::write(&golden, format!("{good}{{\"qid\": \"x\", \"question\": \n")).unwrap();
    check(evaluate(&s, &[]), &["golden.jsonl:", "qid"]);
    // An empty golden set.
    std::fs::write(&golden, "").unwrap();
    check(evaluate(&s, &[]), &["golden.jsonl", "no questions"]);
    // A gold source the corpus does not hold (a typo) is refused with the closest names.
    std::fs::write(&golden, good.replace("FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf", "FRA-Hazardous_Material_Compliance_Manual_01.07.25.pdf")).unwrap();
    check(evaluate(&s, &[]), &["golden.jsonl", "FRA-Hazardous_Material_Compliance_Manual_01.07.25.pdf", "closest: FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf"]);
    std::fs::write(&golden, good).unwrap();
    // A typo in the pipeline.
    let text = std::fs::read_to_string(&s.pipeline).unwrap();
    std::fs::write(&s.pipeline, text.replace("window = 1", "windw = 1")).unwrap();
    check(evaluate(&s, &[]), &["small.toml", "windw"]);
    // A corpus that is not there.
    std::fs::write(&s.pipeline, text.replace("corpus = \"corpus\"", "corpus = \"nowhere\"")).unwrap();
    check(evaluate(&s, &[]), &["nowhere", "corpus"]);
    // Nothing half-written: no evaluation artifact was committed by the failures.
    assert!(gauge::complete_dirs(&s.root.join("artifacts"), "evaluate").is_empty());
    assert!(!BTreeSet::from_iter(std::fs::read_dir(&s.root).unwrap().flatten().map(|e| e.file_name())).contains(std::ffi::OsStr::new("eval")));
}

/// failures.parquet on a real evaluation: a config filtered to one manual loses every question
/// on the other manual at `candidates` (no retriever can return its pages), a cutoff no score
/// reaches loses at `cutoff` exactly the questions the same config finds without it, and
/// `ablation.md` counts them.
#[test]
fn missed_questions_are_traced_to_the_stage_that_lost_them() {
    let s = setup();
    let model = repo_root().join("models/all-MiniLM-L6-v2");
    let pipeline = pipeline("failures")
        .baseline(json!({ "name": "BM25", "embed": { "model": model.to_str().unwrap() }, "retrieval": { "dense": false, "bm25": true, "promote_exact": false } }))
        .variant(json!({ "name": "BM25, one manual", "retrieval": { "filter": { "sources": [MANUALS[0]] } } }))
        .variant(json!({ "name": "BM25 + cutoff", "retrieval": { "cutoff": 1e9 } }))
        .write(&s.root.join("failures.toml"));
    let art = s.root.join("artifacts");
    let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", s.root.join("eval").to_str().unwrap()]));
    let dir = PathBuf::from(last_line(&out));
    // Per question: BM25's hit@10.
    let pq = read_parquet_any(&dir.join("per_query.parquet")).unwrap();
    let c = Columns::new(&pq);
    let (config, qid, hit10) = (c.strings_required("config"), c.strings_required("qid"), c.f64s("hit_10"));
    let bm25 = |col: &Vec<Option<f64>>, want: f64| -> BTreeSet<String> { (0..pq.num_rows()).filter(|&i| config[i] == "BM25" && col[i] == Some(want)).map(|i| qid[i].clone()).collect() };
    let (found, missed) = (bm25(&hit10, 1.0), bm25(&hit10, 0.0));
    let other_manual: BTreeSet<String> = s.gold.iter().filter(|(_, items)| items.iter().all(|(src, _)| src == MANUALS[1])).map(|(q, _)| q.clone()).collect();
    assert!(!other_manual.is_empty());
    let f = read_parquet_any(&dir.join("failures.parquet")).unwrap();
    let c = Columns::new(&f);
    let (fconfig, fqid, lost) = (c.strings_required("config"), c.strings_required("qid"), c.strings_required("lost_at"));
    let with = |cfg: &str, label: Option<&str>| -> BTreeSet<String> { (0..f.num_rows()).filter(|&i| fconfig[i] == cfg && label.is_none_or(|l| lost[i] == l)).map(|i| fqid[i].clone()).collect() };
    assert_eq!(with("BM25, one manual", Some("candidates")), other_manual, "filtered out: lost among the candidates");
    assert!(with("BM25, one manual", None).is_superset(&other_manual));
    assert!(!found.is_empty());
    assert_eq!(with("BM25 + cutoff", Some("cutoff")), found, "the cutoff loses exactly what BM25 finds");
    assert_eq!(with("BM25 + cutoff", None).len(), found.len() + missed.len());
    assert_eq!(with("BM25", None), missed);
    assert!(with("BM25", Some("cutoff")).is_empty());
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    assert!(md.contains("## Where the missed questions were lost"), "{md}");
}
