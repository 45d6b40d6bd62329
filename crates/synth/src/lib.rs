//! The `synth-data` stage: golden sets and training pairs from a chunk artifact, either from a
//! teacher LLM (any OpenAI-compatible endpoint) or offline by inverse cloze.
//!
//! Long runs are resumable: every finished sample (accepted or failed) is appended to a
//! journal in the run's checkpoint directory as soon as it is known, and a rerun of the same config skips
//! what the journal holds. The output rows follow the golden-set format `evaluate` reads.
#![deny(missing_docs)]
pub mod cli;
pub mod doc2query;
mod doc2query_run;
pub mod heldout;
mod heldout_run;
pub mod journal;
pub mod likelihood_filter;
pub mod plan;
mod samples;
pub mod sft;
pub mod split;
pub mod teacher;
pub mod teacher_set;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use gauge_core::golden::{write_jsonl, GoldItem, GoldenQuestion};
use gauge_core::schema::{read_chunks, ChunkRecord};
use gauge_core::{Plan, Stage, StageRun};
use gauge_chat::GenerateOptions;
use gauge_generator::GeneratorConfig;
use gauge_chat_client::{ChatConfig, RetryPolicy};
use serde::{Deserialize, Serialize};

pub use journal::{Doc2QueryJournalEntry, JournalEntry};
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
    /// A synthetic evaluation set on a seeded page split no training may touch: one question
    /// per held passage, kept when the model judges the passage to answer it (see [`heldout`]).
    Heldout,
    /// Another artifact's questions kept when their passage raises their likelihood under a
    /// local decoder (query likelihood; see [`likelihood_filter`]).
    Likelihood,
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
    /// The held-out evaluation set (`--mode heldout`); left out of the echo while default, so
    /// the other modes' fingerprints stay as they were.
    #[serde(skip_serializing_if = "heldout::HeldoutConfig::is_default")]
    pub heldout: heldout::HeldoutConfig,
    /// The query-likelihood filter (`--mode likelihood`); left out of the echo while default.
    #[serde(skip_serializing_if = "likelihood_filter::LikelihoodFilterConfig::is_default")]
    pub likelihood: likelihood_filter::LikelihoodFilterConfig,
    /// Inverse-cloze questions per planned chunk (`--mode ict`): its most salient candidate
    /// sentences, best first (a chunk with fewer gives fewer). `n` still counts chunks, so
    /// `--n` above the eligible chunks with `ict_per_chunk = 3` asks every chunk for three.
    /// Left out of the echo at 1, so earlier runs' fingerprints stay as they were.
    #[serde(skip_serializing_if = "is_one")]
    pub ict_per_chunk: usize,
}

fn is_one(n: &usize) -> bool {
    *n == 1
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
            heldout: heldout::HeldoutConfig::default(),
            likelihood: likelihood_filter::LikelihoodFilterConfig::default(),
            ict_per_chunk: 1,
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

pub(crate) fn label(mode: Mode) -> &'static str {
    match mode {
        Mode::Ict => "ict",
        Mode::Llm => "llm",
        Mode::Sft => "sft",
        Mode::Doc2query => "doc2query",
        Mode::Heldout => "heldout",
        Mode::Likelihood => "likelihood",
    }
}

/// SHA-256 hex of text.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(text.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn gold_of(c: &ChunkRecord) -> GoldItem {
    GoldItem::Span { source: c.source.clone(), char_start: c.char_start, char_end: c.char_end, page_start: Some(c.page_start), page_end: Some(c.page_end), grade: None }
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
    /// Page splits (`heldout_pages.json`) or golden sets whose pages no question, passage or
    /// context may come from (`--hold-out`, repeatable).
    pub hold_out: Vec<PathBuf>,
}

