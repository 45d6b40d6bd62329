//! `answer` end to end: citations checked against the passages given (through a scripted
//! OpenAI-compatible endpoint that cites one given passage and one invented page), refusals
//! that never call the model, and the local SmolLM2 decoder on a real index. Needs `just models`.
use std::path::{Path, PathBuf};

use gauge::chat_server::{ChatServer, Reply};
use gauge::pipeline::{merged, pipeline, scripted_api, small_corpus_stages};
use gauge::{last_line, markdown_index, ok, repo_root, run, write_golden, write_markdown_corpus};
use serde_json::json;
use gauge_core::table::{read_parquet_any, Columns};

const TOPICS: [(&str, &str); 3] = [
    ("gates", "Gate arms must be fully lowered at least five seconds before the train reaches the crossing, and stay down until it has passed."),
    ("lights", "Flashing light signals flash alternately at 35 to 65 times a minute while a train approaches the crossing."),
    ("bells", "Bells ring while the gate arms descend and may stop once the arms reach the horizontal position."),
];

fn build_index(root: &Path) -> String {
    markdown_index(root, &TOPICS).1
}

struct Row {
    answer: String,
    refused: bool,
    passages: serde_json::Value,
    citations: serde_json::Value,
    n: (i32, i32, i32),
    prompt_tokens: i32,
    completion_tokens: i32,
    finish_reason: String,
}

