//! The `synth-data` stage: golden sets and training pairs from a chunk artifact, either from a
//! teacher LLM (any OpenAI-compatible endpoint) or offline by inverse cloze.
//!
//! Long runs are resumable: every finished sample (accepted or failed) is appended to a
//! journal in the run's checkpoint directory as soon as it is known, and a rerun of the same config skips
//! what the journal holds. The output rows follow the golden-set format `evaluate` reads.
#![deny(missing_docs)]
pub mod cli;
pub mod doc2query;
pub mod plan;
pub mod sft;
pub mod split;
pub mod teacher;
pub mod teacher_set;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gauge_core::golden::{write_jsonl, GoldItem, GoldenQuestion};
use gauge_core::schema::{read_chunks, ChunkRecord};
use gauge_core::{Plan, Stage, StageRun};
use gauge_decoder::GenerateOptions;
use gauge_generator::{Generator, GeneratorConfig};
use gauge_chat_client::{ChatConfig, Message, RetryPolicy, Usage};
use serde::{Deserialize, Serialize};

pub use plan::Style;

/// Stage name.
pub const STAGE: &str = "synth";
/// Output format version.
pub const FORMAT_VERSION: u32 = 1;

/// How questions are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A teacher LLM writes question, reasoning and answer.
    Llm,
    /// Inverse cloze: a salient sentence of the chunk is the query (no LLM).
    Ict,
    /// Supervised fine-tuning examples built offline (chat format; see [`sft`]).
    Sft,
    /// A generator writes questions per passage, kept when the engine retrieves the passage
    /// for them (round trip; see [`doc2query`]).
    Doc2query,
}

/// Effective configuration (serde, with defaults), echoed into the manifest. Holds the
/// name of the key's environment variable, never the key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// LLM or inverse cloze.
    pub mode: Mode,
    /// Samples to draw.
    pub n: usize,
    /// Question styles, rotated over samples (LLM mode).
    pub styles: Vec<Style>,
    /// Sampling and split seed.
    pub seed: u64,
    /// Chunks shorter than this are not sampled.
    pub min_chars: usize,
    /// Split weights, e.g. `[70, 15, 15]` for train/dev/test (empty: no split).
    pub split: Vec<u32>,
    /// Questions whose word-trigram Jaccard similarity with an earlier one reaches this are
    /// dropped as near-duplicates (identical normalised text always is).
    pub near_duplicate_jaccard: f64,
    /// The teacher (LLM mode): an OpenAI-compatible endpoint (`kind = "api"`, the default)
    /// or the local decoder (`kind = "local"`). Either way the reply is held to
    /// [`teacher::TeacherReply`]'s JSON Schema.
    pub teacher: GeneratorConfig,
    /// The teacher's sampling and reply length.
    pub generation: GenerateOptions,
    /// SFT examples (`--mode sft`).
    pub sft: sft::SftConfig,
    /// Questions per passage with the round-trip filter (`--mode doc2query`).
    pub doc2query: doc2query::Doc2QueryConfig,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            mode: Mode::Ict,
            n: 200,
            styles: vec![Style::Factual, Style::Scenario, Style::MultiHop],
            seed: 42,
            min_chars: 300,
            split: Vec::new(),
            near_duplicate_jaccard: 0.7,
            teacher: GeneratorConfig::Api(ChatConfig::default()),
            generation: GenerateOptions { max_new_tokens: 1500, temperature: 0.2, ..GenerateOptions::default() },
            sft: sft::SftConfig::default(),
            doc2query: doc2query::Doc2QueryConfig::default(),
        }
    }
}

/// One generated question: a golden-set row ([`GoldenQuestion`], the format `evaluate` reads)
/// plus provenance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SynthRow {
    /// The golden-set fields: `qid` (`<label>-<sample index>`), the question (ICT: the
    /// sentence), the gold spans of the chunk(s) it was made from, the teacher's answer (none
    /// for ICT) and the style as `category`.
    #[serde(flatten)]
    pub golden: GoldenQuestion,
    /// The teacher's four-phase reasoning (none for ICT).
    pub thinking: Option<String>,
    /// The same reasoning phase by phase (teacher rows; the SFT examples are built from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<teacher::FourPhases>,
    /// Teacher model, or `ict`.
    pub teacher_model: String,
    /// SHA-256 of the exact prompt sent (system + user), none for ICT.
    pub prompt_sha256: Option<String>,
    /// The (first) chunk.
    pub chunk_id: String,
    /// `train`, `dev`, `test` (when split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// A journal line: one finished sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Sample index.
    pub sample: usize,
    /// The row, when accepted.
    pub row: Option<SynthRow>,
    /// Why it failed, when it did.
    pub failure: Option<String>,
    /// Tokens spent on it.
    pub usage: Usage,
    /// Passage cuts made to fit the prompt to the teacher's context.
    #[serde(default)]
    pub cuts: usize,
    /// HTTP attempts.
    pub attempts: u32,
    /// The endpoint could not be reached (timeouts, dropped connections, 5xx or 429 after every
    /// retry) and gave no reply: a run that stops asks again when resumed, and three such
    /// samples in a row stop the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_reply: bool,
}

/// Run settings that do not change the output.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Retry and rate policy.
    pub retry: RetryPolicy,
    /// Prompt template folder.
    pub prompts: PathBuf,
    /// Also copy `golden.jsonl` here once the artifact exists.
    pub copy_to: Option<PathBuf>,
    /// Device of a local teacher.
    pub device: String,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions { concurrency: 4, retry: RetryPolicy::default(), prompts: PathBuf::from("pipelines/prompts"), copy_to: None, device: "cpu".into() }
    }
}

/// What a build produced.
#[derive(Debug, Default)]
pub struct SynthSummary {
    /// Rows kept.
    pub accepted: usize,
    /// Samples that failed.
    pub failed: usize,
    /// Samples resumed from the journal.
    pub resumed: usize,
    /// SFT examples were written (`accepted` counts them).
    pub sft: bool,
}

fn label(mode: Mode) -> &'static str {
    match mode {
        Mode::Ict => "ict",
        Mode::Llm => "llm",
        Mode::Sft => "sft",
        Mode::Doc2query => "doc2query",
    }
}

