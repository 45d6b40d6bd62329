//! `answer` end to end: citations checked against the passages given (through a scripted
//! OpenAI-compatible endpoint that cites one given passage and one invented page), refusals
//! that never call the model, and the local SmolLM2 decoder on a real index. Needs `just models`.
use std::path::{Path, PathBuf};

use gauge::chat_server::{ChatServer, Reply};
use gauge::{last_line, ok, repo_root, run};
use gauge_core::table::{read_parquet_any, Columns};

const TOPICS: [(&str, &str); 3] = [
    ("gates", "Gate arms must be fully lowered at least five seconds before the train reaches the crossing, and stay down until it has passed."),
    ("lights", "Flashing light signals flash alternately at 35 to 65 times a minute while a train approaches the crossing."),
    ("bells", "Bells ring while the gate arms descend and may stop once the arms reach the horizontal position."),
];

fn build_index(root: &Path) -> String {
    let corpus = root.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (name, text) in TOPICS {
        std::fs::write(corpus.join(format!("{name}.md")), format!("# {name}\n\n{text}\n")).unwrap();
    }
    let art = root.join("artifacts");
    let a = art.to_str().unwrap();
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(minilm.join("model.safetensors").is_file(), "{}: missing; run `just models`", minilm.display());
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", a])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", a, "--strategy", "page", "--min-chars", "0"])));
    let emb = last_line(&ok(run("embed", &[&chunks, "--model", minilm.to_str().unwrap(), "--artifacts", a])));
    last_line(&ok(run("index", &["--embeddings", &emb, "--artifacts", a])))
}

struct Row {
    answer: String,
    refused: bool,
    passages: serde_json::Value,
    citations: serde_json::Value,
    n: (i32, i32, i32),
    completion_tokens: i32,
}

