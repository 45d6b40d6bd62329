//! The `answer` stage: for each question, the retrieval engine's passages (the same config
//! language as `evaluate`), a prompt from a template in `pipelines/prompts/` (each passage
//! tagged with its source and pages), an answer from the local Burn decoder (a GGUF file or
//! a Hugging Face folder) or an OpenAI-compatible endpoint, and every citation of the answer
//! checked against the passages given: verified, or invented. A question the score cutoff
//! refuses is answered with the refusal sentence, and the model is not called.
#![deny(missing_docs)]
pub mod cli;
mod out_of_corpus;
pub mod structure;
pub use out_of_corpus::load_out_of_corpus;
pub use structure::{PhaseText, StructureConfig, StructureKind, VerdictPlace};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int32Array, StringArray};
use gauge_core::golden::{load_golden, GoldenQuestion};
use gauge_core::schema::{arrow_schema, ANSWER_COLUMNS};
use gauge_core::{hash, FileEntry, Plan, Stage, StageRun};
use gauge_chat::GenerateOptions;
use gauge_generator::Generator;
use gauge_chat_client::Message;
use gauge_engine::{Engine, RetrievalConfig};
use serde::{Deserialize, Serialize};

use gauge_cite::{check, Citation, GivenPassage};

/// Stage name.
pub const STAGE: &str = "answer";
/// Output format version.
pub const FORMAT_VERSION: u32 = 1;

pub use gauge_generator::GeneratorConfig;

/// Settings of `answer` (serde, with defaults), echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AnswerConfig {
    /// Retrieval, as in a pipeline's `retrieval`.
    pub retrieval: RetrievalConfig,
    /// The generator.
    pub generator: GeneratorConfig,
    /// Prompt template: `plain` or `four_phase` (`pipelines/prompts/answer_<name>.md`).
    pub template: String,
    /// Sampling and length (greedy by default).
    pub generation: GenerateOptions,
    /// What a refused question is answered with.
    pub refusal: String,
    /// The form the reply is held to by constrained decoding (default free:
    /// [`structure::StructureConfig`]); `four_phase` holds the four phases in order, each within
    /// its budget, citing only the given tags, with the model's refusal as a legal first move.
    #[serde(skip_serializing_if = "StructureConfig::is_free")]
    pub structure: StructureConfig,
}

impl Default for AnswerConfig {
    fn default() -> Self {
        AnswerConfig {
            retrieval: RetrievalConfig { k: 5, ..RetrievalConfig::default() },
            generator: GeneratorConfig::default(),
            template: "plain".into(),
            generation: GenerateOptions { max_new_tokens: 200, ..GenerateOptions::default() },
            refusal: "The provided documents do not contain this information.".into(),
            structure: StructureConfig::default(),
        }
    }
}

/// What `answer` reads.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerInputs {
    /// The index artifact.
    pub index: PathBuf,
    /// A golden-set file of questions (JSONL or Parquet)…
    pub golden: Option<PathBuf>,
    /// …or one question.
    pub question: Option<String>,
    /// Questions the corpus cannot answer (JSON Lines, no gold), asked after the golden set's
    /// (see [`load_out_of_corpus`]); only with `golden`.
    pub out_of_corpus: Option<PathBuf>,
    /// At most this many questions of the golden set (0: all).
    pub limit: usize,
}

/// Run settings that do not change the answers.
#[derive(Debug, Clone)]
pub struct AnswerOptions {
    /// Device of the embedder, reranker and decoder.
    pub device: String,
    /// Folder of the prompt templates.
    pub prompts: PathBuf,
    /// Stream generated text to stderr.
    pub stream: bool,
}

impl Default for AnswerOptions {
    fn default() -> Self {
        AnswerOptions { device: "cpu".into(), prompts: PathBuf::from("pipelines/prompts"), stream: false }
    }
}

