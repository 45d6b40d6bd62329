//! `--mode doc2query`: questions for `n` planned passages from the generator (one batch), each
//! reply journaled as it finishes; each question cleaned, kept when the engine retrieves its
//! passage in the top `round_trip_k`, then near-duplicates dropped; `golden.jsonl` (and splits
//! by page), `dropped.jsonl` with every dropped question and its reason, counts and speed in
//! the manifest.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use gauge_chat_client::Message;
use gauge_core::golden::{write_jsonl, GoldenQuestion};
use gauge_core::schema::ChunkRecord;
use gauge_core::StageRun;
use gauge_generator::Generator;

use crate::doc2query::{self, ReplyFormat};
use crate::journal::{read_journal, Doc2QueryJournalEntry, Journal};
use crate::{gold_of, plan, split, Doc2QueryPlan, Style, SynthConfig, SynthOptions, SynthRow, SynthSummary};

/// Every planned passage's reply, and how the generation went.
struct Replies {
    /// By passage index: the reply or why there is none.
    entries: BTreeMap<usize, Doc2QueryJournalEntry>,
    /// Passages found in the journal of an earlier run.
    resumed: usize,
    /// Their generated tokens.
    resumed_tokens: usize,
    /// Seconds this run spent generating.
    seconds: f64,
    /// How the replies are written.
    format: ReplyFormat,
    /// The generator's name (each kept row's `teacher_model`).
    model: String,
}

/// What a filter kept and dropped (doc2query's round trip, the held-out set's judge).
#[derive(Default)]
pub(crate) struct Kept {
    pub(crate) rows: Vec<SynthRow>,
    /// Every dropped question with its passage and reason (`dropped.jsonl`).
    pub(crate) dropped: Vec<serde_json::Value>,
    /// Drops counted by reason.
    pub(crate) reasons: BTreeMap<String, usize>,
    tokens: usize,
    written: usize,
}

impl Kept {
    /// Records a dropped row (a filter over an earlier set) and its reason.
    pub(crate) fn drop_row(&mut self, row: &SynthRow, reason: &str) {
        *self.reasons.entry(reason.to_string()).or_default() += 1;
        self.dropped.push(serde_json::json!({ "qid": row.golden.qid, "chunk_id": row.chunk_id, "question": row.golden.question, "reason": reason }));
    }

    /// Records a dropped question and its reason.
    pub(crate) fn drop(&mut self, chunk: &ChunkRecord, question: &str, reason: &str) {
        *self.reasons.entry(reason.to_string()).or_default() += 1;
        self.dropped.push(serde_json::json!({ "chunk_id": chunk.chunk_id, "source": chunk.source, "page_start": chunk.page_start, "question": question, "reason": reason }));
    }
}

/// Runs `--mode doc2query` (see the module docs).
pub(crate) fn write_doc2query(chunks: &[ChunkRecord], chunks_path: &Path, plan: &Doc2QueryPlan, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let d = &cfg.doc2query;
    let planned = plan::plan(chunks, cfg.n, &[Style::Factual], cfg.seed, cfg.min_chars, &|_| true);
    anyhow::ensure!(!planned.is_empty(), "{}: no chunk is long enough (min_chars {}) and not a table of contents", chunks_path.display(), cfg.min_chars);
    let generator = Generator::open(&d.generator, &rt.device, rt.retry.clone())?;
    let format = d.reply.resolve(&d.generator);
    let replies = ask(&generator, format, chunks, plan, &planned, run, cfg)?;
    // The replies in passage order (the journal is in the order they finished).
    write_jsonl(&run.path("replies.jsonl"), replies.entries.values())?;
    run.add_output("replies.jsonl", Some(replies.entries.len() as u64))?;
    let mut kept = round_trip(chunks, plan, &planned, &replies, cfg, rt)?;
    let before = kept.rows.len();
    let mut rows = split::drop_near_duplicates(std::mem::take(&mut kept.rows), cfg.near_duplicate_jaccard);
    if before > rows.len() {
        kept.reasons.insert("near_duplicate".into(), before - rows.len());
    }
    let split_counts = if cfg.split.is_empty() { BTreeMap::new() } else { split::assign_splits(&mut rows, &cfg.split, cfg.seed) };
    crate::write_golden_rows(&rows, &split_counts, vec!["retrieval round trip".into()], Some("kept when the untrained engine found the passage (doc2query round trip)".into()), run)?;
    write_jsonl(&run.path("dropped.jsonl"), kept.dropped.iter())?;
    run.add_output("dropped.jsonl", Some(kept.dropped.len() as u64))?;
    run.set_stat("label", "doc2query");
    run.set_stat("passages", planned.len());
    run.set_stat("questions_written", kept.written);
    run.set_stat("questions_kept", rows.len());
    run.set_stat("dropped", serde_json::to_value(&kept.reasons)?);
    run.set_stat("completion_tokens", kept.tokens);
    run.set_stat("generation_seconds", replies.seconds);
    run.set_stat("resumed_from_journal", replies.resumed);
    let generated: usize = kept.tokens - replies.resumed_tokens;
    run.set_stat("tokens_per_second", if replies.seconds > 0.0 { generated as f64 / replies.seconds } else { 0.0 });
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    run.set_stat("reply_format", serde_json::to_value(format)?);
    if format == ReplyFormat::Json {
        run.set_stat("structured_output", generator.structured_status());
    }
    eprintln!("synth-data: doc2query: {} questions written for {} passages, {} kept after the round trip (top {}) and near-duplicate removal", kept.written, planned.len(), rows.len(), d.round_trip_k);
    Ok(SynthSummary { accepted: rows.len(), failed: kept.written - rows.len(), resumed: replies.resumed, sft: false })
}

