//! The `synth-data` binary's own flags (the shared ones come from [`gauge_core::cli`]).
use std::path::PathBuf;
use std::time::Duration;

use gauge_core::cli::{Invocation, StageCli};
use gauge_core::config::{parse_as, set_path, Layer};
use gauge_core::stage::Built;
use serde::Serialize;

use crate::{Mode, Synth, SynthOptions, SynthSummary};

/// Inputs and flags of `synth-data`; config flags set one field of [`crate::SynthConfig`].
#[derive(clap::Args, Debug, Serialize)]
pub struct SynthArgs {
    /// The chunk artifact directory.
    #[serde(skip)]
    pub chunks: PathBuf,
    /// `--mode sft`: a teacher-written set (JSONL: qid, question, thinking, answer, gold,
    /// in_corpus) to turn into SFT examples (needs --index); `--mode doc2query`: example
    /// questions (any JSONL with `question`) whose style the prompts show; `--mode heldout`: a
    /// teacher set whose out-of-corpus questions the prompts show; `--mode likelihood`: the
    /// synth-data artifact (or its golden.jsonl) to filter.
    #[arg(long)]
    #[serde(skip)]
    pub from: Option<PathBuf>,
    /// The index each teacher question's context is retrieved from, or doc2query's round trip
    /// runs on (built from the chunks).
    #[arg(long)]
    #[serde(skip)]
    pub index: Option<PathBuf>,
    /// Pages no question, passage or context may come from: a held-out set's page split
    /// (`heldout_pages.json`, or the `.pages.json` copied beside its golden set) or a golden
    /// set (its gold pages) (repeatable).
    #[arg(long)]
    #[serde(skip)]
    pub hold_out: Vec<PathBuf>,
    /// `llm` (a teacher), `ict` (inverse cloze, offline), `sft` (chat-format training examples),
    /// `doc2query` (questions per passage, round-trip filtered; needs --index) or `heldout` (an
    /// evaluation set on a seeded page split no training may touch, judged by the model; needs
    /// --from, a teacher set whose out-of-corpus questions are the examples) or `likelihood`
    /// (the questions of --from, a doc2query artifact, filtered by how much their passage raises
    /// their likelihood under a local decoder) (`mode`).
    #[arg(long, value_parser = parse_as::<Mode>)]
    pub mode: Option<Mode>,
    /// Samples to draw (`n`).
    #[arg(long)]
    pub n: Option<usize>,
    /// LLM question styles, comma-separated: factual, scenario, multi_hop (`styles`).
    #[arg(long)]
    #[serde(skip)]
    pub styles: Option<String>,
    /// Split weights train:dev:test (e.g. 70:15:15) or train:test, grouped by source page (`split`).
    #[arg(long)]
    #[serde(skip)]
    pub split: Option<String>,
    /// Seed of sampling and splits (`seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip chunks shorter than this (`min_chars`).
    #[arg(long)]
    pub min_chars: Option<usize>,
    /// Teacher kind: `api` (an OpenAI-compatible endpoint) or `local` (the Burn decoder) (`teacher.kind`).
    #[arg(long, value_parser = ["api", "local"])]
    #[serde(rename = "teacher.kind")]
    pub teacher: Option<String>,
    /// Teacher base URL up to /v1, e.g. http://localhost:11434/v1 (`teacher.base_url`).
    #[arg(long)]
    #[serde(rename = "teacher.base_url")]
    pub base_url: Option<String>,
    /// Teacher model: the endpoint's model name, or a local GGUF file / model folder / name (`teacher.model`).
    #[arg(long)]
    #[serde(rename = "teacher.model")]
    pub model: Option<String>,
    /// Name of the environment variable holding the API key, never the key (`teacher.api_key_env`).
    #[arg(long)]
    #[serde(rename = "teacher.api_key_env")]
    pub api_key_env: Option<String>,
    /// The teacher's generation settings (`generation.*`; `--max-new-tokens`: its reply length).
    #[command(flatten)]
    #[serde(flatten)]
    pub generation: gauge_core::cli::GenerationFlags,
    /// Device of a local teacher: cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    #[serde(skip)]
    pub device: String,
    /// Prompt templates folder.
    #[arg(long, default_value = "pipelines/prompts")]
    #[serde(skip)]
    pub prompts: PathBuf,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    #[serde(skip)]
    pub concurrency: usize,
    /// Requests per minute (0: unlimited).
    #[arg(long, default_value_t = 60)]
    #[serde(skip)]
    pub rpm: u32,
    /// Seconds before a request counts as timed out.
    #[arg(long, default_value_t = 120.0, value_parser = gauge_core::cli::finite_f64)]
    #[serde(skip)]
    pub timeout_s: f64,
    /// Retries on 429/5xx/timeouts.
    #[arg(long, default_value_t = 6)]
    #[serde(skip)]
    pub max_retries: u32,
    /// First backoff in milliseconds (doubles per retry, ±50 % jitter).
    #[arg(long, default_value_t = 2000)]
    #[serde(skip)]
    pub backoff_ms: u64,
    /// Also copy golden.jsonl here (e.g. data/golden/fra-ict.jsonl) for pipelines to read.
    #[arg(long)]
    #[serde(skip)]
    pub copy_to: Option<PathBuf>,
}

