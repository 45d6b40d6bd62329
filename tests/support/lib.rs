//! Helpers for gauge's end-to-end tests: locating the stage binaries and `../shared`.
use std::path::{Path, PathBuf};

pub mod chat_server;
pub mod pipeline;
use std::process::{Command, Output};

/// The repository root (read at run time: `cargo test` sets `CARGO_MANIFEST_DIR`, and a
/// target directory shared between checkouts must not bake one checkout's path in).
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_else(|| std::env::current_dir().expect("working directory"))
}

/// `../shared` beside the checkout (test data, fixtures); panics with the fix if absent.
pub fn shared() -> PathBuf {
    let p = repo_root().join("../shared");
    assert!(p.is_dir(), "{}: missing; tests read corpora and fixtures from ../shared beside the checkout", p.display());
    p
}

/// Path of a stage binary built in the same target directory as the running test.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target profile directory");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{}: stage binary not built; run `cargo build --release --workspace --bins` (just test does)",
        path.display()
    );
    path
}

/// A command that runs a nested `cargo build` (a recipe through `./just.sh`) without the
/// variables `cargo test` sets for the test crate (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
/// `CARGO_CRATE_NAME`, …): build scripts that declare `rerun-if-env-changed` on them (ring's
/// does) would rerun, and the next plain build would compile their dependants again. Keeps
/// `CARGO_TARGET_DIR` and `CARGO_HOME`, which say where the build lives.
pub fn without_cargo_test_env(mut cmd: Command) -> Command {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_") && key != "CARGO_TARGET_DIR" && key != "CARGO_HOME" {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Runs a stage binary with arguments, progress bars off; returns its output.
pub fn run(name: &str, args: &[&str]) -> Output {
    Command::new(bin(name)).args(args).env("GAUGE_NO_PROGRESS", "1").output().expect("stage binary runs")
}

/// The last line of stdout (the artifact directory, by convention).
pub fn last_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_string()
}

/// Asserts success, showing stderr otherwise.
pub fn ok(out: Output) -> Output {
    assert!(out.status.success(), "exit {:?}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

/// A refusal of bad input: exit status 1, and stderr ending in one line `<binary>: error: …`
/// that contains `needle`; the line, or what is wrong.
pub fn check_refused(out: &Output, needle: &str) -> Result<String, String> {
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(1) {
        return Err(format!("expected exit status 1 for bad input, got {:?}; stderr:\n{err}", out.status));
    }
    let line = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    if !line.contains(": error: ") {
        return Err(format!("the last stderr line is not a one-line error: {line:?}\nstderr:\n{err}"));
    }
    if !line.contains(needle) {
        return Err(format!("the error does not say {needle:?}: {line}"));
    }
    Ok(line.to_string())
}

/// Asserts [`check_refused`]; returns the error line.
pub fn refused(out: &Output, needle: &str) -> String {
    check_refused(out, needle).unwrap_or_else(|why| panic!("{why}"))
}

/// Asserts a command line refused by the argument parser (clap): exit status 2, and the first
/// stderr line `error: …` containing `needle`; returns that line.
pub fn refused_arguments(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "expected exit status 2 for a bad argument; stderr:\n{err}");
    let line = err.lines().next().unwrap_or_default();
    assert!(line.starts_with("error: "), "the first stderr line is not the parser's error: {line:?}\nstderr:\n{err}");
    assert!(line.contains(needle), "the error does not say {needle:?}: {line}");
    line.to_string()
}

/// Complete (non-hidden) artifact directories of a stage under a root.
pub fn complete_dirs(root: &Path, stage: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join(stage)) else { return Vec::new() };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect()
}

/// Writes each `(name, text)` as `root/corpus/<name>.md` (a `# name` heading, then the text);
/// returns the corpus folder.
pub fn write_markdown_corpus(root: &Path, docs: &[(&str, &str)]) -> PathBuf {
    let corpus = root.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (name, text) in docs {
        std::fs::write(corpus.join(format!("{name}.md")), format!("# {name}\n\n{text}\n")).unwrap();
    }
    corpus
}

/// A Markdown corpus of `docs` (one page each) extracted, chunked by page, embedded with
/// all-MiniLM-L6-v2 and indexed under `root/artifacts`: (chunk artifact, index artifact).
/// Needs `just models`.
pub fn markdown_index(root: &Path, docs: &[(&str, &str)]) -> (String, String) {
    let corpus = write_markdown_corpus(root, docs);
    let art = root.join("artifacts");
    let a = art.to_str().unwrap();
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(minilm.join("model.safetensors").is_file(), "{}: missing; run `just models`", minilm.display());
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", a])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", a, "--strategy", "page", "--min-chars", "0"])));
    let emb = last_line(&ok(run("embed", &[&chunks, "--model", minilm.to_str().unwrap(), "--artifacts", a])));
    let index = last_line(&ok(run("index", &["--embeddings", &emb, "--artifacts", a])));
    (chunks, index)
}

/// Writes `root/golden.jsonl`: one question per `(qid, question, source)`, its gold the
/// source's page 1 (a Markdown document is one page).
pub fn write_golden(root: &Path, rows: &[(&str, &str, &str)]) -> PathBuf {
    let path = root.join("golden.jsonl");
    let lines: Vec<String> = rows.iter().map(|(id, q, src)| serde_json::json!({"qid": id, "question": q, "gold": [{"source": src, "page": 1}]}).to_string()).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// The Python of the reference implementations (statsmodels, pytrec_eval): `$GAUGE_REFS_PYTHON`,
/// else `~/.cache/gauge-refs-venv` (`just refs-venv`, which `just test` runs); fails the test
/// naming the fix when it is missing.
pub fn refs_python() -> PathBuf {
    let p = std::env::var_os("GAUGE_REFS_PYTHON").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/gauge-refs-venv/bin/python3"));
    assert!(p.is_file(), "{}: no Python with statsmodels and pytrec_eval; run `./just.sh refs-venv` (`./just.sh test` does) or set GAUGE_REFS_PYTHON", p.display());
    p
}