/// One answered question.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerRow {
    /// Question id.
    pub qid: String,
    /// The question.
    pub question: String,
    /// The answer text (the refusal sentence when refused).
    pub answer: String,
    /// Refused by the score cutoff (no passage given, model not called).
    pub refused: bool,
    /// The passages given, in prompt order.
    pub passages: Vec<GivenPassage>,
    /// Citations found in the answer.
    pub citations: Vec<Citation>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Generation seconds (prompt and decoding).
    pub generation_seconds: f64,
    /// `eos`, `stop`, `loop` (the loop stop ended it), `length`, `refused`, `api`.
    pub finish_reason: String,
}

/// What planning found.
pub struct AnswerState {
    questions: Vec<GoldenQuestion>,
    system: String,
    template: String,
}

/// Counts of a build.
#[derive(Debug, Default)]
pub struct AnswerSummary {
    /// Questions answered (refusals included).
    pub questions: usize,
    /// Refused.
    pub refused: usize,
    /// Citations found.
    pub citations: usize,
    /// Of which invented.
    pub invented: usize,
    /// Replies the loop stop ended.
    pub loops: usize,
    /// Seconds generating.
    pub seconds: f64,
}

/// The `answer` stage.
pub struct Answer;

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); the prompt templates live in pipelines/prompts/", path.display()))
}

impl Stage for Answer {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = AnswerConfig;
    type Inputs = AnswerInputs;
    type Options = AnswerOptions;
    type State = AnswerState;
    type Summary = AnswerSummary;

    fn plan(config: &AnswerConfig, inputs: &AnswerInputs, options: &AnswerOptions) -> anyhow::Result<Plan<AnswerState>> {
        config.retrieval.validate()?;
        let (manifest, _) = gauge_index::IndexManifest::read(&inputs.index)?;
        let mut entries = vec![FileEntry::hashed("index", inputs.index.display(), manifest.fingerprint)];
        let questions = match (&inputs.golden, &inputs.question) {
            (Some(g), None) => {
                entries.push(FileEntry::file("questions", g)?);
                let golden = load_golden(g)?;
                // `limit` counts the golden set's questions; the out-of-corpus ones all follow.
                let mut questions: Vec<GoldenQuestion> = golden.iter().take(if inputs.limit > 0 { inputs.limit } else { usize::MAX }).cloned().collect();
                if let Some(o) = &inputs.out_of_corpus {
                    // A new input only when given: earlier answer artifacts keep their fingerprint.
                    entries.push(FileEntry::file("out_of_corpus", o)?);
                    questions.extend(load_out_of_corpus(o, golden.iter().map(|q| q.qid.as_str()))?);
                }
                questions
            }
            (None, Some(q)) => {
                anyhow::ensure!(inputs.out_of_corpus.is_none(), "--out-of-corpus needs --golden FILE (it adds questions to a golden set)");
                anyhow::ensure!(!q.trim().is_empty(), "the question is empty; ask something");
                entries.push(FileEntry::text("questions", "(command line)", q).with_rows(1));
                vec![GoldenQuestion::new("q1".into(), q.clone(), Vec::new())]
            }
            _ => anyhow::bail!("give either --golden FILE or one question"),
        };
        // The questions answered are part of what the output depends on: a `--limit` run and a
        // full run of the same file must not share an artifact.
        entries.push(FileEntry::hashed("question_count", "(question count)", questions.len().to_string()).with_rows(questions.len()));
        entries.extend(gauge_generator::model_entry(&config.generator)?);
        if let Some(rw) = &config.retrieval.rewrite {
            // The rewrites depend on the model's weights (or endpoint) and the template's text.
            entries.push(FileEntry::text("rewrite", rw.template.as_deref().unwrap_or("built-in"), &rw.identity()?));
        }
        // No room for an answer is no answer (before: an empty one, counted as answered).
        anyhow::ensure!(config.generation.max_new_tokens >= 1, "generation.max_new_tokens = 0 leaves no room for an answer; give at least 1 (the default is 200)");
        config.structure.validate(config.generation.max_new_tokens).map_err(|e| anyhow::anyhow!(e))?;
        let system = read(&options.prompts.join("answer_system.md"))?;
        gauge_core::names::plain_name(&config.template).map_err(|why| anyhow::anyhow!("template {why} (it names prompts/answer_<template>.md)"))?;
        let template = read(&options.prompts.join(format!("answer_{}.md", config.template)))?;
        let echo = serde_json::json!({
            "config": config,
            "prompt_sha": hash::bytes_hash(format!("{system}\u{0}{template}").as_bytes()),
        });
        Ok(Plan::new(entries, AnswerState { questions, system, template }).echo(echo).seed(config.generation.seed))
    }

