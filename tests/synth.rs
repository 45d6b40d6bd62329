//! `synth-data` end to end: inverse cloze on the FRA corpus, and LLM mode against a local
//! OpenAI-style server scripted to misbehave (429 + Retry-After, 500, malformed JSON, a hang),
//! a kill mid-run and the resumption, the key never written, and `evaluate` reading the output.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gauge::chat_server::{valid_reply, ChatServer, Reply};
use gauge::pipeline::pipeline;
use gauge::{bin, last_line, ok, refused, repo_root, run, shared};
use serde_json::json;

const SECRET: &str = "sk-test-SECRET-4f2a9c";
const MANUALS: [&str; 2] = [
    "FRA-Track_Structures_CM_2026_Vol_III_Ch1_Railroad_Workplace_Safety_General.pdf",
    "FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf",
];

/// extract + chunk `corpus` into `art`; returns the chunks dir.
fn chunks_of(corpus: &Path, art: &Path) -> String {
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", art.to_str().unwrap()])));
    last_line(&ok(run("chunk", &[&pages, "--artifacts", art.to_str().unwrap()])))
}

fn small_corpus(root: &Path) -> PathBuf {
    let corpus = root.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for m in MANUALS {
        std::fs::copy(shared().join("corpora/fra").join(m), corpus.join(m)).unwrap();
    }
    corpus
}

fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { all_files(&p, out) } else { out.push(p) }
    }
}

#[test]
fn ict_on_the_fra_corpus_is_deterministic_and_splits_by_page() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let chunks_dir = chunks_of(&shared().join("corpora/fra"), &art);
    let chunks = gauge_core::schema::read_chunks(&Path::new(&chunks_dir).join("chunks.parquet")).unwrap();
    let by_id: HashMap<&str, &gauge_core::schema::ChunkRecord> = chunks.iter().map(|c| (c.chunk_id.as_str(), c)).collect();
    let args = [chunks_dir.as_str(), "--mode", "ict", "--n", "200", "--split", "70:15:15", "--artifacts", art.to_str().unwrap()];
    let dir = PathBuf::from(last_line(&ok(run("synth-data", &args))));
    let rows = jsonl(&dir.join("golden.jsonl"));
    assert_eq!(rows.len(), 200);
    let mut qids = BTreeSet::new();
    let mut page_split: BTreeMap<(String, i64), String> = BTreeMap::new();
    let mut sources = BTreeSet::new();
    for r in &rows {
        assert!(qids.insert(r["qid"].as_str().unwrap().to_string()));
        assert_eq!((r["category"].as_str(), r["teacher_model"].as_str()), (Some("ict"), Some("ict")));
        // The query is a full sentence of its gold chunk; the gold span is that chunk's.
        let q = r["question"].as_str().unwrap();
        let c = by_id[r["chunk_id"].as_str().unwrap()];
        assert!(norm(&c.text).contains(&norm(q)), "{q:?} not in its chunk");
        assert!(q.split_whitespace().count() >= 8 && q.ends_with(['.', '?', '!']), "{q:?}");
        let g = &r["gold"][0];
        assert_eq!((g["source"].as_str().unwrap(), g["char_start"].as_i64().unwrap(), g["char_end"].as_i64().unwrap()), (c.source.as_str(), c.char_start, c.char_end));
        sources.insert(c.source.clone());
        let split = r["split"].as_str().unwrap().to_string();
        for p in g["page_start"].as_i64().unwrap()..=g["page_end"].as_i64().unwrap() {
            let prev = page_split.entry((c.source.clone(), p)).or_insert(split.clone());
            assert_eq!(*prev, split, "page {p} of {} feeds two splits", c.source);
        }
    }
    assert_eq!(sources.len(), 4, "stratified sampling reaches every manual");
    let counts: BTreeMap<String, usize> = ["train", "dev", "test"].iter().map(|s| (s.to_string(), jsonl(&dir.join(format!("{s}.jsonl"))).len())).collect();
    assert_eq!(counts.values().sum::<usize>(), 200);
    assert!(counts["train"].abs_diff(140) <= 10 && counts["dev"].abs_diff(30) <= 10, "{counts:?}");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["label"], "ict");
    // Same seed, same set, byte for byte.
    let before = std::fs::read(dir.join("golden.jsonl")).unwrap();
    let mut forced = args.to_vec();
    forced.push("--force");
    ok(run("synth-data", &forced));
    assert_eq!(std::fs::read(dir.join("golden.jsonl")).unwrap(), before);
    assert!(String::from_utf8_lossy(&ok(run("synth-data", &args)).stderr).contains("cache hit"));
    // The default echoes no ict_per_chunk (earlier runs' fingerprints stand).
    assert!(manifest["config"].get("ict_per_chunk").is_none(), "{}", manifest["config"]);

    // Several questions a chunk: the same 60 chunks, each giving up to three of its salient
    // sentences, the best one first — the one a single-question run asks.
    let one = PathBuf::from(last_line(&ok(run("synth-data", &[chunks_dir.as_str(), "--mode", "ict", "--n", "60", "--artifacts", art.to_str().unwrap()]))));
    let three = PathBuf::from(last_line(&ok(run("synth-data", &[chunks_dir.as_str(), "--mode", "ict", "--n", "60", "--set", "ict_per_chunk=3", "--artifacts", art.to_str().unwrap()]))));
    let (one, three) = (jsonl(&one.join("golden.jsonl")), jsonl(&three.join("golden.jsonl")));
    assert_eq!(one.len(), 60);
    assert!(three.len() > 120 && three.len() <= 180, "{} questions from 60 chunks", three.len());
    let mut per_chunk: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &three {
        let c = by_id[r["chunk_id"].as_str().unwrap()];
        let q = r["question"].as_str().unwrap().to_string();
        assert!(norm(&c.text).contains(&norm(&q)), "{q:?} not in its chunk");
        per_chunk.entry(c.chunk_id.clone()).or_default().push(q);
    }
    assert_eq!(per_chunk.len(), 60, "the same chunks");
    assert_eq!(three.iter().map(|r| r["qid"].as_str().unwrap()).collect::<BTreeSet<_>>().len(), three.len());
    for r in &one {
        let qs = &per_chunk[r["chunk_id"].as_str().unwrap()];
        assert_eq!(qs[0], r["question"].as_str().unwrap(), "the best sentence first");
        assert!(qs.iter().collect::<BTreeSet<_>>().len() == qs.len(), "{qs:?}");
    }
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "ict", "--set", "ict_per_chunk=0", "--artifacts", art.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("ict_per_chunk"), "{err}");
}

fn llm_args<'a>(chunks: &'a str, url: &'a str, art: &'a str, n: &'a str, concurrency: &'a str) -> Vec<&'a str> {
    let prompts = Box::leak(repo_root().join("pipelines/prompts").to_string_lossy().to_string().into_boxed_str());
    vec![
        chunks, "--mode", "llm", "--n", n, "--base-url", url, "--model", "test-model", "--api-key-env", "GAUGE_TEST_KEY", "--prompts", prompts,
        "--concurrency", concurrency, "--rpm", "0", "--timeout-s", "1", "--max-retries", "2", "--backoff-ms", "10", "--artifacts", art,
    ]
}

