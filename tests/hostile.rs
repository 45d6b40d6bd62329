//! gauge used as a careless or hostile user would: names that try to be paths, destinations
//! that are not previous results, values without bounds, gold pages past a document's end, a
//! key pasted where its variable's name goes and a reply that echoes the key. Each is refused
//! in one line (exit 1, `<stage>: error: …`) or handled, and nothing outside the run's folders
//! changes. Needs `just models` (MiniLM).
use std::path::Path;

use gauge::chat_server::{ChatServer, Reply};
use gauge::{check_refused, last_line, markdown_index, ok, repo_root, run, write_golden};
use gauge_core::table::{read_parquet_any, Columns};

const TOPICS: [(&str, &str); 3] = [
    ("gates", "Gate arms must be fully lowered at least five seconds before the train reaches the crossing, and stay down until it has passed."),
    ("lights", "Flashing light signals flash alternately at 35 to 65 times a minute while a train approaches the crossing."),
    ("bells", "Bells ring while the gate arms descend and may stop once the arms reach the horizontal position."),
];

fn refused(out: &std::process::Output, needle: &str) {
    if let Err(why) = check_refused(out, needle) {
        panic!("{why}");
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path().display().to_string(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn pipeline(dir: &Path, name_line: &str) -> std::path::PathBuf {
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    let p = dir.join("p.toml");
    std::fs::write(&p, format!("{name_line}\ncorpus = \"corpus\"\ngolden = \"golden.jsonl\"\nk = 3\nresamples = 1000\n[baseline]\nname = \"Hybrid\"\nchunk = {{ strategy = \"page\", filters = {{ min_chars = 0 }} }}\nembed = {{ model = \"{}\" }}\n", minilm.display())).unwrap();
    p
}

#[test]
fn a_pipeline_name_is_never_a_path_and_only_an_evaluation_folder_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, _) = markdown_index(tmp.path(), &TOPICS);
    write_golden(tmp.path(), &[("q1", "When are gate arms lowered?", "gates.md"), ("q2", "How often do lights flash?", "lights.md")]);
    let eval = tmp.path().join("eval");
    let other = eval.join("other-study");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("ablation.md"), "another study's table").unwrap();
    let keep = tmp.path().join("somewhere/keep");
    std::fs::create_dir_all(&keep).unwrap();
    std::fs::write(keep.join("notes.txt"), "mine").unwrap();
    let before = (snapshot(&eval), snapshot(&keep));
    let art = tmp.path().join("artifacts");
    let evaluate = |p: &Path| run("evaluate", &[p.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()]);
    // Before: `""` emptied the whole eval dir, `../somewhere/keep` replaced that folder.
    for (line, needle) in [
        ("name = \"\"", "`name` is empty"),
        ("name = \"../somewhere/keep\"", "a name is one folder"),
        (&format!("name = \"{}\"", keep.display()), "a name is one folder"),
        ("name = \".\"", "is not a name"),
        ("name = \"..\"", "is not a name"),
    ] {
        let out = evaluate(&pipeline(tmp.path(), line));
        refused(&out, needle);
    }
    assert_eq!((snapshot(&eval), snapshot(&keep)), before, "a refused name changed something");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().to_string()).filter(|n| n.starts_with(".tmp")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A folder of that name that is not an evaluation: refused, kept.
    let out = evaluate(&pipeline(tmp.path(), "name = \"other-study\""));
    refused(&out, "not an evaluation folder");
    assert_eq!(std::fs::read_to_string(other.join("ablation.md")).unwrap(), "another study's table");
    // A new name, then the same again (a previous evaluation: replaced).
    let p = pipeline(tmp.path(), "name = \"mine\"");
    ok(evaluate(&p));
    ok(evaluate(&p));
    assert!(eval.join("mine/ablation.md").is_file() && other.join("ablation.md").is_file());

    // A gold page past the end of its one-page document: refused, naming the question
    // (before: exit 0 and every metric 0.000).
    std::fs::write(tmp.path().join("golden.jsonl"), "{\"qid\":\"q-past\",\"question\":\"When are gate arms lowered?\",\"gold\":[{\"source\":\"gates.md\",\"page\":99}]}\n").unwrap();
    refused(&evaluate(&p), "question `q-past` names page 99 of `gates.md`, which has 1 page(s)");
    // Unless the pipeline says its golden set's pages are approximate: a warning with a count.
    let out = ok(evaluate(&pipeline(tmp.path(), "name = \"mine\"\ngold_pages = \"approximate\"")));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 gold page(s) lie past their document's end"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn retrieval_values_without_bounds_are_clamped_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = markdown_index(tmp.path(), &TOPICS);
    let query = |extra: &[&str]| {
        let mut args = vec!["when are gate arms lowered", "--index", index.as_str(), "--json"];
        args.extend_from_slice(extra);
        run("query", &args)
    };
    // k above the passage count means all of them (before: an 80 GB allocation, or a panic in
    // tantivy's top-k).
    for k in ["10000000000", "4611686018427387904", "18446744073709551615"] {
        let out = ok(query(&["-k", k]));
        let hits: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
        let n = hits["passages"].as_array().map_or(0, Vec::len);
        assert_eq!(n, 3, "k = {k}: {hits}");
    }
    refused(&query(&["--rrf-k=-60"]), "must be a finite number ≥ 0");
    refused(&query(&["--fusion", "weighted", "--alpha", "7"]), "must lie in [0, 1]");
    let out = query(&["--fusion", "weighted", "--alpha", "NaN"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses a NaN flag: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a finite number"));
    refused(&query(&["--set", "fusion.k=nan"]), "fusion");
    // A question past the cap: one line, no gigabytes.
    let long = "gate arms ".repeat(2000);
    refused(&run("query", &[&long, "--index", &index]), "at most 16384 are searched");
}

#[test]
fn keys_never_reach_a_manifest_stderr_or_an_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = markdown_index(tmp.path(), &TOPICS);
    let key = "sk-test-hostile-0123456789abcdefghijklmnop";
    // The endpoint echoes the key it was sent (a misbehaving proxy).
    let server = ChatServer::start(|_, r| Reply::Content(format!("Echo: {} [gates.md p. 1]", r.authorization.clone().unwrap_or_default())));
    let art = tmp.path().join("artifacts");
    let prompts = repo_root().join("pipelines/prompts");
    let base = |key_env: &str| {
        vec![
            "when are gate arms lowered".to_string(), "--index".into(), index.clone(), "--artifacts".into(), art.display().to_string(), "--prompts".into(), prompts.display().to_string(),
            "--set".into(), "generator.kind=api".into(), "--set".into(), "generator.model=scripted".into(), "--set".into(), format!("generator.api_key_env={key_env}"),
            "--set".into(), format!("generator.base_url={}", server.url),
        ]
    };
    let run_env = |args: &[String]| std::process::Command::new(gauge::bin("answer")).args(args).env("GAUGE_NO_PROGRESS", "1").env("GAUGE_HOSTILE_KEY", key).output().unwrap();
    // The key pasted as the variable's name: refused, and not repeated.
    let out = run_env(&base(key));
    refused(&out, "api_key_env");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(key), "the key reached stderr");
    assert!(!art.join("answer").exists() || snapshot(&art.join("answer")).iter().all(|(_, b)| !String::from_utf8_lossy(b).contains(key)), "the key reached an artifact");
    // A reply that echoes the key: masked before it is cached or written.
    let out = run_env(&base("GAUGE_HOSTILE_KEY"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.requests().last().unwrap().authorization.as_deref(), Some(format!("Bearer {key}").as_str()), "the key was sent");
    let dir = last_line(&out);
    let batch = read_parquet_any(&Path::new(&dir).join("answers.parquet")).unwrap();
    let answers = Columns::new(&batch).strings_required("answer");
    assert!(answers[0].contains("Bearer [key]"), "{answers:?}");
    let leaked: Vec<String> = snapshot(&art).into_iter().filter(|(_, b)| String::from_utf8_lossy(b).contains(key)).map(|(p, _)| p).collect();
    assert!(leaked.is_empty(), "the key is stored in {leaked:?}");
}
