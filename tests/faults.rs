//! `just faults [short|full]`: the fault matrix over the real binaries. Ignored by `cargo test`
//! (`just faults` runs it with `--ignored`; `.ci/run` runs the short variant).
//!
//! - **SIGKILL** at seeded points of each stage (extract, chunk, embed, index, synth-data
//!   `--mode ict` and `--mode doc2query` (its replies journaled as they finish), train-lora,
//!   raptor, answer, evaluate): the rerun finishes and its output equals an
//!   uninterrupted run's — byte for byte for every file but the manifest (whose `outputs`
//!   must be equal), by query results for an index (tantivy names its segments at random), by
//!   the text columns for answers (their timing columns are wall time), by runs and TREC files
//!   for an evaluation (its latencies are wall time) — and no temporary directory is left.
//! - **A full disk** (a tmpfs sized to hold the upstream artifacts only; where mounting is not
//!   allowed, a file-size limit with `ulimit -f`): `embed` fails with one line, and the
//!   artifacts already there are intact.
//! - **A read-only artifacts root**: a cache hit still answers; a new artifact is refused in
//!   one line; nothing changes.
//! - **Four concurrent runs** of one stage and config: all succeed, one complete artifact.
//! - **Races at commit**: 20 pairs of `evaluate` runs of one pipeline into one root and one
//!   eval dir (the evaluation artifact removed between pairs, so each pair races to commit it
//!   and to replace `eval/<name>/`), and rounds of six concurrent `extract` runs (25 rounds,
//!   150 runs; 5 rounds in the short variant): every run exits 0 with the same artifact, the
//!   loser of a race sees a cache hit, nothing is left behind.
//! - **A shared root seen from two PID namespaces** (`unshare --pid --fork --mount-proc`, as two
//!   containers or hosts sharing a volume): a run in the other namespace, which cannot see this
//!   one's process, leaves its in-progress build alone, and both commit.
//! - **An endpoint that dies mid-run** (every call fails after the third: HTTP 503 for
//!   synth-data `--mode llm`, which stops after three unanswered samples in a row, and `--mode
//!   doc2query`, which asks for every passage and then stops, journaling what was answered; HTTP 400 for
//!   answer and raptor, which stop at the first failed call): the run fails in one line; once
//!   the endpoint is back the rerun makes only the calls not made before and ends with the
//!   uninterrupted run's output.
//!
//! - **The second hostile round** (#82): seeded bit flips in a committed index (12; 124 in the
//!   full variant), each refused in one line or answered exactly as before; synth-data against an
//!   endpoint that never answers (exit 1, nothing committed); a corpus file growing while
//!   `extract` reads it (pages of the hashed bytes, or one line saying it changed); an index on a
//!   read-only mount (answers); a stdout closed at once (exit 141, as after SIGPIPE; no panic).
//!
//! One line per try (`faults: <try>: ok|FAIL …`) and a total; any failure fails the test.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gauge::chat_server::{valid_reply, ChatServer, Reply};
use gauge::{bin, check_refused, last_line, repo_root, shared, write_golden, write_markdown_corpus};
use gauge_core::rng::SplitMix64;
use gauge_core::table::{read_parquet_any, Columns};

const SUBJECTS: [&str; 8] = ["Gate arms", "Flashing lights", "Crossing bells", "Track circuits", "Tank cars", "Bridge walkways", "Air brakes", "Fall protection"];
const RULES: [&str; 3] = ["must be inspected every month and the result recorded", "shall be tested after any repair that affects their function", "need a written plan approved before work begins"];

fn full() -> bool {
    std::env::var("GAUGE_FAULTS").is_ok_and(|v| v == "full")
}

/// The inputs every try builds from.
struct Inputs {
    corpus: PathBuf,
    golden: PathBuf,
    pipeline: PathBuf,
    raptor_cfg: PathBuf,
    minilm: PathBuf,
    tiny_bert: PathBuf,
    prompts: PathBuf,
    url: String,
}