/// What planning `synth-data` found.
pub struct SynthState {
    pub(crate) chunks: Vec<ChunkRecord>,
    pub(crate) chunks_path: PathBuf,
    pub(crate) styles: Vec<Style>,
    pub(crate) prompts: Option<teacher::Prompts>,
    pub(crate) sft_prompts: Option<sft::SftPrompts>,
    /// The teacher set and the index to retrieve from (`--from`).
    pub(crate) teacher_set: Option<(Vec<teacher_set::TeacherRecord>, PathBuf)>,
    /// `--mode doc2query`: its prompt, example questions and index.
    pub(crate) doc2query: Option<Doc2QueryPlan>,
    /// `--mode heldout`: its prompts, example questions and page split.
    pub(crate) heldout: Option<heldout_run::HeldoutPlan>,
    /// `--mode likelihood`: the rows to filter.
    pub(crate) filter: Option<Vec<SynthRow>>,
    /// The `--hold-out` pages (`source#page`) and the ids of the chunks left out for
    /// touching one.
    pub(crate) held: Held,
}

/// The `--hold-out` pages and the chunks left out for them.
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) pages: std::collections::HashSet<String>,
    pub(crate) chunks: std::collections::HashSet<String>,
}

/// What `--mode doc2query` needs beside the chunks.
pub(crate) struct Doc2QueryPlan {
    pub(crate) template: String,
    pub(crate) examples: Vec<String>,
    pub(crate) index: PathBuf,
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
        let mut chunks = read_chunks(&chunks_path)?;
        anyhow::ensure!(!chunks.is_empty(), "{}: no chunks to sample from", chunks_path.display());
        entry.rows = Some(chunks.len() as u64);
        let chunks_hash = entry.hash.clone();
        let mut files = vec![entry];
        let held = hold_out_chunks(&mut chunks, &inputs.hold_out, &mut files)?;
        anyhow::ensure!(!chunks.is_empty(), "{}: every chunk touches a --hold-out page", chunks_path.display());
        let (styles, prompts, sft_prompts) = match cfg.mode {
            Mode::Ict => {
                anyhow::ensure!(cfg.ict_per_chunk > 0, "ict_per_chunk must be at least 1 (questions per chunk)");
                (vec![Style::Ict], None, None)
            }
            Mode::Sft => (vec![Style::Ict], None, Some(load_sft_prompts(cfg, rt)?)),
            Mode::Doc2query | Mode::Heldout | Mode::Likelihood => (vec![Style::Factual], None, None),
            Mode::Llm => {
                anyhow::ensure!(!cfg.styles.is_empty() && !cfg.styles.contains(&Style::Ict), "LLM mode takes styles among factual, scenario, multi_hop");
                let p = teacher::Prompts::load(&rt.prompts).map_err(|e| anyhow::anyhow!(e))?;
                // The teacher's rows also become SFT examples in the answer prompt's format.
                (cfg.styles.clone(), Some(p), Some(load_sft_prompts(cfg, rt)?))
            }
        };
        if cfg.mode == Mode::Llm {
            files.extend(gauge_generator::model_entry(&cfg.teacher)?);
        }
        let doc2query = if cfg.mode == Mode::Doc2query { Some(plan_doc2query(cfg, inputs, rt, &mut files)?) } else { None };
        let heldout = if cfg.mode == Mode::Heldout { Some(plan_heldout(cfg, inputs, rt, &chunks, chunks_hash, &mut files)?) } else { None };
        let filter = if cfg.mode == Mode::Likelihood { Some(plan_filter(cfg, inputs, &mut files)?) } else { None };
        let teacher_set = if matches!(cfg.mode, Mode::Doc2query | Mode::Heldout | Mode::Likelihood) { None } else { plan_teacher_set(cfg, inputs, &mut files)? };
        let mut echo = serde_json::json!({
            "config": cfg,
            "reply_schema": (cfg.mode == Mode::Llm).then(|| teacher::reply_schema().schema),
            "styles": styles,
            "prompt_templates": prompts.as_ref().map(|p| p.hashes()),
            "sft_templates": sft_prompts.as_ref().map(|p| gauge_core::hash::bytes_hash(format!("{}\u{0}{}", p.system, p.template).as_bytes())),
            "label": label(cfg.mode),
        });
        if cfg.mode == Mode::Sft && teacher_set.is_some() && !cfg.split.is_empty() {
            // The untrained questions come in two files (in corpus, out of it): an artifact from
            // before, with one file holding both, is not reused.
            echo["untrained_files"] = serde_json::json!([UNTRAINED_GOLDEN, UNTRAINED_OUT_OF_CORPUS]);
        }
        Ok(Plan::new(files, SynthState { chunks, chunks_path, styles, prompts, sft_prompts, teacher_set, doc2query, heldout, filter, held }).echo(echo).seed(cfg.seed))
    }

    fn build(state: SynthState, run: &mut StageRun, cfg: &SynthConfig, inputs: &SynthInputs, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
        Self::build_rows(state, run, cfg, inputs, rt)
    }

    fn summary_line(s: &SynthSummary) -> String {
        if s.sft {
            return format!("{} SFT examples written ({} skipped: no quotable sentence)", s.accepted, s.failed);
        }
        format!("{} questions kept, {} samples failed ({} resumed from the journal)", s.accepted, s.failed, s.resumed)
    }
}