    fn build(state: AnswerState, run: &mut StageRun, config: &AnswerConfig, inputs: &AnswerInputs, options: &AnswerOptions) -> anyhow::Result<AnswerSummary> {
        let started = std::time::Instant::now();
        let root = run.final_dir().parent().and_then(Path::parent).expect("an artifact lives at <root>/<stage>/<fingerprint>");
        let cache = Arc::new(gauge_generator::cache::CallCache::new(root.join("llm-cache")));
        let (rows, cut_passages, prefix) = answer_all(&state, config, inputs, options, &cache)?;
        run.set_stat("model_calls", cache.misses());
        run.set_stat("model_calls_cached", cache.hits());
        let n = write_answers(&run.path("answers.parquet"), &rows)?;
        run.add_output("answers.parquet", Some(n))?;
        let citations: usize = rows.iter().map(|r| r.citations.len()).sum();
        let invented: usize = rows.iter().map(|r| r.citations.iter().filter(|c| !c.verified).count()).sum();
        let summary = AnswerSummary { questions: rows.len(), refused: rows.iter().filter(|r| r.refused).count(), citations, invented, loops: rows.iter().filter(|r| r.finish_reason == "loop").count(), seconds: started.elapsed().as_secs_f64() };
        run.set_stat("questions", summary.questions);
        run.set_stat("refused", summary.refused);
        run.set_stat("loops", summary.loops);
        run.set_stat("passages_cut_to_fit_context", cut_passages);
        if let Some((prompt, reused)) = prefix {
            // The local decoder's prefix cache: prompt tokens taken from a prompt run before.
            run.set_stat("prompt_tokens_prefilled", prompt - reused);
            run.set_stat("prompt_tokens_reused", reused);
        }
        run.set_stat("citations", citations);
        run.set_stat("invented_citations", invented);
        run.set_stat("completion_tokens", rows.iter().map(|r| r.completion_tokens).sum::<usize>());
        run.set_stat("generation_seconds", rows.iter().map(|r| r.generation_seconds).sum::<f64>());
        Ok(summary)
    }

    fn summary_line(s: &AnswerSummary) -> String {
        format!("{} questions answered ({} refused, {} ended in a loop) in {:.1} s; {} citations, {} invented", s.questions, s.refused, s.loops, s.seconds, s.citations, s.invented)
    }
}

/// The user message for a question and its passages (the template shared with the SFT data).
pub fn render_prompt(template: &str, question: &str, passages: &[(GivenPassage, String)]) -> anyhow::Result<String> {
    let ps: Vec<gauge_cite::PromptPassage> = passages.iter().map(|(g, text)| gauge_cite::PromptPassage { source: g.source.clone(), page_start: g.page_start, page_end: g.page_end, text: text.clone() }).collect();
    Ok(gauge_cite::render_answer_prompt(template, question, &ps)?)
}

/// The answers, how many passage cuts fitting the prompts to the context took, and (local
/// decoder) the prompt tokens seen and reused by its prefix cache.
type Answered = (Vec<AnswerRow>, usize, Option<(u64, u64)>);