/// SHA-256 hex of text.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(text.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn gold_of(c: &ChunkRecord) -> GoldItem {
    GoldItem::Span { source: c.source.clone(), char_start: c.char_start, char_end: c.char_end, page_start: Some(c.page_start), page_end: Some(c.page_end), grade: None }
}

/// A line of a journal, keyed by the sample (or passage) it finishes.
trait JournalLine: Serialize + serde::de::DeserializeOwned {
    fn key(&self) -> usize;
}

impl JournalLine for JournalEntry {
    fn key(&self) -> usize {
        self.sample
    }
}

/// A doc2query journal line: one passage's reply (or why there is none), kept as soon as the
/// decoder finishes it, so a killed run asks only for the passages not yet answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Doc2QueryJournalEntry {
    /// The planned passage's index.
    pub passage: usize,
    /// The reply's text.
    pub text: Option<String>,
    /// Its generated tokens.
    pub completion_tokens: usize,
    /// Why generation failed, when it did.
    pub failure: Option<String>,
}

impl JournalLine for Doc2QueryJournalEntry {
    fn key(&self) -> usize {
        self.passage
    }
}

/// Reads a journal, dropping a torn last line (a crash mid-write) by truncating the file
/// back to its last complete line.
fn read_journal<T: JournalLine>(path: &Path) -> anyhow::Result<BTreeMap<usize, T>> {
    let mut out = BTreeMap::new();
    let Ok(bytes) = std::fs::read(path) else { return Ok(out) };
    let mut good_len = 0usize;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if !line.ends_with(b"\n") {
            break;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(e) => {
                out.insert(e.key(), e);
                good_len += line.len();
            }
            Err(_) => break,
        }
    }
    if good_len < bytes.len() {
        tracing::warn!("{}: dropping a torn last line (the previous run was killed mid-write)", path.display());
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(good_len as u64)?;
    }
    Ok(out)
}

/// Appends journal lines, each flushed and synced before the next sample is counted done.
struct Journal {
    file: Mutex<std::fs::File>,
}

impl Journal {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| anyhow::anyhow!("{}: cannot open the journal: {e}", path.display()))?;
        Ok(Journal { file: Mutex::new(file) })
    }

    fn append<T: JournalLine>(&self, e: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(e)?;
        line.push('\n');
        let mut f = self.file.lock().expect("journal lock");
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
        Ok(())
    }
}

fn teacher_sample(teacher: &Generator, prompts: &teacher::Prompts, cfg: &SynthConfig, s: &plan::PlannedSample, chunks: &[ChunkRecord]) -> JournalEntry {
    let picked: Vec<&ChunkRecord> = s.chunks.iter().map(|&i| &chunks[i]).collect();
    let mut usage = Usage::default();
    let mut attempts = 0;
    let fail = |reason: String, usage: Usage, attempts: u32, cuts: usize| JournalEntry { sample: s.index, row: None, failure: Some(reason), usage, attempts, cuts, no_reply: false };
    // The passages are shortened when the prompt would not leave the reply its tokens.
    let mut texts: Vec<String> = picked.iter().map(|c| c.text.clone()).collect();
    let render = |texts: &[String]| -> Vec<Message> {
        let fitted: Vec<ChunkRecord> = picked.iter().zip(texts).map(|(c, t)| ChunkRecord { text: t.clone(), ..(*c).clone() }).collect();
        let refs: Vec<&ChunkRecord> = fitted.iter().collect();
        vec![Message::system(prompts.system()), Message::user(prompts.user(s.style, &refs))]
    };
    let mut cuts = match teacher.fit(&mut texts, cfg.generation.max_new_tokens, render) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string(), usage, attempts, 0),
    };
    let messages = render(&texts);
    let prompt_sha = sha256_hex(&format!("{}\n\n{}", messages[0].content, messages[1].content));
    let schema = teacher::reply_schema();
    // One repair round: the reply is shown back with what was wrong; the reply shown and the
    // passages are fitted together, so the longer conversation still leaves the new reply its
    // tokens.
    let mut repair_cuts = 0;
    // Whether a call found the endpoint gone: timeouts, dropped connections and 5xx/429 after
    // every retry (a 4xx is an answer: the endpoint is there and refuses the request).
    let unreachable = std::cell::Cell::new(false);
    let out = gauge_generator::structured::complete_with_repair(
        messages,
        |m| {
            let reply = teacher.complete(m, &cfg.generation, Some(&schema));
            if let Err(gauge_generator::GeneratorError::Llm(gauge_chat_client::LlmError::Exhausted { .. })) = &reply {
                unreachable.set(true);
            }
            reply
        },
        teacher::parse_reply,
        |reply, e| {
            let repair = prompts.repair(e);
            let n = texts.len();
            let mut parts = texts.clone();
            parts.push(reply.to_string());
            let render_repair = |p: &[String]| -> Vec<Message> { gauge_generator::structured::repair_conversation(&render(&p[..n]), &p[n], repair.clone()) };
            repair_cuts = teacher.fit(&mut parts, cfg.generation.max_new_tokens, render_repair).map_err(|e| e.to_string())?;
            Ok(render_repair(&parts))
        },
    );
    cuts += repair_cuts;
    let no_reply = out.completions.is_empty() && unreachable.get();
    for c in &out.completions {
        usage += Usage { prompt_tokens: c.prompt_tokens as u64, completion_tokens: c.completion_tokens as u64 };
        attempts += c.attempts;
    }
    match out.result {
        Ok(r) => {
            let row = SynthRow {
                golden: GoldenQuestion {
                    qid: format!("{}-{}", s.style.name(), s.index),
                    question: r.question.trim().to_string(),
                    gold: picked.iter().map(|c| gold_of(c)).collect(),
                    keywords: Vec::new(),
                    reference_answer: Some(r.answer.trim().to_string()),
                    category: Some(s.style.name().into()),
                },
                thinking: Some(r.reasoning.text()),
                phases: Some(r.reasoning.clone()),
                teacher_model: teacher.name().to_string(),
                prompt_sha256: Some(prompt_sha),
                chunk_id: picked[0].chunk_id.clone(),
                split: None,
            };
            JournalEntry { sample: s.index, row: Some(row), failure: None, usage, attempts, cuts, no_reply: false }
        }
        Err(reason) => JournalEntry { no_reply, ..fail(reason, usage, attempts, cuts) },
    }
}

