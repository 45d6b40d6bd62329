//! `--mode heldout`: a synthetic evaluation set on pages no training may touch.
//!
//! The pages are split once, seeded, before any question is written: each document's pages
//! are cut into blocks of `block_pages` consecutive pages, and `share_percent` of each
//! document's blocks are held out (a block, not a page, so that a chunk crossing a page break
//! stays inside); `guard_pages` pages on either side of a held block are held out as well but
//! ask no question (they continue a held page). The split is written as
//! [`HeldoutPages`] (`heldout_pages.json`), which every other `synth-data` mode and
//! `evaluate` read back: no training question, positive or SFT context is drawn from its
//! `pages`, and `evaluate` refuses a trained model whose `training_pages.json` meets them.
//!
//! A generator (the 1.5B model by default) writes one question per held passage in the style
//! of a few example questions (`--from`: a teacher set, of which only the out-of-corpus
//! records are shown, so no dev question leaks into the prompts); the same model, held to a
//! JSON Schema, then copies the passage's sentence that answers the question and says yes or
//! no, and only a "yes" whose quote is found in the passage is kept (a 1.5B judge asked for a
//! bare yes/no said yes to every question of a trial, generic ones included). There is deliberately no round trip through gauge's own retrievers: it would keep
//! only the questions they already find and bias the set toward them.
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use gauge_core::schema::ChunkRecord;
use gauge_generator::GeneratorConfig;
use serde::{Deserialize, Serialize};

/// File name of the page split inside the artifact (and `<set>.pages.json` beside a copy).
pub const PAGES_FILE: &str = "heldout_pages.json";

/// Version of [`HeldoutPages`].
pub const PAGES_FORMAT: u32 = 1;

/// Settings of `--mode heldout` (serde, with defaults).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HeldoutConfig {
    /// The model that writes and judges the questions.
    pub generator: GeneratorConfig,
    /// Percent of each document's page blocks held out.
    pub share_percent: u32,
    /// Consecutive pages per block.
    pub block_pages: i32,
    /// Pages on either side of a held block also held out (no question asked from them).
    pub guard_pages: i32,
    /// Example questions shown in each prompt (out-of-corpus records of `--from`).
    pub examples: usize,
    /// Questions shorter than this many words are dropped.
    pub min_words: usize,
    /// Tokens a question may have (the rest of `generation.*` — temperature, seed — applies).
    pub max_new_tokens: usize,
    /// Tokens the judge may write (its reply quotes one sentence of the passage).
    pub judge_max_new_tokens: usize,
}

impl Default for HeldoutConfig {
    fn default() -> Self {
        HeldoutConfig {
            generator: GeneratorConfig::Local { model: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".into(), adapter: None },
            share_percent: 20,
            block_pages: 8,
            guard_pages: 1,
            examples: 3,
            min_words: 8,
            max_new_tokens: 96,
            judge_max_new_tokens: 192,
        }
    }
}

impl HeldoutConfig {
    /// Whether these are the defaults (then the field is left out of other modes' configs, so
    /// their fingerprints do not change).
    pub fn is_default(&self) -> bool {
        *self == HeldoutConfig::default()
    }

    /// Checks the settings.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=90).contains(&self.share_percent), "heldout.share_percent must be 1 to 90, got {}", self.share_percent);
        anyhow::ensure!(self.block_pages >= 1, "heldout.block_pages must be at least 1, got {}", self.block_pages);
        anyhow::ensure!(self.guard_pages >= 0, "heldout.guard_pages must be 0 or more, got {}", self.guard_pages);
        anyhow::ensure!(self.max_new_tokens >= 8, "heldout.max_new_tokens must be at least 8, got {}", self.max_new_tokens);
        anyhow::ensure!(self.judge_max_new_tokens >= 32, "heldout.judge_max_new_tokens must be at least 32 (the reply quotes a sentence), got {}", self.judge_max_new_tokens);
        Ok(())
    }
}

