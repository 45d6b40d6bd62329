//! `--mode sft --from FILE`: SFT examples from a teacher-written set (question, the teacher's
//! four-phase `thinking`, its `answer`, verified gold pages, `in_corpus`), as
//! `../shared/golden/fra-sft.jsonl` holds them.
//!
//! Each example is the conversation `answer` has at inference: the context is what the engine
//! retrieves for the question with the configured retrieval (`sft.retrieval`), with each gold
//! page forced in when retrieval missed it (in place of the lowest-ranked other passage) and
//! the passages in a seeded order; the target is the teacher's four phases under gauge's
//! headings, its mentions of a source and file page rewritten into the `[source p. N]` tags of
//! the passages given, and its answer citing the gold pages' tags. A seeded share of the
//! in-corpus questions (`sft.refusal_share`) gets a context with every gold page taken out,
//! and every out-of-corpus question its retrieved context as is; both reply with the refusal.
use std::path::Path;

use gauge_core::golden::{GoldItem, GoldenQuestion};
use gauge_core::schema::ChunkRecord;
use gauge_cite::{page_tag, render_answer_prompt, PromptPassage};
use gauge_chat_client::Message;
use serde::Deserialize;

use crate::sft::{SftConfig, SftPrompts, SftRow};

/// A gold page of a teacher record.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct GoldPage {
    /// Source file.
    pub source: String,
    /// 1-based file page.
    pub page: i32,
}

/// One line of a teacher set.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TeacherRecord {
    /// Question id.
    pub qid: String,
    /// The question.
    pub question: String,
    /// The teacher's reasoning in four phases (`PHASE 1: CONTEXTUAL AUDIT` … `PHASE 4:
    /// VERIFICATION`).
    pub thinking: String,
    /// The teacher's answer.
    pub answer: String,
    /// Verified gold pages (empty for an out-of-corpus question).
    #[serde(default)]
    pub gold: Vec<GoldPage>,
    /// Whether the corpus holds the answer (false: the right reply is a refusal).
    #[serde(default = "yes")]
    pub in_corpus: bool,
}

fn yes() -> bool {
    true
}

/// Reads a teacher set (JSONL); a bad line is a one-line error naming the file and line.
pub fn read_teacher_set(path: &Path) -> anyhow::Result<Vec<TeacherRecord>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read the teacher set ({e})", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let r: TeacherRecord = serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{}:{}: not a teacher record ({e}); each line needs qid, question, thinking, answer, gold [{{source, page}}], in_corpus", path.display(), i + 1))?;
        anyhow::ensure!(!r.in_corpus || !r.gold.is_empty(), "{}:{}: `{}` is in the corpus but has no gold page", path.display(), i + 1, r.qid);
        out.push(r);
    }
    anyhow::ensure!(!out.is_empty(), "{}: no teacher records", path.display());
    Ok(out)
}

/// The record as a golden row (its gold pages), for page-grouped splits.
pub fn golden_of(r: &TeacherRecord) -> GoldenQuestion {
    GoldenQuestion { qid: r.qid.clone(), question: r.question.clone(), gold: r.gold.iter().map(|g| GoldItem::Page { source: g.source.clone(), page: g.page, grade: None }).collect(), keywords: Vec::new(), reference_answer: Some(r.answer.clone()), category: Some(if r.in_corpus { "teacher" } else { "out_of_corpus" }.into()) }
}

/// The four phases of a teacher's `thinking`, by their `PHASE n:` headers (each without its
/// header line); `None` when a phase is missing.
pub fn phases(thinking: &str) -> Option<[String; 4]> {
    let mut out: [String; 4] = Default::default();
    let mut current: Option<usize> = None;
    for line in thinking.lines() {
        let t = line.trim();
        let header = t.strip_prefix("PHASE ").and_then(|rest| rest.split(':').next()).and_then(|n| n.trim().parse::<usize>().ok()).filter(|n| (1..=4).contains(n));
        if let Some(n) = header {
            current = Some(n - 1);
            continue;
        }
        if let Some(c) = current {
            if !t.is_empty() {
                if !out[c].is_empty() {
                    out[c].push(' ');
                }
                out[c].push_str(t);
            }
        }
    }
    out.iter().all(|p| !p.is_empty()).then_some(out)
}