/// Samples in a row without any reply from the teacher endpoint that stop a run (`--mode llm`).
pub const ENDPOINT_DOWN_AFTER: usize = 3;

/// The `synth-data` stage: a chunk artifact → `golden.jsonl` (+ splits, failures, journal).
pub struct Synth;

/// The manifest entry of an index artifact (as `train-lora` records one).
fn index_entry(index: &Path) -> anyhow::Result<gauge_core::FileEntry> {
    let (_, entry) = gauge_core::artifact::input_file(index, "manifest.json", "index")?;
    Ok(entry.named("index"))
}

/// What `synth-data` reads.
#[derive(Debug, Clone, Serialize)]
pub struct SynthInputs {
    /// The chunk artifact directory (or its `chunks.parquet`).
    pub chunks: PathBuf,
    /// A teacher-written set (`--mode sft --from FILE`; see [`teacher_set`]).
    pub from: Option<PathBuf>,
    /// The index the teacher set's contexts are retrieved from (built from `chunks`).
    pub index: Option<PathBuf>,
}

/// What planning `synth-data` found.
pub struct SynthState {
    chunks: Vec<ChunkRecord>,
    chunks_path: PathBuf,
    styles: Vec<Style>,
    prompts: Option<teacher::Prompts>,
    sft_prompts: Option<sft::SftPrompts>,
    /// The teacher set and the index to retrieve from (`--from`).
    teacher_set: Option<(Vec<teacher_set::TeacherRecord>, PathBuf)>,
    /// `--mode doc2query`: its prompt, example questions and index.
    doc2query: Option<Doc2QueryPlan>,
}

/// What `--mode doc2query` needs beside the chunks.
struct Doc2QueryPlan {
    template: String,
    examples: Vec<String>,
    index: PathBuf,
}

impl Stage for Synth {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = SynthConfig;
    type Inputs = SynthInputs;
    type Options = SynthOptions;
    type State = SynthState;
    type Summary = SynthSummary;

    fn plan(cfg: &SynthConfig, inputs: &SynthInputs, rt: &SynthOptions) -> anyhow::Result<Plan<SynthState>> {
        let chunks = &inputs.chunks;
        anyhow::ensure!(cfg.n > 0, "--n must be at least 1");
        if !cfg.split.is_empty() {
            anyhow::ensure!((2..=3).contains(&cfg.split.len()) && cfg.split.iter().sum::<u32>() > 0, "--split takes 2 or 3 weights such as 70:15:15 (train:dev:test)");
        }
        let (chunks_path, mut entry) = gauge_core::artifact::input_file(chunks, "chunks.parquet", "chunk")?;
        let chunks = read_chunks(&chunks_path)?;
        anyhow::ensure!(!chunks.is_empty(), "{}: no chunks to sample from", chunks_path.display());
        entry.rows = Some(chunks.len() as u64);
        let mut sft_prompts = None;
        let load_sft_prompts = || -> anyhow::Result<sft::SftPrompts> {
            anyhow::ensure!((0.0..=1.0).contains(&cfg.sft.refusal_share), "sft.refusal_share is a share between 0 and 1, got {}", cfg.sft.refusal_share);
            let read = |name: String| {
                let p = rt.prompts.join(&name);
                std::fs::read_to_string(&p).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); pass --prompts DIR holding answer_system.md and answer_<template>.md", p.display()))
            };
            gauge_core::names::plain_name(&cfg.sft.template).map_err(|why| anyhow::anyhow!("sft.template {why} (it names prompts/answer_<template>.md)"))?;
            Ok(sft::SftPrompts { system: read("answer_system.md".into())?, template: read(format!("answer_{}.md", cfg.sft.template))? })
        };
        let (styles, prompts) = match cfg.mode {
            Mode::Ict => (vec![Style::Ict], None),
            Mode::Sft => {
                sft_prompts = Some(load_sft_prompts()?);
                (vec![Style::Ict], None)
            }
            Mode::Doc2query => (vec![Style::Factual], None),
            Mode::Llm => {
                anyhow::ensure!(!cfg.styles.is_empty() && !cfg.styles.contains(&Style::Ict), "LLM mode takes styles among factual, scenario, multi_hop");
                let p = teacher::Prompts::load(&rt.prompts).map_err(|e| anyhow::anyhow!(e))?;
                // The teacher's rows also become SFT examples in the answer prompt's format.
                sft_prompts = Some(load_sft_prompts()?);
                (cfg.styles.clone(), Some(p))
            }
        };
        let mut files = vec![entry];
        if cfg.mode == Mode::Llm {
            files.extend(gauge_generator::model_entry(&cfg.teacher)?);
        }
        let mut doc2query = None;
        if cfg.mode == Mode::Doc2query {
            let d = &cfg.doc2query;
            anyhow::ensure!(d.per_chunk > 0 && d.round_trip_k > 0, "doc2query.per_chunk and doc2query.round_trip_k must be at least 1");
            let index = inputs.index.as_ref().ok_or_else(|| anyhow::anyhow!("--mode doc2query keeps a question when the engine retrieves its passage: pass --index INDEX_DIR (built from the same chunks)"))?;
            let path = rt.prompts.join("doc2query.md");
            let template = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); pass --prompts DIR holding doc2query.md", path.display()))?;
            let examples = match &inputs.from {
                Some(f) => {
                    let ex = doc2query::read_examples(f, d.examples, cfg.seed)?;
                    files.push(gauge_core::FileEntry::file("examples", f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?.with_rows(ex.len()));
                    ex
                }
                None => Vec::new(),
            };
            files.push(index_entry(index)?);
            files.extend(gauge_generator::model_entry(&d.generator)?);
            files.push(gauge_core::FileEntry::text("prompt", path.display(), &template));
            doc2query = Some(Doc2QueryPlan { template, examples, index: index.clone() });
        }
        let teacher_set = match (&inputs.from, &inputs.index) {
            _ if cfg.mode == Mode::Doc2query => None,
            (None, None) => None,
            (Some(from), Some(index)) => {
                anyhow::ensure!(cfg.mode == Mode::Sft, "--from FILE builds SFT examples: add --mode sft");
                anyhow::ensure!(cfg.sft.retrieval.k > 0, "sft.retrieval.k must be at least 1");
                let records = teacher_set::read_teacher_set(from)?;
                let hash = gauge_core::hash::file_hash(from).map_err(|e| anyhow::anyhow!("{}: {e}", from.display()))?;
                files.push(gauge_core::FileEntry::hashed("teacher_set", from.display(), hash).with_rows(records.len()));
                files.push(index_entry(index)?);
                Some((records, index.clone()))
            }
            (Some(_), None) => anyhow::bail!("--from FILE retrieves each question's context: pass --index INDEX_DIR (built from the same chunks)"),
            (None, Some(_)) => anyhow::bail!("--index is used with --from FILE (a teacher set)"),
        };
        let echo = serde_json::json!({
            "config": cfg,
            "reply_schema": (cfg.mode == Mode::Llm).then(|| teacher::reply_schema().schema),
            "styles": styles,
            "prompt_templates": prompts.as_ref().map(|p| p.hashes()),
            "sft_templates": sft_prompts.as_ref().map(|p| gauge_core::hash::bytes_hash(format!("{}\u{0}{}", p.system, p.template).as_bytes())),
            "label": label(cfg.mode),
        });
        Ok(Plan::new(files, SynthState { chunks, chunks_path, styles, prompts, sft_prompts, teacher_set, doc2query }).echo(echo).seed(cfg.seed))
    }

    fn build(state: SynthState, run: &mut StageRun, cfg: &SynthConfig, _: &SynthInputs, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
        generate(state, run, cfg, rt)
    }

    fn summary_line(s: &SynthSummary) -> String {
        if s.sft {
            return format!("{} SFT examples written ({} skipped: no quotable sentence)", s.accepted, s.failed);
        }
        format!("{} questions kept, {} samples failed ({} resumed from the journal)", s.accepted, s.failed, s.resumed)
    }
}