impl Synth {
    /// The rows of the configured mode, written into the run.
    fn build_rows(state: SynthState, run: &mut StageRun, cfg: &SynthConfig, _: &SynthInputs, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
        if let Some(plan) = &state.doc2query {
            return doc2query_run::write_doc2query(&state.chunks, &state.chunks_path, plan, run, cfg, rt);
        }
        if let Some(rows) = state.filter {
            return likelihood_filter::write_filtered(&state.chunks, rows, run, cfg, rt);
        }
        if let Some(plan) = &state.heldout {
            return heldout_run::write_heldout(&state.chunks, &state.chunks_path, plan, run, cfg, rt);
        }
        if let Some((records, index)) = &state.teacher_set {
            let prompts = state.sft_prompts.as_ref().expect("SFT mode loads its prompts");
            return write_teacher_set_sft(records, index, (&state.chunks, &state.held), prompts, run, cfg, rt);
        }
        if cfg.mode == Mode::Sft {
            return write_sft(&state.chunks, &state.chunks_path, state.sft_prompts.as_ref().expect("SFT mode loads its prompts"), run, cfg);
        }
        samples::write_samples(state, run, cfg, rt)
    }
}

/// The answer stage's prompts an SFT example is written in (`answer_system.md`,
/// `answer_<sft.template>.md` from the prompt folder).
fn load_sft_prompts(cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<sft::SftPrompts> {
    anyhow::ensure!((0.0..=1.0).contains(&cfg.sft.refusal_share), "sft.refusal_share is a share between 0 and 1, got {}", cfg.sft.refusal_share);
    let read = |name: String| {
        let p = rt.prompts.join(&name);
        std::fs::read_to_string(&p).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); pass --prompts DIR holding answer_system.md and answer_<template>.md", p.display()))
    };
    gauge_core::names::plain_name(&cfg.sft.template).map_err(|why| anyhow::anyhow!("sft.template {why} (it names prompts/answer_<template>.md)"))?;
    Ok(sft::SftPrompts { system: read("answer_system.md".into())?, template: read(format!("answer_{}.md", cfg.sft.template))? })
}

/// `--mode doc2query`'s prompt, example questions (`--from`) and index, each also an input.
fn plan_doc2query(cfg: &SynthConfig, inputs: &SynthInputs, rt: &SynthOptions, files: &mut Vec<gauge_core::FileEntry>) -> anyhow::Result<Doc2QueryPlan> {
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
    Ok(Doc2QueryPlan { template, examples, index: index.clone() })
}