/// The page split of a held-out set (`heldout_pages.json`): pages are `source#page`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HeldoutPages {
    /// [`PAGES_FORMAT`].
    pub format: u32,
    /// Seed of the split.
    pub seed: u64,
    /// Percent of each document's blocks held out.
    pub share_percent: u32,
    /// Pages per block.
    pub block_pages: i32,
    /// Guard pages on either side of a held block.
    pub guard_pages: i32,
    /// Hash of the chunk table the split was made from.
    pub chunks: String,
    /// Pages questions are asked from (the held blocks).
    pub question_pages: Vec<String>,
    /// Every page no training may touch: the held blocks and their guard pages.
    pub pages: Vec<String>,
}

/// `source#page`, as `training_pages.json` writes a page.
pub fn page_key(source: &str, page: i32) -> String {
    format!("{source}#{page}")
}

/// The split of the chunks' pages (see the module docs): per document (source, in name
/// order), its pages from the first to the last any chunk covers, cut into blocks; the blocks
/// are shuffled with one seeded generator and the first `⌈share · blocks⌉` (at least one, and
/// never every block of a document with more than one) are held.
pub fn split_pages(chunks: &[ChunkRecord], cfg: &HeldoutConfig, seed: u64, chunks_hash: String) -> HeldoutPages {
    let mut span: BTreeMap<&str, (i32, i32)> = BTreeMap::new();
    for c in chunks {
        let e = span.entry(c.source.as_str()).or_insert((c.page_start, c.page_end));
        e.0 = e.0.min(c.page_start);
        e.1 = e.1.max(c.page_end);
    }
    let mut rng = gauge_core::rng::SplitMix64::new(seed);
    let (mut question, mut all) = (BTreeSet::new(), BTreeSet::new());
    for (source, (first, last)) in span {
        let mut blocks: Vec<i32> = (first..=last).step_by(cfg.block_pages as usize).collect();
        let n = blocks.len();
        rng.shuffle(&mut blocks);
        let mut take = (n * cfg.share_percent as usize).div_ceil(100).max(1);
        if n > 1 {
            take = take.min(n - 1);
        }
        for &b in &blocks[..take] {
            let end = (b + cfg.block_pages - 1).min(last);
            for p in b..=end {
                question.insert((source.to_string(), p));
            }
            for p in (b - cfg.guard_pages).max(first)..=(end + cfg.guard_pages).min(last) {
                all.insert((source.to_string(), p));
            }
        }
    }
    let keys = |s: &BTreeSet<(String, i32)>| s.iter().map(|(src, p)| page_key(src, *p)).collect::<Vec<_>>();
    HeldoutPages { format: PAGES_FORMAT, seed, share_percent: cfg.share_percent, block_pages: cfg.block_pages, guard_pages: cfg.guard_pages, chunks: chunks_hash, question_pages: keys(&question), pages: keys(&all) }
}

/// Whether a chunk lies on pages all in `pages`.
pub fn inside(c: &ChunkRecord, pages: &HashSet<String>) -> bool {
    (c.page_start..=c.page_end).all(|p| pages.contains(&page_key(&c.source, p)))
}

/// Whether a chunk touches a page of `pages`.
pub fn touches(c: &ChunkRecord, pages: &HashSet<String>) -> bool {
    (c.page_start..=c.page_end).any(|p| pages.contains(&page_key(&c.source, p)))
}

/// The pages a `--hold-out FILE` keeps out of training: a held-out split
/// (`heldout_pages.json` or a `*.pages.json` copy: its `pages`) or a golden set (JSONL: its
/// questions' gold pages).
pub fn read_held_pages(path: &Path) -> anyhow::Result<HashSet<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read the held-out pages ({e})", path.display()))?;
    if path.extension().is_some_and(|e| e == "json") {
        let split: HeldoutPages = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: not a heldout_pages.json ({e}); pass the page split `synth-data --mode heldout` wrote, or a golden set (.jsonl)", path.display()))?;
        anyhow::ensure!(split.format == PAGES_FORMAT, "{}: page split format {} (this build reads {PAGES_FORMAT})", path.display(), split.format);
        return Ok(split.pages.into_iter().collect());
    }
    let golden = gauge_core::golden::load_golden(path)?;
    let mut out = HashSet::new();
    for q in &golden {
        for g in &q.gold {
            if let Some((a, b)) = g.pages() {
                out.extend((a..=b).map(|p| page_key(g.source(), p)));
            }
        }
    }
    Ok(out)
}