/// Samples, generates (journaled in the run's checkpoint directory) and writes the rows.
fn generate(state: SynthState, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let SynthState { chunks, chunks_path, styles, prompts, sft_prompts, teacher_set, doc2query } = state;
    if let Some(plan) = doc2query {
        return write_doc2query(&chunks, &chunks_path, &plan, run, cfg, rt);
    }
    if let Some((records, index)) = teacher_set {
        return write_teacher_set_sft(&records, &index, &chunks, sft_prompts.as_ref().expect("SFT mode loads its prompts"), run, cfg, rt);
    }
    if cfg.mode == Mode::Sft {
        return write_sft(&chunks, &chunks_path, sft_prompts.as_ref().expect("SFT mode loads its prompts"), run, cfg);
    }
    let journal_path = run.checkpoint_dir()?.join("journal.jsonl");
    // The plan is a pure function of the chunks and the config, so a resumed run sees the
    // same samples under the same indexes.
    // Word statistics for sentence salience (inverse cloze only).
    let df = if cfg.mode == Mode::Ict { plan::document_frequencies(&chunks) } else { Default::default() };
    let ict_sentence = |i: usize| plan::salient_sentence(&chunks[i].text, &df, chunks.len());
    let planned = plan::plan(&chunks, cfg.n, &styles, cfg.seed, cfg.min_chars, &|i| ict_sentence(i).is_some());
    anyhow::ensure!(!planned.is_empty(), "{}: no chunk is long enough (min_chars {}) and not a table of contents", chunks_path.display(), cfg.min_chars);
    let mut done: BTreeMap<usize, JournalEntry> = read_journal(&journal_path)?;
    // A sample the endpoint never answered (the run stopped because it was down) is asked again.
    done.retain(|_, e| !e.no_reply);
    let resumed = done.len();
    if resumed > 0 {
        eprintln!("synth-data: resuming: {resumed} of {} samples already in {}", planned.len(), journal_path.display());
    }
    let pending: Vec<&plan::PlannedSample> = planned.iter().filter(|s| !done.contains_key(&s.index)).collect();
    let journal = Journal::open(&journal_path)?;
    let bar = gauge_core::progress::bar(planned.len() as u64, "samples");
    bar.inc(resumed as u64);
    let mut structured = None;
    match cfg.mode {
        Mode::Ict => {
            for s in &pending {
                let c = &chunks[s.chunks[0]];
                let (_, _, sentence) = ict_sentence(s.chunks[0]).expect("planned ICT samples have a sentence");
                let row = SynthRow {
                    golden: GoldenQuestion {
                        qid: format!("ict-{}", s.index),
                        question: sentence,
                        gold: vec![gold_of(c)],
                        keywords: Vec::new(),
                        reference_answer: None,
                        category: Some("ict".into()),
                    },
                    thinking: None,
                    phases: None,
                    teacher_model: "ict".into(),
                    prompt_sha256: None,
                    chunk_id: c.chunk_id.clone(),
                    split: None,
                };
                journal.append(&JournalEntry { sample: s.index, row: Some(row), failure: None, usage: Usage::default(), attempts: 0, cuts: 0, no_reply: false })?;
                bar.inc(1);
            }
        }
        Mode::Sft => unreachable!("SFT examples are written by write_sft"),
        Mode::Doc2query => unreachable!("doc2query questions are written by write_doc2query"),
        Mode::Llm => {
            let client = Generator::open(&cfg.teacher, &rt.device, rt.retry.clone())?;
            let prompts = prompts.as_ref().expect("LLM mode loads prompts");
            let next = AtomicUsize::new(0);
            let error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
            // Samples in a row the endpoint did not answer; at ENDPOINT_DOWN_AFTER the run stops
            // (the journal keeps what was answered; those samples are asked again on resume).
            let streak = AtomicUsize::new(0);
            let down: Mutex<Option<String>> = Mutex::new(None);
            std::thread::scope(|scope| {
                for _ in 0..rt.concurrency.max(1) {
                    scope.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= pending.len() || error.lock().expect("lock").is_some() || down.lock().expect("lock").is_some() {
                            return;
                        }
                        let entry = teacher_sample(&client, prompts, cfg, pending[i], &chunks);
                        if let Some(reason) = &entry.failure {
                            tracing::warn!("sample {}: {reason}", entry.sample);
                        }
                        if let Err(e) = journal.append(&entry) {
                            *error.lock().expect("lock") = Some(e);
                            return;
                        }
                        if !entry.no_reply {
                            streak.store(0, Ordering::SeqCst);
                        } else if streak.fetch_add(1, Ordering::SeqCst) + 1 >= ENDPOINT_DOWN_AFTER {
                            let last = entry.failure.clone().unwrap_or_default();
                            down.lock().expect("lock").get_or_insert(last);
                            return;
                        }
                        bar.inc(1);
                    });
                }
            });
            if let Some(e) = error.into_inner().expect("lock") {
                return Err(e.context(format!("{}: cannot append to the journal", journal_path.display())));
            }
            if let Some(last) = down.into_inner().expect("lock") {
                let answered = read_journal::<JournalEntry>(&journal_path)?.values().filter(|e| !e.no_reply).count();
                anyhow::bail!("the teacher endpoint answered none of the last {ENDPOINT_DOWN_AFTER} samples (last: {last}); {answered} of {} samples are in {}: rerun to resume", planned.len(), journal_path.display());
            }
            structured = Some(client.structured_status());
        }
    }
    bar.finish_and_clear();
    drop(journal);
    // Finalise from the journal in sample order, so the output does not depend on which
    // request finished first.
    let entries: BTreeMap<usize, JournalEntry> = read_journal(&journal_path)?;
    anyhow::ensure!(entries.len() == planned.len(), "{}: journal holds {} of {} samples", journal_path.display(), entries.len(), planned.len());
    let mut usage = Usage::default();
    let mut attempts = 0u64;
    let mut cuts = 0usize;
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for e in entries.values() {
        usage += e.usage;
        attempts += e.attempts as u64;
        cuts += e.cuts;
        match (&e.row, &e.failure) {
            (Some(r), _) => rows.push(r.clone()),
            (None, f) => failures.push(serde_json::json!({ "sample": e.sample, "style": planned[e.sample].style, "chunk_ids": planned[e.sample].chunks.iter().map(|&i| chunks[i].chunk_id.clone()).collect::<Vec<_>>(), "reason": f })),
        }
    }
    let before = rows.len();
    let mut rows = split::drop_near_duplicates(rows, cfg.near_duplicate_jaccard);
    let duplicates = before - rows.len();
    let split_counts = if cfg.split.is_empty() { BTreeMap::new() } else { split::assign_splits(&mut rows, &cfg.split, cfg.seed) };
    write_golden_rows(&rows, &split_counts, run)?;
    write_jsonl(&run.path("failures.jsonl"), failures.iter())?;
    run.add_output("failures.jsonl", Some(failures.len() as u64))?;
    if let (Mode::Llm, Some(p)) = (cfg.mode, &sft_prompts) {
        let n = write_teacher_sft(&rows, &chunks, p, run, cfg)?;
        run.set_stat("sft_examples", n);
    }
    std::fs::copy(&journal_path, run.path("journal.jsonl"))?;
    run.add_output("journal.jsonl", Some(entries.len() as u64))?;
    let mut by_style: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        *by_style.entry(r.golden.category.as_deref().unwrap_or_default()).or_default() += 1;
    }
    run.set_stat("label", label(cfg.mode));
    run.set_stat("planned", planned.len());
    run.set_stat("accepted", rows.len());
    run.set_stat("failed", failures.len());
    run.set_stat("near_duplicates_dropped", duplicates);
    run.set_stat("resumed_from_journal", resumed);
    run.set_stat("by_style", serde_json::to_value(&by_style)?);
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    run.set_stat("prompt_tokens", usage.prompt_tokens);
    run.set_stat("completion_tokens", usage.completion_tokens);
    run.set_stat("http_attempts", attempts);
    run.set_stat("passages_cut_to_fit_context", cuts);
    if let Some(st) = structured {
        // How the JSON replies were obtained in this run (a resumed run reports its own).
        run.set_stat("structured_output", st);
    }
    Ok(SynthSummary { accepted: rows.len(), failed: failures.len(), resumed, sft: false })
}

