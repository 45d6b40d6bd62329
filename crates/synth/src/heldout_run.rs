//! `--mode heldout` (see [`crate::heldout`]): the page split, one question per held passage
//! (one batch, journaled), the judge over every well-formed question (one batch, journaled),
//! near-duplicates dropped; `golden.jsonl`, `heldout_pages.json`, `replies.jsonl`,
//! `judgments.jsonl` (the judge's replies, by passage), `dropped.jsonl` (every dropped question with its reason) and counts in the manifest, with
//! `written == kept + Σ dropped`.
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use gauge_chat::GenerateOptions;
use gauge_chat_client::Message;
use gauge_core::golden::{write_jsonl, GoldenQuestion};
use gauge_core::schema::ChunkRecord;
use gauge_core::StageRun;
use gauge_generator::Generator;

use crate::doc2query_run::{ask_journaled, Kept};
use crate::heldout::{self, HeldoutPages};
use crate::{gold_of, plan, split, Style, SynthConfig, SynthOptions, SynthRow, SynthSummary};

/// What `--mode heldout` needs beside the chunks.
pub(crate) struct HeldoutPlan {
    pub(crate) question_template: String,
    pub(crate) judge_template: String,
    pub(crate) examples: Vec<String>,
    pub(crate) split: HeldoutPages,
}