/// The prompt that asks for one question: the template with `{{examples}}` (one example a
/// line), `{{source}}`, `{{pages}}` and `{{passage}}` filled in. The examples come first in
/// the template, so every prompt of a run shares that prefix (cached by the local decoder).
pub fn question_prompt(template: &str, chunk: &ChunkRecord, examples: &[String]) -> String {
    let examples = examples.iter().map(|e| format!("- {e}")).collect::<Vec<_>>().join("\n");
    fill(template, chunk).replace("{{examples}}", &examples)
}

/// The judge's prompt: the template with `{{source}}`, `{{pages}}`, `{{passage}}` and
/// `{{question}}` filled in.
pub fn judge_prompt(template: &str, chunk: &ChunkRecord, question: &str) -> String {
    fill(template, chunk).replace("{{question}}", question)
}

fn fill(template: &str, chunk: &ChunkRecord) -> String {
    let pages = if chunk.page_start == chunk.page_end { chunk.page_start.to_string() } else { format!("{}-{}", chunk.page_start, chunk.page_end) };
    template.replace("{{source}}", &chunk.source).replace("{{pages}}", &pages).replace("{{passage}}", &chunk.text)
}

/// The judge's reply: the passage's sentence that answers the question (word for word; empty
/// when none does), then the verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JudgeVerdict {
    /// The sentence of the passage that answers the question.
    pub evidence: String,
    /// `yes` when the passage answers the question.
    pub answerable: String,
}

/// The judge's JSON Schema: `{"evidence": "…", "answerable": "yes" | "no"}`, evidence first
/// (the model quotes before it decides).
pub fn judge_schema() -> gauge_chat_client::ResponseSchema {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "evidence": { "type": "string", "maxLength": 600 },
            "answerable": { "type": "string", "enum": ["yes", "no"] }
        },
        "required": ["evidence", "answerable"],
        "additionalProperties": false
    });
    gauge_chat_client::ResponseSchema { name: "heldout_judge".into(), schema }
}

/// What the judge decided about one question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// "yes", with evidence found in the passage: kept.
    Answered,
    /// "no".
    NotAnswered,
    /// "yes", but the evidence is not the passage's (fewer than [`MIN_EVIDENCE_WORDS`] words,
    /// or less than [`MIN_EVIDENCE_OVERLAP`] of its word trigrams in the passage): the judge
    /// could not show where the answer is.
    NoEvidence,
    /// Not the schema's object.
    Unparsable,
}

/// Words an evidence quote needs at least.
pub const MIN_EVIDENCE_WORDS: usize = 5;

/// Share of an evidence quote's word trigrams that must be the passage's. A 1.5B model quotes
/// loosely (a lead-in such as "The passage states that", a word dropped or changed), so the
/// quote need not be verbatim; a restatement of the question shares almost none.
pub const MIN_EVIDENCE_OVERLAP: f64 = 0.5;

/// The judge's verdict on a reply about `passage`: "yes" counts only when its evidence is
/// the passage's (see [`Verdict::NoEvidence`]).
pub fn verdict(reply: &str, passage: &str) -> Verdict {
    let Ok(v) = serde_json::from_str::<JudgeVerdict>(gauge_chat_client::json_payload(reply)) else { return Verdict::Unparsable };
    match v.answerable.as_str() {
        "no" => Verdict::NotAnswered,
        "yes" if crate::split::alnum_words(&v.evidence).len() >= MIN_EVIDENCE_WORDS && crate::split::trigram_share(&v.evidence, passage) >= MIN_EVIDENCE_OVERLAP => Verdict::Answered,
        "yes" => Verdict::NoEvidence,
        _ => Verdict::Unparsable,
    }
}