fn inputs(root: &Path, url: &str) -> Inputs {
    let docs: Vec<(String, String)> = SUBJECTS
        .iter()
        .enumerate()
        .flat_map(|(i, s)| RULES.iter().enumerate().map(move |(j, r)| (format!("doc{i}{j}"), format!("{s} {r}. Identifier ERA{i}{j}LA{}. {}", 100 + i * 5 + j, (0..10).map(|k| format!("Clause {k} applies to {} under section {}.", s.to_lowercase(), 170 + k)).collect::<Vec<_>>().join(" ")))))
        .collect();
    let refs: Vec<(&str, &str)> = docs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let corpus = write_markdown_corpus(root, &refs);
    let golden = write_golden(root, &[("q1", "When must gate arms be inspected?", "doc00.md"), ("q2", "Who approves a plan for bridge walkways?", "doc52.md"), ("q3", "ERA31LA116", "doc31.md"), ("q4", "testing flashing lights after repair", "doc11.md"), ("q5", "tank car repair testing", "doc41.md"), ("q6", "fall protection plan", "doc72.md")]);
    let minilm = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(minilm.join("model.safetensors").is_file(), "{}: missing; run `just models`", minilm.display());
    let pipeline = gauge::pipeline::pipeline("faults")
        .set("k", serde_json::json!(5))
        .baseline(gauge::pipeline::merged(gauge::pipeline::small_corpus_stages(), serde_json::json!({ "name": "Hybrid", "embed": { "model": minilm.to_str().unwrap() } })))
        .variant(serde_json::json!({ "name": "Hybrid, 300-char chunks", "chunk": { "strategy": "recursive", "size": 300, "overlap": 30, "filters": { "min_chars": 0 } } }))
        .write(&root.join("p.toml"));
    let raptor_cfg = root.join("raptor.toml");
    std::fs::write(&raptor_cfg, format!("cluster_size = 4\n[model]\nkind = \"api\"\nbase_url = \"{url}\"\nmodel = \"scripted\"\napi_key_env = \"GAUGE_NO_SUCH_KEY\"\n")).unwrap();
    Inputs { corpus, golden, pipeline, raptor_cfg, minilm, tiny_bert: shared().join("fixtures/tiny-bert-cross-encoder"), prompts: repo_root().join("pipelines/prompts"), url: url.to_string() }
}

const STAGES: [&str; 10] = ["extract", "chunk", "embed", "index", "synth-data", "synth-d2q", "train-lora", "raptor", "answer", "evaluate"];

/// A stage's command line in artifact root `root`, its upstream built there first.
fn command(inp: &Inputs, root: &Path, stage: &str) -> (String, Vec<String>) {
    let a = root.to_str().unwrap().to_string();
    let up = |s: &str| last_line(&must(command_output(inp, root, s)));
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let args = match stage {
        "extract" => s(&[inp.corpus.to_str().unwrap(), "--artifacts", &a]),
        "chunk" => s(&[&up("extract"), "--strategy", "recursive", "--size", "300", "--overlap", "30", "--min-chars", "0", "--artifacts", &a]),
        "embed" => s(&[&up("chunk"), "--model", inp.minilm.to_str().unwrap(), "--artifacts", &a]),
        "index" => s(&["--embeddings", &up("embed"), "--artifacts", &a]),
        "synth-data" => s(&[&up("chunk"), "--mode", "ict", "--n", "24", "--split", "50:50:0", "--min-chars", "60", "--artifacts", &a]),
        "train-lora" => s(&[
            &up("synth-data"), "--target", "embedder", "--index", &up("index"), "--base", inp.tiny_bert.to_str().unwrap(), "--artifacts", &a,
            "--max-steps", "12", "--epochs", "50", "--grad-accum", "1", "--learning-rate", "1e-2", "--r", "4", "--lora-alpha", "8",
            "--set", "batch_size=4", "--set", "warmup_steps=1", "--set", "eval_every=0", "--set", "checkpoint_every=2", "--set", "eval_examples=16",
        ]),
        "raptor" => s(&[&up("embed"), "--config", inp.raptor_cfg.to_str().unwrap(), "--artifacts", &a]),
        "answer" => s(&[
            "--golden", inp.golden.to_str().unwrap(), "--index", &up("index"), "--artifacts", &a, "--prompts", inp.prompts.to_str().unwrap(), "-k", "3",
            "--set", "generator.kind=api", "--set", "generator.model=scripted", "--set", "generator.api_key_env=GAUGE_NO_SUCH_KEY", "--set", &format!("generator.base_url={}", inp.url),
        ]),
        "synth-llm" => s(&[
            &up("chunk"), "--mode", "llm", "--n", "6", "--min-chars", "60", "--base-url", &inp.url, "--model", "scripted", "--api-key-env", "GAUGE_NO_SUCH_KEY", "--prompts", inp.prompts.to_str().unwrap(),
            "--concurrency", "1", "--rpm", "0", "--timeout-s", "5", "--max-retries", "0", "--backoff-ms", "10", "--artifacts", &a,
        ]),
        "synth-d2q" => s(&[
            &up("chunk"), "--mode", "doc2query", "--index", &up("index"), "--n", "12", "--min-chars", "60", "--prompts", inp.prompts.to_str().unwrap(), "--artifacts", &a,
            "--rpm", "0", "--timeout-s", "5", "--max-retries", "0", "--backoff-ms", "10",
            "--set", "doc2query.generator.kind=api", "--set", "doc2query.generator.model=scripted", "--set", "doc2query.generator.api_key_env=GAUGE_NO_SUCH_KEY", "--set", &format!("doc2query.generator.base_url={}", inp.url),
        ]),
        "evaluate" => s(&[inp.pipeline.to_str().unwrap(), "--artifacts", &a, "--eval-dir", root.with_extension("eval").to_str().unwrap()]),
        other => panic!("no stage {other}"),
    };
    let binary = if stage.starts_with("synth-") { "synth-data" } else { stage };
    (binary.to_string(), args)
}