/// `--mode likelihood`'s rows (`--from`, required) and its scorer as inputs.
fn plan_filter(cfg: &SynthConfig, inputs: &SynthInputs, files: &mut Vec<gauge_core::FileEntry>) -> anyhow::Result<Vec<SynthRow>> {
    anyhow::ensure!(inputs.index.is_none(), "--mode likelihood scores each question with its own passage: drop --index");
    let from = inputs.from.as_ref().ok_or_else(|| anyhow::anyhow!("--mode likelihood filters a generated set: pass --from SYNTH_ARTIFACT (e.g. a doc2query run) or its golden.jsonl"))?;
    let path = likelihood_filter::rows_file(from);
    let rows = likelihood_filter::read_rows(&path)?;
    let hash = gauge_core::hash::file_hash(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    files.push(gauge_core::FileEntry::hashed("rows", path.display(), hash).with_rows(rows.len()));
    files.extend(gauge_generator::model_entry(&GeneratorConfig::Local { model: cfg.likelihood.model.clone(), adapter: None })?);
    Ok(rows)
}

/// Drops the chunks that touch a page of the `--hold-out` files (each also an input); returns
/// the pages and the chunks' ids (a retrieved context may name them: it must not show them).
fn hold_out_chunks(chunks: &mut Vec<ChunkRecord>, hold_out: &[PathBuf], files: &mut Vec<gauge_core::FileEntry>) -> anyhow::Result<Held> {
    let mut pages = std::collections::HashSet::new();
    for (k, h) in hold_out.iter().enumerate() {
        let held = heldout::read_held_pages(h)?;
        files.push(gauge_core::FileEntry::file(format!("hold_out:{k}"), h).map_err(|e| anyhow::anyhow!("{}: {e}", h.display()))?.with_rows(held.len()));
        pages.extend(held);
    }
    let mut ids = std::collections::HashSet::new();
    if pages.is_empty() {
        return Ok(Held::default());
    }
    chunks.retain(|c| {
        let touches = heldout::touches(c, &pages);
        if touches {
            ids.insert(c.chunk_id.clone());
        }
        !touches
    });
    eprintln!("synth-data: {} chunks left out: they touch one of the {} held-out pages", ids.len(), pages.len());
    Ok(Held { pages, chunks: ids })
}

/// `--mode heldout`'s prompts, example questions (`--from`, a teacher set: its out-of-corpus
/// records) and page split, each also an input; `--index` is refused (no round trip).
fn plan_heldout(cfg: &SynthConfig, inputs: &SynthInputs, rt: &SynthOptions, chunks: &[ChunkRecord], chunks_hash: String, files: &mut Vec<gauge_core::FileEntry>) -> anyhow::Result<heldout_run::HeldoutPlan> {
    let h = &cfg.heldout;
    h.validate()?;
    anyhow::ensure!(inputs.index.is_none(), "--mode heldout keeps a question when the model judges its passage to answer it, never by a round trip through gauge's retrievers (that would bias the set toward them): drop --index");
    let from = inputs.from.as_ref().ok_or_else(|| anyhow::anyhow!("--mode heldout shows example questions from a teacher set's out-of-corpus records: pass --from FILE (e.g. ../shared/golden/fra-sft.jsonl)"))?;
    let records = teacher_set::read_teacher_set(from)?;
    let examples = heldout::examples(&records, h.examples, cfg.seed);
    anyhow::ensure!(h.examples == 0 || !examples.is_empty(), "{}: no out-of-corpus record (`in_corpus: false`) to show as an example; only those are shown, so no evaluation question leaks into the prompts", from.display());
    files.push(gauge_core::FileEntry::file("examples", from).map_err(|e| anyhow::anyhow!("{}: {e}", from.display()))?.with_rows(examples.len()));
    let read = |name: &str| {
        let p = rt.prompts.join(name);
        std::fs::read_to_string(&p).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); pass --prompts DIR holding heldout_question.md and heldout_judge.md", p.display()))
    };
    let (question_template, judge_template) = (read("heldout_question.md")?, read("heldout_judge.md")?);
    files.push(gauge_core::FileEntry::text("question_prompt", "heldout_question.md", &question_template));
    files.push(gauge_core::FileEntry::text("judge_prompt", "heldout_judge.md", &judge_template));
    files.extend(gauge_generator::model_entry(&h.generator)?);
    let split = heldout::split_pages(chunks, h, cfg.seed, chunks_hash);
    Ok(heldout_run::HeldoutPlan { question_template, judge_template, examples, split })
}

