//! Relevance judgements that do not depend on how the corpus was chunked, and the
//! per-question scores built on them.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use gauge_core::golden::{GoldItem, GoldenQuestion};
use crate::metrics::{first_relevant_rank, item_ranking, keyword_scores, ndcg_items_at, recall_at, reciprocal_rank_at, ItemEntry};

/// How a retrieved passage is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RelevanceMode {
    /// From the fields present: `gold` → page/span, else `keywords`.
    #[default]
    Auto,
    /// Relevant when it comes from a gold source and its page range holds a gold page.
    Page,
    /// Relevant when it overlaps a gold character span of the same source.
    Span,
    /// Judged per keyword: a passage is relevant to a keyword when it contains it
    /// (case-insensitive); MRR and nDCG are averaged over keywords.
    Keyword,
}

impl RelevanceMode {
    /// The mode to use for a golden set: `Auto` becomes `Page`, `Span` (the kinds of its gold
    /// items; page when mixed, span items still judged as spans) or `Keyword`; a forced mode
    /// must find the fields it needs on every question.
    pub fn resolve(self, questions: &[GoldenQuestion]) -> Result<RelevanceMode, String> {
        let all_gold = questions.iter().all(|q| !q.gold.is_empty());
        let all_keywords = questions.iter().all(|q| !q.keywords.is_empty());
        let spans_only = questions.iter().flat_map(|q| &q.gold).all(|g| matches!(g, GoldItem::Span { .. }));
        let missing = |what: &str| {
            let q = questions.iter().find(|q| if what == "keywords" { q.keywords.is_empty() } else { q.gold.is_empty() }).map(|q| q.qid.clone()).unwrap_or_default();
            format!("relevance mode needs `{what}` on every question; `{q}` has none (use --relevance to pick another mode)")
        };
        match self {
            RelevanceMode::Auto if all_gold => Ok(if spans_only { RelevanceMode::Span } else { RelevanceMode::Page }),
            RelevanceMode::Auto if all_keywords => Ok(RelevanceMode::Keyword),
            RelevanceMode::Auto => Err("every question needs `gold` (pages or spans) or every question `keywords`; the set mixes questions with only one of them".into()),
            RelevanceMode::Page | RelevanceMode::Span if !all_gold => Err(missing("gold")),
            RelevanceMode::Keyword if !all_keywords => Err(missing("keywords")),
            m => Ok(m),
        }
    }

    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            RelevanceMode::Auto => "auto",
            RelevanceMode::Page => "page",
            RelevanceMode::Span => "span",
            RelevanceMode::Keyword => "keyword",
        }
    }
}

pub use gauge_engine::PassageSpan;

/// Which gold items of `q` (those with a positive grade) the passage covers (page mode: a `Page` item whose page lies in its
/// range, or a `Span` item it overlaps; span mode: overlapping spans only). A RAPTOR summary
/// covers what its leaves cover.
pub fn covered_gold(q: &GoldenQuestion, p: &PassageSpan, mode: RelevanceMode) -> Vec<usize> {
    if !p.leaves.is_empty() {
        let all: BTreeSet<usize> = p.leaves.iter().flat_map(|l| covered_gold(q, l, mode)).collect();
        return all.into_iter().collect();
    }
    q.gold
        .iter()
        .enumerate()
        .filter(|(_, g)| g.grade() > 0.0)
        .filter(|(_, g)| match mode {
            RelevanceMode::Page => g.covered_by_pages(&p.source, (p.page_start, p.page_end), (p.char_start, p.char_end)),
            RelevanceMode::Span => g.covered_by_chars(&p.source, (p.char_start, p.char_end)),
            _ => false,
        })
        .map(|(i, _)| i)
        .collect()
}

/// A passage's grade for a question (0: not relevant): the highest grade of the gold items it
/// covers; 1 when relevant in keyword mode. Written into the TREC qrels.
pub fn relevance_grade(q: &GoldenQuestion, p: &PassageSpan, mode: RelevanceMode) -> f64 {
    match mode {
        RelevanceMode::Keyword => {
            if is_relevant(q, p, mode) { 1.0 } else { 0.0 }
        }
        _ => covered_gold(q, p, mode).iter().map(|&i| q.gold[i].grade()).fold(0.0, f64::max),
    }
}

/// Whether a passage is relevant to a question under a (resolved) mode; a RAPTOR summary is
/// relevant when one of its leaves is.
pub fn is_relevant(q: &GoldenQuestion, p: &PassageSpan, mode: RelevanceMode) -> bool {
    if !p.leaves.is_empty() {
        return p.leaves.iter().any(|l| is_relevant(q, l, mode));
    }
    match mode {
        RelevanceMode::Keyword => {
            let t = p.text.to_lowercase();
            q.keywords.iter().any(|k| t.contains(&k.to_lowercase()))
        }
        _ => !covered_gold(q, p, mode).is_empty(),
    }
}