fn rows(dir: &str) -> Vec<Row> {
    let batch = read_parquet_any(&PathBuf::from(dir).join("answers.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (answer, refused, passages, citations) = (c.strings_required("answer"), c.bools("refused"), c.strings_required("passages"), c.strings_required("citations"));
    let (nc, nv, ni, pt, ct) = (c.i32s("n_citations"), c.i32s("n_verified"), c.i32s("n_invented"), c.i32s("prompt_tokens"), c.i32s("completion_tokens"));
    let finish = c.strings_required("finish_reason");
    (0..batch.num_rows())
        .map(|i| Row {
            answer: answer[i].clone(),
            refused: refused[i],
            passages: serde_json::from_str(&passages[i]).unwrap(),
            citations: serde_json::from_str(&citations[i]).unwrap(),
            n: (nc[i], nv[i], ni[i]),
            prompt_tokens: pt[i],
            completion_tokens: ct[i],
            finish_reason: finish[i].clone(),
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
    // The endpoint's finish reason is kept ("length" is what "Ran out of tokens" counts).
    assert_eq!(r.finish_reason, "stop");
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
    // `--out-of-corpus` adds its questions after the golden set's; `--limit` counts only the
    // golden set's, so every out-of-corpus question is still asked.
    let ooc = tmp.path().join("ooc.jsonl");
    std::fs::write(&ooc, "{\"qid\": \"x\", \"question\": \"who designed the eiffel tower\"}\n").unwrap();
    let args = [
        "--golden", golden.to_str().unwrap(), "--out-of-corpus", ooc.to_str().unwrap(), "--limit", "1", "--index", index.as_str(), "--artifacts", art.to_str().unwrap(), "--prompts", prompts.to_str().unwrap(),
        "--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.api_key_env=GAUGE_NO_SUCH_KEY", "--set", url.as_str(),
    ];
    let with_ooc = last_line(&ok(run("answer", &args)));
    assert_ne!(with_ooc, one);
    let batch = read_parquet_any(&PathBuf::from(&with_ooc).join("answers.parquet")).unwrap();
    assert_eq!(Columns::new(&batch).strings_required("qid"), ["a", "x"]);
    // Not with a single question.
    let out = run("answer", &["when are gate arms lowered", "--out-of-corpus", ooc.to_str().unwrap(), "--index", index.as_str(), "--artifacts", art.to_str().unwrap()]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--out-of-corpus needs --golden FILE"));
    // Sampling controls reach the endpoint under the names it reads (OpenAI's, llama.cpp
    // server's); what no endpoint has is refused in one line; an unknown field is refused.
    let before = server.requests().len();
    let out = api(&["-k", "2", "--frequency-penalty", "0.5", "--repetition-penalty", "1.2", "--set", "generation.dry_multiplier=0.8"]);
    let dir = last_line(&out);
    let body = &server.requests()[before].body;
    assert_eq!((body["frequency_penalty"].as_f64(), body["repeat_penalty"].as_f64().map(|v| v as f32), body["dry_multiplier"].as_f64().map(|v| v as f32)), (Some(0.5), Some(1.2), Some(0.8)), "{body}");
    assert!(body.get("presence_penalty").is_none() && body.get("min_p").is_none(), "{body}");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(PathBuf::from(&dir).join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["config"]["config"]["generation"]["frequency_penalty"], 0.5, "the manifest echoes the controls");
    let out = run("answer", &["when are gate arms lowered", "--index", &index, "--artifacts", art.to_str().unwrap(), "--no-repeat-ngram-size", "3", "--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.api_key_env=GAUGE_NO_SUCH_KEY", "--set", url.as_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no_repeat_ngram_size"), "{err}");
    let out = run("answer", &["when are gate arms lowered", "--index", &index, "--artifacts", art.to_str().unwrap(), "--set", "generation.repeat_penalty=1.1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("repeat_penalty"), "{}", String::from_utf8_lossy(&out.stderr));
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
    let again = ok(run("answer", &args));
    assert_eq!(last_line(&again), dir);
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));
    // Greedy decoding: 24 new tokens continue the 12 (the 12-token answer is a prefix of the
    // 24-token one), so the generation does not depend on its length budget.
    let with = |k: &str, tokens: &str| {
        let mut a = args.to_vec();
        let n = a.len();
        a[n - 3] = k;
        a[n - 1] = tokens;
        rows(&last_line(&ok(run("answer", &a)))).remove(0)
    };
    let longer = with("2", "24");
    assert!(longer.completion_tokens >= r.completion_tokens, "{} < {}", longer.completion_tokens, r.completion_tokens);
    assert!(longer.answer.starts_with(r.answer.trim_end()), "12 tokens: {:?}\n24 tokens: {:?}", r.answer, longer.answer);
    // The passages are in the prompt: one passage fewer, fewer prompt tokens, and the passages
    // recorded are the ones given.
    let one = with("1", "12");
    assert_eq!((one.passages.as_array().unwrap().len(), r.passages.as_array().unwrap().len()), (1, 2));
    assert!(one.prompt_tokens + 10 < r.prompt_tokens, "prompt tokens with 1 passage {} vs 2 passages {}", one.prompt_tokens, r.prompt_tokens);
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
    write_golden(root, &[("q1", "When are gate arms lowered?", "gates.md"), ("q2", "How often do lights flash?", "lights.md")]);
    copy_answer_prompts(root);
    let pipeline = pipeline("qa")
        .set("k", json!(2))
        .baseline(merged(small_corpus_stages(), json!({ "name": "Hybrid" })))
        .set("answer", json!({ "generator": scripted_api(&server.url) }))
        .write(&root.join("qa.toml"));
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

/// The LLM judge on answer rows (`[judge]`), with a scripted judge: a valid grade, an invalid
/// reply repaired once, and a judge call that fails (recorded as missing, not a score). The
/// grades land in the evaluation's answers.parquet and metrics, the agreement with the citation
/// check is reported, and a re-evaluation asks the judge only what it could not answer before.
#[test]
fn the_judge_grades_answers_and_a_failed_grade_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    build_index(root);
    // The answerer cites its first passage, and for q2 also a page it was never given.
    let answerer = ChatServer::start(|_, r| {
        let user = r.message(1);
        let tag = user.lines().find(|l| l.starts_with('[') && l.ends_with(']')).unwrap_or("[none p. 1]").to_string();
        if user.contains("lights flash") { Reply::Content(format!("They flash 35 to 65 times a minute {tag} [elsewhere.pdf p. 7].")) } else { Reply::Content(format!("Before the train arrives {tag}.")) }
    });
    let grade = |f: u8| serde_json::json!({"faithfulness": f, "accuracy": 4, "completeness": 3, "relevance": 5, "citation_quality": 2, "reason": "Checked against the passages."}).to_string();
    let judge = ChatServer::start(move |_, r| {
        let prompt = r.message(0);
        let repair = r.body["messages"].as_array().map_or(0, |m| m.len()) == 3;
        if prompt.contains("When are gate arms lowered?") {
            Reply::Content(grade(5))
        } else if prompt.contains("How often do lights flash?") {
            // First an invalid grade, then a valid one when shown the error.
            if repair { assert!(r.message(2).contains("`faithfulness` is 9"), "{}", r.message(2)); Reply::Content(grade(4)) } else { Reply::Content(grade(9)) }
        } else {
            Reply::Reject(400, "judge model not loaded".into())
        }
    });
    write_golden(root, &[("q1", "When are gate arms lowered?", "gates.md"), ("q2", "How often do lights flash?", "lights.md"), ("q3", "Do bells ring while the arms descend?", "bells.md")]);
    copy_answer_prompts(root);
    let pipeline = pipeline("judged")
        .set("k", json!(2))
        .baseline(merged(small_corpus_stages(), json!({ "name": "Hybrid" })))
        .set("answer", json!({ "generator": scripted_api(&answerer.url), "template": "plain" }))
        .set("judge", json!({ "model": scripted_api(&judge.url) }))
        .write(&root.join("qa.toml"));
    let (art, eval) = (root.join("artifacts"), root.join("eval"));
    let args = [pipeline.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
    let out = ok(run("evaluate", &args));
    let dir = PathBuf::from(last_line(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("question `q3`: no grade"), "{}", String::from_utf8_lossy(&out.stderr));
    // q1 once, q2 twice (the repair); q3 is refused (a 400 is not retried, though the client
    // may try once more without `response_format`).
    let asked = |q: &str| judge.requests().iter().filter(|r| r.message(0).contains(q)).count();
    assert_eq!((asked("When are gate arms lowered?"), asked("How often do lights flash?")), (1, 2));
    let q3_calls = asked("Do bells ring");
    assert!((1..=2).contains(&q3_calls), "{q3_calls}");
    let q2 = judge.requests().into_iter().find(|r| r.message(0).contains("How often do lights flash?")).unwrap().message(0);
    assert!(q2.contains("[lights.md p. 1]") && q2.contains("35 to 65 times a minute") && q2.contains("[elsewhere.pdf p. 7]"), "the rubric shows passages and answer: {q2}");

    let batch = read_parquet_any(&dir.join("answers.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (qid, faith, reason, error, invented) = (c.strings_required("qid"), c.i32s_nullable("judge_faithfulness"), c.strings("judge_reason"), c.strings("judge_error"), c.i32s("n_invented"));
    let at = |q: &str| qid.iter().position(|x| x == q).unwrap();
    assert_eq!((faith[at("q1")], faith[at("q2")], faith[at("q3")]), (Some(5), Some(4), None));
    assert_eq!(reason[at("q1")].as_deref(), Some("Checked against the passages."));
    assert!(error[at("q3")].as_deref().unwrap().contains("judge model not loaded"), "{:?}", error[at("q3")]);
    assert_eq!((invented[at("q1")], invented[at("q2")]), (0, 1));

    let metrics = read_parquet_any(&dir.join("metrics.parquet")).unwrap();
    let m = Columns::new(&metrics);
    let (name, value, n) = (m.strings_required("metric"), m.f64s("value"), m.i32s("n"));
    let i = name.iter().position(|x| x == "answer/judge_faithfulness").expect("judge metric");
    assert_eq!((value[i], n[i]), (Some(4.5), 2), "the missing grade is left out, not scored");
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    // Both graded answers are faithful; q2's carries an invented citation: they agree on q1 only.
    assert!(md.contains("### Judge") && md.contains("| Hybrid | 2 | 1 | 2 | 1 (50 %) | 0 | – | 1 (50 %) |"), "{md}");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!((manifest["stats"]["judge_missing"].as_u64(), manifest["stats"]["judge_calls"].as_u64()), (Some(1), Some(3)));

    // A forced re-evaluation reads q1's and q2's grades from the cache and asks only q3 again.
    let mut forced = args.to_vec();
    forced.push("--force");
    ok(run("evaluate", &forced));
    assert_eq!((asked("When are gate arms lowered?"), asked("How often do lights flash?"), asked("Do bells ring")), (1, 2, 2 * q3_calls));
    assert_eq!(answerer.requests().len(), 3);
}

/// The plain answer prompts, copied into `root/prompts` (the pipelines there name them).
fn copy_answer_prompts(root: &Path) {
    std::fs::create_dir_all(root.join("prompts")).unwrap();
    for f in ["answer_system.md", "answer_plain.md"] {
        std::fs::copy(repo_root().join("pipelines/prompts").join(f), root.join("prompts").join(f)).unwrap();
    }
}

#[test]
fn answer_rewrites_the_query_when_its_config_asks() {
    // `answer --set retrieval.rewrite.kind=expand …` used to stop with "the config asks for
    // query rewriting but no rewriter is loaded": the answer stage opened its engine without
    // the rewriter that `query` and `evaluate` load.
    let tmp = tempfile::tempdir().unwrap();
    let index = build_index(tmp.path());
    let server = ChatServer::start(|_, r| {
        if r.message(0).starts_with("Rewrite this search query") {
            // The expansion names the lights page's words; the question names none of them.
            return Reply::Content("flashing light signals flash alternately 35 to 65 times a minute".into());
        }
        let user = r.message(1);
        let tag = user.lines().find(|l| l.starts_with('[') && l.ends_with(']')).unwrap_or("[none p. 1]").to_string();
        Reply::Content(format!("They blink 35 to 65 times a minute {tag}."))
    });
    let art = tmp.path().join("artifacts");
    let prompts = repo_root().join("pipelines/prompts");
    let mut args: Vec<String> = ["How often do the beacons blink?", "--index", &index, "--artifacts", art.to_str().unwrap(), "--prompts", prompts.to_str().unwrap(), "-k", "1"].iter().map(|s| s.to_string()).collect();
    for set in [
        "generator.kind=api".to_string(),
        "generator.model=scripted".into(),
        "generator.api_key_env=GAUGE_NO_SUCH_KEY".into(),
        format!("generator.base_url={}", server.url),
        "retrieval.dense=false".into(),
        "retrieval.rewrite.kind=expand".into(),
        "retrieval.rewrite.model.kind=api".into(),
        "retrieval.rewrite.model.model=scripted".into(),
        "retrieval.rewrite.model.api_key_env=GAUGE_NO_SUCH_KEY".into(),
        format!("retrieval.rewrite.model.base_url={}", server.url),
    ] {
        args.push("--set".into());
        args.push(set);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ok(run("answer", &argv));
    let r = &rows(&last_line(&out))[0];
    assert!(!r.refused, "{}", r.answer);
    assert_eq!(r.passages[0]["source"], "lights.md", "the expanded query retrieves the lights page: {}", r.passages);
    assert_eq!(r.n, (1, 1, 0), "{}: {}", r.answer, r.citations);
    let rewrites = server.requests().iter().filter(|q| q.message(0).starts_with("Rewrite this search query")).count();
    assert_eq!(rewrites, 1, "one expansion call for one question");
}

/// A pipeline's declared answer gate (`[answer] gate`): an adapted local generator is judged
/// against its base on every metric of the family (one gate row each, adjusted together) and on
/// its secondary metrics against their margins; a gate naming a metric that is not a
/// higher-is-better answer metric is refused in one line naming the file.
#[test]
fn an_adapter_is_gated_on_the_declared_family_and_its_secondary_margins() {
    use gauge_train::generator::model::{LoraShape, TrainableLlama};
    let gguf = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(gguf.is_file(), "{}: missing; run `just models`", gguf.display());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    build_index(root);
    copy_answer_prompts(root);
    let golden = [
        json!({"qid": "q1", "question": "When are gate arms lowered?", "gold": [{"source": "gates.md", "page": 1}], "reference_answer": "At least five seconds before the train reaches the crossing."}),
        json!({"qid": "q2", "question": "How often do lights flash?", "gold": [{"source": "lights.md", "page": 1}], "reference_answer": "35 to 65 times a minute."}),
        json!({"qid": "q3", "question": "Do bells ring while the gate arms descend?", "gold": [{"source": "bells.md", "page": 1}], "reference_answer": "Yes, while the arms descend."}),
    ];
    std::fs::write(root.join("golden.jsonl"), golden.iter().map(|g| g.to_string() + "\n").collect::<String>()).unwrap();
    // Two questions the corpus cannot answer, in their own file (a refusal is right).
    let ooc = root.join("out-of-corpus.jsonl");
    std::fs::write(&ooc, "{\"qid\": \"o1\", \"question\": \"Who designed the Eiffel Tower?\", \"reference_answer\": \"The manuals do not say.\"}\n{\"qid\": \"o2\", \"question\": \"What is the boiling point of mercury?\"}\n").unwrap();
    // A PEFT adapter for SmolLM2 as train-lora initialises it (B = 0: the base's answers).
    let files = gauge_decoder::ModelFiles::open(gguf.to_str().unwrap(), false).unwrap();
    let model = TrainableLlama::load(files.config.clone(), &files.checkpoint, gauge_train::BaseStorage::Auto, &gauge_encoder::device::cpu()).unwrap();
    let adapter = root.join("adapter");
    model.init_lora(LoraShape { r: 4, alpha: 4.0, rslora: false, targets: vec![0, 2] }, 1).to_adapter(0.0, None).save(&adapter).unwrap();
    let local = |adapter: Option<&Path>| match adapter {
        Some(a) => json!({"kind": "local", "model": gguf.to_str().unwrap(), "adapter": a.to_str().unwrap()}),
        None => json!({"kind": "local", "model": gguf.to_str().unwrap()}),
    };
    let with_gate = |name: &str, gate: serde_json::Value| {
        pipeline(name)
            .set("k", json!(2))
            .set("out_of_corpus", json!(ooc.to_str().unwrap()))
            .baseline(merged(small_corpus_stages(), json!({ "name": "Hybrid" })))
            .set("answer", json!({
                "template": "plain", "generation": {"max_new_tokens": 6},
                "generators": [{"name": "base", "generator": local(None)}, {"name": "+ adapter", "generator": local(Some(&adapter))}],
                "gate": gate, "split_seed": 7,
            }))
            .write(&root.join(format!("{name}.toml")))
    };
    let args = |p: &Path| vec![p.to_str().unwrap().to_string(), "--artifacts".into(), root.join("artifacts").to_str().unwrap().into(), "--eval-dir".into(), root.join("eval").to_str().unwrap().into()];
    let good = with_gate("gated", json!({"family": ["grounded_answer", "out_of_corpus_refusal"], "non_inferiority": {"reference_token_f1": 0.05}}));
    let a = args(&good);
    let dir = PathBuf::from(last_line(&ok(run("evaluate", &a.iter().map(String::as_str).collect::<Vec<_>>()))));
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let gate = manifest["stats"]["gate"].as_array().unwrap();
    let metrics: Vec<&str> = gate.iter().map(|g| g["metric"].as_str().unwrap()).collect();
    assert_eq!(metrics, ["Grounded answers", "Refusals of out-of-corpus questions"], "{gate:?}");
    assert!(gate.iter().all(|g| g["row"] == "Hybrid · + adapter" && g["base"] == "Hybrid · base" && g["family"] == 2), "{gate:?}");
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    // Grounded answers over the 3 answerable questions, out-of-corpus refusals over the 2 others.
    assert!(md.contains("| Hybrid · + adapter | Hybrid · base | Grounded answers | 3 |") && md.contains("| Hybrid · + adapter | Hybrid · base | Refusals of out-of-corpus questions | 2 |") && md.contains("these 2 rows alone"), "{md}");
    // Every generator answered all five; retrieval (its per-question rows, the TREC run) saw
    // only the golden set's three.
    let qids_of = |file: &str, config: &str| {
        let batch = read_parquet_any(&dir.join(file)).unwrap();
        let c = Columns::new(&batch);
        c.strings_required("config").into_iter().zip(c.strings_required("qid")).filter(|(c, _)| c == config).map(|(_, q)| q).collect::<Vec<_>>()
    };
    assert_eq!(qids_of("answers.parquet", "Hybrid · base"), ["q1", "q2", "q3", "o1", "o2"]);
    assert_eq!(qids_of("answers.parquet", "Hybrid · + adapter"), ["q1", "q2", "q3", "o1", "o2"]);
    assert_eq!(qids_of("per_query.parquet", "Hybrid"), ["q1", "q2", "q3"]);
    // The page-group halves (`split_seed`) share out the out-of-corpus questions too (one each).
    let half = |title: &str| md.split(&format!("### {title} (")).nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<usize>().ok()).unwrap();
    assert_eq!(half("Tuning half") + half("Held-out half"), 5, "{md}");
    assert!(manifest["inputs"].as_array().unwrap().iter().any(|i| i["name"] == "out_of_corpus" && i["rows"] == 2), "{}", manifest["inputs"]);
    // B = 0: the adapter's answers are the base's, so token F1 moves by nothing and is
    // non-inferior at any margin; the gate cannot call it better.
    let ni = manifest["stats"]["non_inferiority"].as_array().unwrap();
    assert_eq!(ni.len(), 1, "{ni:?}");
    assert_eq!((ni[0]["metric"].as_str(), ni[0]["delta"].as_f64(), ni[0]["verdict"].as_str()), (Some("Token F1 vs reference"), Some(0.0), Some("non-inferior")));
    assert!(md.contains("### Secondary metrics: non-inferiority") && md.contains("| −0.05 | ✓ non-inferior |"), "{md}");
    assert!(gate.iter().all(|g| g["verdict"] == "not better"), "{gate:?}");
    let page = std::fs::read_to_string(root.join("eval/gated/report.html")).unwrap();
    assert!(page.contains("Secondary metrics: non-inferiority") && page.contains("Grounded answers"));
    // A lower-is-better metric cannot be gated on.
    let bad = with_gate("badgate", json!({"family": ["tokens_generated"]}));
    let out = run("evaluate", &args(&bad).iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("badgate.toml") && err.contains("tokens_generated") && err.contains("higher-is-better"), "{err}");
    // An out-of-corpus row with gold pages belongs in the golden set: refused, file and line named.
    std::fs::write(&ooc, "{\"qid\": \"o1\", \"question\": \"Who designed the Eiffel Tower?\"}\n{\"qid\": \"o2\", \"question\": \"How often do lights flash?\", \"gold\": [{\"source\": \"lights.md\", \"page\": 1}]}\n").unwrap();
    let out = run("evaluate", &args(&good).iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("out-of-corpus.jsonl:2") && err.contains("belongs in the golden set"), "{err}");
    // A gate on out-of-corpus refusals without the questions that give it values: refused when
    // the pipeline is read, before any answer is generated.
    let no_ooc = pipeline("noooc")
        .baseline(merged(small_corpus_stages(), json!({ "name": "Hybrid" })))
        .set("answer", json!({"generators": [{"name": "base", "generator": local(None)}, {"name": "+ adapter", "generator": local(Some(&adapter))}], "gate": {"family": ["out_of_corpus_refusal"]}}))
        .write(&root.join("noooc.toml"));
    let out = run("evaluate", &args(&no_ooc).iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("noooc.toml") && err.contains("add `out_of_corpus"), "{err}");
    // Without answer rows nothing would ask them: refused when the pipeline is read.
    let no_answers = pipeline("noanswers").set("out_of_corpus", json!(ooc.to_str().unwrap())).baseline(merged(small_corpus_stages(), json!({ "name": "Hybrid" }))).write(&root.join("noanswers.toml"));
    let out = run("evaluate", &args(&no_answers).iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("noanswers.toml") && err.contains("add an [answer] section"), "{err}");
}

/// `[refusal]`: each config's cutoff set on a calibration set of answerable questions alone,
/// then its false refusals on the golden set and its refusals of out-of-corpus files measured
/// (no generation). On three one-page documents, questions about the Eiffel Tower or mercury
/// score under every answerable question by dense cosine, so dense retrieval tells them apart
/// (AUROC 1); the rows, the manifest's figures and the table agree with one another; the golden
/// set's best scores are its rank-1 scores in runs.parquet; a four-phase SFT file gives its
/// out-of-corpus rows only; a section that cannot be measured is refused in one line naming the
/// file.
#[test]
fn refusal_by_score_cutoff_is_calibrated_on_one_set_and_measured_on_others() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write_markdown_corpus(root, &TOPICS);
    write_golden(root, &[("q1", "When are gate arms lowered?", "gates.md"), ("q2", "How often do the lights flash?", "lights.md"), ("q3", "Do bells ring while gate arms descend?", "bells.md")]);
    let calibration = root.join("dev.jsonl");
    let cal = [("c1", "How many seconds before the train must the gate arms be down?", "gates.md"), ("c2", "What flash rate do crossing light signals use?", "lights.md"), ("c3", "When may the crossing bells stop ringing?", "bells.md")];
    std::fs::write(&calibration, cal.iter().map(|(id, q, s)| json!({"qid": id, "question": q, "gold": [{"source": s, "page": 1}]}).to_string() + "\n").collect::<String>()).unwrap();
    let ooc = root.join("outside.jsonl");
    std::fs::write(&ooc, "{\"qid\": \"o1\", \"question\": \"Who designed the Eiffel Tower in Paris?\"}\n{\"qid\": \"o2\", \"question\": \"What is the boiling point of mercury?\"}\n").unwrap();
    let sft = root.join("sft.jsonl");
    std::fs::write(&sft, "{\"qid\": \"s1\", \"question\": \"When are gate arms lowered?\", \"in_corpus\": true, \"gold\": [{\"source\": \"gates.md\", \"page\": 1}], \"answer\": \"…\"}\n{\"qid\": \"s2\", \"question\": \"Which grape varieties grow best in Burgundy?\", \"in_corpus\": false, \"answer\": \"Not in the manuals.\"}\n").unwrap();
    let refusal = json!({"calibrate_on": "dev.jsonl", "out_of_corpus": ["outside.jsonl", "sft.jsonl"], "max_false_refusal": 0.34});
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    let write = |name: &str, refusal: serde_json::Value| {
        pipeline(name)
            .set("k", json!(2))
            .set("refusal", refusal)
            .baseline(merged(small_corpus_stages(), json!({ "name": "Vector", "retrieval": { "bm25": false } })))
            .variant(json!({ "name": "BM25", "retrieval": { "dense": false, "bm25": true } }))
            .variant(json!({ "name": "Hybrid RRF", "retrieval": { "dense": true, "bm25": true } }))
            .variant(json!({ "name": "Vector + MaxSim", "base": "Vector", "retrieval": { "rerank": { "kind": "max_sim", "model": minilm.to_str().unwrap(), "n_initial": 3 } } }))
            .write(&root.join(format!("{name}.toml")))
    };
    let args = |p: &Path| vec![p.to_str().unwrap().to_string(), "--artifacts".into(), root.join("artifacts").to_str().unwrap().into(), "--eval-dir".into(), root.join("eval").to_str().unwrap().into()];
    let good = write("refusal", refusal.clone());
    let a = args(&good);
    let dir = PathBuf::from(last_line(&ok(run("evaluate", &a.iter().map(String::as_str).collect::<Vec<_>>()))));
    let batch = read_parquet_any(&dir.join("refusal.parquet")).unwrap();
    let c = Columns::new(&batch);
    let (config, score, set, qid, refused) = (c.strings_required("config"), c.strings_required("score"), c.strings_required("set"), c.strings_required("qid"), c.bools("refused"));
    let best = c.f64s("best_score");
    // 4 configs × (3 calibration + 3 golden + 2 + 1 out-of-corpus): the SFT file's in-corpus row skipped.
    assert_eq!(batch.num_rows(), 4 * 9);
    let of = |cfg: &str, s: &str| -> Vec<(String, Option<f64>, bool)> { (0..batch.num_rows()).filter(|&i| config[i] == cfg && set[i] == s).map(|i| (qid[i].clone(), best[i], refused[i])).collect() };
    assert_eq!(of("Vector", "sft.jsonl").iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["s2"]);
    // Each config's own score: the reranker's when it reranks, else the dense retriever's, else BM25's — never the fused one.
    let kind = |cfg: &str| (0..batch.num_rows()).find(|&i| config[i] == cfg).map(|i| score[i].clone()).unwrap();
    assert_eq!([kind("Vector"), kind("BM25"), kind("Hybrid RRF"), kind("Vector + MaxSim")], ["dense", "bm25", "dense", "final"]);
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let stats = manifest["stats"]["refusal"].as_array().unwrap();
    assert_eq!(stats.iter().map(|s| s["config"].as_str().unwrap()).collect::<Vec<_>>(), ["Vector", "BM25", "Hybrid RRF", "Vector + MaxSim"]);
    for s in ["calibration", "answerable", "outside.jsonl", "sft.jsonl"] {
        // Vector and Hybrid RRF keep the same dense retriever's cosine: the same scores.
        assert_eq!(of("Vector", s), of("Hybrid RRF", s), "{s}");
        assert!(of("Vector", s).iter().all(|r| r.1.is_some_and(|b| (-1.0..=1.0001).contains(&b))), "cosines: {:?}", of("Vector", s));
    }
    // A reranked config's golden-set score is the rank-1 score its search already wrote.
    let runs = read_parquet_any(&dir.join("runs.parquet")).unwrap();
    let r = Columns::new(&runs);
    let (rc, rq, rr, rs) = (r.strings_required("config"), r.strings_required("qid"), r.i32s("rank"), r.f64s("score"));
    for (q, b, _) in of("Vector + MaxSim", "answerable") {
        let i = (0..runs.num_rows()).find(|&i| rc[i] == "Vector + MaxSim" && rq[i] == q && rr[i] == 1).unwrap();
        assert_eq!(b, rs[i], "{q}");
    }
    for cfg in ["Vector", "BM25", "Hybrid RRF", "Vector + MaxSim"] {
        let s = stats.iter().find(|s| s["config"] == cfg).unwrap();
        let threshold = s["threshold"].as_f64().unwrap();
        // ⌊0.34 · 3⌋ = 1: the second-lowest calibration score.
        let mut cals: Vec<f64> = of(cfg, "calibration").iter().map(|r| r.1.unwrap()).collect();
        cals.sort_by(f64::total_cmp);
        assert_eq!(threshold, cals[1], "{cfg}");
        for s in ["calibration", "answerable", "outside.jsonl", "sft.jsonl"] {
            for (q, b, refused) in of(cfg, s) {
                assert_eq!(refused, b.is_none_or(|b| b < threshold), "{cfg} {q}");
            }
        }
        assert_eq!(s["false_refusals"]["n"], 3);
        assert_eq!(s["refusals_all"]["n"], 3);
        assert_eq!(s["refusals_all"]["k"].as_u64().unwrap() as usize, ["outside.jsonl", "sft.jsonl"].iter().flat_map(|f| of(cfg, f)).filter(|r| r.2).count());
    }
    // Dense cosine separates these questions completely.
    let vector = &stats[0];
    assert_eq!(vector["auroc"][0].as_f64(), Some(1.0), "{vector}");
    let md = std::fs::read_to_string(dir.join("ablation.md")).unwrap();
    assert!(md.contains("## Refusal by score cutoff") && md.contains("3 answerable questions of `dev.jsonl`") && md.contains("| refused: outside.jsonl | refused: sft.jsonl | refused: all out-of-corpus | AUROC |") && md.contains("| Vector | dense | "), "{md}");
    assert!(manifest["inputs"].as_array().unwrap().iter().any(|i| i["name"] == "refusal_out_of_corpus_2" && i["rows"] == 1), "{}", manifest["inputs"]);
    let page = std::fs::read_to_string(root.join("eval/refusal/report.html")).unwrap();
    assert!(page.contains("<section id=\"refusal\">") && page.contains("Refused: sft.jsonl") && page.contains("href=\"#refusal\""), "the report page shows the table");
    // A rerun is a cache hit.
    let again = PathBuf::from(last_line(&ok(run("evaluate", &a.iter().map(String::as_str).collect::<Vec<_>>()))));
    assert_eq!(again, dir);
    // Sections that cannot be measured, refused when the pipeline is read.
    for (name, section, needle) in [
        ("noooc", json!({"calibrate_on": "dev.jsonl", "out_of_corpus": []}), "out_of_corpus is empty"),
        ("badshare", json!({"calibrate_on": "dev.jsonl", "out_of_corpus": ["outside.jsonl"], "max_false_refusal": 0.9}), "max_false_refusal"),
        ("badconfig", json!({"calibrate_on": "dev.jsonl", "out_of_corpus": ["outside.jsonl"], "configs": ["Nope"]}), "`Nope`"),
        ("badfield", json!({"calibrate_on": "dev.jsonl", "out_of_corpus": ["outside.jsonl"], "cutof": 0.3}), "cutof"),
    ] {
        let p = write(name, section);
        let out = run("evaluate", &args(&p).iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&format!("{name}.toml")) && err.contains(needle), "{name}: {err}");
    }
    // An out-of-corpus row with gold is refused with its file and line.
    std::fs::write(&ooc, "{\"qid\": \"o1\", \"question\": \"Who designed the Eiffel Tower?\"}\n{\"qid\": \"o2\", \"question\": \"How often do lights flash?\", \"gold\": [{\"source\": \"lights.md\", \"page\": 1}]}\n").unwrap();
    let out = run("evaluate", &a.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("outside.jsonl:2") && err.contains("not out of corpus"), "{err}");
}

/// The four phases held by structure (#81): through an endpoint, each request carries its
/// question's own schema (its passages' tags, the phase budgets, the refusal as the first
/// field) and each reply is rendered under the template's headings — a refusal as the refusal
/// sentence, a reply that ignored the schema kept as written; locally, SmolLM2 under the schema
/// cannot leave it: four phases in order (or its refusal), no invented citation. Bad budgets are
/// refused in one line naming the setting.
#[test]
fn four_phase_answers_are_held_by_their_schema_and_rendered_under_the_headings() {
    let tmp = tempfile::tempdir().unwrap();
    let index = build_index(tmp.path());
    let server = ChatServer::start(|i, r| {
        let user = r.message(1);
        let tag = user.lines().find(|l| l.starts_with('[') && l.ends_with(']')).unwrap_or("[none p. 1]").to_string();
        Reply::Content(match i {
            0 => serde_json::json!({"verdict": "answer", "contextual_audit": format!("The first passage bears {tag}."), "evidence_map": format!("Arms lowered {tag}; bells [rules.pdf p. 99]."), "synthesis": format!("The arms come down first {tag}."), "verification": "Every tag checked."}).to_string(),
            1 => r#"{"verdict":"refuse"}"#.to_string(),
            _ => "The arms come down first.".to_string(),
        })
    });
    let golden = tmp.path().join("three.jsonl");
    std::fs::write(&golden, ["when are gate arms lowered", "who built the eiffel tower", "how often do the lights flash"].iter().enumerate().map(|(i, q)| format!("{{\"qid\": \"q{i}\", \"question\": \"{q}\", \"gold\": [], \"keywords\": [\"x\"]}}\n")).collect::<String>()).unwrap();
    let (art, prompts) = (tmp.path().join("artifacts"), repo_root().join("pipelines/prompts"));
    let url = format!("generator.base_url={}", server.url);
    let base = vec![
        "--golden".to_string(), golden.display().to_string(), "--index".into(), index.clone(), "--artifacts".into(), art.display().to_string(), "--prompts".into(), prompts.display().to_string(),
        "-k".into(), "2".into(), "--template".into(), "four_phase".into(), "--structure".into(), "four_phase".into(), "--max-new-tokens".into(), "384".into(),
    ];
    let api: Vec<String> = ["--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.api_key_env=GAUGE_NO_SUCH_KEY", "--set", url.as_str()].iter().map(|s| s.to_string()).collect();
    let args: Vec<String> = base.iter().chain(&api).cloned().collect();
    let out = ok(run("answer", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    let dir = last_line(&out);
    let r = rows(&dir);
    // Each request sent its own schema: the phases in order, each bounded, brackets only its tags.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let schema = &requests[0].body["response_format"]["json_schema"]["schema"];
    let answer = &schema["anyOf"][0];
    let keys: Vec<&String> = answer["properties"].as_object().unwrap_or_else(|| panic!("{}", requests[0].body)).keys().collect();
    assert_eq!(keys, ["verdict", "contextual_audit", "evidence_map", "synthesis", "verification"]);
    assert_eq!(schema["anyOf"][1]["properties"]["verdict"]["const"], "refuse");
    let pattern = answer["properties"]["synthesis"]["pattern"].as_str().unwrap();
    for p in r[0].passages.as_array().unwrap() {
        let tag = format!("[{} p. {}]", p["source"].as_str().unwrap(), p["page_start"]);
        assert!(pattern.contains(&regex::escape(&tag)), "{tag} in {pattern}");
    }
    assert_eq!(answer["properties"]["synthesis"]["maxLength"], 120 * 3, "the default budget: 35 % of (384 − 40) tokens, 3 characters each");
    // The default form: each phase a sentence, the synthesis citing a given tag, and the prompt
    // told so (its last paragraph names the keys in the schema's order).
    let (synthesis, audit) = (regex::Regex::new(pattern).unwrap(), regex::Regex::new(answer["properties"]["contextual_audit"]["pattern"].as_str().unwrap()).unwrap());
    let tag = format!("[{} p. {}]", r[0].passages[0]["source"].as_str().unwrap(), r[0].passages[0]["page_start"]);
    assert!(synthesis.is_match(&format!("The arms come down first {tag}.")) && !synthesis.is_match("The arms come down first."), "{pattern}");
    assert!(audit.is_match("The first passage bears.") && !audit.is_match(",") && !audit.is_match("The first passage bears"));
    let user = requests[0].body["messages"][1]["content"].as_str().unwrap();
    let told = user.rsplit("\n\n").next().unwrap();
    assert!(told.starts_with("Reply with one JSON object") && told.contains("\"verdict\"") && told.contains("The synthesis cites at least one tag."), "{told}");
    // Rendered under the headings; the endpoint's invented page is still caught by the check.
    assert!(r[0].answer.starts_with("1. Contextual audit: The first passage bears [") && r[0].answer.contains("\n\n4. Verification: Every tag checked."), "{}", r[0].answer);
    assert_eq!(r[0].n, (4, 3, 1), "{}", r[0].citations);
    assert_eq!((r[1].answer.as_str(), r[1].refused), ("The provided documents do not contain this information.", false), "the model's own refusal, not the cutoff's");
    assert_eq!(r[2].answer, "The arms come down first.", "a reply outside the schema is kept as written");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(PathBuf::from(&dir).join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["config"]["config"]["structure"]["kind"], "four_phase", "the manifest echoes the form");
    // Bad budgets: one line naming the setting, before any model is called.
    for (set, says) in [("60", "raise generation.max_new_tokens"), ("structure.phase_tokens=[10, 10]", "give four"), ("structure.phase_tokens=[200, 200, 200, 200]", "over generation.max_new_tokens = 384")] {
        let mut a = args.clone();
        match set.parse::<usize>() {
            Ok(_) => *a.iter_mut().find(|x| x.as_str() == "384").unwrap() = set.to_string(),
            Err(_) => a.extend(["--set".to_string(), set.to_string()]),
        }
        let out = run("answer", &a.iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{set}: {err}");
        assert!(err.contains(says), "{set}: {err}");
    }
    assert_eq!(server.requests().len(), 3);
    // Locally the schema holds: SmolLM2 cannot leave it (small budgets: the reply ends well
    // within its tokens), so every reply is the four phases in order or its own refusal, and
    // no bracket is anything but a given tag.
    let gguf = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(gguf.is_file(), "{}: missing; run `just models`", gguf.display());
    let mut local = base.clone();
    local.extend(["--model".to_string(), gguf.display().to_string(), "--set".into(), "structure.phase_tokens=[12, 12, 12, 12]".into()]);
    let dir = last_line(&ok(run("answer", &local.iter().map(String::as_str).collect::<Vec<_>>())));
    for r in rows(&dir) {
        // The evaluator's check: each heading found after the one before it (a phase's text
        // may name a later phase: SmolLM2 echoes the keys the prompt lists).
        let lower = r.answer.to_lowercase();
        let mut from = Some(0);
        for p in ["contextual audit", "evidence map", "synthesis", "verification"] {
            from = from.and_then(|at| lower[at..].find(p).map(|i| at + i + p.len()));
        }
        let in_order = from.is_some();
        assert!(in_order || r.answer == "The provided documents do not contain this information.", "{:?} ({})", r.answer, r.finish_reason);
        assert_eq!(r.n.2, 0, "an invented citation under the schema: {}", r.citations);
        assert_eq!(r.finish_reason, "eos", "{:?}", r.answer);
    }
}