impl StageCli for Synth {
    const BIN: &'static str = "synth-data";
    const ABOUT: &'static str = "Writes artifacts/synth/<fingerprint>/golden.jsonl (the golden-set format `evaluate` reads) plus train/dev/test.jsonl when split, failures.jsonl and the journal; a killed LLM run resumes from its journal when rerun with the same settings. Prints the artifact directory as the last line of stdout.";
    type Args = SynthArgs;

    fn invocation(args: SynthArgs, _shared: &gauge_core::cli::SharedArgs) -> anyhow::Result<Invocation<Self>> {
        let mut flags = Layer::from_flags("flags", &args);
        if let Some(s) = &args.styles {
            let styles: Vec<serde_json::Value> = s
                .split(',')
                .map(|x| crate::Style::parse(x).map(|st| serde_json::to_value(st).expect("styles serialise")).ok_or_else(|| anyhow::anyhow!("unknown style `{x}` (factual, scenario, multi_hop)")))
                .collect::<anyhow::Result<_>>()?;
            set_path(&mut flags.patch, "styles", serde_json::Value::Array(styles));
        }
        if let Some(s) = &args.split {
            let weights: Vec<u32> = s.split(':').map(|w| w.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("--split takes weights like 70:15:15, got `{s}`"))).collect::<anyhow::Result<_>>()?;
            set_path(&mut flags.patch, "split", serde_json::json!(weights));
        }
        let options = SynthOptions {
            concurrency: args.concurrency,
            retry: gauge_chat_client::RetryPolicy {
                timeout: Duration::from_secs_f64(args.timeout_s),
                max_retries: args.max_retries,
                backoff_base: Duration::from_millis(args.backoff_ms),
                backoff_max: Duration::from_secs(120),
                requests_per_minute: args.rpm,
            },
            prompts: args.prompts,
            copy_to: args.copy_to,
            device: args.device,
        };
        Ok(Invocation { inputs: crate::SynthInputs { chunks: args.chunks, from: args.from, index: args.index, hold_out: args.hold_out }, options, flags })
    }

    /// `--copy-to`: the golden set copied (through a temporary file) where pipelines read it,
    /// and a held-out set's page split beside it as `<name>.pages.json`. Only a previous golden
    /// set (a JSON Lines file) or page split is replaced; a folder, a link or another kind of
    /// file is refused, naming it.
    fn after(built: &Built<SynthSummary>, options: &SynthOptions) -> anyhow::Result<()> {
        let Some(dest) = &options.copy_to else { return Ok(()) };
        // An empty result (every sample rejected: its failures are in the artifact) never
        // replaces the user's set.
        // (Read from the artifact, not the summary: a cache hit has no summary of its own.)
        let golden = built.dir.join("golden.jsonl");
        let kept = gauge_core::read::read_bounded_string(&golden, gauge_core::read::DATA_LIMIT).map_err(|e| anyhow::anyhow!("--copy-to: {e}"))?.lines().any(|l| !l.trim().is_empty());
        anyhow::ensure!(
            kept,
            "--copy-to {}: the run kept nothing (its artifact: {}), so the file is left as it was",
            dest.display(),
            built.dir.display()
        );
        copy_golden(&built.dir.join("golden.jsonl"), dest)?;
        let split = built.dir.join(crate::heldout::PAGES_FILE);
        if split.is_file() {
            copy_golden(&split, &dest.with_extension("pages.json"))?;
        }
        let provenance = built.dir.join(crate::PROVENANCE_FILE);
        if provenance.is_file() {
            copy_golden(&provenance, &dest.with_extension("provenance.json"))?;
        }
        Ok(())
    }
}

