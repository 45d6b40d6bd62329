//! Failure attribution: for every question a config missed (no relevant passage among the
//! judged top k), the first stage at which the gold was lost, read from the search's
//! intermediate lists ([`gauge_engine::SearchTrace`]) and the upstream artifacts:
//!
//! | label | the gold… |
//! |---|---|
//! | `extraction` | pages came out of `extract` empty (or missing): no text to find |
//! | `chunking` | pages have text, but no chunk of the index is relevant (filtered, split away) |
//! | `candidates` | chunks exist, but no retriever returned one among its candidates (with a single retriever: or it ranked them below the cut) |
//! | `fusion` | was a candidate, but fusion of several retrievers ranked it below the cut (k, or the reranker's `n_initial`) |
//! | `dedup` | was fused, but the per-document / per-page cap removed it |
//! | `rerank` | reached the reranker, which put it below k |
//! | `cutoff` | would have been returned, but the score cutoff refused the question |
//! | `window` | was in the top k, but the judged passage (its small-to-big window or summary) was not relevant |
//! | `citation` | (answer rows) was in the context the generator was given, but the answer cites no gold page |
//!
//! An answer row misses a question when its answer cites no gold page; when the retrieval of
//! its config had already lost the gold, the answer row carries that stage's label.
//! `failures.parquet` has one row per missed (config, question) with the gold's best rank at
//! every stage; `ablation.md` counts the labels per config.
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int32Array, StringArray};
use gauge_core::golden::{GoldItem, GoldenQuestion};
use gauge_core::schema::{arrow_schema, FAILURE_COLUMNS};
use gauge_engine::SearchTrace;

/// Where the gold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LostAt {
    /// The gold pages have no extracted text.
    Extraction,
    /// No chunk of the index is relevant.
    Chunking,
    /// No retriever returned a relevant chunk.
    Candidates,
    /// Fusion ranked it below the cut.
    Fusion,
    /// The per-document / per-page cap removed it.
    Dedup,
    /// The reranker put it below k.
    Rerank,
    /// The cutoff refused the question.
    Cutoff,
    /// In the top k, but the judged passage was not relevant.
    Window,
    /// (Answer rows) in the context, but the answer cites no gold page.
    Citation,
}

impl LostAt {
    /// Every label, in pipeline order.
    pub const ALL: [LostAt; 8] = [LostAt::Extraction, LostAt::Chunking, LostAt::Candidates, LostAt::Fusion, LostAt::Dedup, LostAt::Rerank, LostAt::Cutoff, LostAt::Window];

    /// The label in `failures.parquet`.
    pub fn label(self) -> &'static str {
        match self {
            LostAt::Extraction => "extraction",
            LostAt::Chunking => "chunking",
            LostAt::Candidates => "candidates",
            LostAt::Fusion => "fusion",
            LostAt::Dedup => "dedup",
            LostAt::Rerank => "rerank",
            LostAt::Cutoff => "cutoff",
            LostAt::Window => "window",
            LostAt::Citation => "citation",
        }
    }
}

/// The gold's best 1-based rank at every stage of one search (`None`: not in that list, or
/// the stage did not run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageRanks {
    /// Chunks of the index relevant to the question on their own.
    pub relevant_chunks: usize,
    /// Whether some gold page has extracted text (spans and keywords: true).
    pub gold_text: bool,
    /// Per retriever: the best rank in its candidates.
    pub retrievers: BTreeMap<String, Option<usize>>,
    /// After fusion.
    pub fused: Option<usize>,
    /// After the per-document cap.
    pub capped: Option<usize>,
    /// After reranking (when the config reranks).
    pub reranked: Option<usize>,
    /// The reranker's pool (`n_initial`), when the config reranks.
    pub rerank_pool: Option<usize>,
    /// The cutoff refused.
    pub refused: bool,
    /// In the final top k (before windows are judged).
    pub top: Option<usize>,
    /// Passages judged.
    pub k: usize,
}

