//! The second hostile-user round (issue #82), end to end through the stage binaries: a file the
//! user added inside a previous evaluation is never deleted (D01), a flipped byte in a committed
//! artifact is an error naming the file, not a different result (D12), a field set before its
//! kind is kept and a reversed page range refused (D04), `/dev/zero` or a FIFO given as a config
//! is refused at once (D06), a reader that closes stdout early ends the run with status 141 and no
//! panic (D14), and an
//! index where no lock file can be written (a read-only mount) still answers (D11).
//! Needs `just models` (MiniLM).
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use gauge::{bin, check_refused, markdown_index, ok, repo_root, run, write_golden};

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

fn pipeline(dir: &Path) -> std::path::PathBuf {
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    let p = dir.join("p.toml");
    std::fs::write(&p, format!("name = \"study\"\ncorpus = \"corpus\"\ngolden = \"golden.jsonl\"\nk = 3\nresamples = 1000\n[baseline]\nname = \"Hybrid\"\nchunk = {{ strategy = \"page\", filters = {{ min_chars = 0 }} }}\nembed = {{ model = \"{}\" }}\n", minilm.display())).unwrap();
    p
}

#[test]
fn a_users_file_in_an_evaluation_folder_survives_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    markdown_index(tmp.path(), &TOPICS);
    write_golden(tmp.path(), &[("q1", "When are gate arms lowered?", "gates.md"), ("q2", "How often do lights flash?", "lights.md")]);
    let (art, eval) = (tmp.path().join("artifacts"), tmp.path().join("eval"));
    let p = pipeline(tmp.path());
    let evaluate = |extra: &[&str]| {
        let mut args = vec![p.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--eval-dir", eval.to_str().unwrap()];
        args.extend_from_slice(extra);
        run("evaluate", &args)
    };
    ok(evaluate(&[]));
    let notes = eval.join("study/notes.md");
    std::fs::write(&notes, "what I saw").unwrap();
    // Before: the next run replaced the folder whole and notes.md was gone without a word.
    refused(&evaluate(&["--force"]), "notes.md");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "what I saw");
    assert!(eval.join("study/ablation.md").is_file(), "the previous result stays whole");
    std::fs::rename(&notes, tmp.path().join("notes.md")).unwrap();
    ok(evaluate(&["--force"]));
}

#[test]
fn a_flipped_byte_in_a_committed_artifact_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (chunks, index) = markdown_index(tmp.path(), &TOPICS);
    let query = || run("query", &["when are gate arms lowered", "--index", &index, "--json"]);
    ok(query());
    // One byte of a chunk table (the index's, then the chunk stage's as `embed` reads it):
    // before, a flip inside a chunk's text answered with the changed word and exit 0.
    for (dir, file) in [(index.as_str(), "chunks.parquet"), (chunks.as_str(), "chunks.parquet")] {
        let path = Path::new(dir).join(file);
        let original = std::fs::read(&path).unwrap();
        let mut bytes = original.clone();
        bytes[original.len() / 2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let out = if dir == index { query() } else { run("embed", &[&chunks, "--model", repo_root().join("models/all-MiniLM-L6-v2").to_str().unwrap(), "--artifacts", tmp.path().join("artifacts").to_str().unwrap(), "--force"]) };
        refused(&out, "changed since `");
        assert!(String::from_utf8_lossy(&out.stderr).contains(file));
        std::fs::write(&path, &original).unwrap();
    }
    ok(query());
    // The BM25 segment files, which the manifest does not list: tantivy's own checksums.
    let seg = std::fs::read_dir(Path::new(&index).join("bm25")).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|e| e == "store")).expect("a store file");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[0] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();
    refused(&query(), "its checksum fails");
}

#[test]
fn flags_and_set_merge_field_by_field_and_a_reversed_page_range_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = markdown_index(tmp.path(), &TOPICS);
    let query = |extra: &[&str]| {
        let mut args = vec!["when are gate arms lowered", "--index", index.as_str(), "--json"];
        args.extend_from_slice(extra);
        run("query", &args)
    };
    // Before: alpha 0.5 and min-max were used, silently.
    let out = ok(query(&["--fusion", "weighted", "--set", "fusion.alpha=0.9", "--set", "fusion.normalization=\"z_score\""]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["fusion"], serde_json::json!({ "kind": "weighted", "alpha": 0.9f32 as f64, "normalization": "z_score" }), "{}", v["config"]);
    // A field the final kind does not have: one line naming it.
    refused(&query(&["--fusion", "weighted", "--set", "fusion.k=30"]), "`k`");
    // Before: an empty result and exit 0.
    let out = query(&["--pages", "5-1"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses the flag: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("write 1-5"));
    refused(&query(&["--set", "filter.pages=[5, 1]"]), "write [1, 5]");
}

#[test]
fn a_device_or_a_fifo_as_a_config_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = markdown_index(tmp.path(), &TOPICS);
    // Before: read until memory ran out (~300 MB/s), or blocked forever on the FIFO.
    refused(&run("query", &["gates", "--index", &index, "--config", "/dev/zero"]), "not a regular file");
    let fifo = tmp.path().join("config.toml");
    if Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        refused(&run("query", &["gates", "--index", &index, "--config", fifo.to_str().unwrap()]), "not a regular file");
    }
    let manifest = Path::new(&index).join("manifest.json");
    std::fs::remove_file(&manifest).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &manifest).unwrap();
    refused(&run("query", &["gates", "--index", &index]), "not a regular file");
}

#[test]
fn a_reader_that_closes_stdout_early_ends_the_run_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (name, text) in TOPICS {
        std::fs::write(corpus.join(format!("{name}.md")), text).unwrap();
    }
    // `extract … | head -c0`: the pipe is closed before the stage prints its folder.
    let mut child = Command::new(bin("extract"))
        .args([corpus.to_str().unwrap(), "--artifacts", tmp.path().join("artifacts").to_str().unwrap()])
        .env("GAUGE_NO_PROGRESS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    // Before: a panic ("failed printing to stdout: Broken pipe") and exit 101. Now the status a
    // tool ended by SIGPIPE reports, and nothing on stderr about it.
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.code(), Some(gauge_core::BROKEN_PIPE_STATUS), "{err}");
}

#[test]
fn an_index_where_no_lock_file_can_be_written_still_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = markdown_index(tmp.path(), &TOPICS);
    // What a read-only mount does to tantivy's meta lock (the tests run as root, for whom
    // permissions do not stop a write): the lock file's place is taken by a folder.
    let lock = Path::new(&index).join("bm25/.tantivy-meta.lock");
    let _ = std::fs::remove_file(&lock);
    std::fs::create_dir(&lock).unwrap();
    // Before: "Failed to acquire Lockfile".
    let out = ok(run("query", &["when are gate arms lowered", "--index", &index, "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passages"][0]["source"], "gates.md", "{v}");
}

#[test]
fn an_answer_with_no_room_for_tokens_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = markdown_index(tmp.path(), &TOPICS);
    let prompts = repo_root().join("pipelines/prompts");
    let art = tmp.path().join("artifacts");
    let args = [
        "when are gate arms lowered", "--index", index.as_str(), "--artifacts", art.to_str().unwrap(), "--prompts", prompts.to_str().unwrap(),
        "--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.base_url=http://127.0.0.1:9/v1", "--max-new-tokens", "0",
    ];
    // Before: an empty answer, counted as answered.
    refused(&run("answer", &args), "max_new_tokens = 0 leaves no room");
}