fn answer_all(state: &AnswerState, config: &AnswerConfig, inputs: &AnswerInputs, options: &AnswerOptions, cache: &Arc<gauge_generator::cache::CallCache>) -> anyhow::Result<Answered> {
    let cfg = config.retrieval.clone().normalize();
    // Everything the config names (a rewriter's calls through the run's cache).
    let engine = Engine::assemble(&cfg, &gauge_engine::IndexOptions::one(&inputs.index, &options.device), cache.clone())?;
    let generator = Generator::open(&config.generator, &options.device, gauge_chat_client::RetryPolicy::default())?;
    if config.generation.constrain_citations && !generator.is_local() {
        anyhow::bail!("generation.constrain_citations masks the local decoder's tokens; {} is an endpoint — set it to false", generator.name());
    }
    // Streaming shows one reply at a time, so it decodes one at a time.
    let opts = GenerateOptions { stream: options.stream, batch_size: if options.stream { 1 } else { config.generation.batch_size }, ..config.generation.clone() };
    let mut cut_passages = 0usize;
    // A four-phase reply's budgets (checked at plan time; free replies have none).
    let budgets = if config.structure.is_free() { [0; 4] } else { config.structure.budgets(opts.max_new_tokens).map_err(|e| anyhow::anyhow!(e))? };
    // Retrieval and prompts first (fast), then every prompt through the generator at once:
    // the local decoder batches them (generation.batch_size), an endpoint takes them in turn.
    let mut rows = Vec::with_capacity(state.questions.len());
    let mut chats: Vec<Vec<Message>> = Vec::new();
    let mut asked: Vec<usize> = Vec::new();
    for q in &state.questions {
        let result = engine.search(&q.question, &cfg)?;
        let passages: Vec<(GivenPassage, String)> = result
            .distinct()
            .into_iter()
            .map(|p| (GivenPassage { chunk_id: p.chunk.chunk_id.clone(), source: p.span.source.clone(), page_start: p.span.page_start, page_end: p.span.page_end }, p.span.text.clone()))
            .collect();
        if result.refusal.is_some() || passages.is_empty() {
            rows.push(AnswerRow {
                qid: q.qid.clone(),
                question: q.question.clone(),
                answer: config.refusal.clone(),
                refused: true,
                passages: Vec::new(),
                citations: Vec::new(),
                prompt_tokens: 0,
                completion_tokens: 0,
                generation_seconds: 0.0,
                finish_reason: "refused".into(),
            });
            continue;
        }
        // Passages are shortened (longest first) when the prompt would not leave the reply
        // its tokens in the model's context.
        let mut texts: Vec<String> = passages.iter().map(|(_, t)| t.clone()).collect();
        let messages = |texts: &[String]| -> Vec<Message> {
            let given: Vec<(GivenPassage, String)> = passages.iter().zip(texts).map(|((g, _), t)| (g.clone(), t.clone())).collect();
            let mut user = render_prompt(&state.template, &q.question, &given).unwrap_or_default();
            if !config.structure.is_free() && config.structure.describe_format {
                // The model is told the form the schema holds it to.
                user = format!("{}\n\n{}", user.trim_end(), structure::format_instructions(&config.structure, budgets));
            }
            vec![Message::system(state.system.trim()), Message::user(user)]
        };
        render_prompt(&state.template, &q.question, &passages)?;
        cut_passages += generator.fit(&mut texts, opts.max_new_tokens, messages)?;
        chats.push(messages(&texts));
        asked.push(rows.len());
        rows.push(AnswerRow {
            qid: q.qid.clone(),
            question: q.question.clone(),
            answer: String::new(),
            refused: false,
            passages: passages.into_iter().map(|(g, _)| g).collect(),
            citations: Vec::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            generation_seconds: 0.0,
            finish_reason: String::new(),
        });
    }
    let bar = gauge_core::progress::ReplyBar::new(state.questions.len() as u64, "questions");
    bar.bar.inc((state.questions.len() - asked.len()) as u64);
    // Every reply goes through the model-call cache (`<artifact root>/llm-cache/`), so a run
    // stopped part-way — killed, or its endpoint gone — resumes with the replies it had: the
    // local decoder takes the prompts as one batch; an endpoint takes them in turn, each reply
    // stored as it comes, and the first failure stops the run.
    let model = gauge_generator::cache::model_identity(&config.generator)?;
    // Constrained citations: each reply may cite only its own passages' tags.
    let tags: Option<Vec<Vec<String>>> = opts.constrain_citations.then(|| asked.iter().map(|&i| gauge_cite::citable_tags(&rows[i].passages)).collect());
    let replies = if !config.structure.is_free() {
        // The four phases: one schema per question (its own passages' tags), so each reply
        // is decoded alone (the batch API takes one schema for all), locally or by an endpoint.
        let mut out = Vec::with_capacity(chats.len());
        for (chat, &i) in chats.iter().zip(&asked) {
            let schema = structure::four_phase_schema(&gauge_cite::citable_tags(&rows[i].passages), budgets, &config.structure);
            let schema = gauge_chat_client::ResponseSchema { name: "four_phase".into(), schema };
            let reply = cache.complete(&generator, &model, chat, &opts, Some(&schema));
            bar.reply(reply.as_ref().map_or(0, |r| if r.hit { 0 } else { r.completion.completion_tokens }));
            let failed = reply.is_err();
            out.push(reply);
            if failed {
                break;
            }
        }
        out
    } else if generator.is_local() {
        cache.complete_batch_constrained(&generator, &model, &chats, &opts, None, tags.as_deref(), &|tokens| bar.reply(tokens))
    } else {
        let mut out = Vec::with_capacity(chats.len());
        for chat in &chats {
            let reply = cache.complete(&generator, &model, chat, &opts, None);
            bar.reply(reply.as_ref().map_or(0, |r| if r.hit { 0 } else { r.completion.completion_tokens }));
            let failed = reply.is_err();
            out.push(reply);
            if failed {
                break;
            }
        }
        out
    };
    for (i, reply) in asked.into_iter().zip(replies) {
        let reply = reply?;
        let row = &mut rows[i];
        // A cached reply reports the time its original call took.
        row.generation_seconds = reply.original_latency_ms / 1e3;
        let reply = reply.completion;
        let text = if config.structure.is_free() { reply.text } else { structure::render(&reply.text, &config.refusal).text };
        row.citations = check(&text, &row.passages);
        row.answer = text;
        row.prompt_tokens = reply.prompt_tokens;
        row.completion_tokens = reply.completion_tokens;
        row.finish_reason = reply.finish_reason;
    }
    bar.bar.finish_and_clear();
    if cut_passages > 0 {
        tracing::info!("{cut_passages} passage cut(s) to fit {}'s context", generator.name());
    }
    let prefix = generator.local_model().map(|lm| {
        let kept = lm.prefix_cache.lock().expect("prefix cache lock");
        (kept.prompt_tokens, kept.reused_tokens)
    });
    Ok((rows, cut_passages, prefix))
}