/// The question of a reply: its first line that asks (list marker, "Question:" and quotes
/// dropped, cut after the first `?`); `None` when no line asks.
pub fn question_of(reply: &str) -> Option<String> {
    crate::doc2query::parse_lines(reply).into_iter().next()
}

/// A question made to stand on its own: "the passage" (which the reader of the set does not
/// have) becomes "the manual", as the prompt asks.
pub fn standalone(question: &str) -> String {
    question.replace("the passage", "the manual").replace("The passage", "The manual").replace("this passage", "the manual")
}

/// Example questions for the prompts: `n` of the out-of-corpus records of a teacher set
/// (never its in-corpus ones, which may be dev questions), a seeded choice in a stable order.
pub fn examples(records: &[crate::teacher_set::TeacherRecord], n: usize, seed: u64) -> Vec<String> {
    // Their "the cited handbook page" wording is the teacher set's; the set's questions say
    // "the manual".
    let neutral = |q: &str| q.replace("the cited handbook page", "the manual").replace("the cited page", "the manual").replace("the cited ", "the ");
    let mut out: Vec<String> = records.iter().filter(|r| !r.in_corpus).map(|r| neutral(&r.question)).collect();
    gauge_core::rng::SplitMix64::new(seed).shuffle(&mut out);
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(source: &str, first: i32, last: i32) -> ChunkRecord {
        ChunkRecord { page_end: last, ..ChunkRecord::leaf(format!("{source}-{first}"), source, first, "x") }
    }

    #[test]
    fn the_split_holds_whole_blocks_with_guards_and_is_seeded() {
        let chunks: Vec<ChunkRecord> = (1..=40).map(|p| chunk("a.pdf", p, p)).chain((1..=10).map(|p| chunk("b.pdf", p, (p + 1).min(10)))).collect();
        let cfg = HeldoutConfig { block_pages: 5, guard_pages: 1, share_percent: 20, ..HeldoutConfig::default() };
        let s = split_pages(&chunks, &cfg, 7, "h".into());
        assert_eq!(s, split_pages(&chunks, &cfg, 7, "h".into()), "seeded");
        assert_ne!(s.question_pages, split_pages(&chunks, &cfg, 8, "h".into()).question_pages, "another seed, another split");
        let q: HashSet<String> = s.question_pages.iter().cloned().collect();
        let all: HashSet<String> = s.pages.iter().cloned().collect();
        assert!(q.is_subset(&all));
        // a.pdf: 8 blocks of 5, ⌈20 % · 8⌉ = 2 held; b.pdf: 2 blocks, 1 held (never both).
        let held = |src: &str| q.iter().filter(|p| p.starts_with(src)).count();
        assert_eq!(held("a.pdf#"), 10);
        assert_eq!(held("b.pdf#"), 5);
        // Whole blocks: a held page's block-mates are held.
        for p in 1..=40 {
            if q.contains(&page_key("a.pdf", p)) {
                let b = (p - 1) / 5 * 5 + 1;
                assert!((b..b + 5).all(|x| q.contains(&page_key("a.pdf", x))), "page {p}");
            }
        }
        // Guards: the page before and after each held block, within the document, not asked.
        for p in 1..=40 {
            let held_here = q.contains(&page_key("a.pdf", p));
            let near = q.contains(&page_key("a.pdf", p - 1)) || q.contains(&page_key("a.pdf", p + 1));
            assert_eq!(all.contains(&page_key("a.pdf", p)), held_here || near, "page {p}");
        }
        assert!(!all.contains(&page_key("a.pdf", 0)) && !all.contains(&page_key("a.pdf", 41)));
        // Chunk tests.
        let first_held = s.question_pages.iter().find(|p| p.starts_with("a.pdf#")).unwrap();
        let p: i32 = first_held.rsplit('#').next().unwrap().parse().unwrap();
        assert!(inside(&chunk("a.pdf", p, p), &q) && touches(&chunk("a.pdf", p, p), &all));
        assert!(!inside(&chunk("a.pdf", p - 1, p), &q) || p % 5 != 1);
    }

    #[test]
    fn held_pages_read_from_a_split_or_a_golden_set_and_bad_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let split = HeldoutPages { format: PAGES_FORMAT, seed: 1, share_percent: 20, block_pages: 8, guard_pages: 1, chunks: "h".into(), question_pages: vec!["a.pdf#3".into()], pages: vec!["a.pdf#2".into(), "a.pdf#3".into(), "a.pdf#4".into()] };
        let f = tmp.path().join("set.pages.json");
        std::fs::write(&f, serde_json::to_string(&split).unwrap()).unwrap();
        assert_eq!(read_held_pages(&f).unwrap().len(), 3);
        let g = tmp.path().join("set.jsonl");
        std::fs::write(&g, "{\"qid\": \"q1\", \"question\": \"Why?\", \"gold\": [{\"source\": \"a.pdf\", \"page\": 9}]}\n").unwrap();
        assert_eq!(read_held_pages(&g).unwrap(), HashSet::from(["a.pdf#9".to_string()]));
        let bad = tmp.path().join("bad.json");
        std::fs::write(&bad, "{\"pages\": 3}").unwrap();
        let e = read_held_pages(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.json") && e.contains("heldout_pages.json"), "{e}");
        let e = read_held_pages(&tmp.path().join("missing.json")).unwrap_err().to_string();
        assert!(e.contains("missing.json"), "{e}");
    }

    #[test]
    fn verdicts_and_questions_are_read_from_replies() {
        let passage = "Gate arms must be fully lowered at least five seconds before the train arrives.\nThey stay down until the last car has passed.";
        let reply = |evidence: &str, answer: &str| serde_json::json!({ "evidence": evidence, "answerable": answer }).to_string();
        assert_eq!(verdict(&reply("gate arms must be fully   lowered at least five seconds", "yes"), passage), Verdict::Answered, "case and spacing aside");
        assert_eq!(verdict(&reply("The passage states that gate arms must be fully lowered at least five seconds before the train arrives", "yes"), passage), Verdict::Answered, "a lead-in is allowed");
        assert_eq!(verdict(&format!("```json\n{}\n```", reply("", "no")), passage), Verdict::NotAnswered);
        assert_eq!(verdict(&reply("Crossing gates need to come down a few seconds early", "yes"), passage), Verdict::NoEvidence, "not the passage's words");
        assert_eq!(verdict(&reply("the last car", "yes"), passage), Verdict::NoEvidence, "too short to show anything");
        // Overlap by trigrams: 3 of the 5 trigrams of this quote are the passage's.
        let q = "gate arms must be fully raised today";
        assert!((crate::split::trigram_share(q, passage) - 3.0 / 5.0).abs() < 1e-12, "{}", crate::split::trigram_share(q, passage));
        assert_eq!(verdict(&reply("x", "maybe"), passage), Verdict::Unparsable);
        assert_eq!(verdict("yes", passage), Verdict::Unparsable);
        assert_eq!(question_of("Question: A crew finds a broken rail. What must the inspector record?\nExtra"), Some("A crew finds a broken rail. What must the inspector record?".into()));
        assert_eq!(question_of("No question here."), None);
        assert_eq!(standalone("What does the passage require, according to this passage?"), "What does the manual require, according to the manual?");
    }

    #[test]
    fn only_out_of_corpus_records_become_examples() {
        let rec = |q: &str, in_corpus: bool| crate::teacher_set::TeacherRecord { qid: q.into(), question: q.into(), thinking: String::new(), answer: String::new(), gold: Vec::new(), in_corpus };
        let records = vec![rec("dev one?", true), rec("outside one?", false), rec("outside two?", false), rec("dev two?", true)];
        let ex = examples(&records, 5, 1);
        assert_eq!(ex.len(), 2);
        assert!(ex.iter().all(|q| q.starts_with("outside")));
        assert_eq!(ex, examples(&records, 5, 1));
    }
}