/// Rewrites the teacher's page mentions into gauge's citation tags: `NAME.pdf, file page 5`
/// (any document file name: `.pdf`, `.md`, `.txt`, `.html`, `.docx`)
/// → `[NAME.pdf p. 5]`, `file pages 5-6` (or `5 and 6`, `5 to 6`) → `[SOURCE pp. 5-6]`, a bare
/// `file page 5` → `[default_source p. 5]`.
pub fn rewrite_page_mentions(text: &str, default_source: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("file page") {
        let (before, after) = rest.split_at(at);
        // A source named just before: `NAME.pdf, ` or `NAME.pdf ` ending `before`.
        let trimmed = before.trim_end().trim_end_matches(',').trim_end();
        let named = trimmed.rsplit(|c: char| c.is_whitespace() || c == '(').next().filter(|w| {
            let w = w.to_lowercase();
            [".pdf", ".md", ".markdown", ".txt", ".html", ".htm", ".docx"].iter().any(|ext| w.ends_with(ext))
        });
        let after = after.trim_start_matches("file pages").trim_start_matches("file page");
        let digits = |s: &str| -> (Option<i32>, usize) {
            let s2 = s.trim_start();
            let skip = s.len() - s2.len();
            let n: String = s2.chars().take_while(char::is_ascii_digit).collect();
            (n.parse().ok(), skip + n.len())
        };
        let (first, used) = digits(after);
        let Some(first) = first else {
            out.push_str(before);
            out.push_str("file page");
            rest = &rest[at + "file page".len()..];
            continue;
        };
        let mut consumed = used;
        let mut last = first;
        let tail = &after[used..];
        for sep in ["-", "–", " - ", " and ", " to "] {
            if let Some(t) = tail.strip_prefix(sep) {
                if let (Some(b), u) = digits(t) {
                    if b > first {
                        last = b;
                        consumed = used + sep.len() + u;
                        break;
                    }
                }
            }
        }
        let source = named.unwrap_or(default_source);
        let keep = match named {
            Some(_) => &before[..before.len() - (before.len() - trimmed.len()) - source.len()],
            None => before,
        };
        out.push_str(keep);
        out.push_str(&page_tag(source, first, last));
        rest = &after[consumed..];
    }
    out.push_str(rest);
    out
}

/// The target reply of a grounded example: the teacher's phases under the template's
/// headings (four_phase), page mentions rewritten into tags, the evidence and the answer
/// citing `tags`; `plain`: the answer with its tags.
pub fn grounded_reply(template: &str, r: &TeacherRecord, tags: &str) -> anyhow::Result<String> {
    let source = r.gold.first().map_or("", |g| g.source.as_str());
    let answer = rewrite_page_mentions(r.answer.trim(), source);
    if template != "four_phase" {
        return Ok(format!("{answer} {tags}"));
    }
    let [audit, evidence, _, verification] = phases(&r.thinking).ok_or_else(|| anyhow::anyhow!("`{}`: the thinking lacks one of PHASE 1–4", r.qid))?;
    let fix = |s: &str| rewrite_page_mentions(s, source);
    Ok(format!("1. Contextual audit: {}\n2. Evidence map: {} {tags}\n3. Synthesis: {answer} {tags}\n4. Verification: {}", fix(&audit), fix(&evidence), fix(&verification)))
}

/// Whether chunk `c` covers the gold page `g`.
fn covers(c: &ChunkRecord, g: &GoldPage) -> bool {
    c.source == g.source && c.page_start <= g.page && g.page <= c.page_end
}

/// Whether chunk `c` covers one of the record's gold pages.
pub fn on_gold(r: &TeacherRecord, c: &ChunkRecord) -> bool {
    r.gold.iter().any(|g| covers(c, g))
}