fn synth_llm(args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin("synth-data")).args(args).env("GAUGE_NO_PROGRESS", "1").env("GAUGE_TEST_KEY", SECRET).output().unwrap()
}

#[test]
fn llm_mode_retries_repairs_records_failures_and_never_writes_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = small_corpus(tmp.path());
    let art = tmp.path().join("artifacts");
    let chunks = chunks_of(&corpus, &art);
    // One request at a time, so the script can follow samples in order:
    // s0: 429 (Retry-After 0.3 s), ok · s1: 500, ok · s2: malformed, repaired · s3: malformed
    // twice → failed · s4: hang past the 1 s timeout, ok · s5: 500 × 3 → failed.
    let server = ChatServer::start(|n, r| match n {
        0 => Reply::TooMany(0.3),
        2 | 10 | 11 | 12 => Reply::ServerError,
        4 | 6 | 7 => Reply::Content("Sure! Here is the question: what is a lanyard".into()),
        8 => Reply::Hang(Duration::from_secs(3)),
        _ => Reply::Content(valid_reply(r)),
    });
    let art_s = art.to_str().unwrap().to_string();
    let args = llm_args(&chunks, &server.url, &art_s, "6", "1");
    let out = synth_llm(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let dir = PathBuf::from(last_line(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 13, "requests: {:#?}", reqs.iter().map(|r| r.passage().chars().take(30).collect::<String>()).collect::<Vec<_>>());
    // Every request asks for the reply's JSON Schema, derived from the Rust type.
    for r in &reqs {
        let f = &r.body["response_format"];
        assert_eq!(f["type"], "json_schema", "{f}");
        assert_eq!(f["json_schema"]["name"], "teacher_reply");
        let mut props: Vec<&String> = f["json_schema"]["schema"]["properties"].as_object().unwrap().keys().collect();
        props.sort();
        assert_eq!(props, ["answer", "question", "reasoning"]);
        assert_eq!(f["json_schema"]["schema"]["additionalProperties"], false);
        assert_eq!(f["json_schema"]["strict"], true);
    }
    // The key goes in the header, nowhere else.
    assert!(reqs.iter().all(|r| r.authorization.as_deref() == Some(&format!("Bearer {SECRET}"))));
    let mut files = Vec::new();
    all_files(tmp.path(), &mut files);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "{} holds the key", f.display());
    }
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
    // Retry-After was honoured; the hang was cut by the timeout and retried.
    assert!(reqs[1].at - reqs[0].at >= Duration::from_millis(290), "retried after {:?}", reqs[1].at - reqs[0].at);
    assert!(reqs[9].at - reqs[8].at >= Duration::from_millis(900) && reqs[9].at - reqs[8].at < Duration::from_millis(2900));
    assert_eq!(reqs[1].passage(), reqs[0].passage());
    // The repair request shows the bad reply back and says what was wrong.
    assert_eq!(reqs[5].body["messages"].as_array().unwrap().len(), 4);
    assert!(reqs[5].message(2).contains("what is a lanyard") && reqs[5].message(3).contains("JSON"));

    let rows = jsonl(&dir.join("golden.jsonl"));
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let accepted: Vec<&str> = rows.iter().map(|r| r["qid"].as_str().unwrap()).collect();
    assert_eq!(accepted, ["factual-0", "scenario-1", "multi_hop-2", "scenario-4"]);
    for r in &rows {
        assert_eq!(r["teacher_model"], "test-model");
        assert!(r["thinking"].as_str().unwrap().contains("Evidence Mapping"));
        assert!(!r["reference_answer"].as_str().unwrap().is_empty());
        // prompt_sha256 is the SHA-256 of the exact system + user prompt sent.
        let sent = reqs.iter().find(|q| serde_json::from_str::<serde_json::Value>(&valid_reply(q)).unwrap()["question"] == r["question"]).unwrap();
        assert_eq!(r["prompt_sha256"].as_str().unwrap(), gauge_synth::sha256_hex(&format!("{}\n\n{}", sent.message(0), sent.message(1))));
    }
    assert_eq!(rows[2]["gold"].as_array().unwrap().len(), 2, "multi_hop has two gold chunks");
    let failures = jsonl(&dir.join("failures.jsonl"));
    assert_eq!(failures.len(), 2);
    assert!(failures[0]["reason"].as_str().unwrap().contains("invalid reply after one repair"), "{failures:#?}");
    assert!(failures[1]["reason"].as_str().unwrap().contains("HTTP 500 after 3 attempts"), "{failures:#?}");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    // Seven responses carried a body with usage (100 prompt + 50 completion tokens each).
    assert_eq!((manifest["stats"]["prompt_tokens"].as_u64(), manifest["stats"]["completion_tokens"].as_u64()), (Some(700), Some(350)));
    assert_eq!(manifest["config"]["config"]["teacher"]["api_key_env"], "GAUGE_TEST_KEY");
    assert_eq!(manifest["stats"]["structured_output"]["used"], "json_schema");

    // The teacher's rows are also SFT examples in `answer`'s prompt format: the user turn holds
    // the row's chunk(s) among distractors, the reply walks the teacher's four phases and cites
    // the chunk's page tag; refusal rows leave the chunk out.
    let sft = jsonl(&dir.join("sft.jsonl"));
    assert_eq!(sft.len(), rows.len());
    assert_eq!(manifest["stats"]["sft_examples"], 4);
    let chunk_rows = gauge_core::table::read_parquet_any(&PathBuf::from(&chunks).join("chunks.parquet")).unwrap();
    let cols = gauge_core::table::Columns::new(&chunk_rows);
    let (ids, texts) = (cols.strings_required("chunk_id"), cols.strings_required("text"));
    for (e, r) in sft.iter().zip(&rows) {
        assert_eq!(e["id"], r["qid"]);
        assert_eq!(e["question"], r["question"]);
        let m = e["messages"].as_array().unwrap();
        assert_eq!(m.iter().map(|x| x["role"].as_str().unwrap()).collect::<Vec<_>>(), ["system", "user", "assistant"]);
        let (user, reply) = (m[1]["content"].as_str().unwrap(), m[2]["content"].as_str().unwrap());
        assert!(user.contains(&format!("Question: {}", r["question"].as_str().unwrap())), "{user}");
        let own = texts[ids.iter().position(|i| i == e["chunk_id"].as_str().unwrap()).unwrap()].clone();
        let tag = gauge_cite::page_tag(e["source"].as_str().unwrap(), e["page_start"].as_i64().unwrap() as i32, e["page_end"].as_i64().unwrap() as i32);
        if e["kind"] == "grounded" {
            assert!(user.contains(own.trim()), "the context holds the row's chunk");
            assert!(reply.contains("1. Contextual audit:") && reply.contains("4. Verification:") && reply.contains(&tag), "{reply}");
            assert!(reply.contains(r["reference_answer"].as_str().unwrap().trim()));
        } else {
            assert!(!user.contains(own.trim()), "a refusal context lacks the chunk");
            assert!(reply.contains("The provided documents do not contain this information."));
        }
    }
    assert_eq!(gauge_core::table::read_parquet_any(&dir.join("sft.parquet")).unwrap().num_rows(), 4);

    // `evaluate` reads the output unchanged (span relevance), and the offline set too.
    let ict = PathBuf::from(last_line(&ok(run("synth-data", &[&chunks, "--mode", "ict", "--n", "30", "--artifacts", &art_s]))));
    for (name, golden) in [("llm", dir.join("golden.jsonl")), ("ict", ict.join("golden.jsonl"))] {
        let pipeline = pipeline(name)
            .set("golden", json!(golden.to_str().unwrap()))
            .baseline(json!({ "name": "BM25", "embed": { "model": repo_root().join("models/all-MiniLM-L6-v2").to_str().unwrap() }, "retrieval": { "dense": false, "bm25": true } }))
            .write(&tmp.path().join(format!("{name}.toml")));
        let eval = tmp.path().join("eval");
        let out = ok(run("evaluate", &[pipeline.to_str().unwrap(), "--artifacts", &art_s, "--eval-dir", eval.to_str().unwrap()]));
        let md = std::fs::read_to_string(PathBuf::from(last_line(&out)).join("ablation.md")).unwrap();
        assert!(md.contains("relevance: span") && md.contains("| BM25 (baseline) |"), "{md}");
    }
}