/// Asks the generator for every planned passage the journal does not hold, in one batch (see
/// [`ask_journaled`]).
fn ask(generator: &Generator, format: ReplyFormat, chunks: &[ChunkRecord], plan: &Doc2QueryPlan, planned: &[plan::PlannedSample], run: &mut StageRun, cfg: &SynthConfig) -> anyhow::Result<Replies> {
    let d = &cfg.doc2query;
    let schema = (format == ReplyFormat::Json).then(|| doc2query::reply_schema(d.per_chunk));
    let chunk_of: BTreeMap<usize, usize> = planned.iter().map(|s| (s.index, s.chunks[0])).collect();
    let keys: Vec<usize> = chunk_of.keys().copied().collect();
    let chat = |k: usize| vec![Message::user(doc2query::prompt(&plan.template, &chunks[chunk_of[&k]], &plan.examples, d.per_chunk, format))];
    let asked = ask_journaled(generator, &keys, &chat, &cfg.generation, schema.as_ref(), &run.checkpoint_dir()?.join("journal.jsonl"), "passages")?;
    Ok(Replies { entries: asked.entries, resumed: asked.resumed, resumed_tokens: asked.resumed_tokens, seconds: asked.seconds, format, model: generator.name().to_string() })
}

/// What [`ask_journaled`] got.
pub(crate) struct Asked {
    /// By key: the reply or why there is none.
    pub(crate) entries: BTreeMap<usize, Doc2QueryJournalEntry>,
    /// Keys found in the journal of an earlier run.
    pub(crate) resumed: usize,
    /// Their generated tokens.
    pub(crate) resumed_tokens: usize,
    /// Seconds this run spent generating.
    pub(crate) seconds: f64,
}

/// Asks the generator, in one batch, for the chat of every key (`chat(key)`) the journal at
/// `journal_path` does not hold; each reply is journaled as it finishes, so a rerun after a
/// kill asks only for the rest (keys must be a pure function of the chunks and the config).
/// A reply bar counts `unit`s with tokens/s and ETA.
pub(crate) fn ask_journaled(generator: &Generator, keys: &[usize], chat: &dyn Fn(usize) -> Vec<Message>, opts: &gauge_chat::GenerateOptions, schema: Option<&gauge_chat_client::ResponseSchema>, journal_path: &Path, unit: &str) -> anyhow::Result<Asked> {
    let mut done: BTreeMap<usize, Doc2QueryJournalEntry> = read_journal(journal_path)?;
    let wanted: std::collections::BTreeSet<usize> = keys.iter().copied().collect();
    done.retain(|k, _| wanted.contains(k));
    let resumed = done.len();
    let resumed_tokens: usize = done.values().map(|e| e.completion_tokens).sum();
    if resumed > 0 {
        eprintln!("synth-data: resuming: {resumed} of {} {unit} already in {}", keys.len(), journal_path.display());
    }
    let pending: Vec<usize> = keys.iter().copied().filter(|k| !done.contains_key(k)).collect();
    let chats: Vec<Vec<Message>> = pending.iter().map(|&k| chat(k)).collect();
    let bar = gauge_core::progress::ReplyBar::new(keys.len() as u64, unit);
    bar.bar.inc(resumed as u64);
    let journal = Journal::open(journal_path)?;
    let entries = Mutex::new(done);
    let journal_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let no_reply: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    generator.complete_batch_each(&chats, opts, schema, &|j, reply| {
        let passage = pending[j];
        let entry = match reply {
            Ok(c) => Doc2QueryJournalEntry { passage, text: Some(c.text.clone()), completion_tokens: c.completion_tokens, failure: None },
            Err(e) => Doc2QueryJournalEntry { passage, text: None, completion_tokens: 0, failure: Some(e.to_string()) },
        };
        // An endpoint that gave no reply (timeouts, dropped connections, 5xx/429 after every
        // retry) is not journaled: the run stops and a rerun asks again. A 4xx is an answer:
        // that key is journaled as failed.
        if let Err(gauge_generator::GeneratorError::Llm(e @ gauge_chat_client::LlmError::Exhausted { .. })) = reply {
            no_reply.lock().expect("lock").push(e.to_string());
        } else {
            if let Err(e) = journal.append(&entry) {
                journal_error.lock().expect("lock").get_or_insert(e);
            }
            entries.lock().expect("lock").insert(passage, entry);
        }
        bar.reply(reply.as_ref().map_or(0, |c| c.completion_tokens));
    });
    let seconds = started.elapsed().as_secs_f64();
    bar.bar.finish_and_clear();
    drop(journal);
    if let Some(e) = journal_error.into_inner().expect("lock") {
        return Err(e.context(format!("{}: cannot append to the journal", journal_path.display())));
    }
    let entries = entries.into_inner().expect("lock");
    let no_reply = no_reply.into_inner().expect("lock");
    if let Some(last) = no_reply.last() {
        anyhow::bail!("the endpoint gave no reply for {} of {} {unit} asked (last: {last}); {} of {} {unit} are in {}: rerun to resume", no_reply.len(), pending.len(), entries.len(), keys.len(), journal_path.display());
    }
    anyhow::ensure!(entries.len() == keys.len(), "{}: {} of {} {unit} have a reply", journal_path.display(), entries.len(), keys.len());
    Ok(Asked { entries, resumed, resumed_tokens, seconds })
}

