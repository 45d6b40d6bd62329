//! `query` and `evaluate` rank alike: for every config of `pipelines/fra.toml` (on two of its
//! manuals, the dev questions about them), the passages `query --config` returns for a
//! question are the ones `evaluate` judged, in the same order — both go through the engine,
//! with the same normalised retrieval config. Needs `just models`; configs whose reranker
//! model is not on this machine are skipped by `evaluate` and here.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use gauge::{last_line, ok, repo_root, run, shared};
use gauge_core::table::{read_parquet_any, Columns};

const MANUALS: [&str; 2] = [
    "FRA-Track_Structures_CM_2026_Vol_III_Ch1_Railroad_Workplace_Safety_General.pdf",
    "FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf",
];
const QUESTIONS_PER_CONFIG: usize = 3;

#[test]
fn query_returns_what_evaluate_judged_for_every_fra_config() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let corpus = root.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for m in MANUALS {
        std::fs::copy(shared().join("corpora/fra").join(m), corpus.join(m)).unwrap();
    }
    let text = std::fs::read_to_string(shared().join("golden/fra-dev.jsonl")).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            v["gold"].as_array().is_some_and(|g| !g.is_empty() && g.iter().all(|g| MANUALS.contains(&g["source"].as_str().unwrap_or_default())))
        })
        .collect();
    assert!(lines.len() >= QUESTIONS_PER_CONFIG);
    std::fs::write(root.join("golden.jsonl"), lines.join("\n") + "\n").unwrap();
    // fra.toml's configs as they are, on this corpus and golden set.
    let fra = std::fs::read_to_string(repo_root().join("pipelines/fra.toml")).unwrap();
    let pipeline_text: String = fra
        .lines()
        .map(|l| match l.split('=').next().unwrap_or_default().trim() {
            "corpus" => "corpus = \"corpus\"".to_string(),
            "golden" => "golden = \"golden.jsonl\"".to_string(),
            "resamples" => "resamples = 1000".to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let pipeline_path = root.join("fra.toml");
    std::fs::write(&pipeline_path, pipeline_text).unwrap();
    let pipeline = gauge_evaluate::Pipeline::load(&pipeline_path).unwrap();
    assert!(pipeline.variants.len() >= 13, "fra.toml lost configs?");

    let art = root.join("artifacts");
    let out = ok(run("evaluate", &[pipeline_path.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", root.join("eval").to_str().unwrap()]));
    let dir = PathBuf::from(last_line(&out));
    let manifest = gauge_core::Manifest::read(&dir).unwrap();
    // A config may be skipped only because its reranker model is not on this machine (checked
    // here on its own, not taken from evaluate's word); each skip is named with its reason.
    let mut skipped = BTreeSet::new();
    for s in manifest.stats["skipped"].as_array().unwrap() {
        let (name, reason) = (s[0].as_str().unwrap(), s[1].as_str().unwrap_or_default());
        let v = pipeline.variants.iter().find(|v| v.name == name).unwrap_or_else(|| panic!("evaluate skipped `{name}`, which fra.toml does not have"));
        let missing = v.stages.retrieval.rerank.as_ref().and_then(|rc| gauge_rerank::reranker_identity(rc).err());
        assert!(missing.is_some(), "evaluate skipped `{name}` ({reason}), but its reranker is on this machine: an unexpected skip");
        eprintln!("query_matches_evaluate: config `{name}` skipped: {reason}");
        skipped.insert(name.to_string());
    }
    let index_of: BTreeMap<String, String> = manifest.inputs.iter().filter_map(|i| i.name.strip_prefix("index:").map(|n| (n.to_string(), i.path.clone()))).collect();
    // (config, qid) → chunk ids by rank, as evaluate judged them.
    let batch = read_parquet_any(&dir.join("runs.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (config, qid, chunk) = (c.strings_required("config"), c.strings_required("qid"), c.strings_required("chunk_id"));
    let mut judged: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for i in 0..batch.num_rows() {
        judged.entry((config[i].clone(), qid[i].clone())).or_default().push(chunk[i].clone());
    }
    let golden = gauge_core::golden::load_golden(&root.join("golden.jsonl")).unwrap();
    let mut compared = 0;
    for v in &pipeline.variants {
        if skipped.contains(&v.name) {
            continue;
        }
        for q in golden.iter().take(QUESTIONS_PER_CONFIG) {
            let cfg_path = root.join("retrieval.json");
            std::fs::write(&cfg_path, serde_json::to_string(&gauge_evaluate::ablate::config_for(v, q)).unwrap()).unwrap();
            let out = ok(run("query", &["--index", &index_of[&v.name], "--config", cfg_path.to_str().unwrap(), "--json", &q.question]));
            let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            // A window merged around several hits is one judged passage, at its best hit.
            let mut windows = BTreeSet::new();
            let from_query: Vec<String> = reply["passages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["window"].is_null() || windows.insert((p["window"]["doc_id"].to_string(), p["window"]["first"].as_u64())))
                .map(|p| p["chunk_id"].as_str().unwrap().to_string())
                .collect();
            let from_evaluate = judged.get(&(v.name.clone(), q.qid.clone())).cloned().unwrap_or_default();
            assert!(!from_query.is_empty(), "config `{}`, {}: query returned nothing", v.name, q.qid);
            assert_eq!(from_query, from_evaluate, "config `{}`, question {}", v.name, q.qid);
            compared += 1;
        }
    }
    assert_eq!(compared, (pipeline.variants.len() - skipped.len()) * QUESTIONS_PER_CONFIG, "every config not skipped is compared");
}