/// The teacher's rows as chat-format SFT examples (`sft.jsonl`, `sft.parquet`, and
/// `sft-<split>.jsonl` when split; the golden set's splits carry over, so test pages stay out
/// of training): the user turn is `answer`'s prompt over the row's chunk(s) and
/// `sft.distractors` TF-IDF-nearest chunks from other pages in a seeded order, the reply the
/// teacher's four phases with the answer citing the chunk's page tag; a seeded
/// `sft.refusal_share` of rows gets a context without the chunk and the refusal reply.
fn write_teacher_sft(rows: &[SynthRow], chunks: &[ChunkRecord], prompts: &sft::SftPrompts, run: &mut StageRun, cfg: &SynthConfig) -> anyhow::Result<u64> {
    let df = plan::document_frequencies(chunks);
    let sim = sft::Similarity::new(chunks, &df);
    let index: HashMap<&str, usize> = chunks.iter().enumerate().map(|(i, c)| (c.chunk_id.as_str(), i)).collect();
    let mut out = Vec::new();
    for (n, r) in rows.iter().enumerate() {
        let Some(phases) = &r.phases else { continue };
        // The row's chunks: the first by id, a multi-hop partner by its gold span.
        let mut gold: Vec<usize> = Vec::new();
        for g in &r.golden.gold {
            if let GoldItem::Span { source, char_start, .. } = g {
                if let Some(i) = chunks.iter().position(|c| &c.source == source && c.char_start == *char_start) {
                    gold.push(i);
                }
            }
        }
        if gold.is_empty() {
            gold.extend(index.get(r.chunk_id.as_str()));
        }
        let refuse = sft::is_refusal(n, cfg.sft.refusal_share, cfg.seed);
        let answer = r.golden.reference_answer.clone().unwrap_or_default();
        let mut row = sft::teacher_example(n, &r.golden.question, phases, &answer, &gold, chunks, &sim, &cfg.sft, prompts, refuse, cfg.seed)?;
        row.id = r.golden.qid.clone();
        row.split = r.split.clone();
        out.push(row);
    }
    write_jsonl(&run.path("sft.jsonl"), out.iter())?;
    run.add_output("sft.jsonl", Some(out.len() as u64))?;
    let n = write_sft_parquet(&run.path("sft.parquet"), &out)?;
    run.add_output("sft.parquet", Some(n))?;
    let splits: std::collections::BTreeSet<String> = out.iter().filter_map(|r| r.split.clone()).collect();
    for name in splits {
        let file = format!("sft-{name}.jsonl");
        let part: Vec<&sft::SftRow> = out.iter().filter(|r| r.split.as_deref() == Some(name.as_str())).collect();
        write_jsonl(&run.path(&file), part.iter().copied())?;
        run.add_output(&file, Some(part.len() as u64))?;
    }
    Ok(out.len() as u64)
}