/// The scores of one question's ranked passages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuestionScores {
    /// Relevance of each passage, best first.
    pub relevant: Vec<bool>,
    /// 1-based rank of the first relevant passage.
    pub first_relevant_rank: Option<usize>,
    /// Reciprocal rank within k (keyword mode: mean over keywords).
    pub reciprocal_rank: f64,
    /// nDCG@k (keyword mode: mean over keywords).
    pub ndcg: f64,
    /// Recall@k of gold items (keyword mode: keyword coverage).
    pub recall: f64,
    /// Keyword coverage@k, when the question has keywords.
    pub keyword_coverage: Option<f64>,
    /// The gold-item ranking the first k passages imply (empty in keyword mode), from which
    /// nDCG and recall are computed and `trec/<config>.items.run` is written.
    pub items: Vec<ItemEntry>,
}

/// Scores one question's passages (best first, already cut to `k`).
pub fn score_question(q: &GoldenQuestion, passages: &[PassageSpan], mode: RelevanceMode, k: usize) -> QuestionScores {
    let relevant: Vec<bool> = passages.iter().map(|p| is_relevant(q, p, mode)).collect();
    // A summary is judged by its leaves' texts too.
    let joined: Vec<String> = passages.iter().map(|p| if p.leaves.is_empty() { p.text.clone() } else { p.leaves.iter().map(|l| l.text.as_str()).collect::<Vec<_>>().join("\n") }).collect();
    let texts: Vec<&str> = joined.iter().map(String::as_str).collect();
    let keyword = (!q.keywords.is_empty()).then(|| keyword_scores(&q.keywords, &texts, k));
    match mode {
        RelevanceMode::Keyword => {
            let ks = keyword.expect("keyword mode checked every question has keywords");
            QuestionScores {
                first_relevant_rank: first_relevant_rank(&relevant),
                reciprocal_rank: ks.mrr,
                ndcg: ks.ndcg,
                recall: ks.coverage,
                keyword_coverage: Some(ks.coverage),
                relevant,
                items: Vec::new(),
            }
        }
        _ => {
            let covers: Vec<Vec<usize>> = passages.iter().map(|p| covered_gold(q, p, mode)).collect();
            let items = item_ranking(&covers, k);
            QuestionScores {
                first_relevant_rank: first_relevant_rank(&relevant),
                reciprocal_rank: reciprocal_rank_at(&relevant, k),
                ndcg: ndcg_items_at(&items, &q.gold.iter().map(GoldItem::grade).collect::<Vec<_>>(), k),
                recall: recall_at(&items, q.gold.iter().filter(|g| g.grade() > 0.0).count(), k),
                keyword_coverage: keyword.map(|k| k.coverage),
                relevant,
                items,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(s: &QuestionScores) -> [f64; 4] {
        [1, 3, 5, 10].map(|n| crate::metrics::hit_at(&s.relevant, n))
    }

    fn q(gold: Vec<GoldItem>, keywords: &[&str]) -> GoldenQuestion {
        GoldenQuestion {
            qid: "q".into(),
            question: "?".into(),
            gold,
            keywords: keywords.iter().map(|s| s.to_string()).collect(),
            reference_answer: None,
            category: None,
        }
    }

    fn passage(source: &str, pages: (i32, i32), chars: (i64, i64), text: &str) -> PassageSpan {
        PassageSpan { source: source.into(), page_start: pages.0, page_end: pages.1, char_start: chars.0, char_end: chars.1, text: text.into(), leaves: Vec::new() }
    }

    #[test]
    fn page_mode_needs_the_source_and_a_page_in_range() {
        let g = q(vec![GoldItem::Page { source: "a.pdf".into(), page: 5, grade: None }, GoldItem::Page { source: "a.pdf".into(), page: 6, grade: None }], &[]);
        assert_eq!(covered_gold(&g, &passage("a.pdf", (4, 5), (0, 10), ""), RelevanceMode::Page), vec![0]);
        assert_eq!(covered_gold(&g, &passage("a.pdf", (5, 6), (0, 10), ""), RelevanceMode::Page), vec![0, 1]);
        assert!(covered_gold(&g, &passage("b.pdf", (5, 5), (0, 10), ""), RelevanceMode::Page).is_empty());
        assert!(covered_gold(&g, &passage("a.pdf", (7, 9), (0, 10), ""), RelevanceMode::Page).is_empty());
    }

    #[test]
    fn span_mode_needs_an_overlap() {
        let g = q(vec![GoldItem::Span { source: "a.pdf".into(), char_start: 100, char_end: 200, page_start: Some(3), page_end: Some(3), grade: None }], &[]);
        // Page mode judges a span that knows its pages by page overlap.
        assert!(is_relevant(&g, &passage("a.pdf", (2, 3), (0, 10), ""), RelevanceMode::Page));
        assert!(!is_relevant(&g, &passage("a.pdf", (4, 5), (150, 400), ""), RelevanceMode::Page));
        assert!(is_relevant(&g, &passage("a.pdf", (1, 1), (150, 400), ""), RelevanceMode::Span));
        // Touching is not overlapping: [0, 100) ends where the span starts.
        assert!(!is_relevant(&g, &passage("a.pdf", (1, 1), (0, 100), ""), RelevanceMode::Span));
        assert!(!is_relevant(&g, &passage("a.pdf", (1, 1), (200, 300), ""), RelevanceMode::Span));
        assert!(!is_relevant(&g, &passage("b.pdf", (1, 1), (150, 400), ""), RelevanceMode::Span));
    }

    #[test]
    fn a_summary_is_judged_by_its_leaves() {
        let g = q(vec![GoldItem::Page { source: "a.pdf".into(), page: 5, grade: None }, GoldItem::Page { source: "b.pdf".into(), page: 2, grade: None }], &["gate"]);
        let mut summary = passage("a.pdf; b.pdf", (1, 9), (0, 0), "a summary that never says the keyword");
        summary.leaves = vec![passage("a.pdf", (4, 4), (0, 10), "x"), passage("b.pdf", (2, 2), (0, 10), "the gate arm")];
        // Its own page range (1–9 of a joined source) is not what counts: the leaves are.
        assert_eq!(covered_gold(&g, &summary, RelevanceMode::Page), vec![1]);
        assert!(is_relevant(&g, &summary, RelevanceMode::Keyword));
        summary.leaves.pop();
        assert!(!is_relevant(&g, &summary, RelevanceMode::Page));
        assert!(!is_relevant(&g, &summary, RelevanceMode::Keyword));
        assert_eq!(score_question(&g, &[summary], RelevanceMode::Keyword, 10).recall, 0.0);
    }

    #[test]
    fn scores_by_hand() {
        // Gold pages 5 and 9; ranks 2 (page 5) and 4 (page 9) are relevant.
        let g = q(vec![GoldItem::Page { source: "a".into(), page: 5, grade: None }, GoldItem::Page { source: "a".into(), page: 9, grade: None }], &[]);
        let list: Vec<PassageSpan> = [1, 5, 2, 9, 3].iter().map(|&p| passage("a", (p, p), (0, 1), "")).collect();
        let s = score_question(&g, &list, RelevanceMode::Page, 10);
        assert_eq!(s.first_relevant_rank, Some(2));
        assert_eq!(hits(&s), [0.0, 1.0, 1.0, 1.0]);
        assert_eq!(s.reciprocal_rank, 0.5);
        // DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3).
        let want = (1.0 / 3f64.log2() + 1.0 / 5f64.log2()) / (1.0 + 1.0 / 3f64.log2());
        assert!((s.ndcg - want).abs() < 1e-12);
        assert_eq!(s.recall, 1.0);
        assert_eq!(score_question(&g, &list, RelevanceMode::Page, 3).recall, 0.5);
        // Empty retrieval: zeros everywhere.
        let e = score_question(&g, &[], RelevanceMode::Page, 10);
        assert_eq!((e.first_relevant_rank, e.reciprocal_rank, e.ndcg, e.recall, hits(&e)), (None, 0.0, 0.0, 0.0, [0.0; 4]));
    }

    #[test]
    fn perfect_ranking_scores_one_everywhere() {
        let g = q(vec![GoldItem::Page { source: "a".into(), page: 1, grade: None }], &["gate"]);
        let mut list = vec![passage("a", (1, 1), (0, 1), "the gate")];
        list.extend((2..=10).map(|p| passage("a", (p, p), (0, 1), "other")));
        for mode in [RelevanceMode::Page, RelevanceMode::Keyword] {
            let s = score_question(&g, &list, mode, 10);
            assert_eq!((s.reciprocal_rank, s.ndcg, s.recall, hits(&s)), (1.0, 1.0, 1.0, [1.0; 4]), "{mode:?}");
        }
        // Reversed: the relevant passage comes tenth.
        list.reverse();
        let s = score_question(&g, &list, RelevanceMode::Page, 10);
        assert_eq!(hits(&s), [0.0, 0.0, 0.0, 1.0]);
        assert!((s.reciprocal_rank - 0.1).abs() < 1e-12);
        assert!((s.ndcg - 1.0 / 11f64.log2()).abs() < 1e-12);
    }

    #[test]
    fn modes_resolve_from_the_fields_present() {
        let page = q(vec![GoldItem::Page { source: "a".into(), page: 1, grade: None }], &[]);
        let span = q(vec![GoldItem::Span { source: "a".into(), char_start: 0, char_end: 5, page_start: None, page_end: None, grade: None }], &[]);
        let kw = q(vec![], &["x"]);
        assert_eq!(RelevanceMode::Auto.resolve(std::slice::from_ref(&page)), Ok(RelevanceMode::Page));
        assert_eq!(RelevanceMode::Auto.resolve(std::slice::from_ref(&span)), Ok(RelevanceMode::Span));
        assert_eq!(RelevanceMode::Auto.resolve(std::slice::from_ref(&kw)), Ok(RelevanceMode::Keyword));
        assert!(RelevanceMode::Auto.resolve(&[page.clone(), kw.clone()]).is_err());
        assert!(RelevanceMode::Keyword.resolve(&[page]).unwrap_err().contains("keywords"));
        assert!(RelevanceMode::Span.resolve(&[kw]).is_err());
    }
}
