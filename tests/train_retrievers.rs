//! `train-lora --target embedder | reranker` end to end on the tiny BERT fixture, over a real
//! (small) pipeline: Markdown corpus → extract → chunk → embed → index, and `synth-data`'s
//! inverse-cloze questions. The loss falls; the embedder adapter is a PEFT folder that `embed
//! --adapter` and the query engine use (and that changes the fingerprint and the vectors); a
//! run stopped after a checkpoint resumes to the same adapter bytes as an uninterrupted run;
//! the reranker is a `BertForSequenceClassification` folder the cross-encoder and `query
//! --rerank` load; `evaluate` restricts a golden set to questions outside the training pages
//! and says how many remain; bad input is refused before anything is written.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gauge::pipeline::pipeline;
use gauge::{complete_dirs, last_line, ok, run, shared, write_markdown_corpus};
use serde_json::json;
use gauge_encoder::{CrossEncoder, CrossEncoderOptions, ModelSource};

const DOCS: [(&str, &str); 8] = [
    ("gates", "Crossing gate arms must be fully lowered before the train reaches the crossing. The inspector records the gate descent time on the form. A gate arm that is broken must be reported to the railroad at once. Temporary flaggers protect the crossing until the arm is repaired."),
    ("lights", "Flashing lights at a highway crossing must be visible from the roadway approach. The lights flash between thirty five and sixty five times per minute. Each lamp is aimed along the road toward approaching drivers. A dark lamp is a failure of the warning system."),
    ("tank", "A leaking tank car of hazardous materials may be moved only to the nearest place of repair. The shipper must keep the shipping papers with the car. Placards on each side of the car name the class of the material. The inspector checks every valve and fitting for leaks."),
    ("bells", "Crossing bells sound while the warning system is active. The bell may stop once the gate arms are down. A bell that does not ring is written up as a defect. The signal maintainer tests the bell every month."),
    ("track", "Roadway workers need on track safety before fouling a track. A job briefing names the form of protection used. The watchman warns the workers of approaching trains. Workers must clear the track fifteen seconds before a train arrives."),
    ("fall", "A lanyard connects a body harness to an anchorage. A lifeline hangs from the anchorage and other fall arrest parts attach to it. Workers on bridges use fall protection above twelve feet. The harness is inspected before each use."),
    ("brakes", "Air brakes are tested before a train departs the yard. The car inspector walks the train and checks each brake shoe. A car with a cut out brake must be set out at the next terminal. The brake pipe pressure is recorded on the test form."),
    ("signals", "A red signal means stop before the signal. A yellow signal means approach and be prepared to stop. The engineer calls each signal aloud to the crew. A missing signal aspect is treated as the most restrictive one."),
];

/// The smallest relative drop of the reranker's held-out loss accepted after 12 steps.
const RERANKER_DROP: f64 = 0.1;

fn fixture() -> PathBuf {
    shared().join("fixtures/tiny-bert-cross-encoder")
}

struct Built {
    chunks: String,
    index: String,
    synth: PathBuf,
}

/// Corpus, index (embedded with the tiny fixture) and an inverse-cloze set.
fn build(root: &Path) -> Built {
    let corpus = write_markdown_corpus(root, &DOCS);
    let a = root.join("artifacts");
    let a = a.to_str().unwrap();
    let f = fixture();
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", a])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", a, "--strategy", "recursive", "--size", "160", "--overlap", "0", "--min-chars", "0"])));
    let emb = last_line(&ok(run("embed", &[&chunks, "--model", f.to_str().unwrap(), "--artifacts", a])));
    let index = last_line(&ok(run("index", &["--chunks", &chunks, "--embeddings", &emb, "--artifacts", a])));
    let synth = PathBuf::from(last_line(&ok(run("synth-data", &[&chunks, "--mode", "ict", "--n", "24", "--split", "50:50:0", "--min-chars", "60", "--artifacts", a]))));
    Built { chunks, index, synth }
}

