//! `--mode ict` and `--mode llm`: the planned samples (a pure function of the chunks and the
//! config, so a resumed run sees the same samples under the same indexes) turned into golden
//! rows — by inverse cloze offline, or asked of a teacher LLM with a few requests in flight —
//! each journaled as it finishes; then the rows finalised from the journal in sample order,
//! near-duplicates dropped, split, written with their failures, the journal and the stats.
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gauge_chat_client::{Message, Usage};
use gauge_core::golden::{write_jsonl, GoldenQuestion};
use gauge_core::schema::ChunkRecord;
use gauge_core::StageRun;
use gauge_generator::Generator;

use crate::journal::{read_journal, Journal, JournalEntry};
use crate::{gold_of, label, plan, sha256_hex, split, teacher, Mode, SynthConfig, SynthOptions, SynthRow, SynthState, SynthSummary, ENDPOINT_DOWN_AFTER};

/// The planned samples and what a resumed run already has.
struct Pending<'a> {
    planned: &'a [plan::PlannedSample],
    todo: Vec<&'a plan::PlannedSample>,
    resumed: usize,
}

/// Runs `--mode ict` or `--mode llm` (see the module docs).
pub(crate) fn write_samples(state: SynthState, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let SynthState { chunks, chunks_path, styles, prompts, sft_prompts, .. } = state;
    let journal_path = run.checkpoint_dir()?.join("journal.jsonl");
    // Word statistics for sentence salience (inverse cloze only).
    let df = if cfg.mode == Mode::Ict { plan::document_frequencies(&chunks) } else { Default::default() };
    let ict_sentence = |i: usize| plan::salient_sentence(&chunks[i].text, &df, chunks.len());
    let planned = plan::plan(&chunks, cfg.n, &styles, cfg.seed, cfg.min_chars, &|i| ict_sentence(i).is_some());
    // Inverse cloze with several questions a chunk: each planned chunk becomes one sample per
    // salient sentence (up to `ict_per_chunk`), renumbered in order; `rank[s]` is sample s's
    // sentence rank. At 1 the plan is unchanged.
    let (planned, rank) = if cfg.mode == Mode::Ict && cfg.ict_per_chunk > 1 {
        let mut out = Vec::new();
        let mut rank = Vec::new();
        for s in planned {
            let n = plan::salient_sentences(&chunks[s.chunks[0]].text, &df, chunks.len(), cfg.ict_per_chunk).len();
            for j in 0..n {
                out.push(plan::PlannedSample { index: out.len(), style: s.style, chunks: s.chunks.clone() });
                rank.push(j);
            }
        }
        (out, rank)
    } else {
        let n = planned.len();
        (planned, vec![0; n])
    };
    anyhow::ensure!(!planned.is_empty(), "{}: no chunk is long enough (min_chars {}) and not a table of contents", chunks_path.display(), cfg.min_chars);
    let mut done: BTreeMap<usize, JournalEntry> = read_journal(&journal_path)?;
    // A sample the endpoint never answered (the run stopped because it was down) is asked again.
    done.retain(|_, e| !e.no_reply);
    let resumed = done.len();
    if resumed > 0 {
        eprintln!("synth-data: resuming: {resumed} of {} samples already in {}", planned.len(), journal_path.display());
    }
    let pending = Pending { planned: &planned, todo: planned.iter().filter(|s| !done.contains_key(&s.index)).collect(), resumed };
    let journal = Journal::open(&journal_path)?;
    let bar = gauge_core::progress::ReplyBar::new(planned.len() as u64, "samples");
    bar.bar.inc(resumed as u64);
    let mut structured = None;
    match cfg.mode {
        Mode::Ict => {
            for s in &pending.todo {
                let c = &chunks[s.chunks[0]];
                let (_, _, sentence) = plan::salient_sentences(&c.text, &df, chunks.len(), rank[s.index] + 1).pop().expect("planned ICT samples have a sentence of their rank");
                journal.append(&JournalEntry { sample: s.index, row: Some(ict_row(s.index, sentence, c)), failure: None, usage: Usage::default(), attempts: 0, cuts: 0, no_reply: false })?;
                bar.bar.inc(1);
            }
        }
        Mode::Sft => unreachable!("SFT examples are written by write_sft"),
        Mode::Doc2query => unreachable!("doc2query questions are written by write_doc2query"),
        Mode::Heldout => unreachable!("held-out questions are written by write_heldout"),
        Mode::Likelihood => unreachable!("filtered questions are written by write_filtered"),
        Mode::Llm => {
            let client = Generator::open(&cfg.teacher, &rt.device, rt.retry.clone())?;
            let prompts = prompts.as_ref().expect("LLM mode loads prompts");
            let asked = Asked { client: &client, prompts, cfg, chunks: &chunks };
            let (error, down) = ask_teacher(&asked, rt.concurrency, &pending.todo, &journal, &|tokens| bar.reply(tokens));
            if let Some(e) = error {
                return Err(e.context(format!("{}: cannot append to the journal", journal_path.display())));
            }
            if let Some(last) = down {
                let answered = read_journal::<JournalEntry>(&journal_path)?.values().filter(|e| !e.no_reply).count();
                anyhow::bail!("the teacher endpoint answered none of the last {ENDPOINT_DOWN_AFTER} samples (last: {last}); {answered} of {} samples are in {}: rerun to resume", planned.len(), journal_path.display());
            }
            structured = Some(client.structured_status());
        }
    }
    bar.bar.finish_and_clear();
    drop(journal);
    let summary = finalise(&pending, &chunks, &journal_path, run, cfg, sft_prompts.as_ref())?;
    if let Some(st) = structured {
        // How the JSON replies were obtained in this run (a resumed run reports its own).
        run.set_stat("structured_output", st);
    }
    Ok(summary)
}