/// Runs `--mode heldout` (see the module docs).
pub(crate) fn write_heldout(chunks: &[ChunkRecord], chunks_path: &Path, plan: &HeldoutPlan, run: &mut StageRun, cfg: &SynthConfig, rt: &SynthOptions) -> anyhow::Result<SynthSummary> {
    let h = &cfg.heldout;
    let asked_pages: HashSet<String> = plan.split.question_pages.iter().cloned().collect();
    // Leaf chunks wholly on held pages (not on guard pages), planned as the other modes plan
    // (shuffled per source, shares by source); the `ict` style is the one whose filter applies.
    let ok = |i: usize| chunks[i].level == 0 && heldout::inside(&chunks[i], &asked_pages);
    let planned = plan::plan(chunks, cfg.n, &[Style::Ict], cfg.seed, cfg.min_chars, &ok);
    anyhow::ensure!(!planned.is_empty(), "{}: no chunk of at least {} characters lies wholly on the {} held-out pages; lower --min-chars or raise heldout.share_percent", chunks_path.display(), cfg.min_chars, asked_pages.len());
    let generator = Generator::open(&h.generator, &rt.device, rt.retry.clone())?;
    let chunk_of: BTreeMap<usize, &ChunkRecord> = planned.iter().map(|s| (s.index, &chunks[s.chunks[0]])).collect();
    let keys: Vec<usize> = chunk_of.keys().copied().collect();
    let ckpt = run.checkpoint_dir()?.to_path_buf();

    // 1. One question per passage.
    let ask = |k: usize| vec![Message::user(heldout::question_prompt(&plan.question_template, chunk_of[&k], &plan.examples))];
    let ask_opts = GenerateOptions { max_new_tokens: h.max_new_tokens, ..cfg.generation.clone() };
    let written = ask_journaled(&generator, &keys, &ask, &ask_opts, None, &ckpt.join("questions.jsonl"), "passages")?;
    write_jsonl(&run.path("replies.jsonl"), written.entries.values())?;
    run.add_output("replies.jsonl", Some(written.entries.len() as u64))?;
    let mut kept = Kept::default();
    let mut questions: BTreeMap<usize, String> = BTreeMap::new();
    for (&k, entry) in &written.entries {
        let c = chunk_of[&k];
        let Some(text) = &entry.text else {
            kept.drop(c, "", &format!("generation_failed: {}", entry.failure.as_deref().unwrap_or_default()));
            continue;
        };
        let Some(q) = heldout::question_of(text) else {
            kept.drop(c, text, "no_question");
            continue;
        };
        match crate::doc2query::clean(&heldout::standalone(&q), h.min_words) {
            Ok(q) => {
                questions.insert(k, q);
            }
            Err(reason) => kept.drop(c, &q, reason),
        }
    }

    // 2. The judge, greedy, held to {"evidence": "…", "answerable": "yes" | "no"}.
    let judge_opts = GenerateOptions { max_new_tokens: h.judge_max_new_tokens, temperature: 0.0, ..cfg.generation.clone() };
    let schema = heldout::judge_schema();
    let judge_keys: Vec<usize> = questions.keys().copied().collect();
    let judge = |k: usize| vec![Message::user(heldout::judge_prompt(&plan.judge_template, chunk_of[&k], &questions[&k]))];
    let judged = ask_journaled(&generator, &judge_keys, &judge, &judge_opts, Some(&schema), &ckpt.join("judgments.jsonl"), "judgments")?;
    write_jsonl(&run.path("judgments.jsonl"), judged.entries.values())?;
    run.add_output("judgments.jsonl", Some(judged.entries.len() as u64))?;
    for (k, q) in &questions {
        let c = chunk_of[k];
        let entry = &judged.entries[k];
        match entry.text.as_deref().map(|t| heldout::verdict(t, &c.text)) {
            Some(heldout::Verdict::Answered) => kept.rows.push(SynthRow {
                golden: GoldenQuestion::new(format!("heldout-{k}"), q.clone(), vec![gold_of(c)]).in_category("synthetic"),
                thinking: None,
                phases: None,
                teacher_model: generator.name().to_string(),
                prompt_sha256: None,
                chunk_id: c.chunk_id.clone(),
                split: None,
            }),
            Some(heldout::Verdict::NotAnswered) => kept.drop(c, q, "judged_not_answered"),
            Some(heldout::Verdict::NoEvidence) => kept.drop(c, q, "evidence_not_in_passage"),
            Some(heldout::Verdict::Unparsable) => kept.drop(c, q, "judge_unparsable"),
            None => kept.drop(c, q, &format!("judge_failed: {}", entry.failure.as_deref().unwrap_or_default())),
        }
    }
    let before = kept.rows.len();
    let rows = split::drop_near_duplicates(std::mem::take(&mut kept.rows), cfg.near_duplicate_jaccard);
    if before > rows.len() {
        kept.reasons.insert("near_duplicate".into(), before - rows.len());
    }
    let (dropped, reasons) = (kept.dropped, kept.reasons);
    let n_written = written.entries.len();
    debug_assert_eq!(n_written, rows.len() + reasons.values().sum::<usize>());

    crate::write_golden_rows(&rows, &BTreeMap::new(), vec![h.generator.model_name().to_string()], Some("held-out pages; the writing model kept a question only when, quoting the passage, it judged it answered".into()), run)?;
    std::fs::write(run.path(heldout::PAGES_FILE), serde_json::to_string_pretty(&plan.split)?)?;
    run.add_output(heldout::PAGES_FILE, Some(plan.split.pages.len() as u64))?;
    write_jsonl(&run.path("dropped.jsonl"), dropped.iter())?;
    run.add_output("dropped.jsonl", Some(dropped.len() as u64))?;
    let tokens: usize = written.entries.values().chain(judged.entries.values()).map(|e| e.completion_tokens).sum();
    let seconds = written.seconds + judged.seconds;
    let generated = tokens - written.resumed_tokens - judged.resumed_tokens;
    run.set_stat("label", "heldout");
    run.set_stat("held_pages", plan.split.pages.len());
    run.set_stat("question_pages", plan.split.question_pages.len());
    run.set_stat("passages", planned.len());
    run.set_stat("questions_written", n_written);
    run.set_stat("questions_kept", rows.len());
    run.set_stat("dropped", serde_json::to_value(&reasons)?);
    run.set_stat("examples", plan.examples.len());
    run.set_stat("completion_tokens", tokens);
    run.set_stat("generation_seconds", seconds);
    run.set_stat("resumed_from_journal", written.resumed + judged.resumed);
    run.set_stat("tokens_per_second", if seconds > 0.0 { generated as f64 / seconds } else { 0.0 });
    // The paired test's minimum detectable effect at 80 % power, two-sided α 0.05, per unit of
    // the per-question differences' sd (the gate prints it in MRR once it knows that sd).
    run.set_stat("mde_per_sd", (!rows.is_empty()).then(|| (1.959_963_985 + 0.841_621_234) / (rows.len() as f64).sqrt()));
    eprintln!(
        "synth-data: heldout: {} passages on {} held-out pages, {} questions written, {} kept by the judge and near-duplicate removal (dropped: {})",
        planned.len(),
        plan.split.question_pages.len(),
        n_written,
        rows.len(),
        reasons.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", ")
    );
    Ok(SynthSummary { accepted: rows.len(), failed: n_written - rows.len(), resumed: written.resumed, sft: false })
}