/// A data folder whose held-out file is the training file itself, so that the "held-out"
/// loss measures whether training lowered the loss it optimises.
fn same_split_data(synth: &Path, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let train = std::fs::read_to_string(synth.join("train.jsonl")).unwrap();
    assert!(train.lines().count() >= 6, "synth-data made too few training questions:\n{train}");
    std::fs::write(dir.join("train.jsonl"), &train).unwrap();
    std::fs::write(dir.join("dev.jsonl"), &train).unwrap();
    dir.to_path_buf()
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn train(data: &Path, index: &str, artifacts: &Path, target: &str, extra: &[&str]) -> std::process::Output {
    let f = fixture();
    let mut args = vec![
        data.to_str().unwrap(), "--target", target, "--index", index, "--base", f.to_str().unwrap(), "--artifacts", artifacts.to_str().unwrap(),
        "--max-steps", "12", "--epochs", "50", "--grad-accum", "1", "--learning-rate", "1e-2", "--r", "4", "--lora-alpha", "8",
        "--set", "batch_size=4", "--set", "warmup_steps=1", "--set", "eval_every=0", "--set", "checkpoint_every=2", "--set", "eval_examples=64",
    ];
    args.extend_from_slice(extra);
    run("train-lora", &args)
}

#[test]
fn embedder_and_reranker_train_resume_and_load_in_the_pipeline() {
    let tmp = tempfile::tempdir().unwrap();
    let b = build(tmp.path());
    let data = same_split_data(&b.synth, &tmp.path().join("data"));

    // Embedder: the loss falls, a PEFT folder with the training pages beside it.
    let run_a = PathBuf::from(last_line(&ok(train(&data, &b.index, &tmp.path().join("a"), "embedder", &[]))));
    let m = manifest(&run_a);
    let (start, end) = (m["stats"]["dev_loss_start"].as_f64().unwrap(), m["stats"]["dev_loss_end"].as_f64().unwrap());
    assert!(end < start - 0.05, "embedder loss {start} → {end}");
    assert_eq!(m["config"]["target"], "embedder");
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run_a.join("adapter/adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["task_type"], "FEATURE_EXTRACTION");
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run_a.join("adapter/training_pages.json")).unwrap()).unwrap();
    let pages: BTreeSet<String> = record["pages"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
    let listed: BTreeSet<String> = m["stats"]["trained_pages"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
    assert_eq!(pages, listed);
    // The models that wrote the training questions are recorded beside the weights (evaluate
    // marks a config using this adapter on questions of the same family).
    let writers: BTreeSet<String> = std::fs::read_to_string(data.join("train.jsonl")).unwrap().lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["teacher_model"].as_str().map(str::to_string)).collect();
    let recorded: BTreeSet<String> = record["questions_by"].as_array().map(|a| a.iter().map(|m| m.as_str().unwrap().to_string()).collect()).unwrap_or_default();
    assert_eq!(recorded, writers, "{record}");
    // Exactly the pages of the training questions (one page per Markdown file here).
    let train_rows = std::fs::read_to_string(data.join("train.jsonl")).unwrap();
    let want: BTreeSet<String> = train_rows.lines().map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let g = &v["gold"][0];
        format!("{}#{}", g["source"].as_str().unwrap(), g["page_start"].as_i64().or(g["page"].as_i64()).unwrap())
    }).collect();
    assert_eq!(pages, want);

    // Resume: stopped after 3 steps (checkpoint at 2), rerun → the same adapter bytes.
    let b_root = tmp.path().join("b");
    let stopped = train(&data, &b.index, &b_root, "embedder", &["--stop-after", "3"]);
    assert!(!stopped.status.success(), "--stop-after must stop the run");
    assert!(complete_dirs(&b_root, "train-lora").is_empty(), "a stopped run left a complete artifact");
    let resumed = ok(train(&data, &b.index, &b_root, "embedder", &[]));
    let run_b = PathBuf::from(last_line(&resumed));
    assert_eq!(manifest(&run_b)["stats"]["resumed_from_step"], 2);
    assert_eq!(std::fs::read(run_a.join("adapter/adapter_model.safetensors")).unwrap(), std::fs::read(run_b.join("adapter/adapter_model.safetensors")).unwrap(), "resumed adapter differs");

    // embed --adapter: another fingerprint, other vectors, the adapter hash among the inputs;
    // the index built from it answers queries with the adapted query encoder.
    let art = tmp.path().join("artifacts");
    let a = art.to_str().unwrap();
    let f = fixture();
    let adapter = run_a.join("adapter");
    let plain = PathBuf::from(last_line(&ok(run("embed", &[&b.chunks, "--model", f.to_str().unwrap(), "--artifacts", a]))));
    let tuned = PathBuf::from(last_line(&ok(run("embed", &[&b.chunks, "--model", f.to_str().unwrap(), "--adapter", adapter.to_str().unwrap(), "--artifacts", a]))));
    assert_ne!(plain, tuned);
    let tm = manifest(&tuned);
    assert!(tm["inputs"].as_array().unwrap().iter().any(|i| i["name"] == "adapter"), "{tm:#}");
    assert_ne!(std::fs::read(plain.join("embeddings.parquet")).unwrap(), std::fs::read(tuned.join("embeddings.parquet")).unwrap());
    let tuned_index = last_line(&ok(run("index", &["--chunks", &b.chunks, "--embeddings", tuned.to_str().unwrap(), "--artifacts", a])));
    let q = ok(run("query", &["--index", &tuned_index, "--json", "when must gate arms be lowered", "-k", "3"]));
    let r: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    assert_eq!(r["passages"].as_array().unwrap().len(), 3);

    // Reranker: a Hugging Face cross-encoder folder the Burn cross-encoder and `query` load.
    // Trained on synth-data's training questions and measured on its held-out ones (other
    // pages: the split is by page group): the held-out loss falls by at least RERANKER_DROP.
    let run_r = PathBuf::from(last_line(&ok(train(&b.synth, &b.index, &tmp.path().join("r"), "reranker", &["--set", "retriever.hard_negatives=2"]))));
    let rm = manifest(&run_r);
    let (rs, re) = (rm["stats"]["dev_loss_start"].as_f64().unwrap(), rm["stats"]["dev_loss_end"].as_f64().unwrap());
    eprintln!("reranker held-out loss {rs:.4} → {re:.4}");
    assert!(re <= rs * (1.0 - RERANKER_DROP), "reranker held-out loss {rs} → {re}: less than a {:.0} % drop", RERANKER_DROP * 100.0);
    let model_dir = run_r.join("model");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(model_dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    assert!(model_dir.join("training_pages.json").is_file());
    let ce = CrossEncoder::load(&ModelSource { id: "trained".into(), dir: model_dir.clone() }, &CrossEncoderOptions::default(), &gauge_encoder::device::cpu()).unwrap();
    let scores = ce.score("when must gate arms be lowered", &[DOCS[0].1, DOCS[5].1]).unwrap();
    assert!(scores.iter().all(|s| s.is_finite()));
    let q = ok(run("query", &["--index", &b.index, "--json", "when must gate arms be lowered", "--rerank", model_dir.to_str().unwrap(), "--n-initial", "4", "-k", "2"]));
    let r: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    assert_eq!(r["passages"].as_array().unwrap().len(), 2);

    // evaluate keeps only questions whose gold pages were not trained on, and says how many.
    let golden = b.synth.join("golden.jsonl");
    let all: Vec<serde_json::Value> = std::fs::read_to_string(&golden).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let outside = all.iter().filter(|v| !v["gold"].as_array().unwrap().iter().any(|g| pages.contains(&format!("{}#{}", g["source"].as_str().unwrap(), g["page_start"].as_i64().unwrap())))).count();
    assert!(outside > 0 && outside < all.len(), "{outside} of {}", all.len());
    let pipeline = pipeline("restricted")
        .set("corpus", json!(tmp.path().join("corpus").to_str().unwrap()))
        .set("golden", json!(golden.to_str().unwrap()))
        .set("exclude_trained_pages", json!([adapter.to_str().unwrap()]))
        .baseline(json!({
            "name": "BM25",
            "chunk": { "strategy": "recursive", "size": 160, "overlap": 0, "filters": { "min_chars": 0 } },
            "embed": { "model": f.to_str().unwrap() },
            "retrieval": { "dense": false, "bm25": true },
        }))
        .write(&tmp.path().join("p.toml"));
    let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", a, "--eval-dir", tmp.path().join("eval").to_str().unwrap()]));
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains(&format!("{outside} of {} questions", all.len())), "{text}");

    // Bad input: an encoder target without --index, or a GGUF base, is refused before writing.
    let bad_root = tmp.path().join("bad");
    let out = run("train-lora", &[data.to_str().unwrap(), "--target", "embedder", "--base", f.to_str().unwrap(), "--artifacts", bad_root.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--index"), "{err}");
    assert!(complete_dirs(&bad_root, "train-lora").is_empty());
    let out = run("train-lora", &[data.to_str().unwrap(), "--target", "reranker", "--index", &b.index, "--base", shared().join("fixtures/tiny-llama").to_str().unwrap(), "--artifacts", bad_root.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unsupported architecture `llama`") && err.contains("BERT or MPNet model folder"), "{err}");
    // An MPNet base trains the embedder only (`just models all-mpnet-base-v2`, which `just test` fetches).
    let mpnet = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-mpnet-base-v2");
    let out = run("train-lora", &[data.to_str().unwrap(), "--target", "reranker", "--index", &b.index, "--base", mpnet.to_str().unwrap(), "--artifacts", bad_root.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("an MPNet base trains as --target embedder") && err.lines().count() <= 2, "{err}");
    assert!(complete_dirs(&bad_root, "train-lora").is_empty());
}

/// `--also`: two question sets trained together — both sets' questions train (their pages are
/// the training pages), both files are hashed into the fingerprint, and the generator target
/// refuses a mix.
#[test]
fn a_mix_of_question_sets_trains_on_both() {
    let tmp = tempfile::tempdir().unwrap();
    let b = build(tmp.path());
    let rows: Vec<String> = std::fs::read_to_string(b.synth.join("train.jsonl")).unwrap().lines().map(str::to_string).collect();
    assert!(rows.len() >= 6, "synth-data made too few training questions");
    let page_of = |l: &str| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let g = &v["gold"][0];
        format!("{}#{}", g["source"].as_str().unwrap(), g["page_start"].as_i64().unwrap())
    };
    // Split by page, so each set has pages the other lacks.
    let first_page = page_of(&rows[0]);
    let (one, two): (Vec<&String>, Vec<&String>) = rows.iter().partition(|l| page_of(l) == first_page);
    assert!(!one.is_empty() && !two.is_empty());
    let write = |name: &str, part: &[&String]| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("train.jsonl"), part.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        dir
    };
    let (a_dir, b_dir) = (write("set-a", &one), write("set-b", &two));
    let alone = PathBuf::from(last_line(&ok(train(&a_dir, &b.index, &tmp.path().join("alone"), "embedder", &[]))));
    let mixed = PathBuf::from(last_line(&ok(train(&a_dir, &b.index, &tmp.path().join("mixed"), "embedder", &["--also", b_dir.to_str().unwrap()]))));
    assert_ne!(alone.file_name(), mixed.file_name(), "the second set changes the fingerprint");
    let m = manifest(&mixed);
    assert_eq!(m["stats"]["questions_per_set"], serde_json::json!([one.len(), two.len()]));
    assert!(m["inputs"].as_array().unwrap().iter().any(|i| i["name"] == "also:0:train"), "{m:#}");
    let trained: BTreeSet<String> = m["stats"]["trained_pages"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
    let want: BTreeSet<String> = rows.iter().map(|l| page_of(l)).collect();
    assert_eq!(trained, want, "every question of both sets trains");
    let alone_pages = manifest(&alone)["stats"]["trained_pages"].as_array().unwrap().len();
    assert_eq!(alone_pages, 1);

    let out = run("train-lora", &[a_dir.to_str().unwrap(), "--also", b_dir.to_str().unwrap(), "--artifacts", tmp.path().join("bad").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--also mixes question sets for --target embedder or reranker"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The reranker distilled from a decoder's query likelihood (margin-MSE), its negatives
/// denoised: the teacher's scores are in the model-call cache beside the index, the manifest
/// counts the negatives it dropped, the held-out loss falls, and a rerun is a cache hit.
/// Without a teacher, margin-MSE and denoising are refused in one line.
#[test]
fn a_reranker_distilled_from_query_likelihood_with_denoised_negatives() {
    let tmp = tempfile::tempdir().unwrap();
    let b = build(tmp.path());
    let data = same_split_data(&b.synth, &tmp.path().join("same"));
    let teacher = ["--set", "retriever.teacher=SmolLM2-135M-Instruct.Q4_1.gguf", "--set", "retriever.loss=margin_mse", "--set", "retriever.denoise=true", "--set", "retriever.hard_negatives=2"];
    let arts = tmp.path().join("d");
    let dir = PathBuf::from(last_line(&ok(train(&data, &b.index, &arts, "reranker", &teacher))));
    let m = manifest(&dir);
    let denoised = m["stats"]["denoised_negatives"].as_u64().expect("the denoised count");
    eprintln!("{denoised} negatives scored at or above their positive dropped");
    assert!(m["inputs"].as_array().unwrap().iter().any(|i| i["name"] == "teacher"), "{m:#}");
    let cache = Path::new(&b.index).parent().unwrap().parent().unwrap().join("llm-cache");
    assert!(std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0) > 0, "the teacher's scores are cached in {}", cache.display());
    let (start, end) = (m["stats"]["dev_loss_start"].as_f64().unwrap(), m["stats"]["dev_loss_end"].as_f64().unwrap());
    assert!(end < start, "the distillation loss falls on the questions it trains on: {start} → {end}");
    assert_eq!(PathBuf::from(last_line(&ok(train(&data, &b.index, &arts, "reranker", &teacher)))), dir);
    for lone in [["--set", "retriever.loss=margin_mse"], ["--set", "retriever.denoise=true"]] {
        let out = train(&data, &b.index, &tmp.path().join("bad"), "reranker", &lone);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("retriever.teacher") && err.trim().lines().count() == 1, "{err}");
    }
}