/// The context of an example, as chunk indexes in prompt order. `retrieved`: the engine's
/// chunks for the question, best first (more than `k` when a refusal needs replacements).
/// Grounded: the first `k`, each gold page missing from them forced in (its chunk sharing
/// most words with the teacher's answer) in place of the lowest-ranked passage not on a gold
/// page. Refusal: the first `k` passages on no gold page. Then a seeded shuffle.
pub fn context(r: &TeacherRecord, retrieved: &[usize], chunks: &[ChunkRecord], k: usize, refuse: bool, seed: u64) -> Vec<usize> {
    let on_gold = |i: usize| on_gold(r, &chunks[i]);
    let mut ctx: Vec<usize> = if refuse { retrieved.iter().copied().filter(|&i| !on_gold(i)).take(k).collect() } else { retrieved.iter().copied().take(k).collect() };
    if !refuse {
        let answer_words: std::collections::HashSet<String> = crate::plan::words(&r.answer).into_iter().collect();
        for g in &r.gold {
            if ctx.iter().any(|&i| covers(&chunks[i], g)) {
                continue;
            }
            let best = (0..chunks.len()).filter(|&i| covers(&chunks[i], g)).max_by_key(|&i| (crate::plan::words(&chunks[i].text).iter().filter(|w| answer_words.contains(*w)).count(), std::cmp::Reverse(i)));
            let Some(best) = best else { continue };
            match ctx.iter().rposition(|&i| !on_gold(i)) {
                Some(slot) if ctx.len() >= k => ctx[slot] = best,
                _ => ctx.push(best),
            }
        }
    }
    // FNV-1a of the id: each record its own order, the same on every run.
    let id = r.qid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let mut rng = gauge_core::rng::SplitMix64::new(seed ^ id);
    rng.shuffle(&mut ctx);
    ctx
}