/// The first stage that lost the gold.
pub fn first_loss(s: &StageRanks) -> LostAt {
    if s.relevant_chunks == 0 {
        return if s.gold_text { LostAt::Chunking } else { LostAt::Extraction };
    }
    if s.retrievers.values().all(Option::is_none) {
        return LostAt::Candidates;
    }
    let Some(capped) = s.capped else {
        return if s.fused.is_some() { LostAt::Dedup } else { LostAt::Fusion };
    };
    let cut = s.rerank_pool.unwrap_or(s.k);
    if capped > cut {
        // Below the cut after fusion; the cap only moved it when it ranked within the cut before.
        // With one retriever there is nothing to fuse: its own ranking lost it.
        return if s.fused.is_some_and(|f| f <= cut) {
            LostAt::Dedup
        } else if s.retrievers.len() == 1 {
            LostAt::Candidates
        } else {
            LostAt::Fusion
        };
    }
    if s.rerank_pool.is_some() && s.reranked.is_none_or(|r| r > s.k) {
        return LostAt::Rerank;
    }
    if s.refused {
        return LostAt::Cutoff;
    }
    LostAt::Window
}

/// The stage ranks of one traced search, given the question's relevant chunk ids.
pub fn stage_ranks(trace: &SearchTrace, relevant: &HashSet<String>, gold_text: bool, rerank_pool: Option<usize>, k: usize) -> StageRanks {
    let best = |ids: &[String]| ids.iter().position(|id| relevant.contains(id)).map(|i| i + 1);
    let mut retrievers: BTreeMap<String, Option<usize>> = BTreeMap::new();
    for (name, ids) in &trace.lists {
        let r = best(ids);
        let slot = retrievers.entry(name.clone()).or_insert(None);
        *slot = match (*slot, r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    StageRanks {
        relevant_chunks: relevant.len(),
        gold_text,
        retrievers,
        fused: best(&trace.fused),
        capped: best(&trace.deduped),
        reranked: trace.reranked.as_deref().and_then(best),
        rerank_pool,
        refused: trace.refused,
        top: best(&trace.top),
        k,
    }
}

/// Whether some gold page of `q` has text in the extracted pages (`(source, page)` → empty);
/// span and keyword questions count as having text.
pub fn gold_has_text(q: &GoldenQuestion, pages: &std::collections::HashMap<(String, i32), bool>) -> bool {
    let page_items: Vec<(&str, i32)> = q.gold.iter().filter_map(|g| if let GoldItem::Page { source, page, .. } = g { Some((source.as_str(), *page)) } else { None }).collect();
    if page_items.len() < q.gold.len() || page_items.is_empty() {
        return true;
    }
    page_items.iter().any(|(s, p)| pages.get(&(s.to_string(), *p)).is_some_and(|empty| !empty))
}

/// One missed question of one config.
#[derive(Debug, Clone)]
pub struct FailureRow {
    /// Config name.
    pub config: String,
    /// Question id.
    pub qid: String,
    /// Where the gold was lost.
    pub lost_at: LostAt,
    /// The gold's rank at every stage.
    pub ranks: StageRanks,
}

/// The answer rows' failures: every answered question with gold pages whose answer cites
/// none of them. Labelled with the retrieval's own failure when `retrieval` (the config's
/// rows) has one for the question, else `citation` with the gold's rank in the retrieved list.
pub fn answer_failures(row: &str, answered: &[crate::answers::AnsweredQuestion], golden: &[GoldenQuestion], retrieval: &[&FailureRow], query_rows: &[&crate::rows::QueryRow], k: usize) -> Vec<FailureRow> {
    let mut out = Vec::new();
    for a in answered {
        let Some(q) = golden.iter().find(|q| q.qid == a.qid).filter(|q| q.gold.iter().any(|g| g.pages().is_some())) else { continue };
        if a.citations.iter().any(|c| c.cites_gold(&q.gold)) {
            continue;
        }
        let (lost_at, ranks) = match retrieval.iter().find(|f| f.qid == a.qid) {
            Some(f) => (f.lost_at, f.ranks.clone()),
            None => {
                let top = query_rows.iter().find(|r| r.qid == a.qid).and_then(|r| r.scores.first_relevant_rank);
                (LostAt::Citation, StageRanks { gold_text: true, top, k, ..Default::default() })
            }
        };
        out.push(FailureRow { config: row.to_string(), qid: a.qid.clone(), lost_at, ranks });
    }
    out
}

/// Writes `failures.parquet`.
pub fn write_failures(path: &Path, rows: &[FailureRow]) -> anyhow::Result<u64> {
    let int = |f: &dyn Fn(&FailureRow) -> Option<usize>| Arc::new(Int32Array::from_iter(rows.iter().map(|r| f(r).map(|v| v as i32)))) as ArrayRef;
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.config.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.qid.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.lost_at.label()))),
        int(&|r| Some(r.ranks.relevant_chunks)),
        int(&|r| r.ranks.retrievers.get("dense").copied().flatten()),
        int(&|r| r.ranks.retrievers.get("bm25").copied().flatten()),
        int(&|r| r.ranks.fused),
        int(&|r| r.ranks.capped),
        int(&|r| r.ranks.reranked),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.ranks.refused)))),
        int(&|r| r.ranks.top),
    ];
    Ok(gauge_core::table::write_parquet(path, arrow_schema(FAILURE_COLUMNS), cols)?)
}

