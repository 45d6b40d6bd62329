//! `--mode sft`: supervised fine-tuning examples built offline from the corpus, in chat format.
//!
//! Each example is the conversation `answer` has at inference: the system prompt
//! (`answer_system.md`), the user turn rendered from the answer template
//! (`answer_<template>.md`, by the same function `answer` uses) with a context of passages,
//! and the assistant's reply. The context holds the sampled chunk and its most similar chunks
//! from other pages (TF-IDF cosine) as distractors, in a seeded order; the question comes from
//! the chunk's section heading (or, without one, its most distinctive words); the reply quotes
//! the chunk's most salient sentence (the inverse-cloze sentence) and cites its page tag. A
//! share of examples (`refusal_share`) gets a context *without* the sampled chunk and replies
//! with the refusal sentence. Enough to teach the citation format, the four phases and
//! refusal; not facts.
use std::collections::{BTreeMap, HashMap, HashSet};

use gauge_core::schema::ChunkRecord;
use gauge_cite::{page_tag, render_answer_prompt, PromptPassage};
use gauge_chat_client::Message;
use serde::{Deserialize, Serialize};

/// Settings of the SFT examples (serde, with defaults).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SftConfig {
    /// Distractor passages in each context, beside the source chunk.
    pub distractors: usize,
    /// Share of examples whose context lacks the answer (replied with `refusal`); with a
    /// teacher set, its out-of-corpus questions count toward it.
    pub refusal_share: f64,
    /// Answer template the examples follow: `four_phase` or `plain`
    /// (`pipelines/prompts/answer_<name>.md`).
    pub template: String,
    /// The refusal sentence (`answer`'s `refusal`).
    pub refusal: String,
    /// With a teacher set (`--from`): the retrieval that builds each context (the same config
    /// language as `answer` and `evaluate`; `k` passages).
    pub retrieval: gauge_engine::RetrievalConfig,
}

impl Default for SftConfig {
    fn default() -> Self {
        SftConfig {
            distractors: 2,
            refusal_share: 0.2,
            template: "four_phase".into(),
            refusal: "The provided documents do not contain this information.".into(),
            retrieval: gauge_engine::RetrievalConfig { k: 5, ..gauge_engine::RetrievalConfig::default() },
        }
    }
}

/// One training example.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SftRow {
    /// `sft-<sample index>`.
    pub id: String,
    /// `system`, `user`, `assistant`.
    pub messages: Vec<Message>,
    /// `grounded` (the context holds the answer) or `refusal`.
    pub kind: String,
    /// The question.
    pub question: String,
    /// The sampled chunk.
    pub chunk_id: String,
    /// Its source.
    pub source: String,
    /// Its first page.
    pub page_start: i32,
    /// Its last page.
    pub page_end: i32,
    /// The chunks of the context, in prompt order.
    pub context_chunk_ids: Vec<String>,
    /// `train`, `dev`, `test` (when split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// The prompt templates an example needs.
pub struct SftPrompts {
    /// `answer_system.md`.
    pub system: String,
    /// `answer_<template>.md`.
    pub template: String,
}

/// TF-IDF vectors of the chunks, L2-normalised, for distractor search. Ordered maps: sums run
/// in the same order on every run, so near-ties between distractors break the same way.
pub struct Similarity {
    vectors: Vec<BTreeMap<String, f64>>,
}

impl Similarity {
    /// Vectors of every chunk (`df` from [`crate::plan::document_frequencies`]).
    pub fn new(chunks: &[ChunkRecord], df: &HashMap<String, usize>) -> Similarity {
        let n = chunks.len() as f64;
        let vectors = chunks
            .iter()
            .map(|c| {
                let mut v: BTreeMap<String, f64> = BTreeMap::new();
                for w in crate::plan::words(&c.text).into_iter().filter(|w| w.chars().count() >= 3) {
                    *v.entry(w).or_default() += 1.0;
                }
                for (w, x) in v.iter_mut() {
                    *x *= ((n + 1.0) / (*df.get(w).unwrap_or(&0) as f64 + 1.0)).ln();
                }
                let norm = v.values().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
                v.values_mut().for_each(|x| *x /= norm);
                v
            })
            .collect();
        Similarity { vectors }
    }

    fn cosine(&self, a: usize, b: usize) -> f64 {
        let (x, y) = (&self.vectors[a], &self.vectors[b]);
        let (small, large) = if x.len() <= y.len() { (x, y) } else { (y, x) };
        small.iter().map(|(w, v)| v * large.get(w).unwrap_or(&0.0)).sum()
    }