#[test]
fn copy_to_replaces_only_a_set_synth_data_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let chunks = chunks_of(&small_corpus(tmp.path()), &art);
    let a = art.to_str().unwrap();
    // Before: any JSON or JSON Lines file was replaced (a package.json, someone's own set).
    for (name, text) in [("package.json", "{\"name\": \"site\", \"version\": \"1.0.0\"}\n"), ("mine.jsonl", "{\"qid\":\"a\",\"question\":\"my own question\",\"keywords\":[\"gate\"]}\n")] {
        let dest = tmp.path().join(name);
        std::fs::write(&dest, text).unwrap();
        let out = run("synth-data", &[chunks.as_str(), "--mode", "ict", "--n", "5", "--artifacts", a, "--copy-to", dest.to_str().unwrap()]);
        refused(&out, "did not write");
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), text);
    }
    // Its own previous copy: replaced.
    let dest = tmp.path().join("golden/ict.jsonl");
    ok(run("synth-data", &[chunks.as_str(), "--mode", "ict", "--n", "5", "--artifacts", a, "--copy-to", dest.to_str().unwrap()]));
    ok(run("synth-data", &[chunks.as_str(), "--mode", "ict", "--n", "6", "--artifacts", a, "--copy-to", dest.to_str().unwrap()]));
    assert_eq!(jsonl(&dest).len(), 6);
    // A cache hit copies too (its set is read from the artifact).
    let again = tmp.path().join("golden/ict-again.jsonl");
    let out = ok(run("synth-data", &[chunks.as_str(), "--mode", "ict", "--n", "6", "--artifacts", a, "--copy-to", again.to_str().unwrap()]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cache hit"));
    assert_eq!(jsonl(&again), jsonl(&dest));
}

#[test]
fn an_unreachable_endpoint_commits_nothing_and_never_replaces_the_users_set() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = small_corpus(tmp.path());
    let art = tmp.path().join("artifacts");
    let chunks = chunks_of(&corpus, &art);
    // A port that was just free: nothing listens there.
    let url = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let mine = tmp.path().join("golden/mine.jsonl");
    std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
    std::fs::write(&mine, "{\"qid\":\"q1\",\"question\":\"my own question\"}\n").unwrap();
    let art_s = art.to_str().unwrap().to_string();
    let mut args = llm_args(&chunks, &url, &art_s, "2", "1");
    args.extend(["--copy-to", mine.to_str().unwrap()]);
    // Before: exit 0 with "0 questions kept", an empty artifact later runs took as a cache hit,
    // and the user's set replaced by an empty file.
    for _ in 0..2 {
        let out = synth_llm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.lines().last().unwrap_or_default().contains("nothing is committed or copied"), "{err}");
        assert!(!err.contains('\u{1b}'), "no colour codes on a stderr that is not a terminal: {err}");
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "{\"qid\":\"q1\",\"question\":\"my own question\"}\n");
        let committed: Vec<_> = std::fs::read_dir(art.join("synth")).into_iter().flatten().flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.')).collect();
        assert!(committed.is_empty(), "{committed:?}");
    }
}