/// Parses every reply, cleans each question and keeps those whose passage the engine retrieves
/// in the top `round_trip_k`.
fn round_trip(chunks: &[ChunkRecord], plan: &Doc2QueryPlan, planned: &[plan::PlannedSample], replies: &Replies, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<Kept> {
    let d = &cfg.doc2query;
    let retrieval = gauge_engine::RetrievalConfig { k: d.round_trip_k, ..d.retrieval.clone() }.normalize();
    let engine = gauge_engine::Engine::assemble(&retrieval, &gauge_engine::IndexOptions::one(&plan.index, &rt.device), gauge_engine::call_cache_beside(&plan.index))?;
    let mut kept = Kept::default();
    for s in planned {
        let c = &chunks[s.chunks[0]];
        let entry = &replies.entries[&s.index];
        let text = match (&entry.text, &entry.failure) {
            (Some(t), _) => t,
            (None, failure) => {
                kept.drop(c, "", &format!("generation_failed: {}", failure.as_deref().unwrap_or_default()));
                continue;
            }
        };
        kept.tokens += entry.completion_tokens;
        let questions = match replies.format {
            ReplyFormat::Lines => doc2query::parse_lines(text),
            _ => match serde_json::from_str::<doc2query::Doc2QueryReply>(gauge_chat_client::json_payload(text)) {
                Ok(parsed) => parsed.questions,
                Err(_) => Vec::new(),
            },
        };
        if questions.is_empty() {
            kept.drop(c, text, "unparsable_reply");
            continue;
        }
        for (j, q) in questions.iter().take(d.per_chunk).enumerate() {
            kept.written += 1;
            let q = match doc2query::clean(q, d.min_words) {
                Ok(q) => q,
                Err(reason) => {
                    kept.drop(c, q, reason);
                    continue;
                }
            };
            // A model shown example questions may copy one instead of asking about the passage
            // (the 1.5B did, 24 of 24 in a trial): such a question is not the passage's.
            if doc2query::copies_an_example(&q, &plan.examples) {
                kept.drop(c, &q, "copied_example");
                continue;
            }
            let found: Vec<String> = engine.search(&q, &retrieval)?.distinct().into_iter().map(|p| p.chunk.chunk_id.clone()).collect();
            if !doc2query::round_trip(&c.chunk_id, &found, d.round_trip_k) {
                kept.drop(c, &q, "not_retrieved");
                continue;
            }
            kept.rows.push(SynthRow {
                golden: GoldenQuestion::new(format!("d2q-{}-{j}", s.index), q, vec![gold_of(c)]).in_category("doc2query"),
                thinking: None,
                phases: None,
                teacher_model: replies.model.clone(),
                prompt_sha256: None,
                chunk_id: c.chunk_id.clone(),
                split: None,
            });
        }
    }
    Ok(kept)
}