/// An inverse-cloze row: the chunk's salient sentence as the question, the chunk as its gold.
fn ict_row(sample: usize, sentence: String, c: &ChunkRecord) -> SynthRow {
    SynthRow {
        golden: GoldenQuestion::new(format!("ict-{sample}"), sentence, vec![gold_of(c)]).in_category("ict"),
        thinking: None,
        phases: None,
        teacher_model: "ict".into(),
        prompt_sha256: None,
        chunk_id: c.chunk_id.clone(),
        split: None,
    }
}

/// What asking the teacher one sample needs.
struct Asked<'a> {
    client: &'a Generator,
    prompts: &'a teacher::Prompts,
    cfg: &'a SynthConfig,
    chunks: &'a [ChunkRecord],
}

/// Asks the teacher every pending sample, `concurrency` at a time, journaling each. Returns
/// the journal's write error, if any, and — when [`ENDPOINT_DOWN_AFTER`] samples in a row got
/// no reply and the asking stopped — the last reason (the journal keeps what was answered;
/// those samples are asked again on resume).
fn ask_teacher(t: &Asked<'_>, concurrency: usize, todo: &[&plan::PlannedSample], journal: &Journal, tick: &(dyn Fn(usize) + Sync)) -> (Option<anyhow::Error>, Option<String>) {
    let next = AtomicUsize::new(0);
    let error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let streak = AtomicUsize::new(0);
    let down: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..concurrency.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= todo.len() || error.lock().expect("lock").is_some() || down.lock().expect("lock").is_some() {
                    return;
                }
                let entry = teacher_sample(t.client, t.prompts, t.cfg, todo[i], t.chunks);
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
                tick(entry.usage.completion_tokens as usize);
            });
        }
    });
    (error.into_inner().expect("lock"), down.into_inner().expect("lock"))
}

/// The rows finalised from the journal in sample order (the output does not depend on which
/// request finished first), written with failures, the journal copy and the stats.
fn finalise(pending: &Pending<'_>, chunks: &[ChunkRecord], journal_path: &std::path::Path, run: &mut StageRun, cfg: &SynthConfig, sft_prompts: Option<&crate::sft::SftPrompts>) -> anyhow::Result<SynthSummary> {
    let planned = pending.planned;
    let entries: BTreeMap<usize, JournalEntry> = read_journal(journal_path)?;
    anyhow::ensure!(entries.len() == planned.len(), "{}: journal holds {} of {} samples", journal_path.display(), entries.len(), planned.len());
    // When the endpoint answered no sample at all, there is no result: nothing is committed (a
    // later run would reuse it as a cache hit, and --copy-to would replace the user's set), and
    // a rerun asks every sample again. (Some unanswered among answered ones are failures of
    // those samples, recorded in failures.jsonl.)
    let unanswered: Vec<&JournalEntry> = entries.values().filter(|e| e.no_reply).collect();
    if let Some(last) = unanswered.last().filter(|_| unanswered.len() == planned.len()) {
        anyhow::bail!(
            "the teacher endpoint answered none of the {} samples (last: {}); nothing is committed or copied: check the endpoint and rerun",
            planned.len(),
            last.failure.clone().unwrap_or_default()
        );
    }
    let (mut usage, mut attempts, mut cuts) = (Usage::default(), 0u64, 0usize);
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
    crate::write_golden_rows(&rows, &split_counts, Vec::new(), None, run)?;
    write_jsonl(&run.path("failures.jsonl"), failures.iter())?;
    run.add_output("failures.jsonl", Some(failures.len() as u64))?;
    if let (Mode::Llm, Some(p)) = (cfg.mode, sft_prompts) {
        let n = crate::write_teacher_sft(&rows, chunks, p, run, cfg)?;
        run.set_stat("sft_examples", n);
    }
    std::fs::copy(journal_path, run.path("journal.jsonl"))?;
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
    run.set_stat("resumed_from_journal", pending.resumed);
    run.set_stat("by_style", serde_json::to_value(&by_style)?);
    run.set_stat("splits", serde_json::to_value(&split_counts)?);
    run.set_stat("prompt_tokens", usage.prompt_tokens);
    run.set_stat("completion_tokens", usage.completion_tokens);
    run.set_stat("http_attempts", attempts);
    run.set_stat("passages_cut_to_fit_context", cuts);
    Ok(SynthSummary { accepted: rows.len(), failed: failures.len(), resumed: pending.resumed, sft: false })
}

/// One LLM-mode sample asked of the teacher (with one repair round), as its journal line.
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