#[test]
fn a_killed_llm_run_resumes_with_nothing_lost_or_duplicated() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = small_corpus(tmp.path());
    let art = tmp.path().join("artifacts");
    let chunks = chunks_of(&corpus, &art);
    let server = ChatServer::start(|_, r| Reply::Delayed(Duration::from_millis(150), Box::new(Reply::Content(valid_reply(r)))));
    let art_s = art.to_str().unwrap().to_string();
    let args = llm_args(&chunks, &server.url, &art_s, "12", "2");
    let mut child = std::process::Command::new(bin("synth-data"))
        .args(&args)
        .env("GAUGE_NO_PROGRESS", "1")
        .env("GAUGE_TEST_KEY", SECRET)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let journal = || -> Option<PathBuf> {
        // The journal lives in the run's checkpoint directory, `.resume-<fingerprint>/`.
        let resume = std::fs::read_dir(art.join("synth")).ok()?.flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with(".resume-"))?;
        Some(resume.join("journal.jsonl")).filter(|j| j.is_file())
    };
    let started = Instant::now();
    loop {
        let lines = journal().and_then(|j| std::fs::read_to_string(j).ok()).map(|t| t.lines().count()).unwrap_or(0);
        if lines >= 4 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the run never journaled 4 samples");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let journal_path = journal().unwrap();
    let done_before: BTreeSet<String> = std::fs::read_to_string(&journal_path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| e["row"]["chunk_id"].as_str().unwrap().to_string())
        .collect();
    assert!(done_before.len() >= 4 && done_before.len() < 12);
    // A torn last line, as a kill in mid-write leaves, is dropped on resume.
    std::fs::OpenOptions::new().append(true).open(&journal_path).unwrap().write_all(b"{\"sample\": 11, \"row\": {\"qid\"").unwrap();
    let requests_at_kill = server.requests().len();

    let out = synth_llm(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming"));
    let dir = PathBuf::from(last_line(&out));
    let rows = jsonl(&dir.join("golden.jsonl"));
    let qids: BTreeSet<String> = rows.iter().map(|r| r["qid"].as_str().unwrap().to_string()).collect();
    assert_eq!((rows.len(), qids.len()), (12, 12), "every sample once");
    let samples: BTreeSet<usize> = qids.iter().map(|q| q.rsplit('-').next().unwrap().parse().unwrap()).collect();
    assert_eq!(samples, (0..12).collect::<BTreeSet<_>>());
    // Samples journaled before the kill were not asked again: each passage of theirs was
    // requested exactly once overall.
    let reqs = server.requests();
    let chunk_table = gauge_core::schema::read_chunks(&Path::new(&chunks).join("chunks.parquet")).unwrap();
    for id in &done_before {
        let text = norm(&chunk_table.iter().find(|c| &c.chunk_id == id).unwrap().text);
        let asked = reqs.iter().filter(|r| norm(&r.passage()) == text).count();
        assert_eq!(asked, 1, "chunk {id} was requested {asked} times");
    }
    // At most the two in-flight samples were asked twice.
    assert!(reqs.len() <= 12 + 2, "{} requests for 12 samples (kill at {requests_at_kill})", reqs.len());
    assert!(!journal_path.exists(), "the journal moves into the artifact when the run completes");
    assert_eq!(jsonl(&dir.join("journal.jsonl")).len(), 12);
}

#[test]
fn a_rejected_schema_falls_back_once_to_the_prompt_contract_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = small_corpus(tmp.path());
    let art = tmp.path().join("artifacts");
    let chunks = chunks_of(&corpus, &art);
    // A server that knows nothing of `response_format` (as some proxies answer: 400).
    let script = |_: usize, r: &gauge::chat_server::Received| {
        if r.body.get("response_format").is_some() {
            Reply::Reject(400, "Unrecognized request argument supplied: response_format".into())
        } else {
            Reply::Content(valid_reply(r))
        }
    };
    let server = ChatServer::start(script);
    let art_s = art.to_str().unwrap().to_string();
    let args = llm_args(&chunks, &server.url, &art_s, "3", "1");
    let out = synth_llm(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = PathBuf::from(last_line(&out));
    let reqs = server.requests();
    // One rejected request, its retry without the field, then two plain requests.
    let with_field: Vec<bool> = reqs.iter().map(|r| r.body.get("response_format").is_some()).collect();
    assert_eq!(with_field, [true, false, false, false]);
    assert_eq!(jsonl(&dir.join("golden.jsonl")).len(), 3);
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let st = &manifest["stats"]["structured_output"];
    assert_eq!((st["requested"].as_str(), st["used"].as_str()), (Some("auto"), Some("prompt_only")), "{st}");
    assert!(st["fallback_reason"].as_str().unwrap().contains("HTTP 400"), "{st}");

    // Insisting on the schema makes the rejection an error of each sample, recorded.
    let server = ChatServer::start(script);
    let mut strict = llm_args(&chunks, &server.url, &art_s, "3", "1");
    strict.extend(["--set", "teacher.structured_output=\"json_schema\""]);
    let out = synth_llm(&strict);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = PathBuf::from(last_line(&out));
    let failures = jsonl(&dir.join("failures.jsonl"));
    assert_eq!(failures.len(), 3);
    assert!(failures.iter().all(|f| f["reason"].as_str().unwrap().contains("HTTP 400")), "{failures:#?}");
    assert_eq!(server.requests().len(), 3, "a 400 is not retried");
}

#[test]
fn prompts_are_fitted_to_the_context_the_endpoint_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = small_corpus(tmp.path());
    let art = tmp.path().join("artifacts");
    let chunks = chunks_of(&corpus, &art);
    // 1000 tokens of context, 300 kept for the reply: the passages must shrink.
    let server = ChatServer::start_with_context(1000, |_, r| Reply::Content(valid_reply(r)));
    let art_s = art.to_str().unwrap().to_string();
    let mut args = llm_args(&chunks, &server.url, &art_s, "6", "2");
    args.extend(["--max-new-tokens", "300"]);
    let out = synth_llm(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = PathBuf::from(last_line(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 6, "{:?}", std::fs::read_to_string(dir.join("failures.jsonl")));
    for r in &reqs {
        let msgs = r.body["messages"].as_array().unwrap();
        let tokens: usize = msgs.iter().map(|m| gauge_chat_client::estimate_tokens(m["content"].as_str().unwrap()) + gauge_chat_client::TOKENS_PER_MESSAGE).sum();
        assert!(tokens + 300 + 16 <= 1000, "a prompt of {tokens} tokens was sent");
        assert_eq!(r.body["max_tokens"], 300);
    }
    assert!(reqs.iter().any(|r| r.passage().ends_with('…')), "some passage was cut");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["stats"]["passages_cut_to_fit_context"].as_u64().unwrap() >= 1);
    assert_eq!(jsonl(&dir.join("golden.jsonl")).len(), 6);

    // The repair round (the bad reply shown back) is fitted too: a long malformed first reply
    // is cut so that the second request still leaves the reply its 300 tokens.
    let long_bad = format!("Sure! {}", "the gate arm must be lowered before the train arrives ".repeat(60));
    let server = ChatServer::start_with_context(1200, move |n, r| if n == 0 { Reply::Content(long_bad.clone()) } else { Reply::Content(valid_reply(r)) });
    let mut args = llm_args(&chunks, &server.url, &art_s, "1", "1");
    args.extend(["--max-new-tokens", "300", "--force"]);
    let out = synth_llm(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "{:?}", std::fs::read_to_string(PathBuf::from(last_line(&out)).join("failures.jsonl")));
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    let tokens: usize = msgs.iter().map(|m| gauge_chat_client::estimate_tokens(m["content"].as_str().unwrap()) + gauge_chat_client::TOKENS_PER_MESSAGE).sum();
    assert!(tokens + 300 + 16 <= 1200, "the repair prompt has {tokens} tokens");
    assert!(msgs[2]["content"].as_str().unwrap().ends_with('…'), "the bad reply shown back was cut");
    assert_eq!(jsonl(&PathBuf::from(last_line(&out)).join("golden.jsonl")).len(), 1);

    // A reply budget larger than the context is refused per sample, with the fix named.
    let server = ChatServer::start_with_context(900, |_, r| Reply::Content(valid_reply(r)));
    let mut args = llm_args(&chunks, &server.url, &art_s, "2", "1");
    args.extend(["--max-new-tokens", "2000"]);
    let out = synth_llm(&args);
    assert!(out.status.success());
    let failures = jsonl(&PathBuf::from(last_line(&out)).join("failures.jsonl"));
    assert!(failures.iter().all(|f| f["reason"].as_str().unwrap().contains("lower max_new_tokens")), "{failures:#?}");
    assert!(server.requests().is_empty());
}

#[test]
fn sft_examples_teach_citations_phases_and_refusal_and_split_by_page() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let chunks_dir = chunks_of(&shared().join("corpora/fra"), &art);
    let chunks = gauge_core::schema::read_chunks(&Path::new(&chunks_dir).join("chunks.parquet")).unwrap();
    let by_id: HashMap<&str, &gauge_core::schema::ChunkRecord> = chunks.iter().map(|c| (c.chunk_id.as_str(), c)).collect();
    let args = [chunks_dir.as_str(), "--mode", "sft", "--n", "60", "--split", "80:20", "--artifacts", art.to_str().unwrap()];
    let dir = PathBuf::from(last_line(&ok(run("synth-data", &args))));
    let rows = jsonl(&dir.join("sft.jsonl"));
    assert!(rows.len() >= 55, "{} examples", rows.len());
    let system = std::fs::read_to_string(repo_root().join("pipelines/prompts/answer_system.md")).unwrap();
    let refusal = "The provided documents do not contain this information.";
    let mut page_split: BTreeMap<(String, i64), String> = BTreeMap::new();
    let mut refusals = 0;
    for r in &rows {
        let m = r["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant"]);
        assert_eq!(m[0]["content"].as_str().unwrap(), system.trim());
        let (user, reply) = (m[1]["content"].as_str().unwrap(), m[2]["content"].as_str().unwrap());
        let context: Vec<&str> = r["context_chunk_ids"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        assert_eq!(context.len(), 3, "two distractors beside the chunk, or three without it");
        // The user turn is `answer`'s own prompt: every context passage under its tag.
        let given: Vec<gauge_cite::GivenPassage> = context
            .iter()
            .map(|id| {
                let c = by_id[id];
                gauge_cite::GivenPassage { chunk_id: c.chunk_id.clone(), source: c.source.clone(), page_start: c.page_start, page_end: c.page_end }
            })
            .collect();
        let passages: Vec<(gauge_cite::GivenPassage, String)> = given.iter().map(|g| (g.clone(), by_id[g.chunk_id.as_str()].text.clone())).collect();
        let template = std::fs::read_to_string(repo_root().join("pipelines/prompts/answer_four_phase.md")).unwrap();
        assert_eq!(user, gauge_answer::render_prompt(&template, r["question"].as_str().unwrap(), &passages).unwrap());
        assert!(gauge_evaluate::answers::four_phases_in_order(reply), "{reply}");
        let cites = gauge_cite::check(reply, &given);
        let chunk = r["chunk_id"].as_str().unwrap();
        if r["kind"] == "refusal" {
            refusals += 1;
            assert!(!context.contains(&chunk), "a refusal context lacks the chunk");
            assert!(reply.contains(refusal) && cites.is_empty(), "{reply}");
        } else {
            assert!(context.contains(&chunk));
            let c = by_id[chunk];
            assert!(!cites.is_empty() && cites.iter().all(|x| x.verified && x.source == c.source && x.page_start == c.page_start), "{reply}");
            // The quoted sentence is the chunk's own.
            let quoted = reply.split('"').nth(1).unwrap();
            assert!(norm(&c.text).contains(&norm(quoted)), "{quoted:?}");
            // Distractors come from other pages.
            for id in context.iter().filter(|id| **id != chunk) {
                let d = by_id[id];
                assert!(!(d.source == c.source && d.page_start <= c.page_end && c.page_start <= d.page_end));
            }
        }
        let split = r["split"].as_str().unwrap().to_string();
        for p in r["page_start"].as_i64().unwrap()..=r["page_end"].as_i64().unwrap() {
            let prev = page_split.entry((r["source"].as_str().unwrap().to_string(), p)).or_insert(split.clone());
            assert_eq!(*prev, split, "page {p} feeds two splits");
        }
    }
    assert!((3..=25).contains(&refusals), "{refusals} refusal examples of {} at a 0.2 share", rows.len());
    let train = jsonl(&dir.join("train.jsonl")).len();
    let test = jsonl(&dir.join("test.jsonl")).len();
    assert_eq!(train + test, rows.len());
    assert!(train > test && test > 0);
    // Parquet holds the same rows; a forced rerun writes the same bytes.
    let batch = gauge_core::table::read_parquet(&dir.join("sft.parquet"), &gauge_core::schema::arrow_schema(gauge_core::schema::SFT_COLUMNS)).unwrap();
    assert_eq!(batch.num_rows(), rows.len());
    let ids = gauge_core::table::Columns::new(&batch).strings_required("id");
    assert_eq!(ids, rows.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect::<Vec<_>>());
    let first = std::fs::read(dir.join("sft.jsonl")).unwrap();
    let again = PathBuf::from(last_line(&ok(run("synth-data", &[&args[..], &["--force"]].concat()))));
    assert_eq!(std::fs::read(again.join("sft.jsonl")).unwrap(), first);

    // Bad input names the field.
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "sft", "--set", "sft.refusal_share=1.5", "--artifacts", art.to_str().unwrap()]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("refusal_share"));
}