/// Copies a golden set to `dest` through a temporary file beside it (removed on failure).
fn copy_golden(from: &std::path::Path, dest: &std::path::Path) -> anyhow::Result<()> {
    let refuse = |what: &str| anyhow::anyhow!("--copy-to {}: {what}, not a golden set (JSON Lines); gauge replaces only a previous golden set: name a .jsonl file", dest.display());
    if let Ok(meta) = std::fs::symlink_metadata(dest) {
        if meta.file_type().is_symlink() {
            return Err(refuse("is a symbolic link"));
        }
        if meta.is_dir() {
            return Err(refuse("is a folder"));
        }
        // Only what synth-data itself wrote there before is replaced: a golden set whose every
        // row carries `qid` and `teacher_model` (synth-data's rows; a hand-written set has no
        // teacher), a page split (`pages`), a provenance record (`written_by`). Any other file —
        // a `package.json`, someone's own question set — is refused.
        let Ok(text) = gauge_core::read::read_bounded_string(dest, gauge_core::read::DATA_LIMIT) else { return Err(refuse("holds something else")) };
        let object = |t: &str| serde_json::from_str::<serde_json::Value>(t.trim()).ok().filter(serde_json::Value::is_object);
        let has = |v: &serde_json::Value, keys: &[&str]| keys.iter().all(|k| v.get(k).is_some());
        let ours = match from.file_name().and_then(|n| n.to_str()) {
            Some(crate::heldout::PAGES_FILE) => object(&text).is_some_and(|v| has(&v, &["pages"])),
            Some(crate::PROVENANCE_FILE) => object(&text).is_some_and(|v| has(&v, &["written_by"])),
            _ => text.lines().filter(|l| !l.trim().is_empty()).all(|l| object(l).is_some_and(|v| has(&v, &["qid", "teacher_model"]))),
        };
        if !text.trim().is_empty() && !ours {
            return Err(refuse("holds something synth-data did not write (a golden set of its own has `teacher_model` on every row)"));
        }
    }
    let (Some(file_name), parent) = (dest.file_name(), dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."))) else {
        return Err(refuse("names no file"));
    };
    std::fs::create_dir_all(parent).map_err(|e| anyhow::anyhow!("--copy-to {}: {e}", parent.display()))?;
    let tmp = parent.join(format!(".{}.partial-{}", file_name.to_string_lossy(), gauge_core::owner::suffix()));
    let done = std::fs::copy(from, &tmp).map_err(|e| anyhow::anyhow!("--copy-to {}: {e}", tmp.display())).and_then(|_| std::fs::rename(&tmp, dest).map_err(|e| anyhow::anyhow!("--copy-to {}: {e}", dest.display())));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_have_distinct_names() {
        use gauge_core::cli::StageCli;
        gauge_core::cli::command::<super::SynthArgs>(super::Synth::BIN, super::Synth::ABOUT, true).debug_assert();
    }

    #[test]
    fn copy_to_replaces_only_a_golden_set() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("golden.jsonl");
        std::fs::write(&from, "{\"qid\":\"q1\",\"teacher_model\":\"m\"}\n").unwrap();
        // A folder: refused by name, nothing left beside it.
        let folder = dir.path().join("data");
        std::fs::create_dir_all(&folder).unwrap();
        let e = super::copy_golden(&from, &folder).unwrap_err().to_string();
        assert!(e.contains("is a folder") && e.contains("data"), "{e}");
        // Another kind of file: refused, kept.
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "my notes\n").unwrap();
        assert!(super::copy_golden(&from, &notes).unwrap_err().to_string().contains("holds something"));
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
        // JSON that is not synth-data's: a package.json, a hand-written question set (before:
        // both replaced).
        for (name, text) in [("package.json", "{\"name\":\"x\",\"version\":\"1.0.0\"}\n"), ("mine.jsonl", "{\"qid\":\"a\",\"question\":\"mine\"}\n")] {
            let f = dir.path().join(name);
            std::fs::write(&f, text).unwrap();
            assert!(super::copy_golden(&from, &f).unwrap_err().to_string().contains("did not write"));
            assert_eq!(std::fs::read_to_string(&f).unwrap(), text);
        }
        // A new file, then a previous golden set: written.
        let dest = dir.path().join("out/fra.jsonl");
        super::copy_golden(&from, &dest).unwrap();
        std::fs::write(&from, "{\"qid\":\"q2\",\"teacher_model\":\"m\"}\n").unwrap();
        super::copy_golden(&from, &dest).unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "{\"qid\":\"q2\",\"teacher_model\":\"m\"}\n");
        let stray: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).filter(|n| n.to_string_lossy().contains("partial")).collect();
        assert!(stray.is_empty(), "{stray:?}");
        assert_eq!(std::fs::read_dir(dir.path().join("out")).unwrap().count(), 1);
    }
}