/// `--mode sft --from FILE`: one example per teacher record, its context retrieved from the
/// index (see [`teacher_set`]), split by page group, written as `sft.jsonl`, `sft.parquet`
/// and one JSONL per split.
fn write_teacher_set_sft(records: &[teacher_set::TeacherRecord], index: &Path, chunks: &[ChunkRecord], prompts: &sft::SftPrompts, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let retrieval = cfg.sft.retrieval.clone().normalize();
    let k = retrieval.k;
    let engine = gauge_engine::Engine::open_for(index, &retrieval, &rt.device)?;
    // Twice the passages, so a refusal context can be topped up past the gold pages.
    let wide = gauge_engine::RetrievalConfig { k: 2 * k, ..retrieval.clone() };
    let position: HashMap<&str, usize> = chunks.iter().enumerate().map(|(i, c)| (c.chunk_id.as_str(), i)).collect();
    // Out-of-corpus records are refusals already; in-corpus ones make up the rest of the
    // refusal share (none when the out-of-corpus ones reach it).
    let out_of_corpus = records.iter().filter(|r| !r.in_corpus).count();
    let in_corpus = records.len() - out_of_corpus;
    let in_share = if in_corpus == 0 { 0.0 } else { ((cfg.sft.refusal_share * records.len() as f64 - out_of_corpus as f64) / in_corpus as f64).clamp(0.0, 1.0) };
    let bar = gauge_core::progress::bar(records.len() as u64, "examples");
    let (mut rows, mut forced) = (Vec::new(), 0usize);
    for (n, r) in records.iter().enumerate() {
        let result = engine.search(&r.question, &wide)?;
        let retrieved = result
            .distinct()
            .into_iter()
            .map(|p| position.get(p.chunk.chunk_id.as_str()).copied().ok_or_else(|| anyhow::anyhow!("{}: chunk `{}` is not in the chunk artifact; build the index from the same chunks", index.display(), p.chunk.chunk_id)))
            .collect::<anyhow::Result<Vec<usize>>>()?;
        let refuse = !r.in_corpus || sft::is_refusal(n, in_share, cfg.seed);
        let ctx = teacher_set::context(r, &retrieved, chunks, k, refuse, cfg.seed);
        if !refuse {
            forced += usize::from(!retrieved.iter().take(k).any(|&i| teacher_set::on_gold(r, &chunks[i])));
        }
        rows.push(teacher_set::example(r, &ctx, chunks, &cfg.sft, prompts, refuse)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut split_counts = BTreeMap::new();
    if !cfg.split.is_empty() {
        let mut proxies: Vec<SynthRow> = records
            .iter()
            .map(|r| SynthRow { golden: teacher_set::golden_of(r), thinking: None, phases: None, teacher_model: "teacher_set".into(), prompt_sha256: None, chunk_id: String::new(), split: None })
            .collect();
        split_counts = split::assign_splits(&mut proxies, &cfg.split, cfg.seed);
        for (row, p) in rows.iter_mut().zip(proxies) {
            row.split = p.split;
        }
    }
    write_sft_outputs(&rows, &split_counts, run)?;
    run.set_stat("label", "sft");
    run.set_stat("examples", rows.len());
    run.set_stat("refusal_examples", rows.iter().filter(|r| r.kind == "refusal").count());
    run.set_stat("out_of_corpus", out_of_corpus);
    run.set_stat("gold_forced_in", forced);
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    Ok(SynthSummary { accepted: rows.len(), failed: 0, resumed: 0, sft: true })
}

/// `--mode doc2query`: questions for `n` planned passages from the generator (one batch), each
/// cleaned, kept when the engine retrieves its passage in the top `round_trip_k`, then
/// near-duplicates dropped; `golden.jsonl` (and splits by page), `dropped.jsonl` with every
/// dropped question and its reason, counts and speed in the manifest.
fn write_doc2query(chunks: &[ChunkRecord], chunks_path: &Path, plan: &Doc2QueryPlan, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let d = &cfg.doc2query;
    let planned = plan::plan(chunks, cfg.n, &[Style::Factual], cfg.seed, cfg.min_chars, &|_| true);
    anyhow::ensure!(!planned.is_empty(), "{}: no chunk is long enough (min_chars {}) and not a table of contents", chunks_path.display(), cfg.min_chars);
    let generator = Generator::open(&d.generator, &rt.device, rt.retry.clone())?;
    let format = d.reply.resolve(&d.generator);
    let schema = (format == doc2query::ReplyFormat::Json).then(|| doc2query::reply_schema(d.per_chunk));
    // Each reply is journaled as it finishes; a rerun after a kill asks only for the rest (the
    // plan is a pure function of the chunks and the config, so indexes are stable).
    let journal_path = run.checkpoint_dir()?.join("journal.jsonl");
    let done: BTreeMap<usize, Doc2QueryJournalEntry> = read_journal(&journal_path)?;
    let resumed = done.len();
    let resumed_tokens: usize = done.values().map(|e| e.completion_tokens).sum();
    if resumed > 0 {
        eprintln!("synth-data: resuming: {resumed} of {} passages already in {}", planned.len(), journal_path.display());
    }
    let pending: Vec<&plan::PlannedSample> = planned.iter().filter(|s| !done.contains_key(&s.index)).collect();
    let chats: Vec<Vec<Message>> = pending.iter().map(|s| vec![Message::user(doc2query::prompt(&plan.template, &chunks[s.chunks[0]], &plan.examples, d.per_chunk, format))]).collect();
    let bar = gauge_core::progress::bar(planned.len() as u64, "passages");
    bar.inc(resumed as u64);
    let journal = Journal::open(&journal_path)?;
    let entries = Mutex::new(done);
    let journal_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let no_reply: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    generator.complete_batch_each(&chats, &cfg.generation, schema.as_ref(), &|j, reply| {
        let passage = pending[j].index;
        let entry = match reply {
            Ok(c) => Doc2QueryJournalEntry { passage, text: Some(c.text.clone()), completion_tokens: c.completion_tokens, failure: None },
            Err(e) => Doc2QueryJournalEntry { passage, text: None, completion_tokens: 0, failure: Some(e.to_string()) },
        };
        // An endpoint that gave no reply (timeouts, dropped connections, 5xx/429 after every
        // retry) is not journaled: the run stops and a rerun asks again. A 4xx is an answer:
        // that passage is journaled as failed.
        if let Err(gauge_generator::GeneratorError::Llm(e @ gauge_chat_client::LlmError::Exhausted { .. })) = reply {
            no_reply.lock().expect("lock").push(e.to_string());
        } else {
            if let Err(e) = journal.append(&entry) {
                journal_error.lock().expect("lock").get_or_insert(e);
            }
            entries.lock().expect("lock").insert(passage, entry);
        }
        bar.inc(1);
    });
    let generation_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    drop(journal);
    if let Some(e) = journal_error.into_inner().expect("lock") {
        return Err(e.context(format!("{}: cannot append to the journal", journal_path.display())));
    }
    let entries = entries.into_inner().expect("lock");
    let no_reply = no_reply.into_inner().expect("lock");
    if let Some(last) = no_reply.last() {
        anyhow::bail!("the endpoint gave no reply for {} of {} passages asked (last: {last}); {} of {} passages are in {}: rerun to resume", no_reply.len(), pending.len(), entries.len(), planned.len(), journal_path.display());
    }
    anyhow::ensure!(entries.len() == planned.len(), "{}: {} of {} passages have a reply", journal_path.display(), entries.len(), planned.len());
    // The replies in passage order (the journal is in the order they finished).
    write_jsonl(&run.path("replies.jsonl"), entries.values())?;
    run.add_output("replies.jsonl", Some(entries.len() as u64))?;
    let retrieval = gauge_engine::RetrievalConfig { k: d.round_trip_k, ..d.retrieval.clone() }.normalize();
    let engine = gauge_engine::Engine::open_for(&plan.index, &retrieval, &rt.device)?;
    let (mut rows, mut dropped) = (Vec::new(), Vec::new());
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let (mut tokens, mut written) = (0usize, 0usize);
    let mut drop = |chunk: &ChunkRecord, question: &str, reason: &str, dropped: &mut Vec<serde_json::Value>| {
        *reasons.entry(reason.to_string()).or_default() += 1;
        dropped.push(serde_json::json!({ "chunk_id": chunk.chunk_id, "source": chunk.source, "page_start": chunk.page_start, "question": question, "reason": reason }));
    };
    for s in &planned {
        let c = &chunks[s.chunks[0]];
        let entry = &entries[&s.index];
        let text = match (&entry.text, &entry.failure) {
            (Some(t), _) => t,
            (None, failure) => {
                drop(c, "", &format!("generation_failed: {}", failure.as_deref().unwrap_or_default()), &mut dropped);
                continue;
            }
        };
        tokens += entry.completion_tokens;
        let questions = match format {
            doc2query::ReplyFormat::Lines => doc2query::parse_lines(text),
            _ => match serde_json::from_str::<doc2query::Doc2QueryReply>(gauge_chat_client::json_payload(text)) {
                Ok(parsed) => parsed.questions,
                Err(_) => Vec::new(),
            },
        };
        if questions.is_empty() {
            drop(c, text, "unparsable_reply", &mut dropped);
            continue;
        }
        for (j, q) in questions.iter().take(d.per_chunk).enumerate() {
            written += 1;
            let q = match doc2query::clean(q, d.min_words) {
                Ok(q) => q,
                Err(reason) => {
                    drop(c, q, reason, &mut dropped);
                    continue;
                }
            };
            let found: Vec<String> = engine.search(&q, &retrieval)?.distinct().into_iter().map(|p| p.chunk.chunk_id.clone()).collect();
            if !doc2query::round_trip(&c.chunk_id, &found, d.round_trip_k) {
                drop(c, &q, "not_retrieved", &mut dropped);
                continue;
            }
            rows.push(SynthRow {
                golden: GoldenQuestion { qid: format!("d2q-{}-{j}", s.index), question: q, gold: vec![gold_of(c)], keywords: Vec::new(), reference_answer: None, category: Some("doc2query".into()) },
                thinking: None,
                phases: None,
                teacher_model: generator.name().to_string(),
                prompt_sha256: None,
                chunk_id: c.chunk_id.clone(),
                split: None,
            });
        }
    }
    let before = rows.len();
    let mut rows = split::drop_near_duplicates(rows, cfg.near_duplicate_jaccard);
    if before > rows.len() {
        reasons.insert("near_duplicate".into(), before - rows.len());
    }
    let split_counts = if cfg.split.is_empty() { BTreeMap::new() } else { split::assign_splits(&mut rows, &cfg.split, cfg.seed) };
    write_golden_rows(&rows, &split_counts, run)?;
    write_jsonl(&run.path("dropped.jsonl"), dropped.iter())?;
    run.add_output("dropped.jsonl", Some(dropped.len() as u64))?;
    run.set_stat("label", "doc2query");
    run.set_stat("passages", planned.len());
    run.set_stat("questions_written", written);
    run.set_stat("questions_kept", rows.len());
    run.set_stat("dropped", serde_json::to_value(&reasons)?);
    run.set_stat("completion_tokens", tokens);
    run.set_stat("generation_seconds", generation_seconds);
    run.set_stat("resumed_from_journal", resumed);
    let generated: usize = tokens - resumed_tokens;
    run.set_stat("tokens_per_second", if generation_seconds > 0.0 { generated as f64 / generation_seconds } else { 0.0 });
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    run.set_stat("reply_format", serde_json::to_value(format)?);
    if format == doc2query::ReplyFormat::Json {
        run.set_stat("structured_output", generator.structured_status());
    }
    eprintln!("synth-data: doc2query: {written} questions written for {} passages, {} kept after the round trip (top {}) and near-duplicate removal", planned.len(), rows.len(), d.round_trip_k);
    Ok(SynthSummary { accepted: rows.len(), failed: written - rows.len(), resumed, sft: false })
}

/// `golden.jsonl` and `<split>.jsonl` per split.
fn write_golden_rows(rows: &[SynthRow], split_counts: &BTreeMap<String, usize>, run: &mut StageRun) -> anyhow::Result<()> {
    write_jsonl(&run.path("golden.jsonl"), rows.iter())?;
    run.add_output("golden.jsonl", Some(rows.len() as u64))?;
    for name in split_counts.keys() {
        let file = format!("{name}.jsonl");
        let part: Vec<&SynthRow> = rows.iter().filter(|r| r.split.as_deref() == Some(name.as_str())).collect();
        write_jsonl(&run.path(&file), part.iter().copied())?;
        run.add_output(&file, Some(part.len() as u64))?;
    }
    Ok(())
}

/// `sft.jsonl`, `sft.parquet` and `<split>.jsonl` per split.
fn write_sft_outputs(rows: &[sft::SftRow], split_counts: &BTreeMap<String, usize>, run: &mut StageRun) -> anyhow::Result<()> {
    write_jsonl(&run.path("sft.jsonl"), rows.iter())?;
    run.add_output("sft.jsonl", Some(rows.len() as u64))?;
    let n = write_sft_parquet(&run.path("sft.parquet"), rows)?;
    run.add_output("sft.parquet", Some(n))?;
    for name in split_counts.keys() {
        let file = format!("{name}.jsonl");
        let part: Vec<&sft::SftRow> = rows.iter().filter(|r| r.split.as_deref() == Some(name.as_str())).collect();
        write_jsonl(&run.path(&file), part.iter().copied())?;
        run.add_output(&file, Some(part.len() as u64))?;
    }
    Ok(())
}

/// `--mode sft`: examples for the planned samples, near-duplicate questions kept (the
/// contexts differ), split by the source chunk's pages, written as `sft.jsonl`,
/// `sft.parquet` and one JSONL per split.
fn write_sft(chunks: &[ChunkRecord], chunks_path: &Path, prompts: &sft::SftPrompts, run: &mut StageRun, cfg: &SynthConfig) -> anyhow::Result<SynthSummary> {
    let df = plan::document_frequencies(chunks);
    let ok = |i: usize| plan::salient_sentence(&chunks[i].text, &df, chunks.len()).is_some();
    let planned = plan::plan(chunks, cfg.n, &[Style::Ict], cfg.seed, cfg.min_chars, &ok);
    anyhow::ensure!(!planned.is_empty(), "{}: no chunk is long enough (min_chars {}) and has a quotable sentence", chunks_path.display(), cfg.min_chars);
    let sim = sft::Similarity::new(chunks, &df);
    let bar = gauge_core::progress::bar(planned.len() as u64, "examples");
    let mut rows = Vec::new();
    let mut skipped = 0;
    for s in &planned {
        let refuse = sft::is_refusal(s.index, cfg.sft.refusal_share, cfg.seed);
        match sft::example(s.index, s.chunks[0], chunks, &sim, &df, &cfg.sft, prompts, refuse, cfg.seed)? {
            Some(r) => rows.push(r),
            None => skipped += 1,
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    // Page-grouped splits through the golden-row machinery (gold = the sampled chunk's pages).
    let mut split_counts = BTreeMap::new();
    if !cfg.split.is_empty() {
        let c_of: HashMap<&str, &ChunkRecord> = chunks.iter().map(|c| (c.chunk_id.as_str(), c)).collect();
        let mut proxies: Vec<SynthRow> = rows
            .iter()
            .map(|r| SynthRow {
                golden: GoldenQuestion { qid: r.id.clone(), question: r.question.clone(), gold: vec![gold_of(c_of[r.chunk_id.as_str()])], keywords: Vec::new(), reference_answer: None, category: Some("sft".into()) },
                thinking: None,
                phases: None,
                teacher_model: "sft".into(),
                prompt_sha256: None,
                chunk_id: r.chunk_id.clone(),
                split: None,
            })
            .collect();
        split_counts = split::assign_splits(&mut proxies, &cfg.split, cfg.seed);
        for (r, p) in rows.iter_mut().zip(proxies) {
            r.split = p.split;
        }
    }
    write_sft_outputs(&rows, &split_counts, run)?;
    let refusals = rows.iter().filter(|r| r.kind == "refusal").count();
    run.set_stat("label", "sft");
    run.set_stat("planned", planned.len());
    run.set_stat("examples", rows.len());
    run.set_stat("refusal_examples", refusals);
    run.set_stat("skipped_no_sentence", skipped);
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    Ok(SynthSummary { accepted: rows.len(), failed: skipped, resumed: 0, sft: true })
}

fn write_sft_parquet(path: &Path, rows: &[sft::SftRow]) -> anyhow::Result<u64> {
    use arrow::array::{ArrayRef, Int32Array, StringArray};
    use std::sync::Arc;
    let strings = |f: &dyn Fn(&sft::SftRow) -> String| -> ArrayRef { Arc::new(StringArray::from_iter_values(rows.iter().map(f))) };
    let cols = vec![
        strings(&|r| r.id.clone()),
        strings(&|r| r.kind.clone()),
        strings(&|r| r.question.clone()),
        strings(&|r| serde_json::to_string(&r.messages).expect("serialises")),
        strings(&|r| r.chunk_id.clone()),
        strings(&|r| r.source.clone()),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.page_start))) as ArrayRef,
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.page_end))) as ArrayRef,
        strings(&|r| serde_json::to_string(&r.context_chunk_ids).expect("serialises")),
        strings(&|r| r.split.clone().unwrap_or_default()),
    ];
    Ok(gauge_core::table::write_parquet(path, gauge_core::schema::arrow_schema(gauge_core::schema::SFT_COLUMNS), cols)?)
}