/// Writes `answers.parquet` (columns in [`gauge_core::schema::ANSWER_COLUMNS`]).
pub fn write_answers(path: &Path, rows: &[AnswerRow]) -> anyhow::Result<u64> {
    let strings = |f: &dyn Fn(&AnswerRow) -> String| -> ArrayRef { Arc::new(StringArray::from_iter_values(rows.iter().map(f))) };
    let ints = |f: &dyn Fn(&AnswerRow) -> i32| -> ArrayRef { Arc::new(Int32Array::from_iter_values(rows.iter().map(f))) };
    let cols = vec![
        strings(&|r| r.qid.clone()),
        strings(&|r| r.question.clone()),
        strings(&|r| r.answer.clone()),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.refused)))) as ArrayRef,
        strings(&|r| serde_json::to_string(&r.passages).expect("serialises")),
        strings(&|r| serde_json::to_string(&r.citations).expect("serialises")),
        ints(&|r| r.citations.len() as i32),
        ints(&|r| r.citations.iter().filter(|c| c.verified).count() as i32),
        ints(&|r| r.citations.iter().filter(|c| !c.verified).count() as i32),
        ints(&|r| r.prompt_tokens as i32),
        ints(&|r| r.completion_tokens as i32),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.generation_seconds))) as ArrayRef,
        strings(&|r| r.finish_reason.clone()),
    ];
    Ok(gauge_core::table::write_parquet(path, arrow_schema(ANSWER_COLUMNS), cols)?)
}