    /// The `k` chunks most similar to `of` that share no page with it (ties: lower index).
    pub fn distractors(&self, chunks: &[ChunkRecord], of: usize, k: usize) -> Vec<usize> {
        let c = &chunks[of];
        let mut scored: Vec<(f64, usize)> = (0..chunks.len())
            .filter(|&j| {
                let d = &chunks[j];
                j != of && !(d.source == c.source && d.page_start <= c.page_end && c.page_start <= d.page_end)
            })
            .map(|j| (self.cosine(of, j), j))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(k).map(|(_, j)| j).collect()
    }
}

/// The question of an example: from the section heading when the chunk has a usable one,
/// else from its most distinctive words.
pub fn question_for(c: &ChunkRecord, df: &HashMap<String, usize>, n_docs: usize) -> String {
    let doc = if c.title.trim().is_empty() { c.source.trim_end_matches(".pdf").to_string() } else { c.title.trim().to_string() };
    let heading = c.section.trim().trim_end_matches(['.', ':']);
    let words = heading.split_whitespace().count();
    if (2..=14).contains(&words) && heading.chars().any(|ch| ch.is_alphabetic()) {
        return format!("What does {doc} say about {heading}?");
    }
    let mut seen = HashSet::new();
    let mut ranked: Vec<(f64, usize, String)> = crate::plan::words(&c.text)
        .into_iter()
        .enumerate()
        .filter(|(_, w)| w.chars().count() >= 4 && w.chars().all(char::is_alphabetic) && seen.insert(w.clone()))
        .map(|(i, w)| (((n_docs as f64 + 1.0) / (*df.get(&w).unwrap_or(&0) as f64 + 1.0)).ln(), i, w))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut top: Vec<(usize, String)> = ranked.into_iter().take(3).map(|(_, i, w)| (i, w)).collect();
    top.sort();
    format!("What does {doc} say about {}?", top.into_iter().map(|(_, w)| w).collect::<Vec<_>>().join(", "))
}

/// The assistant's reply: the supporting sentence quoted with its tag (`plain`), or the same
/// walked through the four phases (`four_phase`); the refusal sentence when the context lacks
/// the answer.
pub fn reply(template: &str, sentence: Option<(&str, &str)>, refusal: &str) -> String {
    let four = template == "four_phase";
    match (sentence, four) {
        (Some((s, tag)), false) => format!("{s} {tag}"),
        (Some((s, tag)), true) => format!(
            "1. Contextual audit: passage {tag} bears on the question; the other passages do not.\n2. Evidence map: \"{s}\" {tag}\n3. Synthesis: {s} {tag}\n4. Verification: the only claim cites {tag}, a passage given, and quotes it."
        ),
        (None, false) => refusal.to_string(),
        (None, true) => format!("1. Contextual audit: none of the passages addresses the question.\n2. Evidence map: no passage holds the answer.\n3. Synthesis: {refusal}\n4. Verification: nothing is claimed, so nothing needs a citation."),
    }
}

/// What every example of a run is built from: the chunks, their similarities (for the
/// distractors), the SFT settings and prompts, and the seed of the passages' order.
pub struct Examples<'a> {
    /// Every chunk.
    pub chunks: &'a [ChunkRecord],
    /// Their TF-IDF vectors.
    pub sim: &'a Similarity,
    /// The SFT settings.
    pub cfg: &'a SftConfig,
    /// The answer stage's prompts.
    pub prompts: &'a SftPrompts,
    /// The run's seed.
    pub seed: u64,
}

/// Example `index`'s context in a seeded order, so the answer is not always in the same place.
fn seeded_order(context: &mut [usize], seed: u64, index: usize) {
    let mut rng = gauge_core::rng::SplitMix64::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for i in (1..context.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        context.swap(i, j);
    }
}

