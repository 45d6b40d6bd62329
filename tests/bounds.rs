//! Every numeric field of the pipeline schema (`pipelines/pipeline.schema.json`: top level,
//! baseline and variant stages, `[answer]`, `[judge]`, `[search]`) driven through extremes —
//! 0, −1, 1, i64::MAX, u64::MAX, NaN, ±inf, 1e300 — must load or be refused in one line, and
//! never panic. A sample of the pipelines that load (every one under `just fuzz`, which sets
//! `GAUGE_FUZZ_SECONDS`; `GAUGE_BOUNDS_RUNS=N` asks for N) is then run through the real
//! `evaluate` binary on a small corpus (LLM layers against a scripted local endpoint): each run
//! exits 0 or with a one-line error — never a panic (exit 101), an abort (134) or a hang.
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gauge::chat_server::{valid_reply, ChatServer, Reply};
use gauge::{bin, repo_root, shared, write_golden, write_markdown_corpus};
use gauge_core::rng::SplitMix64;

const EXTREMES: [&str; 9] = ["0", "-1", "1", "9223372036854775807", "18446744073709551615", "nan", "inf", "-inf", "1e300"];

/// Every numeric leaf of the schema, as a dotted path (`[]` for an array's element).
fn numeric_paths() -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo_root().join("pipelines/pipeline.schema.json")).unwrap()).unwrap();
    let defs = schema["$defs"].clone();
    let mut out = Vec::new();
    fn walk(node: &serde_json::Value, defs: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<String>, depth: usize) {
        if depth > 14 {
            return;
        }
        if let Some(r) = node["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap();
            return walk(&defs[name], defs, path, out, depth + 1);
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            for sub in node[key].as_array().into_iter().flatten() {
                walk(sub, defs, path, out, depth + 1);
            }
        }
        let types: Vec<&str> = match &node["type"] {
            serde_json::Value::String(s) => vec![s.as_str()],
            serde_json::Value::Array(a) => a.iter().filter_map(|t| t.as_str()).collect(),
            _ => vec![],
        };
        if types.iter().any(|t| *t == "integer" || *t == "number") {
            let p = path.join(".");
            if !out.contains(&p) {
                out.push(p);
            }
        }
        for (k, v) in node["properties"].as_object().into_iter().flatten() {
            path.push(k.clone());
            walk(v, defs, path, out, depth + 1);
            path.pop();
        }
        if node["items"].is_object() {
            path.push("[]".into());
            walk(&node["items"], defs, path, out, depth + 1);
            path.pop();
        }
    }
    walk(&schema, &defs, &mut Vec::new(), &mut out, 0);
    out
}

/// A TOML table as dotted keys and value texts.
type Table = BTreeMap<String, String>;