/// `--mode sft --from FILE --index DIR`: the teacher set and the index its contexts are
/// retrieved from, each also an input; none without `--from`.
fn plan_teacher_set(cfg: &SynthConfig, inputs: &SynthInputs, files: &mut Vec<gauge_core::FileEntry>) -> anyhow::Result<Option<(Vec<teacher_set::TeacherRecord>, PathBuf)>> {
    match (&inputs.from, &inputs.index) {
        (None, None) => Ok(None),
        (Some(from), Some(index)) => {
            anyhow::ensure!(cfg.mode == Mode::Sft, "--from FILE builds SFT examples: add --mode sft");
            anyhow::ensure!(cfg.sft.retrieval.k > 0, "sft.retrieval.k must be at least 1");
            let records = teacher_set::read_teacher_set(from)?;
            let hash = gauge_core::hash::file_hash(from).map_err(|e| anyhow::anyhow!("{}: {e}", from.display()))?;
            files.push(gauge_core::FileEntry::hashed("teacher_set", from.display(), hash).with_rows(records.len()));
            files.push(index_entry(index)?);
            Ok(Some((records, index.clone())))
        }
        (Some(_), None) => anyhow::bail!("--from FILE retrieves each question's context: pass --index INDEX_DIR (built from the same chunks)"),
        (None, Some(_)) => anyhow::bail!("--index is used with --from FILE (a teacher set)"),
    }
}