/// One example: the record, its context (chunk indexes) and whether it is a refusal.
pub fn example(r: &TeacherRecord, ctx: &[usize], chunks: &[ChunkRecord], cfg: &SftConfig, prompts: &SftPrompts, refuse: bool) -> anyhow::Result<SftRow> {
    let passages: Vec<PromptPassage> = ctx.iter().map(|&j| PromptPassage { source: chunks[j].source.clone(), page_start: chunks[j].page_start, page_end: chunks[j].page_end, text: chunks[j].text.clone() }).collect();
    let user = render_answer_prompt(&prompts.template, &r.question, &passages)?;
    let tags: Vec<String> = r.gold.iter().map(|g| page_tag(&g.source, g.page, g.page)).collect();
    let reply = if refuse { crate::sft::reply(&cfg.template, None, &cfg.refusal) } else { grounded_reply(&cfg.template, r, &tags.join(" "))? };
    let first_gold = r.gold.first();
    let gold_chunk = ctx.iter().find(|&&i| on_gold(r, &chunks[i]));
    Ok(SftRow {
        id: r.qid.clone(),
        messages: vec![Message::system(prompts.system.trim()), Message::user(user), Message::assistant(reply)],
        kind: if refuse { "refusal" } else { "grounded" }.into(),
        question: r.question.clone(),
        chunk_id: gold_chunk.map(|&i| chunks[i].chunk_id.clone()).unwrap_or_default(),
        source: first_gold.map(|g| g.source.clone()).unwrap_or_default(),
        page_start: first_gold.map_or(0, |g| g.page),
        page_end: r.gold.iter().map(|g| g.page).max().unwrap_or(0),
        context_chunk_ids: ctx.iter().map(|&j| chunks[j].chunk_id.clone()).collect(),
        split: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const THINKING: &str = "PHASE 1: CONTEXTUAL AUDIT\n1. Source Document: M.pdf, file page 14, § 214.7 Definitions.\n2. Core Subject: weight.\n\nPHASE 2: EVIDENCE MAPPING\n1. The first machine exceeds 7,500 pounds.\n2. The next page (file page 15) adds the purpose.\n\nPHASE 3: SYNTHESIS\n- Conclusion: only the first qualifies.\n\nPHASE 4: VERIFICATION\nThe response relies only on the cited manual page(s) and uses the file page number as metadata.";

    fn record(gold: &[i32], in_corpus: bool) -> TeacherRecord {
        TeacherRecord { qid: "t-1".into(), question: "Which machine qualifies?".into(), thinking: THINKING.into(), answer: "The 8,200-pound machine qualifies under the weight threshold.".into(), gold: gold.iter().map(|&p| GoldPage { source: "M.pdf".into(), page: p }).collect(), in_corpus }
    }

    #[test]
    fn page_mentions_become_tags() {
        assert_eq!(rewrite_page_mentions("Source Document: M.pdf, file page 14, § 214.7.", "X.pdf"), "Source Document: [M.pdf p. 14], § 214.7.");
        assert_eq!(rewrite_page_mentions("see file page 15 and file pages 20-21", "M.pdf"), "see [M.pdf p. 15] and [M.pdf pp. 20-21]");
        assert_eq!(rewrite_page_mentions("file pages 5 and 6", "M.pdf"), "[M.pdf pp. 5-6]");
        assert_eq!(rewrite_page_mentions("uses the file page number as metadata", "M.pdf"), "uses the file page number as metadata");
        assert_eq!(rewrite_page_mentions("no mention", "M.pdf"), "no mention");
    }

    #[test]
    fn the_teachers_phases_go_under_gaugess_headings_with_tags() {
        let p = phases(THINKING).unwrap();
        assert!(p[0].starts_with("1. Source Document: M.pdf, file page 14"));
        assert!(p[3].starts_with("The response relies"));
        assert!(phases("PHASE 1: A\nx\nPHASE 2: B\ny").is_none(), "a missing phase is refused");
        let r = record(&[14], true);
        let reply = grounded_reply("four_phase", &r, "[M.pdf p. 14]").unwrap();
        assert!(reply.starts_with("1. Contextual audit: 1. Source Document: [M.pdf p. 14], § 214.7"), "{reply}");
        assert!(reply.contains("\n2. Evidence map: 1. The first machine exceeds 7,500 pounds. 2. The next page ([M.pdf p. 15]) adds the purpose. [M.pdf p. 14]\n"), "{reply}");
        assert!(reply.contains("\n3. Synthesis: The 8,200-pound machine qualifies under the weight threshold. [M.pdf p. 14]\n4. Verification: "), "{reply}");
        assert_eq!(grounded_reply("plain", &r, "[M.pdf p. 14]").unwrap(), "The 8,200-pound machine qualifies under the weight threshold. [M.pdf p. 14]");
    }

    fn chunk(i: usize, page: i32, text: &str) -> ChunkRecord {
        let mut c = crate::plan::tests::chunk(i, "M.pdf", text);
        (c.page_start, c.page_end) = (page, page);
        c
    }

    #[test]
    fn gold_pages_are_forced_in_and_taken_out_for_refusals() {
        let chunks = vec![chunk(0, 1, "brakes"), chunk(1, 2, "signals"), chunk(2, 14, "gate arms"), chunk(3, 14, "the 8,200-pound machine qualifies weight"), chunk(4, 3, "crossings"), chunk(5, 4, "bells")];
        let r = record(&[14], true);
        // Retrieval missed page 14: its best chunk replaces the lowest-ranked passage.
        let ctx = context(&r, &[0, 1, 4, 5], &chunks, 3, false, 1);
        let mut sorted = ctx.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 3], "{ctx:?}");
        // Already there: kept as retrieved.
        let mut with = context(&r, &[2, 0, 1, 4], &chunks, 3, false, 1);
        with.sort();
        assert_eq!(with, vec![0, 1, 2]);
        // Refusal: no gold page in the context, topped up from the candidates.
        let mut refuse = context(&r, &[2, 0, 3, 1, 4], &chunks, 3, true, 1);
        refuse.sort();
        assert_eq!(refuse, vec![0, 1, 4]);
        // Seeded order: the same seed, the same order; the gold passage is not always first.
        assert_eq!(context(&r, &[0, 1, 4, 5], &chunks, 3, false, 1), ctx);
        let firsts: std::collections::HashSet<usize> = (0..16).map(|s| context(&r, &[0, 1, 4, 5], &chunks, 3, false, s)[0]).collect();
        assert!(firsts.len() > 1);
    }
}