/// Builds the example of one planned sample (`refuse`: leave the source chunk out).
pub fn example(ex: &Examples<'_>, index: usize, chunk: usize, df: &HashMap<String, usize>, refuse: bool) -> anyhow::Result<Option<SftRow>> {
    let Examples { chunks, sim, cfg, prompts, seed } = *ex;
    let c = &chunks[chunk];
    let Some((_, _, sentence)) = crate::plan::salient_sentence(&c.text, df, chunks.len()) else { return Ok(None) };
    let mut context: Vec<usize> = sim.distractors(chunks, chunk, cfg.distractors + usize::from(refuse));
    if !refuse {
        context.push(chunk);
    }
    seeded_order(&mut context, seed, index);
    let passages: Vec<PromptPassage> = context.iter().map(|&j| PromptPassage { source: chunks[j].source.clone(), page_start: chunks[j].page_start, page_end: chunks[j].page_end, text: chunks[j].text.clone() }).collect();
    let question = question_for(c, df, chunks.len());
    let user = render_answer_prompt(&prompts.template, &question, &passages)?;
    let tag = page_tag(&c.source, c.page_start, c.page_end);
    let answer = reply(&cfg.template, (!refuse).then_some((sentence.as_str(), tag.as_str())), &cfg.refusal);
    Ok(Some(SftRow {
        id: format!("sft-{index}"),
        messages: vec![Message::system(prompts.system.trim()), Message::user(user), Message::assistant(answer)],
        kind: if refuse { "refusal" } else { "grounded" }.into(),
        question,
        chunk_id: c.chunk_id.clone(),
        source: c.source.clone(),
        page_start: c.page_start,
        page_end: c.page_end,
        context_chunk_ids: context.iter().map(|&j| chunks[j].chunk_id.clone()).collect(),
        split: None,
    }))
}

/// A teacher's row as an example reads it: the question, the four phases, the answer and the
/// indexes of the chunks it was written from.
#[derive(Clone, Copy)]
pub struct TeacherRow<'a> {
    /// The question.
    pub question: &'a str,
    /// The teacher's reasoning, phase by phase.
    pub phases: &'a crate::teacher::FourPhases,
    /// The teacher's answer.
    pub answer: &'a str,
    /// The row's chunks (indexes into the run's chunks).
    pub gold: &'a [usize],
}

/// An example from a teacher's row: the context holds `gold` (the row's chunks) and
/// distractors from other pages in a seeded order, and the reply is the teacher's four phases
/// with the evidence and the answer citing the gold chunks' page tags (`refuse`: the gold
/// chunks left out, the refusal reply).
pub fn teacher_example(ex: &Examples<'_>, index: usize, row: &TeacherRow<'_>, refuse: bool) -> anyhow::Result<SftRow> {
    let Examples { chunks, sim, cfg, prompts, seed } = *ex;
    let TeacherRow { question, phases, answer, gold } = *row;
    anyhow::ensure!(!gold.is_empty(), "a teacher row without its chunk");
    let first = &chunks[gold[0]];
    let mut context: Vec<usize> = sim.distractors(chunks, gold[0], cfg.distractors + usize::from(refuse)).into_iter().filter(|j| !gold.contains(j)).collect();
    if !refuse {
        context.extend(gold);
    }
    seeded_order(&mut context, seed, index);
    let passages: Vec<PromptPassage> = context.iter().map(|&j| PromptPassage { source: chunks[j].source.clone(), page_start: chunks[j].page_start, page_end: chunks[j].page_end, text: chunks[j].text.clone() }).collect();
    let user = render_answer_prompt(&prompts.template, question, &passages)?;
    let tags: Vec<String> = gold.iter().map(|&g| page_tag(&chunks[g].source, chunks[g].page_start, chunks[g].page_end)).collect();
    let tags = tags.join(" ");
    let reply = if refuse {
        reply(&cfg.template, None, &cfg.refusal)
    } else if cfg.template == "four_phase" {
        format!(
            "1. Contextual audit: {}\n2. Evidence map: {} {tags}\n3. Synthesis: {} {tags}\n4. Verification: {}",
            phases.contextual_audit.trim(),
            phases.evidence_mapping.trim(),
            answer.trim(),
            phases.verification.trim()
        )
    } else {
        format!("{} {tags}", answer.trim())
    };
    Ok(SftRow {
        id: format!("sft-{index}"),
        messages: vec![Message::system(prompts.system.trim()), Message::user(user), Message::assistant(reply)],
        kind: if refuse { "refusal" } else { "grounded" }.into(),
        question: question.to_string(),
        chunk_id: first.chunk_id.clone(),
        source: first.source.clone(),
        page_start: first.page_start,
        page_end: first.page_end,
        context_chunk_ids: context.iter().map(|&j| chunks[j].chunk_id.clone()).collect(),
        split: None,
    })
}

/// Whether sample `index` is a refusal example: a seeded draw at `share`.
pub fn is_refusal(index: usize, share: f64, seed: u64) -> bool {
    let mut rng = gauge_core::rng::SplitMix64::new(seed.wrapping_add(0xA5A5_5A5A) ^ index as u64);
    ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < share
}