/// The teacher's rows as chat-format SFT examples (`sft.jsonl`, `sft.parquet`, and
/// `sft-<split>.jsonl` when split; the golden set's splits carry over, so test pages stay out
/// of training): the user turn is `answer`'s prompt over the row's chunk(s) and
/// `sft.distractors` TF-IDF-nearest chunks from other pages in a seeded order, the reply the
/// teacher's four phases with the answer citing the chunk's page tag; a seeded
/// `sft.refusal_share` of rows gets a context without the chunk and the refusal reply.
pub(crate) fn write_teacher_sft(rows: &[SynthRow], chunks: &[ChunkRecord], prompts: &sft::SftPrompts, run: &mut StageRun, cfg: &SynthConfig) -> anyhow::Result<u64> {
    let df = plan::document_frequencies(chunks);
    let sim = sft::Similarity::new(chunks, &df);
    let ex = sft::Examples { chunks, sim: &sim, cfg: &cfg.sft, prompts, seed: cfg.seed };
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
        let mut row = sft::teacher_example(&ex, n, &sft::TeacherRow { question: &r.golden.question, phases, answer: &answer, gold: &gold }, refuse)?;
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

/// The golden set `synth-data --mode sft --from FILE --split …` writes beside its splits: the
/// in-corpus teacher records outside the `train` split (dev and test), each with the teacher's
/// answer as its reference and category `teacher`.
pub const UNTRAINED_GOLDEN: &str = "untrained-golden.jsonl";
/// Beside it, the out-of-corpus teacher records outside the `train` split (no gold; category
/// `out_of_corpus`, the teacher's refusal as the reference): a pipeline's `out_of_corpus` file.
pub const UNTRAINED_OUT_OF_CORPUS: &str = "untrained-out-of-corpus.jsonl";

/// `--mode sft --from FILE`: one example per teacher record, its context retrieved from the
/// index (see [`teacher_set`]), split by page group, written as `sft.jsonl`, `sft.parquet`
/// and one JSONL per split.
fn write_teacher_set_sft(records: &[teacher_set::TeacherRecord], index: &Path, (chunks, held): (&[ChunkRecord], &Held), prompts: &sft::SftPrompts, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    // A record on a held-out page is not trained on.
    let all = records.len();
    let records: Vec<teacher_set::TeacherRecord> = records.iter().filter(|r| !r.gold.iter().any(|g| held.pages.contains(&heldout::page_key(&g.source, g.page)))).cloned().collect();
    let records = &records[..];
    let retrieval = cfg.sft.retrieval.clone().normalize();
    let k = retrieval.k;
    let engine = gauge_engine::Engine::assemble(&retrieval, &gauge_engine::IndexOptions::one(index, &rt.device), gauge_engine::call_cache_beside(index))?;
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
            .filter(|p| !held.chunks.contains(&p.chunk.chunk_id))
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
    if !split_counts.is_empty() {
        // The questions no training split holds, as a golden set (the teacher's answer as the
        // reference) and, apart, the out-of-corpus ones (no gold: a refusal is right): what an
        // adapter trained on the `train` split is evaluated on.
        let untrained: Vec<&teacher_set::TeacherRecord> = records.iter().zip(&rows).filter(|(_, row)| row.split.as_deref() != Some("train")).map(|(r, _)| r).collect();
        for (file, in_corpus) in [(UNTRAINED_GOLDEN, true), (UNTRAINED_OUT_OF_CORPUS, false)] {
            let part: Vec<GoldenQuestion> = untrained.iter().filter(|r| r.in_corpus == in_corpus).map(|r| teacher_set::golden_of(r)).collect();
            write_jsonl(&run.path(file), part.iter())?;
            run.add_output(file, Some(part.len() as u64))?;
        }
        run.set_stat("untrained_questions", untrained.len());
    }
    run.set_stat("label", "sft");
    run.set_stat("examples", rows.len());
    run.set_stat("refusal_examples", rows.iter().filter(|r| r.kind == "refusal").count());
    run.set_stat("out_of_corpus", out_of_corpus);
    run.set_stat("gold_forced_in", forced);
    if !held.pages.is_empty() {
        run.set_stat("dropped_for_hold_out", all - records.len());
    }
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    Ok(SynthSummary { accepted: rows.len(), failed: 0, resumed: 0, sft: true })
}

/// The provenance record beside a golden set (see [`gauge_core::golden::provenance`]).
pub const PROVENANCE_FILE: &str = "provenance.json";

/// `golden.jsonl`, `<split>.jsonl` per split, and `provenance.json`: who wrote the questions
/// (the rows' `teacher_model`s) and who judged them (`judged_by`: the model that kept or
/// rejected each, or a named rule), which `--copy-to` puts beside the copy and `evaluate`
/// carries into its reports.
pub(crate) fn write_golden_rows(rows: &[SynthRow], split_counts: &BTreeMap<String, usize>, judged_by: Vec<String>, note: Option<String>, run: &mut StageRun) -> anyhow::Result<()> {
    write_jsonl(&run.path("golden.jsonl"), rows.iter())?;
    run.add_output("golden.jsonl", Some(rows.len() as u64))?;
    let mut written_by: Vec<String> = Vec::new();
    for r in rows {
        if !written_by.contains(&r.teacher_model) {
            written_by.push(r.teacher_model.clone());
        }
    }
    let prompts: std::collections::BTreeSet<&str> = rows.iter().filter_map(|r| r.prompt_sha256.as_deref()).collect();
    let prompt = (prompts.len() == 1).then(|| prompts.iter().next().map(|p| format!("sha256 {p}"))).flatten();
    let provenance = gauge_core::golden::Provenance { written_by, judged_by, prompt, note, source: String::new() };
    std::fs::write(run.path(PROVENANCE_FILE), serde_json::to_string_pretty(&provenance)? + "\n")?;
    run.add_output(PROVENANCE_FILE, None)?;
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
    let ex = sft::Examples { chunks, sim: &sim, cfg: &cfg.sft, prompts, seed: cfg.seed };
    let bar = gauge_core::progress::bar(planned.len() as u64, "examples");
    let mut rows = Vec::new();
    let mut skipped = 0;
    for s in &planned {
        let refuse = sft::is_refusal(s.index, cfg.sft.refusal_share, cfg.seed);
        match sft::example(&ex, s.index, s.chunks[0], &df, refuse)? {
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
                golden: GoldenQuestion::new(r.id.clone(), r.question.clone(), vec![gold_of(c_of[r.chunk_id.as_str()])]).in_category("sft"),
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