use std::io::Write as _;

#[test]
fn a_teacher_set_becomes_examples_with_retrieved_contexts_tags_and_refusals() {
    let docs = [
        ("gates", "Gate arms must be fully lowered at least five seconds before the train reaches the crossing."),
        ("lights", "Flashing light signals flash alternately at 35 to 65 times a minute while a train approaches."),
        ("bells", "Bells ring while the gate arms descend and may stop once the arms are horizontal."),
        ("brakes", "Each brake test must be recorded by the inspector on the day it is made."),
        ("signs", "Crossbuck signs are placed on each approach to a public highway-rail crossing."),
        ("tracks", "Adjacent tracks are two tracks with centers fifteen feet apart or less."),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let (chunks_dir, index) = gauge::markdown_index(tmp.path(), &docs);
    let art = tmp.path().join("artifacts");
    let thinking = |src: &str| format!("PHASE 1: CONTEXTUAL AUDIT\n1. Source Document: {src}, file page 1.\n\nPHASE 2: EVIDENCE MAPPING\n1. The page states the rule.\n\nPHASE 3: SYNTHESIS\n- Conclusion: as stated.\n\nPHASE 4: VERIFICATION\nThe response relies only on file page 1.");
    let rec = |qid: &str, q: &str, src: Option<&str>, answer: &str| {
        serde_json::json!({"qid": qid, "question": q, "thinking": thinking(src.unwrap_or("handbook.pdf")), "answer": answer, "gold": src.map(|s| vec![serde_json::json!({"source": s, "page": 1})]).unwrap_or_default(), "in_corpus": src.is_some()}).to_string()
    };
    let lines = [
        rec("t1", "How long before the train must gate arms be lowered?", Some("gates.md"), "At least five seconds before the train arrives."),
        rec("t2", "How fast do crossing lights flash?", Some("lights.md"), "35 to 65 times a minute."),
        // A question whose words point elsewhere: retrieval misses its gold page, forced in.
        rec("t3", "When do gate arms come down and lights flash?", Some("tracks.md"), "Tracks fifteen feet apart or less are adjacent."),
        rec("t4", "What does the handbook say about school buses?", None, "Gates may be appropriate near schools."),
    ];
    let set = tmp.path().join("teacher.jsonl");
    std::fs::write(&set, lines.join("\n") + "\n").unwrap();
    let args = |extra: &[&str]| {
        let mut a = vec![chunks_dir.clone(), "--mode".into(), "sft".into(), "--from".into(), set.to_str().unwrap().into(), "--index".into(), index.clone(), "--artifacts".into(), art.to_str().unwrap().into(), "--set".into(), "sft.retrieval.k=2".into()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let argv = args(&["--split", "50:50"]);
    let out = ok(run("synth-data", &argv.iter().map(String::as_str).collect::<Vec<_>>()));
    let dir = PathBuf::from(last_line(&out));
    let rows = jsonl(&dir.join("sft.jsonl"));
    assert_eq!(rows.len(), 4);
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["stats"]["gold_forced_in"].as_u64().unwrap() >= 1, "{}", manifest["stats"]);
    let chunks = gauge_core::schema::read_chunks(&Path::new(&chunks_dir).join("chunks.parquet")).unwrap();
    let by_id: HashMap<&str, &gauge_core::schema::ChunkRecord> = chunks.iter().map(|c| (c.chunk_id.as_str(), c)).collect();
    let mut split_of: BTreeMap<String, String> = BTreeMap::new();
    for r in &rows {
        let context: Vec<&str> = r["context_chunk_ids"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        assert_eq!(context.len(), 2, "k = 2 passages");
        let given: Vec<gauge_cite::GivenPassage> = context.iter().map(|id| by_id[id]).map(|c| gauge_cite::GivenPassage { chunk_id: c.chunk_id.clone(), source: c.source.clone(), page_start: c.page_start, page_end: c.page_end }).collect();
        let reply = r["messages"][2]["content"].as_str().unwrap();
        assert!(gauge_evaluate::answers::four_phases_in_order(reply), "{reply}");
        let cites = gauge_cite::check(reply, &given);
        let gold = r["source"].as_str().unwrap();
        match r["id"].as_str().unwrap() {
            "t4" => {
                assert_eq!(r["kind"], "refusal", "an out-of-corpus question is a refusal");
                assert!(reply.contains("The provided documents do not contain this information.") && cites.is_empty(), "{reply}");
            }
            id => {
                assert_eq!(r["kind"], "grounded", "{id}: out-of-corpus questions fill the 0.2 refusal share");
                assert!(given.iter().any(|g| g.source == gold), "{id}: the gold page is in the context");
                // The teacher's "NAME, file page 1" became the passage's tag; every citation is
                // verified, and one is the gold page.
                assert!(reply.contains(&format!("Source Document: [{gold} p. 1]")) && !reply.contains("file page 1"), "{reply}");
                assert!(!cites.is_empty() && cites.iter().all(|c| c.verified) && cites.iter().any(|c| c.source == gold), "{reply}");
            }
        }
        let split = r["split"].as_str().unwrap().to_string();
        if !gold.is_empty() {
            assert_eq!(split_of.entry(gold.to_string()).or_insert(split.clone()), &split, "a page feeds one split");
        }
    }
    assert!(dir.join("train.jsonl").is_file() && dir.join("test.jsonl").is_file());
    // The records outside the training split: the in-corpus ones as a golden set (the
    // teacher's answer is the reference), the out-of-corpus ones (no gold) in their own file.
    let in_corpus = jsonl(&dir.join("untrained-golden.jsonl"));
    let out_of_corpus = jsonl(&dir.join("untrained-out-of-corpus.jsonl"));
    assert!(in_corpus.iter().all(|q| q["category"] == "teacher") && out_of_corpus.iter().all(|q| q["category"] == "out_of_corpus"));
    let untrained: Vec<serde_json::Value> = in_corpus.into_iter().chain(out_of_corpus).collect();
    let outside: BTreeSet<String> = rows.iter().filter(|r| r["split"] != "train").map(|r| r["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(untrained.iter().map(|q| q["qid"].as_str().unwrap().to_string()).collect::<BTreeSet<_>>(), outside);
    assert!(!outside.is_empty() && outside.len() < rows.len(), "{outside:?}");
    for q in &untrained {
        let want = if q["qid"] == "t4" { (0, "out_of_corpus") } else { (1, "teacher") };
        assert_eq!((q["gold"].as_array().unwrap().len(), q["category"].as_str().unwrap()), want, "{q}");
        assert!(q["reference_answer"].as_str().unwrap().len() > 10, "{q}");
    }
    assert_eq!(manifest["stats"]["untrained_questions"].as_u64(), Some(outside.len() as u64));
    // Every in-corpus example a refusal: the gold pages leave the context.
    let argv = args(&["--set", "sft.refusal_share=1.0"]);
    let dir = PathBuf::from(last_line(&ok(run("synth-data", &argv.iter().map(String::as_str).collect::<Vec<_>>()))));
    for r in jsonl(&dir.join("sft.jsonl")) {
        assert_eq!(r["kind"], "refusal");
        let gold = r["source"].as_str().unwrap();
        assert!(r["context_chunk_ids"].as_array().unwrap().iter().all(|id| by_id[id.as_str().unwrap()].source != gold || gold.is_empty()));
    }
    // Bad input: --from without --index; a broken line names the file and line.
    let out = run("synth-data", &[&chunks_dir, "--mode", "sft", "--from", set.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--index"), "{}", String::from_utf8_lossy(&out.stderr));
    let broken = tmp.path().join("broken.jsonl");
    std::fs::write(&broken, format!("{}\n{{\"qid\": \"x\"}}\n", lines[0])).unwrap();
    let out = run("synth-data", &[&chunks_dir, "--mode", "sft", "--from", broken.to_str().unwrap(), "--index", &index, "--artifacts", art.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("broken.jsonl:2") && err.lines().filter(|l| !l.trim().is_empty()).count() == 1, "{err}");
}

#[test]
fn doc2query_keeps_only_questions_whose_passage_comes_back() {
    let docs = [
        ("gates", "Gate arms must be fully lowered at least five seconds before the train reaches the crossing, and they stay down until the last car has passed."),
        ("lights", "Flashing light signals flash alternately at 35 to 65 times a minute while a train approaches the highway-rail grade crossing."),
        ("brakes", "Each air brake test must be recorded by the inspector on the day it is made, with the car numbers and the result."),
        ("signs", "Crossbuck signs are placed on each approach to a public highway-rail grade crossing, on the right side of the road."),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let (chunks_dir, index) = gauge::markdown_index(tmp.path(), &docs);
    let art = tmp.path().join("artifacts");
    let examples = tmp.path().join("examples.jsonl");
    std::fs::write(&examples, "{\"question\": \"How long must gate arms stay lowered at a crossing?\"}\n").unwrap();
    let args = [chunks_dir.as_str(), "--mode", "doc2query", "--index", index.as_str(), "--from", examples.to_str().unwrap(), "--n", "4", "--min-chars", "0", "--max-new-tokens", "120", "--set", "doc2query.round_trip_k=1", "--set", "doc2query.per_chunk=2", "--artifacts", art.to_str().unwrap()];
    let dir = PathBuf::from(last_line(&ok(run("synth-data", &args))));
    let kept = jsonl(&dir.join("golden.jsonl"));
    let dropped = jsonl(&dir.join("dropped.jsonl"));
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let stats = &manifest["stats"];
    assert_eq!(stats["passages"], 4);
    let written = stats["questions_written"].as_u64().unwrap() as usize;
    assert!(written > 0, "{stats}");
    assert_eq!(stats["questions_kept"].as_u64().unwrap() as usize, kept.len());
    // Every kept question brings its own passage back first (round trip at k = 1).
    let engine = gauge_engine::Engine::open(Path::new(&index), &gauge_engine::EngineOptions { dense: true, model: None, device: "cpu".into() }).unwrap();
    let cfg = gauge_engine::RetrievalConfig { k: 1, ..Default::default() }.normalize();
    for r in &kept {
        let top = engine.search(r["question"].as_str().unwrap(), &cfg).unwrap();
        assert_eq!(top.passages[0].chunk.chunk_id, r["chunk_id"].as_str().unwrap(), "{r}");
        assert_eq!(r["category"], "doc2query");
    }
    // Every dropped question says why, from the known reasons.
    for d in &dropped {
        let reason = d["reason"].as_str().unwrap();
        assert!(["too_short", "no_words", "not_retrieved", "unparsable_reply", "copied_example"].contains(&reason) || reason.starts_with("generation_failed"), "{d}");
    }
    // Resume: each reply is journaled as the decoder finishes it. Plant a journal of two
    // passages (one reply replaced by a marker question, then a torn line as a kill mid-write
    // leaves) and rerun: the journaled passages are not asked again, the rest are, and the
    // rows follow from the replies.
    let replies = jsonl(&dir.join("replies.jsonl"));
    assert_eq!(replies.len(), 4);
    assert_eq!(replies.iter().map(|r| r["completion_tokens"].as_u64().unwrap() as usize).sum::<usize>(), stats["completion_tokens"].as_u64().unwrap() as usize);
    let marker = "Which plover nests under the crossbuck signs on Tuesdays?";
    let mut planted = replies[0].clone();
    planted["text"] = serde_json::Value::String(marker.to_string());
    let checkpoint = dir.parent().unwrap().join(format!(".resume-{}", dir.file_name().unwrap().to_string_lossy()));
    std::fs::create_dir_all(&checkpoint).unwrap();
    std::fs::write(checkpoint.join("journal.jsonl"), format!("{planted}\n{}\n{{\"passage\": 2, \"te", replies[1])).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = ok(run("synth-data", &args));
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming: 2 of 4 passages"), "{}", String::from_utf8_lossy(&out.stderr));
    let again = PathBuf::from(last_line(&out));
    assert_eq!(again, dir);
    assert!(!checkpoint.exists(), "the journal goes with the committed artifact");
    let resumed = jsonl(&dir.join("replies.jsonl"));
    assert_eq!(resumed[0]["text"], marker);
    assert_eq!(resumed[1..], replies[1..], "the passages not journaled are asked again, greedy replies equal");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["resumed_from_journal"], 2);
    let asked: Vec<String> = jsonl(&dir.join("golden.jsonl")).iter().chain(jsonl(&dir.join("dropped.jsonl")).iter()).map(|r| r["question"].as_str().unwrap_or_default().to_string()).collect();
    assert!(asked.iter().any(|q| q == marker), "the journaled reply's question is used: {asked:?}");
    // Bad input: no index to run the round trip on.
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "doc2query", "--artifacts", art.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--index"));
}

#[test]
fn heldout_questions_come_only_from_held_pages_and_other_modes_skip_them() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let a = art.to_str().unwrap();
    let chunks_dir = chunks_of(&small_corpus(tmp.path()), &art);
    let set = tmp.path().join("data/fra-heldout.jsonl");
    let from = shared().join("golden/fra-sft.jsonl");
    let smol = ["--set", "heldout.generator.kind=local", "--set", "heldout.generator.model=SmolLM2-135M-Instruct.Q4_1.gguf", "--set", "heldout.max_new_tokens=48", "--set", "heldout.min_words=4"];
    let mut args = vec![chunks_dir.as_str(), "--mode", "heldout", "--from", from.to_str().unwrap(), "--n", "3", "--set", "generation.temperature=0", "--copy-to", set.to_str().unwrap(), "--artifacts", a];
    args.extend(smol);
    let out = run("synth-data", &args);
    // A run that kept nothing (a 135M judge may keep none) is committed, but never replaces the
    // user's set: --copy-to refuses, naming the artifact.
    let (dir, copied) = if out.status.success() {
        (PathBuf::from(last_line(&out)), true)
    } else {
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(err.contains("the run kept nothing") && !set.exists(), "{err}");
        (PathBuf::from(err.split("its artifact: ").nth(1).unwrap().split(')').next().unwrap()), false)
    };
    // The split: whole held blocks plus guard pages, the same copy beside the set.
    let split: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("heldout_pages.json")).unwrap()).unwrap();
    if copied {
        assert_eq!(std::fs::read(dir.join("heldout_pages.json")).unwrap(), std::fs::read(tmp.path().join("data/fra-heldout.pages.json")).unwrap());
    }
    let strings = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect::<BTreeSet<String>>();
    let (asked_pages, held) = (strings(&split["question_pages"]), strings(&split["pages"]));
    assert!(!asked_pages.is_empty() && asked_pages.is_subset(&held) && held.len() > asked_pages.len(), "guard pages around the held blocks");
    // Every kept question is on held pages only, marked synthetic, and the counts add up.
    let kept = jsonl(&dir.join("golden.jsonl"));
    if copied {
        assert_eq!(jsonl(&set), kept);
    }
    // Its provenance: the generator wrote and judged the questions; the copy sits beside the set
    // and `evaluate` reads it from there.
    let provenance: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("provenance.json")).unwrap()).unwrap();
    if !kept.is_empty() {
        assert_eq!(provenance["written_by"], serde_json::json!(["SmolLM2-135M-Instruct.Q4_1.gguf"]), "{provenance}");
    }
    assert_eq!(provenance["judged_by"], serde_json::json!(["SmolLM2-135M-Instruct.Q4_1.gguf"]), "{provenance}");
    if copied {
        assert_eq!(std::fs::read(dir.join("provenance.json")).unwrap(), std::fs::read(tmp.path().join("data/fra-heldout.provenance.json")).unwrap());
        let record = gauge_core::golden::resolve_provenance(&set, None).unwrap();
        assert_eq!(record.judged_by, ["SmolLM2-135M-Instruct.Q4_1.gguf"]);
    }
    for r in &kept {
        assert_eq!(r["category"], "synthetic");
        let g = &r["gold"][0];
        for p in g["page_start"].as_i64().unwrap()..=g["page_end"].as_i64().unwrap() {
            assert!(asked_pages.contains(&format!("{}#{p}", g["source"].as_str().unwrap())), "{r}");
        }
    }
    let dropped = jsonl(&dir.join("dropped.jsonl"));
    for d in &dropped {
        let reason = d["reason"].as_str().unwrap();
        assert!(["too_short", "no_words", "no_question", "judged_not_answered", "evidence_not_in_passage", "judge_unparsable", "near_duplicate"].contains(&reason) || reason.starts_with("generation_failed") || reason.starts_with("judge_failed"), "{d}");
    }
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let stats = &manifest["stats"];
    assert_eq!((stats["label"].as_str(), stats["passages"].as_u64()), (Some("heldout"), Some(3)));
    let dropped_n: u64 = stats["dropped"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(stats["questions_written"].as_u64().unwrap(), stats["questions_kept"].as_u64().unwrap() + dropped_n, "{stats}");
    assert_eq!(stats["questions_kept"].as_u64().unwrap() as usize, kept.len());
    // Inverse cloze with the split held out: no row touches a held page (guards included).
    let split_copy = if copied { tmp.path().join("data/fra-heldout.pages.json") } else { dir.join("heldout_pages.json") };
    let ict = [chunks_dir.as_str(), "--mode", "ict", "--n", "150", "--hold-out", split_copy.to_str().unwrap(), "--artifacts", a];
    let out = ok(run("synth-data", &ict));
    assert!(String::from_utf8_lossy(&out.stderr).contains("chunks left out"), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = jsonl(&PathBuf::from(last_line(&out)).join("golden.jsonl"));
    assert!(rows.len() >= 50, "{}", rows.len());
    for r in &rows {
        let g = &r["gold"][0];
        for p in g["page_start"].as_i64().unwrap()..=g["page_end"].as_i64().unwrap() {
            assert!(!held.contains(&format!("{}#{p}", g["source"].as_str().unwrap())), "{r}");
        }
    }
    // Bad input: a round trip is refused, examples are required, a broken split is named.
    let index_args = [chunks_dir.as_str(), "--mode", "heldout", "--from", from.to_str().unwrap(), "--index", a, "--artifacts", a];
    let out = run("synth-data", &index_args);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("drop --index"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "heldout", "--artifacts", a]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from FILE"), "{}", String::from_utf8_lossy(&out.stderr));
    let broken = tmp.path().join("broken.json");
    std::fs::write(&broken, "{}").unwrap();
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "ict", "--hold-out", broken.to_str().unwrap(), "--artifacts", a]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.json"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_likelihood_filter_drops_questions_their_passage_does_not_explain() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let a = art.to_str().unwrap();
    let chunks_dir = chunks_of(&small_corpus(tmp.path()), &art);
    let ict = PathBuf::from(last_line(&ok(run("synth-data", &[chunks_dir.as_str(), "--mode", "ict", "--n", "24", "--split", "80:20", "--artifacts", a]))));
    // Half the rows get another row's question: their passage cannot explain it.
    let mut rows = jsonl(&ict.join("golden.jsonl"));
    let n = rows.len();
    assert!(n >= 12, "{n}");
    let questions: Vec<serde_json::Value> = rows.iter().map(|r| r["question"].clone()).collect();
    let swapped: BTreeSet<String> = (0..n).step_by(2).map(|i| {
        rows[i]["question"] = questions[(i + n / 2 + 1) % n].clone();
        rows[i]["qid"].as_str().unwrap().to_string()
    }).collect();
    let from = tmp.path().join("mixed.jsonl");
    std::fs::write(&from, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    let args = [chunks_dir.as_str(), "--mode", "likelihood", "--from", from.to_str().unwrap(), "--set", "likelihood.drop_share=0.25", "--artifacts", a];
    let dir = PathBuf::from(last_line(&ok(run("synth-data", &args))));
    let scores = jsonl(&dir.join("scores.jsonl"));
    assert_eq!(scores.len(), n);
    let mean_gain = |swap: bool| {
        let g: Vec<f64> = scores.iter().filter(|s| swapped.contains(s["qid"].as_str().unwrap()) == swap).map(|s| s["gain"].as_f64().unwrap()).collect();
        g.iter().sum::<f64>() / g.len() as f64
    };
    assert!(mean_gain(false) > mean_gain(true) + 0.5, "own passage {} vs another's {}", mean_gain(false), mean_gain(true));
    for s in &scores {
        let d = s["with_passage"].as_f64().unwrap() - s["without_passage"].as_f64().unwrap();
        assert!((d - s["gain"].as_f64().unwrap()).abs() < 1e-9, "{s}");
    }
    // Kept rows are the original rows, splits and all; more swapped rows were dropped than kept.
    let kept = jsonl(&dir.join("golden.jsonl"));
    let by_qid: HashMap<String, &serde_json::Value> = rows.iter().map(|r| (r["qid"].as_str().unwrap().to_string(), r)).collect();
    for k in &kept {
        assert_eq!(&k, &by_qid[k["qid"].as_str().unwrap()]);
    }
    let kept_swapped = kept.iter().filter(|k| swapped.contains(k["qid"].as_str().unwrap())).count();
    assert!(kept_swapped * 2 < swapped.len(), "{kept_swapped} of {} swapped rows kept", swapped.len());
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let stats = &manifest["stats"];
    let dropped_n: u64 = stats["dropped"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(stats["questions_read"].as_u64().unwrap(), n as u64);
    assert_eq!(stats["questions_kept"].as_u64().unwrap() + dropped_n, n as u64, "{stats}");
    assert_eq!(jsonl(&dir.join("dropped.jsonl")).len() as u64, dropped_n);
    let split_rows: usize = ["train", "dev", "test"].iter().map(|s| dir.join(format!("{s}.jsonl"))).filter(|p| p.exists()).map(|p| jsonl(&p).len()).sum();
    assert_eq!(split_rows, kept.len());
    // A rerun is a cache hit.
    assert_eq!(PathBuf::from(last_line(&ok(run("synth-data", &args)))), dir);
    // Bad input: no rows to filter, an index, a share out of range.
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "likelihood", "--artifacts", a]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "likelihood", "--from", from.to_str().unwrap(), "--index", a, "--artifacts", a]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("drop --index"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run("synth-data", &[chunks_dir.as_str(), "--mode", "likelihood", "--from", from.to_str().unwrap(), "--set", "likelihood.drop_share=1", "--artifacts", a]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("drop_share"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The committed held-out set (`just heldout-set`) lies on its committed page split: every
/// question's gold pages are question pages, the split's pages hold them (guards around), no
/// dev question was copied in, and no question repeats.
#[test]
fn the_committed_heldout_set_lies_on_its_split() {
    let root = repo_root().join("golden");
    let split: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("fra-heldout.pages.json")).unwrap()).unwrap();
    let strings = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect::<BTreeSet<String>>();
    let (asked, held) = (strings(&split["question_pages"]), strings(&split["pages"]));
    assert!(asked.is_subset(&held) && held.len() > asked.len());
    let rows = jsonl(&root.join("fra-heldout.jsonl"));
    assert!(rows.len() >= 150, "{} questions: the set is sized for power (≥ 150)", rows.len());
    let dev: BTreeSet<String> = jsonl(&shared().join("golden/fra-dev.jsonl")).iter().map(|r| norm(r["question"].as_str().unwrap())).collect();
    let mut seen = BTreeSet::new();
    for r in &rows {
        assert_eq!(r["category"], "synthetic");
        let q = norm(r["question"].as_str().unwrap());
        assert!(!dev.contains(&q) && seen.insert(q.clone()), "{q}");
        for g in r["gold"].as_array().unwrap() {
            for p in g["page_start"].as_i64().unwrap()..=g["page_end"].as_i64().unwrap() {
                assert!(asked.contains(&format!("{}#{p}", g["source"].as_str().unwrap())), "{r}");
            }
        }
    }
}