/// The `ablation.md` section: per config, how many questions it missed and where.
pub fn markdown(rows: &[FailureRow], configs: &[String], k: usize) -> String {
    let answers = rows.iter().any(|r| !configs.contains(&r.config));
    let labels: Vec<LostAt> = if answers { LostAt::ALL.into_iter().chain([LostAt::Citation]).collect() } else { LostAt::ALL.to_vec() };
    let mut rows_of: Vec<String> = configs.to_vec();
    for r in rows {
        if !rows_of.contains(&r.config) {
            rows_of.push(r.config.clone());
        }
    }
    let citation = if answers { " Answer rows miss a question when the answer cites no gold page: **citation** when the gold was in the context they were given, else the retrieval's own label." } else { "" };
    let mut s = format!("\n## Where the missed questions were lost\n\nA question is missed when no judged passage of the top {k} is relevant; each is traced through the search again and labelled with the first stage that lost its gold (`failures.parquet` has the gold's best rank at every stage): **extraction** (gold pages without text), **chunking** (no relevant chunk), **candidates** (no retriever found one, or the only retriever ranked it below the cut), **fusion** (fusing several retrievers ranked it below the cut), **dedup** (removed by the per-document cap), **rerank** (put below k), **cutoff** (refused), **window** (in the top k, but the judged window or summary was not relevant).{citation}\n\n| Config | missed | {} |\n|---|---|{}\n", labels.iter().map(|l| l.label()).collect::<Vec<_>>().join(" | "), "---|".repeat(labels.len()));
    for c in &rows_of {
        let mine: Vec<&FailureRow> = rows.iter().filter(|r| &r.config == c).collect();
        let counts: Vec<String> = labels.iter().map(|l| mine.iter().filter(|r| r.lost_at == *l).count()).map(|n| if n == 0 { "·".to_string() } else { n.to_string() }).collect();
        s.push_str(&format!("| {} | {} | {} |\n", c.replace('|', "\\|"), mine.len(), counts.join(" | ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks() -> StageRanks {
        let mut r = StageRanks { relevant_chunks: 2, gold_text: true, k: 10, ..Default::default() };
        r.retrievers.insert("dense".into(), Some(3));
        r.retrievers.insert("bm25".into(), None);
        r.fused = Some(2);
        r.capped = Some(2);
        r.top = Some(2);
        r
    }

    #[test]
    fn each_label_has_its_case() {
        let base = ranks();
        let case = |f: &dyn Fn(&mut StageRanks)| {
            let mut r = base.clone();
            f(&mut r);
            first_loss(&r)
        };
        assert_eq!(case(&|r| {
            r.relevant_chunks = 0;
            r.gold_text = false;
        }), LostAt::Extraction);
        assert_eq!(case(&|r| r.relevant_chunks = 0), LostAt::Chunking);
        assert_eq!(case(&|r| {
            r.retrievers.insert("dense".into(), None);
        }), LostAt::Candidates);
        assert_eq!(case(&|r| {
            r.fused = Some(14);
            r.capped = Some(12);
        }), LostAt::Fusion);
        assert_eq!(case(&|r| {
            r.retrievers.remove("bm25");
            r.fused = Some(14);
            r.capped = Some(12);
        }), LostAt::Candidates, "one retriever ranked it below the cut: nothing was fused");
        assert_eq!(case(&|r| r.capped = None), LostAt::Dedup);
        assert_eq!(case(&|r| {
            r.fused = Some(9);
            r.capped = Some(11);
        }), LostAt::Dedup, "within the cut after fusion, pushed out by the cap");
        assert_eq!(case(&|r| {
            r.rerank_pool = Some(25);
            r.fused = Some(18);
            r.capped = Some(18);
            r.reranked = Some(16);
        }), LostAt::Rerank);
        assert_eq!(case(&|r| {
            r.rerank_pool = Some(25);
            r.fused = Some(30);
            r.capped = Some(30);
        }), LostAt::Fusion, "below the reranker's pool: it never read it");
        assert_eq!(case(&|r| r.refused = true), LostAt::Cutoff);
        assert_eq!(case(&|_| {}), LostAt::Window);
    }

    #[test]
    fn an_answer_citing_no_gold_page_is_a_citation_failure_unless_retrieval_lost_it() {
        let golden: Vec<GoldenQuestion> = ["a", "b", "c", "d"].iter().map(|id| serde_json::from_value(serde_json::json!({"qid": id, "question": "x", "gold": [{"source": "m.pdf", "page": 3}]})).unwrap()).collect();
        let answer = |qid: &str, page: i32| crate::answers::AnsweredQuestion { qid: qid.into(), answer: "…".into(), refused: false, citations: if page > 0 { vec![gauge_cite::Citation { source: "m.pdf".into(), page_start: page, page_end: page, verified: true }] } else { vec![] }, completion_tokens: 1, seconds: 0.0, finish_reason: "eos".into() };
        // a: cites the gold page; b: cites another page; c: cites nothing; d: retrieval lost it.
        let answered = vec![answer("a", 3), answer("b", 7), answer("c", 0), answer("d", 9)];
        let lost = FailureRow { config: "Hybrid".into(), qid: "d".into(), lost_at: LostAt::Fusion, ranks: ranks() };
        let row = |qid: &str, rank: Option<usize>| crate::rows::QueryRow { config: "Hybrid".into(), qid: qid.into(), category: String::new(), scores: crate::relevance::QuestionScores { first_relevant_rank: rank, ..Default::default() }, refused: false, n_results: 5, latency_ms: 0.0, cold_latency_ms: 0.0, model_calls: 0 };
        let qrows = [row("a", Some(1)), row("b", Some(2)), row("c", Some(4)), row("d", None)];
        let f = answer_failures("Hybrid · base", &answered, &golden, &[&lost], &qrows.iter().collect::<Vec<_>>(), 5);
        let got: Vec<(&str, LostAt, Option<usize>)> = f.iter().map(|r| (r.qid.as_str(), r.lost_at, r.ranks.top)).collect();
        assert_eq!(got, vec![("b", LostAt::Citation, Some(2)), ("c", LostAt::Citation, Some(4)), ("d", LostAt::Fusion, Some(2))]);
        let md = markdown(&f, &["Hybrid".to_string()], 5);
        assert!(md.contains("| citation |") && md.contains("| Hybrid · base | 3 |"), "{md}");
        assert!(!markdown(&[lost], &["Hybrid".to_string()], 5).contains("citation"), "retrieval-only tables keep their columns");
    }

    #[test]
    fn ranks_come_from_the_trace() {
        let trace = SearchTrace {
            lists: vec![("dense".into(), vec!["a".into(), "g".into()]), ("bm25".into(), vec!["b".into()]), ("dense".into(), vec!["g".into()])],
            fused: vec!["a".into(), "b".into(), "g".into()],
            deduped: vec!["a".into(), "g".into()],
            reranked: Some(vec!["g".into(), "a".into()]),
            refused: false,
            top: vec!["g".into()],
        };
        let relevant: HashSet<String> = ["g".to_string()].into();
        let r = stage_ranks(&trace, &relevant, true, Some(25), 1);
        assert_eq!(r.retrievers["dense"], Some(1), "the best of the rewrite's lists");
        assert_eq!(r.retrievers["bm25"], None);
        assert_eq!((r.fused, r.capped, r.reranked, r.top), (Some(3), Some(2), Some(1), Some(1)));
    }

    #[test]
    fn gold_text_reads_the_pages() {
        let q: GoldenQuestion = serde_json::from_value(serde_json::json!({"qid": "q", "question": "x", "gold": [{"source": "a.pdf", "page": 2}, {"source": "a.pdf", "page": 3}]})).unwrap();
        let mut pages = std::collections::HashMap::new();
        pages.insert(("a.pdf".to_string(), 2), true);
        assert!(!gold_has_text(&q, &pages), "page 2 empty, page 3 missing");
        pages.insert(("a.pdf".to_string(), 3), false);
        assert!(gold_has_text(&q, &pages));
    }
}