/// A pipeline file with `path` set to `value` (TOML text), and what that field needs beside it.
fn pipeline_text(path: &str, value: &str, url: &str) -> String {
    let api = |prefix: &str| -> Vec<(String, String)> {
        vec![
            (format!("{prefix}.kind"), "\"api\"".into()),
            (format!("{prefix}.base_url"), format!("\"{url}\"")),
            (format!("{prefix}.model"), "\"scripted\"".into()),
            (format!("{prefix}.api_key_env"), "\"GAUGE_NO_SUCH_KEY\"".into()),
        ]
    };
    // Keys of each table, by dotted key inside it.
    let mut top: BTreeMap<String, String> = [("name", "\"bounds\""), ("corpus", "\"corpus\""), ("golden", "\"golden.jsonl\""), ("resamples", "1000")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    let row = |name: &str| -> BTreeMap<String, String> {
        [("name", format!("\"{name}\"")), ("chunk.strategy", "\"recursive\"".into()), ("chunk.size", "300".into()), ("chunk.overlap", "30".into()), ("chunk.filters.min_chars", "0".into()), ("embed.model", format!("\"{}\"", minilm.display()))]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    };
    let mut baseline = row("Hybrid");
    let mut variant = row("Variant");
    let mut answer: Option<Table> = None;
    let mut judge: Option<Table> = None;
    let mut search: Option<Table> = None;
    let mut generator: Option<Table> = None;
    let mut refusal: Option<Table> = None;
    let stage_context = |table: &mut BTreeMap<String, String>, field: &str| {
        if field.starts_with("retrieval.fusion.alpha") {
            table.insert("retrieval.fusion.kind".into(), "\"weighted\"".into());
        } else if field.starts_with("retrieval.fusion.") {
            table.insert("retrieval.fusion.kind".into(), "\"rrf\"".into());
        } else if field.starts_with("retrieval.rerank.") {
            table.insert("retrieval.rerank.kind".into(), "\"cross_encoder\"".into());
            table.insert("retrieval.rerank.model".into(), format!("\"{}\"", shared().join("fixtures/tiny-bert-cross-encoder").display()));
        } else if field.starts_with("raptor.") {
            table.insert("raptor.cluster_size".into(), "4".into());
            table.extend(api("raptor.model"));
        } else if field.starts_with("retrieval.rewrite.") {
            table.insert("retrieval.rewrite.kind".into(), "\"expand\"".into());
            table.extend(api("retrieval.rewrite.model"));
        }
    };
    let answer_base = || -> BTreeMap<String, String> { api("generator").into_iter().chain([("generation.max_new_tokens".to_string(), "16".to_string())]).collect() };
    let (section, field) = path.split_once('.').unwrap_or(("", path));
    match section {
        "" => {
            top.insert(path.to_string(), value.to_string());
        }
        "baseline" => {
            stage_context(&mut baseline, field);
            baseline.insert(field.to_string(), value.to_string());
        }
        "variants" => {
            let field = field.trim_start_matches("[].");
            stage_context(&mut variant, field);
            variant.insert(field.to_string(), value.to_string());
        }
        "answer" => {
            let mut a = answer_base();
            if let Some(g) = field.strip_prefix("generators.[].") {
                let mut named: BTreeMap<String, String> = api("generator").into_iter().collect();
                named.insert("name".into(), "\"second\"".into());
                named.insert(g.to_string(), value.to_string());
                generator = Some(named);
            } else {
                a.insert(field.to_string(), value.to_string());
            }
            answer = Some(a);
        }
        "judge" => {
            answer = Some(answer_base());
            let mut j: BTreeMap<String, String> = api("model").into_iter().collect();
            j.insert(field.to_string(), value.to_string());
            judge = Some(j);
        }
        "search" => {
            let mut s: BTreeMap<String, String> = [("budget".to_string(), "2".to_string())].into();
            s.insert(field.to_string(), value.to_string());
            search = Some(s);
        }
        "refusal" => {
            // The golden set as its own calibration set (allowed; marked in-sample) and the
            // out-of-corpus file the test writes.
            let mut r: Table = [("calibrate_on".to_string(), "\"golden.jsonl\"".to_string()), ("out_of_corpus".to_string(), "[\"ooc.jsonl\"]".to_string())].into();
            r.insert(field.to_string(), value.to_string());
            refusal = Some(r);
        }
        other => panic!("a schema section this test does not know: {other}"),
    }
    let table = |header: &str, t: &BTreeMap<String, String>| format!("{header}\n{}", t.iter().map(|(k, v)| format!("{k} = {v}\n")).collect::<String>());
    let mut text = table("", &top);
    text += &table("[baseline]", &baseline);
    text += &table("[[variants]]", &variant);
    if let Some(a) = &answer {
        text += &table("[answer]", a);
    }
    if let Some(g) = &generator {
        text += &table("[[answer.generators]]", g);
    }
    if let Some(j) = &judge {
        text += &table("[judge]", j);
    }
    if let Some(r) = &refusal {
        text += &table("[refusal]", r);
    }
    if let Some(s) = &search {
        text += &table("[search]", s);
        text += "[search.space]\n\"chunk.size\" = [300, 400]\n";
    }
    text
}

/// Ok when the error is one line (what a user sees), with the reason otherwise.
fn one_line(e: &str) -> Result<(), String> {
    if e.trim().is_empty() || e.trim().contains('\n') {
        Err(format!("not a one-line error: {e:?}"))
    } else {
        Ok(())
    }
}

#[test]
fn every_numeric_pipeline_field_loads_or_is_refused_in_one_line_and_runs_without_a_panic() {
    let paths = numeric_paths();
    assert!(paths.len() >= 100, "the schema walk found only {} numeric fields: {paths:?}", paths.len());
    for must in ["k", "resamples", "baseline.retrieval.fusion.k", "baseline.retrieval.fusion.alpha", "baseline.chunk.size", "answer.generation.batch_size", "search.budget"] {
        assert!(paths.iter().any(|p| p == must), "{must} not found among {paths:?}");
    }
    let server = ChatServer::start(|_, r| if r.body["response_format"].is_object() { Reply::Content(valid_reply(r)) } else { Reply::Content("A short reply.".into()) });
    let tmp = tempfile::tempdir().unwrap();
    let docs: Vec<(String, String)> = (0..6).map(|i| (format!("doc{i}"), format!("Rule {i}: gate arms of type {i} must be inspected every {i} months. Identifier ERA{i}LA1{i}. {}", "Clause text follows here. ".repeat(20)))).collect();
    let refs: Vec<(&str, &str)> = docs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    write_markdown_corpus(tmp.path(), &refs);
    let prompts = tmp.path().join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    for e in std::fs::read_dir(repo_root().join("pipelines/prompts")).unwrap().flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), prompts.join(e.file_name())).unwrap();
        }
    }
    write_golden(tmp.path(), &[("q1", "When must gate arms of type 2 be inspected?", "doc2.md"), ("q2", "ERA4LA14", "doc4.md"), ("q3", "type 5 gate arms", "doc5.md")]);
    std::fs::write(tmp.path().join("ooc.jsonl"), "{\"qid\": \"o1\", \"question\": \"Who designed the Eiffel Tower?\"}\n").unwrap();

    // 1. Every field × every extreme through the parser.
    let mut failures = Vec::new();
    let mut loaded = Vec::new();
    let (mut ok, mut refused) = (0, 0);
    for path in &paths {
        for value in EXTREMES {
            let text = pipeline_text(path, value, &server.url);
            let file = tmp.path().join("p.toml");
            std::fs::write(&file, &text).unwrap();
            match catch_unwind(AssertUnwindSafe(|| gauge_evaluate::Pipeline::load(&file))) {
                Err(_) => failures.push(format!("{path} = {value}: Pipeline::load panicked")),
                Ok(Ok(_)) => {
                    ok += 1;
                    loaded.push((path.clone(), value, text));
                }
                Ok(Err(e)) => {
                    refused += 1;
                    if let Err(why) = one_line(&e.to_string()) {
                        failures.push(format!("{path} = {value}: {why}"));
                    }
                }
            }
        }
    }
    println!("bounds: {} fields × {} values: {ok} load, {refused} refused in one line", paths.len(), EXTREMES.len());

    // 2. The real binary on a sample of what loads (searches, which run many configs, aside).
    let runnable: Vec<_> = loaded.into_iter().filter(|(p, _, _)| !p.starts_with("search.")).collect();
    let wanted = match (std::env::var("GAUGE_BOUNDS_RUNS").ok().and_then(|v| v.parse::<usize>().ok()), std::env::var("GAUGE_FUZZ_SECONDS").is_ok()) {
        (Some(n), _) => n,
        (None, true) => usize::MAX,
        (None, false) => 12,
    };
    let mut rng = SplitMix64::new(7);
    let mut pool = runnable;
    let mut sample = Vec::new();
    while !pool.is_empty() && sample.len() < wanted {
        sample.push(pool.swap_remove(rng.below(pool.len())));
    }
    for (i, (path, value, text)) in sample.iter().enumerate() {
        let file = tmp.path().join(format!("run{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let started = Instant::now();
        let mut child = Command::new(bin("evaluate"))
            .arg(&file)
            .arg("--artifacts")
            .arg(tmp.path().join("artifacts"))
            .arg("--eval-dir")
            .arg(tmp.path().join("eval"))
            .current_dir(tmp.path())
            .env("GAUGE_NO_PROGRESS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let limit = Duration::from_secs(300);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if started.elapsed() > limit {
                child.kill().ok();
                child.wait().ok();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read as _;
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default().to_string();
        let verdict = match status.and_then(|s| s.code()) {
            None => format!("no exit code (killed after {:.0} s, or a signal)", started.elapsed().as_secs_f64()),
            Some(0) => String::new(),
            Some(1) if last.contains(": error: ") && !err.contains("panicked") => String::new(),
            Some(code) => format!("exit {code}: {}", err.lines().rev().take(4).collect::<Vec<_>>().join(" | ")),
        };
        println!("bounds: evaluate with {path} = {value}: {} ({:.1} s)", if verdict.is_empty() { if last.contains(": error: ") { last.as_str() } else { "exit 0" } } else { verdict.as_str() }, started.elapsed().as_secs_f64());
        if !verdict.is_empty() {
            failures.push(format!("evaluate with {path} = {value}: {verdict}"));
        }
    }
    assert!(Path::new(&tmp.path().join("artifacts")).exists() || sample.is_empty());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