fn command_output(inp: &Inputs, root: &Path, stage: &str) -> std::process::Output {
    let (b, args) = command(inp, root, stage);
    Command::new(bin(&b)).args(&args).current_dir(inp.corpus.parent().unwrap()).env("GAUGE_NO_PROGRESS", "1").output().expect("stage binary runs")
}

fn must(out: std::process::Output) -> std::process::Output {
    assert!(out.status.success(), "exit {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

/// Runs a stage and SIGKILLs it after `after` (if still running); true when it was killed.
fn run_killed(inp: &Inputs, root: &Path, stage: &str, after: Duration) -> bool {
    let (b, args) = command(inp, root, stage);
    let mut child = Command::new(bin(&b)).args(&args).current_dir(inp.corpus.parent().unwrap()).env("GAUGE_NO_PROGRESS", "1").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    while started.elapsed() < after {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().ok();
    child.wait().unwrap();
    true
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_string_lossy().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn manifest_outputs(dir: &Path) -> serde_json::Value {
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    m["outputs"].clone()
}

fn query(index: &Path) -> Vec<String> {
    ["gate arms inspection", "ERA31LA116", "bridge walkway plan"]
        .iter()
        .flat_map(|q| {
            let out = must(Command::new(bin("query")).args(["--index", index.to_str().unwrap(), "--json", q, "-k", "5"]).output().unwrap());
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            v["passages"].as_array().unwrap().iter().map(|p| p["chunk_id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        })
        .collect()
}

fn answer_text(dir: &Path) -> Vec<String> {
    let batch = read_parquet_any(&dir.join("answers.parquet")).unwrap();
    let c = Columns::new(&batch);
    ["qid", "answer", "passages", "citations"].iter().flat_map(|k| c.strings_required(k)).collect()
}

/// What must be equal between an uninterrupted run's output and a resumed one's.
fn same_output(stage: &str, want: &Path, got: &Path) -> Result<(), String> {
    match stage {
        "index" => (query(want) == query(got)).then_some(()).ok_or("query results differ".into()),
        "answer" => (answer_text(want) == answer_text(got)).then_some(()).ok_or("answers differ".into()),
        // The adapter byte for byte; the loss curve and stats carry wall times.
        "train-lora" => {
            let (w, g) = (files(&want.join("adapter")), files(&got.join("adapter")));
            if w.is_empty() {
                return Err("no adapter in the uninterrupted run".into());
            }
            match w.iter().find(|(k, v)| g.get(*k) != Some(v)) {
                Some((k, _)) => Err(format!("adapter/{k} differs")),
                None => Ok(()),
            }
        }
        "evaluate" => {
            let (w, g) = (want.parent().unwrap().parent().unwrap().with_extension("eval").join("faults"), got.parent().unwrap().parent().unwrap().with_extension("eval").join("faults"));
            let (fw, fg) = (files(&w), files(&g));
            for k in fw.keys().filter(|k| k.ends_with(".run") || k.ends_with(".qrels") || *k == "runs.parquet") {
                if fw.get(k) != fg.get(k) {
                    return Err(format!("{k} differs"));
                }
            }
            Ok(())
        }
        _ => {
            // A teacher run's journal records what happened (a sample the dead endpoint never
            // answered, then its retry); what it made must be equal.
            let skip = |name: &str| name == "manifest.json" || (stage == "synth-llm" && name == "journal.jsonl");
            let outputs = |d: &Path| -> Vec<serde_json::Value> { manifest_outputs(d).as_array().unwrap().iter().filter(|o| !skip(o["name"].as_str().unwrap_or_default())).cloned().collect() };
            if outputs(want) != outputs(got) {
                return Err("manifest outputs differ".into());
            }
            let (mut fw, mut fg) = (files(want), files(got));
            fw.retain(|k, _| !skip(k));
            fg.retain(|k, _| !skip(k));
            if fw.keys().ne(fg.keys()) {
                return Err(format!("files differ: {:?} vs {:?}", fw.keys().collect::<Vec<_>>(), fg.keys().collect::<Vec<_>>()));
            }
            match fw.iter().find(|(k, v)| fg.get(*k) != Some(v)) {
                Some((k, _)) => Err(format!("{k} differs")),
                None => Ok(()),
            }
        }
    }
}

fn temporaries(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for s in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(s.path()).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(".tmp-") || n.ends_with(".old") {
                out.push(format!("{}/{n}", s.file_name().to_string_lossy()));
            }
        }
    }
    out
}

struct Tally {
    tries: usize,
    failed: Vec<String>,
}

impl Tally {
    fn record(&mut self, name: &str, result: Result<String, String>) {
        self.tries += 1;
        match result {
            Ok(detail) => println!("faults: {name}: ok ({detail})"),
            Err(why) => {
                println!("faults: {name}: FAIL — {why}");
                self.failed.push(format!("{name}: {why}"));
            }
        }
    }
}

/// A uniform draw in [0, 1) for the kill points.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn kill_matrix(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    let points = if full() { 3 } else { 1 };
    let mut rng = SplitMix64::new(42);
    let reference = tmp.join("reference");
    for stage in STAGES {
        // The uninterrupted run (its upstream first, untimed).
        let (b, args) = command(inp, &reference, stage);
        let started = Instant::now();
        let out = must(Command::new(bin(&b)).args(&args).current_dir(inp.corpus.parent().unwrap()).env("GAUGE_NO_PROGRESS", "1").output().unwrap());
        let secs = started.elapsed().as_secs_f64();
        let want = PathBuf::from(last_line(&out));
        for p in 0..points {
            let root = tmp.join(format!("kill-{stage}-{p}"));
            command(inp, &root, stage); // builds the upstream
            let at = Duration::from_secs_f64(secs * (0.1 + 0.8 * unit(&mut rng)));
            let killed = run_killed(inp, &root, stage, at);
            let rerun = command_output(inp, &root, stage);
            let result = if !rerun.status.success() {
                Err(format!("the rerun failed: {}", String::from_utf8_lossy(&rerun.stderr).lines().last().unwrap_or_default()))
            } else {
                let got = PathBuf::from(last_line(&rerun));
                same_output(stage, &want, &got).and_then(|()| {
                    let left = temporaries(&root);
                    if left.is_empty() {
                        Ok(format!("{} at {:.2} s of {secs:.2} s, rerun equal", if killed { "killed" } else { "finished before the kill" }, at.as_secs_f64()))
                    } else {
                        Err(format!("temporaries left: {left:?}"))
                    }
                })
            };
            tally.record(&format!("kill -9 {stage} #{p}"), result);
        }
    }
}

/// Mounts a tmpfs of `bytes` at `dir`; false where mounting is not allowed (or
/// `GAUGE_FAULTS_NO_MOUNT=1` asks for the fallbacks).
fn mount_tmpfs(dir: &Path, bytes: u64) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    if std::env::var("GAUGE_FAULTS_NO_MOUNT").is_ok_and(|v| v == "1") {
        return false;
    }
    Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs", dir.to_str().unwrap()]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn umount(dir: &Path) {
    Command::new("umount").arg(dir).status().ok();
}

fn du(dir: &Path) -> u64 {
    files(dir).values().map(|v| (v.len() as u64).div_ceil(4096) * 4096 + 4096).sum()
}

fn full_disk(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    // Upstream (extract, chunk) sizes measured in a scratch root, then a tmpfs that holds them
    // with 64 KiB to spare: embed's vectors do not fit.
    let scratch = tmp.join("disk-scratch");
    let chunks = PathBuf::from(last_line(&must(command_output(inp, &scratch, "chunk"))));
    let need = du(&scratch) + 64 * 1024;
    let root = tmp.join("disk");
    if mount_tmpfs(&root, need) {
        let chunks_here = PathBuf::from(last_line(&must(command_output(inp, &root, "chunk"))));
        let before = files(&root);
        let out = command_output(inp, &root, "embed");
        let result = check_refused(&out, "No space left on device").and_then(|line| {
            let mut after = files(&root);
            after.retain(|k, _| before.contains_key(k));
            if after != before {
                return Err("an artifact already there changed".into());
            }
            let (mut here, mut there) = (files(&chunks_here), files(&chunks));
            here.remove("manifest.json");
            there.remove("manifest.json");
            if here != there {
                return Err("the chunk artifact differs from the scratch build".into());
            }
            Ok(format!("tmpfs of {need} bytes: {line}; temporaries left: {:?}", temporaries(&root)))
        });
        umount(&root);
        tally.record("full disk (tmpfs): embed", result);
    } else {
        // No mount: a file-size limit. The kernel stops the process (SIGXFSZ) at the first write
        // past it; what must hold is that nothing complete or changed is left behind.
        let root = tmp.join("disk-ulimit");
        must(command_output(inp, &root, "chunk"));
        let before = files(&root);
        let (b, args) = command(inp, &root, "embed");
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let out = Command::new("bash").args(["-c", &format!("ulimit -f 64; exec '{}' {}", bin(&b).display(), quoted.join(" "))]).current_dir(inp.corpus.parent().unwrap()).env("GAUGE_NO_PROGRESS", "1").output().unwrap();
        let mut after = files(&root);
        after.retain(|k, _| before.contains_key(k));
        let complete = std::fs::read_dir(root.join("embed")).into_iter().flatten().flatten().any(|e| !e.file_name().to_string_lossy().starts_with('.'));
        let result = if out.status.success() || complete {
            Err("embed completed past a 64 KiB file-size limit".into())
        } else if after != before {
            Err("an artifact already there changed".into())
        } else {
            Ok(format!("ulimit -f 64 (mount not allowed): stopped with {:?}, upstream intact", out.status))
        };
        tally.record("full disk (ulimit -f): embed", result);
    }
}

fn read_only(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    let root = tmp.join("readonly");
    if !mount_tmpfs(&root, 64 << 20) {
        tally.record("read-only root", Ok("skipped: mounting is not allowed here".into()));
        return;
    }
    let pages = last_line(&must(command_output(inp, &root, "extract")));
    let before = files(&root);
    let remounted = Command::new("mount").args(["-o", "remount,ro", root.to_str().unwrap()]).status().is_ok_and(|s| s.success());
    let result = if !remounted {
        Ok("skipped: remounting read-only is not allowed here".into())
    } else {
        let hit = command_output(inp, &root, "extract");
        let (b, args) = command(inp, &root, "chunk");
        let new = Command::new(bin(&b)).args(&args).env("GAUGE_NO_PROGRESS", "1").output().unwrap();
        if !hit.status.success() || last_line(&hit) != pages {
            Err(format!("a cache hit failed on a read-only root: {}", String::from_utf8_lossy(&hit.stderr).trim()))
        } else {
            check_refused(&new, "Read-only file system").and_then(|line| if files(&root) == before { Ok(format!("cache hit answered; new artifact: {line}")) } else { Err("the root changed".into()) })
        }
    };
    umount(&root);
    tally.record("read-only root: extract hit, chunk refused", result);
}

fn concurrent(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    let root = tmp.join("concurrent");
    command(inp, &root, "embed"); // extract and chunk
    let (b, args) = command(inp, &root, "embed");
    let children: Vec<_> = (0..4).map(|_| Command::new(bin(&b)).args(&args).env("GAUGE_NO_PROGRESS", "1").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()).collect();
    let outs: Vec<_> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    let dirs: Vec<String> = outs.iter().map(last_line).collect();
    let complete: Vec<_> = std::fs::read_dir(root.join("embed")).unwrap().flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.')).collect();
    let result = match outs.iter().find(|o| !o.status.success()) {
        Some(o) => Err(format!("a run failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        None if dirs.iter().any(|d| d != &dirs[0]) => Err(format!("different artifacts: {dirs:?}")),
        None if complete.len() != 1 => Err(format!("{} complete embed artifacts", complete.len())),
        None => Ok(format!("4 runs, 1 artifact, temporaries left: {}", temporaries(&root).len())),
    };
    tally.record("4 concurrent embeds", result);
}

/// Runs `n` copies of one command at once; their outputs.
fn together(b: &str, args: &[String], n: usize, dir: &Path) -> Vec<std::process::Output> {
    let children: Vec<_> = (0..n).map(|_| Command::new(bin(b)).args(args).current_dir(dir).env("GAUGE_NO_PROGRESS", "1").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()).collect();
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

/// The first failed run's last stderr line, or whether all printed one artifact.
fn all_agree(outs: &[std::process::Output]) -> Result<String, String> {
    if let Some(o) = outs.iter().find(|o| !o.status.success()) {
        return Err(format!("a run failed ({:?}): {}", o.status, String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or_default()));
    }
    let dirs: Vec<String> = outs.iter().map(last_line).collect();
    if dirs.iter().any(|d| d != &dirs[0]) {
        return Err(format!("different artifacts: {dirs:?}"));
    }
    Ok(dirs[0].clone())
}

fn races(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    let cwd = inp.corpus.parent().unwrap();
    // Two evaluate runs of one pipeline, 20 times, each pair racing to commit and to copy.
    let root = tmp.join("race-evaluate");
    let (b, args) = command(inp, &root, "evaluate");
    must(command_output(inp, &root, "evaluate")); // upstream artifacts, once
    let eval_dir = root.with_extension("eval");
    let mut result = Ok(String::new());
    let mut hits = 0;
    for pair in 0..20 {
        let _ = std::fs::remove_dir_all(root.join("evaluate"));
        let outs = together(&b, &args, 2, cwd);
        hits += outs.iter().filter(|o| String::from_utf8_lossy(&o.stderr).contains("committed this artifact first")).count();
        match all_agree(&outs) {
            Err(why) => {
                result = Err(format!("pair {pair}: {why}"));
                break;
            }
            Ok(dir) => {
                // eval/<name> is the artifact plus the report page rendered from it, the
                // questions and the passage texts it shows.
                let mut copied = files(&eval_dir.join("faults"));
                let page = copied.remove("report.html");
                if copied.remove("questions.parquet").is_none() {
                    result = Err(format!("pair {pair}: eval/faults/questions.parquet is missing"));
                    break;
                }
                // The passages' texts, recorded when the index artifacts are here.
                copied.remove("passages.parquet");
                let made = files(Path::new(&dir));
                if copied != made {
                    result = Err(format!("pair {pair}: eval/faults differs from the artifact"));
                    break;
                }
                if !page.is_some_and(|p| p.starts_with(b"<!DOCTYPE html>") && p.ends_with(b"</html>\n")) {
                    result = Err(format!("pair {pair}: eval/faults/report.html is missing or cut short"));
                    break;
                }
            }
        }
    }
    // A cached rerun (the same results in place) puts back a page deleted since.
    if result.is_ok() {
        std::fs::remove_file(eval_dir.join("faults/report.html")).unwrap();
        result = match all_agree(&together(&b, &args, 1, cwd)) {
            Err(why) => Err(format!("the cached rerun: {why}")),
            Ok(_) if !eval_dir.join("faults/report.html").is_file() => Err("a cached rerun did not put back the deleted eval/faults/report.html".into()),
            Ok(_) => result,
        };
    }
    let left: Vec<String> = temporaries(&root).into_iter().chain(std::fs::read_dir(&eval_dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().to_string()).filter(|n| n.starts_with('.'))).collect();
    tally.record("20 pairs of concurrent evaluates", result.and_then(|_| if left.is_empty() { Ok(format!("40 runs exit 0, {hits} lost a commit race and answered with the winner's artifact")) } else { Err(format!("left behind: {left:?}")) }));

    // Six extracts at once, round after round.
    let root = tmp.join("race-extract");
    let (b, args) = command(inp, &root, "extract");
    let rounds = if full() { 25 } else { 5 };
    let mut result = Ok(());
    for round in 0..rounds {
        let _ = std::fs::remove_dir_all(root.join("extract"));
        if let Err(why) = all_agree(&together(&b, &args, 6, cwd)) {
            result = Err(format!("round {round}: {why}"));
            break;
        }
    }
    let left = temporaries(&root);
    tally.record(&format!("{rounds} rounds of six concurrent extracts"), result.and_then(|()| if left.is_empty() { Ok(format!("{} runs exit 0", rounds * 6)) } else { Err(format!("left behind: {left:?}")) }));

    shared_root(inp, tmp, tally);
}

/// One build pauses before its commit while a run in another PID namespace (which sees no
/// such process) cleans the same stage folder: the paused build must survive and commit.
fn shared_root(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    let name = "shared root: a run in another PID namespace leaves this one's build alone";
    let probe = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        let why = probe.map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string()).unwrap_or_else(|e| e.to_string());
        tally.record(name, Ok(format!("not run: `unshare --pid --fork --mount-proc` is not allowed here ({why})")));
        return;
    }
    let root = tmp.join("shared-root");
    let cwd = inp.corpus.parent().unwrap();
    let (b, args) = command(inp, &root, "extract");
    // This namespace's build, paused after writing everything.
    let paused = Command::new(bin(&b)).args(&args).current_dir(cwd).env("GAUGE_NO_PROGRESS", "1").env("GAUGE_TEST_PAUSE_BEFORE_COMMIT_MS", "5000").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while !std::fs::read_dir(root.join("extract")).into_iter().flatten().flatten().any(|e| e.file_name().to_string_lossy().starts_with(".tmp-")) && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The other namespace: another config of the same stage, into the same stage folder.
    let mut other_args = args.clone();
    other_args.push("--no-nfkc".into());
    let other = Command::new("unshare").args(["--pid", "--fork", "--mount-proc"]).arg(bin(&b)).args(&other_args).current_dir(cwd).env("GAUGE_NO_PROGRESS", "1").output().unwrap();
    let first = paused.wait_with_output().unwrap();
    let result = if !other.status.success() {
        Err(format!("the other namespace's run failed: {}", String::from_utf8_lossy(&other.stderr).lines().last().unwrap_or_default()))
    } else if !first.status.success() {
        Err(format!("the paused build failed (its temporary was removed?): {}", String::from_utf8_lossy(&first.stderr).lines().last().unwrap_or_default()))
    } else if !Path::new(&last_line(&first)).join("manifest.json").is_file() {
        Err("the paused build's artifact is incomplete".into())
    } else {
        Ok("both committed; the other namespace removed nothing of this one".into())
    };
    tally.record(name, result);
}

fn endpoint_dies(inp: &Inputs, tmp: &Path, tally: &mut Tally, refuse_from: &AtomicUsize, server: &ChatServer) {
    for stage in ["synth-llm", "synth-d2q", "answer", "raptor"] {
        let reference = tmp.join(format!("endpoint-ref-{stage}"));
        command(inp, &reference, stage); // upstream
        let n0 = server.requests().len();
        let want = PathBuf::from(last_line(&must(command_output(inp, &reference, stage))));
        let calls = server.requests().len() - n0;
        let root = tmp.join(format!("endpoint-{stage}"));
        command(inp, &root, stage);
        // Dies after 3 calls: every later call is refused (HTTP 400) until it is back.
        let n1 = server.requests().len();
        refuse_from.store(n1 + 3, Ordering::SeqCst);
        let failed = command_output(inp, &root, stage);
        refuse_from.store(usize::MAX, Ordering::SeqCst);
        let made = server.requests().len() - n1;
        let n2 = server.requests().len();
        let rerun = command_output(inp, &root, stage);
        let again = server.requests().len() - n2;
        let answered = made.min(3);
        let result = if failed.status.success() {
            Err(format!("the run succeeded with the endpoint down after {answered} of {calls} calls (a complete artifact, {} calls refused)", made - answered))
        } else if let Err(why) = check_refused(&failed, "endpoint down") {
            Err(format!("the failed run: {why}"))
        } else if !rerun.status.success() {
            Err(format!("the rerun failed: {}", String::from_utf8_lossy(&rerun.stderr).lines().last().unwrap_or_default()))
        } else {
            let got = PathBuf::from(last_line(&rerun));
            same_output(stage, &want, &got).and_then(|()| {
                if again + answered == calls {
                    Ok(format!("{calls} calls uninterrupted; {answered} answered before it died, {again} on the rerun; output equal"))
                } else {
                    Err(format!("the rerun made {again} calls; {answered} were answered before, {calls} in all"))
                }
            })
        };
        let name = match stage {
            "synth-llm" => "synth-data --mode llm",
            "synth-d2q" => "synth-data --mode doc2query",
            other => other,
        };
        tally.record(&format!("endpoint dies: {name}"), result);
    }
}

/// The second hostile round's tries (issue #82): corrupt bytes in a committed index, an
/// endpoint that never answers synth-data, a corpus file growing while `extract` reads it, an
/// index on a read-only mount, a stdout closed early.
fn round_two(inp: &Inputs, tmp: &Path, tally: &mut Tally) {
    let root = tmp.join("round-two");
    let index = PathBuf::from(last_line(&must(command_output(inp, &root, "index"))));
    let ask = |index: &Path| Command::new(bin("query")).args(["--index", index.to_str().unwrap(), "--json", "gate arms inspection", "-k", "5"]).env("GAUGE_NO_PROGRESS", "1").output().unwrap();
    let want = must(ask(&index)).stdout;
    // Seeded single-bit flips anywhere in the index's files: each query refuses in one line or
    // answers exactly as before (before: 12 of 124 flips in chunks.parquet answered differently).
    let mut targets: Vec<PathBuf> = vec![index.join("chunks.parquet"), index.join("dense.faiss")];
    // tantivy's segment files (their checksums); not meta.json, which neither the manifest nor
    // tantivy checks yet (recorded as an open gap in docs/src/artifacts.md).
    targets.extend(std::fs::read_dir(index.join("bm25")).unwrap().flatten().map(|e| e.path()).filter(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        !n.starts_with('.') && n != "meta.json" && std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
    }));
    let mut rng = SplitMix64::new(82);
    let (flips, mut refused, mut same, mut silent) = (if full() { 124 } else { 12 }, 0, 0, Vec::new());
    for _ in 0..flips {
        let file = &targets[rng.below(targets.len())];
        let original = std::fs::read(file).unwrap();
        let mut bytes = original.clone();
        let at = rng.below(bytes.len());
        bytes[at] ^= 1 << rng.below(8);
        std::fs::write(file, &bytes).unwrap();
        let out = ask(&index);
        if out.status.success() {
            if out.stdout == want {
                same += 1;
            } else {
                silent.push(format!("{} byte {at}", file.file_name().unwrap().to_string_lossy()));
            }
        } else if check_refused(&out, "").is_ok() {
            refused += 1;
        } else {
            silent.push(format!("{} byte {at}: not a one-line refusal ({:?})", file.file_name().unwrap().to_string_lossy(), out.status));
        }
        std::fs::write(file, &original).unwrap();
    }
    tally.record(
        &format!("{flips} flipped bits in a committed index"),
        if silent.is_empty() { Ok(format!("{refused} refused in one line, {same} answered as before")) } else { Err(format!("answered differently or crashed: {silent:?}")) },
    );

    // An endpoint nobody answers: synth-data commits nothing and exits 1.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let dead_root = tmp.join("round-two-dead");
    let chunks = last_line(&must(command_output(inp, &dead_root, "chunk")));
    let out = Command::new(bin("synth-data"))
        .args([chunks.as_str(), "--mode", "llm", "--n", "2", "--min-chars", "60", "--base-url", &dead, "--model", "scripted", "--api-key-env", "GAUGE_NO_SUCH_KEY", "--prompts", inp.prompts.to_str().unwrap(), "--concurrency", "1", "--rpm", "0", "--timeout-s", "2", "--max-retries", "0", "--artifacts", dead_root.to_str().unwrap()])
        .env("GAUGE_NO_PROGRESS", "1")
        .output()
        .unwrap();
    let committed = std::fs::read_dir(dead_root.join("synth")).into_iter().flatten().flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count();
    tally.record("synth-data against an endpoint that never answers", check_refused(&out, "answered none").and_then(|line| if committed == 0 { Ok(line) } else { Err(format!("{committed} artifact(s) committed")) }));

    // A corpus file growing while extract reads it: the run ends either with pages that are the
    // hashed bytes' or with one line saying the file changed — never pages the hash never saw.
    let growing = tmp.join("round-two-growing");
    std::fs::create_dir_all(&growing).unwrap();
    let file = growing.join("log.md");
    std::fs::write(&file, "# Log\n\n").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                use std::io::Write as _;
                let mut f = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
                writeln!(f, "Entry {n}: gate arms inspected and the result recorded. {}", "Clause text. ".repeat(40)).unwrap();
                n += 1;
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new(bin("extract")).args([growing.to_str().unwrap(), "--artifacts", tmp.join("round-two-growing-art").to_str().unwrap()]).env("GAUGE_NO_PROGRESS", "1").output().unwrap();
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let result = if out.status.success() {
        // The bytes were read once more and hashed equal: the pages are those bytes'.
        let pages = read_parquet_any(&PathBuf::from(last_line(&out)).join("pages.parquet")).unwrap();
        let chars: usize = Columns::new(&pages).strings_required("text").iter().map(|t| t.len()).sum();
        Ok(format!("the writer paused between hash and read: {chars} characters of the hashed bytes"))
    } else {
        check_refused(&out, "changed while extract ran")
    };
    tally.record("a corpus file growing during extract", result);

    // An index on a read-only mount answers (before: tantivy's "Failed to acquire Lockfile").
    let ro = tmp.join("round-two-ro");
    let result = if !mount_tmpfs(&ro, 64 << 20) {
        Ok("skipped: mounting is not allowed here".into())
    } else {
        let index = PathBuf::from(last_line(&must(command_output(inp, &ro, "index"))));
        let want = must(ask(&index)).stdout;
        let _ = std::fs::remove_file(index.join("bm25/.tantivy-meta.lock"));
        let r = if !Command::new("mount").args(["-o", "remount,ro", ro.to_str().unwrap()]).status().is_ok_and(|s| s.success()) {
            Ok("skipped: remounting read-only is not allowed here".into())
        } else {
            let out = ask(&index);
            if out.status.success() && out.stdout == want { Ok("answered as on a writable root".into()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_string()) }
        };
        umount(&ro);
        r
    };
    tally.record("an index on a read-only mount", result);

    // A reader that closes stdout at once: the stage ends quietly, status 0 (before: a panic, 101).
    let mut child = Command::new(bin("extract")).args([inp.corpus.to_str().unwrap(), "--artifacts", tmp.join("round-two-stdout").to_str().unwrap()]).env("GAUGE_NO_PROGRESS", "1").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    tally.record("stdout closed early", if out.status.code() == Some(gauge_core::BROKEN_PIPE_STATUS) && !err.contains("panicked") { Ok("exit 141 as after SIGPIPE, no panic".into()) } else { Err(format!("{:?}: {}", out.status, err.trim())) });
}

#[test]
#[ignore = "the fault matrix: `just faults` (long) or `just faults short`"]
fn fault_matrix() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let refuse_from = Arc::new(AtomicUsize::new(usize::MAX));
    let refusing = refuse_from.clone();
    let server = ChatServer::start(move |n, r| {
        if n >= refusing.load(Ordering::SeqCst) {
            // Gone: synth-data (run with --max-retries 0) sees a 503 after its retries; answer
            // and raptor (the default retry policy: minutes of backoff) stop at the first error,
            // so a refusal stands for the dead endpoint there.
            if r.body["response_format"].is_object() { Reply::Reject(503, "endpoint down".into()) } else { Reply::Reject(400, "endpoint down".into()) }
        } else if r.body["response_format"].is_object() {
            Reply::Content(valid_reply(r))
        } else {
            Reply::Content(format!("A summary of {} words. It cites nothing it was not given.", r.message(1).split_whitespace().count()))
        }
    });
    let inp = inputs(tmp.path(), &server.url);
    let mut tally = Tally { tries: 0, failed: Vec::new() };
    kill_matrix(&inp, tmp.path(), &mut tally);
    full_disk(&inp, tmp.path(), &mut tally);
    read_only(&inp, tmp.path(), &mut tally);
    concurrent(&inp, tmp.path(), &mut tally);
    races(&inp, tmp.path(), &mut tally);
    endpoint_dies(&inp, tmp.path(), &mut tally, &refuse_from, &server);
    round_two(&inp, tmp.path(), &mut tally);
    println!("faults: {} tries, {} failed, {:.0} s ({})", tally.tries, tally.failed.len(), started.elapsed().as_secs_f64(), if full() { "full" } else { "short" });
    assert!(tally.failed.is_empty(), "fault matrix failures:\n{}", tally.failed.join("\n"));
}