fn rows(dir: &str) -> Vec<Row> {
    let batch = read_parquet_any(&PathBuf::from(dir).join("answers.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (answer, refused, passages, citations) = (c.strings_required("answer"), c.bools("refused"), c.strings_required("passages"), c.strings_required("citations"));
    let (nc, nv, ni, ct) = (c.i32s("n_citations"), c.i32s("n_verified"), c.i32s("n_invented"), c.i32s("completion_tokens"));
    (0..batch.num_rows())
        .map(|i| Row {
            answer: answer[i].clone(),
            refused: refused[i],
            passages: serde_json::from_str(&passages[i]).unwrap(),
            citations: serde_json::from_str(&citations[i]).unwrap(),
            n: (nc[i], nv[i], ni[i]),
            completion_tokens: ct[i],
        })
        .collect()
}

#[test]
fn api_answers_have_their_citations_checked_and_refusals_skip_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let index = build_index(tmp.path());
    // The endpoint cites the first passage tag of its prompt, and a page that was never given.
    let server = ChatServer::start(|_, r| {
        let user = r.message(1);
        let tag = user.lines().find(|l| l.starts_with('[') && l.ends_with(']')).unwrap_or("[none p. 1]").to_string();
        Reply::Content(format!("The arms come down first {tag}. Bells stop at the horizontal [rules.pdf p. 99]."))
    });
    let art = tmp.path().join("artifacts");
    let api = |extra: &[&str]| {
        let mut args = vec![
            "when are gate arms lowered", "--index", index.as_str(), "--artifacts", art.to_str().unwrap(), "--prompts",
            repo_root().join("pipelines/prompts").to_str().unwrap().to_string().leak(),
            "--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.api_key_env=GAUGE_NO_SUCH_KEY",
        ];
        let url = format!("generator.base_url={}", server.url);
        args.push("--set");
        args.push(url.leak());
        args.extend_from_slice(extra);
        ok(run("answer", &args))
    };
    let out = api(&["-k", "2"]);
    let r = &rows(&last_line(&out))[0];
    assert!(!r.refused);
    assert_eq!(r.passages.as_array().unwrap().len(), 2);
    assert_eq!(r.n, (2, 1, 1), "{}: {}", r.answer, r.citations);
    assert_eq!(r.citations[0]["verified"], true);
    assert_eq!((r.citations[1]["source"].as_str(), r.citations[1]["verified"].as_bool()), (Some("rules.pdf"), Some(false)));
    let first_given = &r.passages[0];
    assert_eq!(r.citations[0]["source"], first_given["source"]);
    let asked = server.requests().len();
    assert_eq!(asked, 1);
    // The user prompt tagged every passage with its source and page.
    let prompt = server.requests()[0].message(1);
    assert!(prompt.contains(&format!("[{} p. 1]", first_given["source"].as_str().unwrap())), "{prompt}");
    // A cutoff no passage reaches: refused, and the endpoint is not called.
    let out = api(&["-k", "2", "--cutoff", "1000"]);
    let r = &rows(&last_line(&out))[0];
    assert!(r.refused && r.passages.as_array().unwrap().is_empty() && r.n == (0, 0, 0));
    assert_eq!(r.answer, "The provided documents do not contain this information.");
    assert_eq!(server.requests().len(), asked);
    // `--limit` is part of the fingerprint: a limited run and a full run of one golden file are
    // different artifacts (they once shared one, so a full run returned the limited answers).
    let golden = tmp.path().join("two.jsonl");
    std::fs::write(&golden, "{\"qid\": \"a\", \"question\": \"when are gate arms lowered\", \"gold\": [], \"keywords\": [\"gate\"]}\n{\"qid\": \"b\", \"question\": \"how often do the lights flash\", \"gold\": [], \"keywords\": [\"lights\"]}\n").unwrap();
    let url = format!("generator.base_url={}", server.url);
    let prompts = repo_root().join("pipelines/prompts");
    let by_limit = |limit: &str| {
        let args = [
            "--golden", golden.to_str().unwrap(), "--limit", limit, "--index", index.as_str(), "--artifacts", art.to_str().unwrap(), "--prompts", prompts.to_str().unwrap(),
            "--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.api_key_env=GAUGE_NO_SUCH_KEY", "--set", url.as_str(),
        ];
        last_line(&ok(run("answer", &args)))
    };
    let (one, all) = (by_limit("1"), by_limit("0"));
    assert_ne!(one, all);
    assert_eq!((rows(&one).len(), rows(&all).len()), (1, 2));
    // Bad input: neither a question nor a golden set.
    let out = run("answer", &["--index", &index, "--artifacts", art.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--golden FILE or one question"));
}

#[test]
fn the_local_decoder_answers_from_a_gguf_and_a_rerun_is_a_cache_hit() {
    let gguf = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(gguf.is_file(), "{}: missing; run `just models`", gguf.display());
    let tmp = tempfile::tempdir().unwrap();
    let index = build_index(tmp.path());
    let art = tmp.path().join("artifacts");
    let prompts = repo_root().join("pipelines/prompts");
    let args = [
        "How often do crossing lights flash?", "--index", index.as_str(), "--artifacts", art.to_str().unwrap(), "--prompts", prompts.to_str().unwrap(),
        "--model", gguf.to_str().unwrap(), "-k", "2", "--max-new-tokens", "12",
    ];
    let out = ok(run("answer", &args));
    let dir = last_line(&out);
    let r = &rows(&dir)[0];
    assert!(!r.refused && !r.answer.is_empty());
    assert!((1..=12).contains(&r.completion_tokens), "{}", r.completion_tokens);
    assert_eq!(r.n.0, r.n.1 + r.n.2);
    let again = ok(run("answer", &args));
    assert_eq!(last_line(&again), dir);
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));
}

#[test]
fn evaluate_adds_answer_rows_with_citation_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    build_index(root); // the corpus folder and a warm artifact store
    let server = ChatServer::start(|_, r| {
        let user = r.message(1);
        let tag = user.lines().find(|l| l.starts_with('[') && l.ends_with(']')).unwrap_or("[none p. 1]").to_string();
        Reply::Content(format!("Answer {tag} and [elsewhere.pdf p. 7]."))
    });
    let golden: Vec<String> = [("q1", "When are gate arms lowered?", "gates.md"), ("q2", "How often do lights flash?", "lights.md")]
        .iter()
        .map(|(id, q, src)| serde_json::json!({ "qid": id, "question": q, "gold": [{"source": src, "page": 1}] }).to_string())
        .collect();
    std::fs::write(root.join("golden.jsonl"), golden.join("\n")).unwrap();
    std::fs::create_dir_all(root.join("prompts")).unwrap();
    for f in ["answer_system.md", "answer_plain.md"] {
        std::fs::copy(repo_root().join("pipelines/prompts").join(f), root.join("prompts").join(f)).unwrap();
    }
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    let pipeline = root.join("qa.toml");
    std::fs::write(
        &pipeline,
        format!(
            r#"name = "qa"
corpus = "corpus"
golden = "golden.jsonl"
resamples = 1000
k = 2
[baseline]
name = "Hybrid"
chunk = {{ strategy = "page", filters = {{ min_chars = 0 }} }}
embed = {{ model = "{minilm}" }}
[answer]
generator = {{ kind = "api", base_url = "{url}", model = "scripted", api_key_env = "GAUGE_NO_SUCH_KEY" }}
"#,
            minilm = minilm.display(),
            url = server.url
        ),
    )
    .unwrap();
    let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", root.join("artifacts").to_str().unwrap(), "--eval-dir", root.join("eval").to_str().unwrap()]));
    let dir = PathBuf::from(last_line(&out));
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    assert!(md.contains("## Answers") && md.contains("| Hybrid | 2 |"), "{md}");
    let batch = read_parquet_any(&dir.join("metrics.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (metric, value) = (c.strings_required("metric"), c.f64s("value"));
    let get = |m: &str| value[metric.iter().position(|x| x == m).unwrap_or_else(|| panic!("no {m}"))].unwrap();
    // Each answer cites its first passage (verified) and one page never given (invented).
    assert_eq!(get("answer/citation_precision"), 0.5);
    assert_eq!(get("answer/invented_citation_rate"), 0.5);
    assert_eq!(get("answer/answer_verified_citation"), 1.0);
    assert_eq!(server.requests().len(), 2);
    // A rerun is a cache hit: the answer stage is not called again.
    let again = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", root.join("artifacts").to_str().unwrap(), "--eval-dir", root.join("eval").to_str().unwrap()]));
    assert_eq!(PathBuf::from(last_line(&again)), dir);
    assert_eq!(server.requests().len(), 2);
}
