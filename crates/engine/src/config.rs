//! Query-time settings: which retrievers, fusion, filters, dedup, rerank, cutoff, windows, k.
use gauge_core::schema::ChunkRecord;
use gauge_rank::{Fusion, RerankConfig};
use serde::{Deserialize, Serialize};

/// Metadata filters, applied inside every retriever.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    /// Keep only these sources (empty: all).
    pub sources: Vec<String>,
    /// Keep only these document types (empty: all).
    pub doc_types: Vec<String>,
    /// Keep only chunks overlapping this page range (inclusive).
    pub pages: Option<(i32, i32)>,
}

impl Filter {
    /// Whether a chunk passes.
    pub fn accepts(&self, c: &ChunkRecord) -> bool {
        (self.sources.is_empty() || self.sources.contains(&c.source))
            && (self.doc_types.is_empty() || self.doc_types.contains(&c.doc_type))
            && self.pages.is_none_or(|(a, b)| c.page_end >= a && c.page_start <= b)
    }

    /// Whether it lets everything through.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.doc_types.is_empty() && self.pages.is_none()
    }
}

/// The unit per-document dedup counts in.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DedupKey {
    /// The whole document (`doc_id`).
    #[default]
    Doc,
    /// One page of a document (`doc_id` + `page_start`): useful when a corpus has few, long
    /// documents whose overlapping chunks crowd the list.
    Page,
}

/// What a search does with RAPTOR summary nodes (indexes built from a `raptor` artifact; an
/// index without summaries is unaffected).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SummaryUse {
    /// Summaries compete with chunks and are returned as passages (RAPTOR's "collapsed tree").
    #[default]
    Keep,
    /// A summary hit is replaced, at its rank, by the chunks under it (those the retrievers
    /// also ranked first, in their order, then the rest in document order), until `k`.
    Expand,
    /// Summaries are never returned (the leaves-only baseline on the same index).
    Exclude,
}

impl SummaryUse {
    fn is_keep(&self) -> bool {
        *self == SummaryUse::Keep
    }
}

/// Retrieval settings (serde, with defaults); every layer can be switched.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalConfig {
    /// Dense retrieval on.
    pub dense: bool,
    /// BM25 retrieval on.
    pub bm25: bool,
    /// BM25's `k1` and `b` (tantivy's 1.2 and 0.75 by default; Anserini's BEIR runs use 0.9
    /// and 0.4). Left out of the manifest at the default, so older evaluations keep their
    /// address.
    #[serde(skip_serializing_if = "gauge_index::Bm25Params::is_default")]
    pub bm25_params: gauge_index::Bm25Params,
    /// Candidates from each retriever (raised to `k` and the reranker's `n_initial` by
    /// [`RetrievalConfig::normalize`]).
    pub candidates: usize,
    /// Fusion of the retrievers' lists.
    pub fusion: Fusion,
    /// Metadata filters.
    pub filter: Filter,
    /// At most this many chunks per dedup key (0: no limit).
    pub max_per_doc: usize,
    /// What `max_per_doc` counts per: the document, or one source page of it.
    pub dedup_by: DedupKey,
    /// Small-to-big: neighbouring chunks on each side of a hit (0: off).
    pub window: usize,
    /// Refuse when the best final score is under this.
    pub cutoff: Option<f32>,
    /// Exact-identifier promotion: when the query holds identifiers (tokens with digits such
    /// as `ERA22LA175`, `174.63`, `236.405.A1`), fused candidates whose text holds every one
    /// of them as a whole token move to the front, in fused order.
    pub promote_exact: bool,
    /// Reranking of the fused list.
    pub rerank: Option<RerankConfig>,
    /// faiss `nprobe` for IVF indexes (query time).
    pub nprobe: Option<usize>,
    /// faiss `efSearch` for HNSW indexes (query time).
    pub ef_search: Option<usize>,
    /// Passages returned — the one `k`: the reranker keeps `k`, and an evaluation judges `k`.
    pub k: usize,
    /// Query rewriting by a language model before retrieval (expansion, multi-query, HyDE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<crate::rewrite::RewriteConfig>,
    /// RAPTOR summary nodes: keep them as passages, expand them to their chunks, or exclude them.
    #[serde(skip_serializing_if = "SummaryUse::is_keep")]
    pub summaries: SummaryUse,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        RetrievalConfig {
            dense: true,
            bm25: true,
            bm25_params: gauge_index::Bm25Params::default(),
            candidates: 50,
            fusion: Fusion::default(),
            filter: Filter::default(),
            max_per_doc: 0,
            dedup_by: DedupKey::Doc,
            window: 0,
            cutoff: None,
            promote_exact: true,
            rerank: None,
            nprobe: None,
            ef_search: None,
            k: 10,
            rewrite: None,
            summaries: SummaryUse::Keep,
        }
    }
}

impl RetrievalConfig {
    /// The effective config, the one place the query-time rules live: the reranker reads at
    /// least `k` candidates and keeps exactly `k`; each retriever returns at least
    /// `max(candidates, k, n_initial)`. Idempotent; [`crate::Engine`] applies it to every
    /// search, so `query` and `evaluate` rank alike.
    pub fn normalize(mut self) -> RetrievalConfig {
        if let Some(r) = &mut self.rerank {
            r.n_initial = r.n_initial.max(self.k);
            r.top_n = self.k;
        }
        self.candidates = self.candidates.max(self.k).max(self.rerank.as_ref().map_or(0, |r| r.n_initial));
        self
    }

    /// Checks what no search can run with: some retriever on, `k` ≥ 1, fusion constants in
    /// range, a finite cutoff. (A `k` or `candidates` above the passage count is not an error:
    /// each search clamps it, see [`RetrievalConfig::clamped_to`].)
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.dense || self.bm25, "both retrievers are off; enable dense or BM25");
        self.bm25_params.validate().map_err(anyhow::Error::msg)?;
        anyhow::ensure!(self.k >= 1, "k must be at least 1");
        self.fusion.validate().map_err(anyhow::Error::msg)?;
        if let Some((a, b)) = self.filter.pages {
            anyhow::ensure!(a <= b, "filter.pages = [{a}, {b}]: the first page is after the last, so nothing could match; write [{b}, {a}]");
        }
        if let Some(c) = self.cutoff {
            anyhow::ensure!(c.is_finite(), "cutoff = {c}: a score cutoff must be a finite number");
        }
        if let Some(r) = &self.rewrite {
            anyhow::ensure!(r.temperature.is_finite() && r.temperature >= 0.0, "rewrite.temperature = {}: must be a finite number ≥ 0", r.temperature);
            anyhow::ensure!((1..=100).contains(&r.n), "rewrite.n = {}: ask for 1 to 100 queries", r.n);
            anyhow::ensure!((1..=1 << 20).contains(&r.max_new_tokens), "rewrite.max_new_tokens = {}: must be 1 to 1048576", r.max_new_tokens);
        }
        Ok(())
    }

    /// The same config with every list length at most `passages` (the number of passages the
    /// index holds): a larger `k` means "all of them", and no retriever allocates for more.
    pub fn clamped_to(mut self, passages: usize) -> RetrievalConfig {
        let n = passages.max(1);
        self.k = self.k.min(n);
        self.candidates = self.candidates.min(n);
        if let Some(r) = &mut self.rerank {
            r.n_initial = r.n_initial.min(n);
            r.top_n = r.top_n.min(n);
        }
        self.window = self.window.min(n);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_applies_the_candidate_pool_rule_once() {
        let cfg = RetrievalConfig { candidates: 5, k: 10, rerank: Some(RerankConfig { n_initial: 25, top_n: 3, ..Default::default() }), ..Default::default() };
        let n = cfg.normalize();
        assert_eq!(n.candidates, 25);
        assert_eq!((n.rerank.as_ref().unwrap().n_initial, n.rerank.as_ref().unwrap().top_n), (25, 10));
        assert_eq!(n.clone().normalize(), n);
        let plain = RetrievalConfig { candidates: 3, k: 7, ..Default::default() }.normalize();
        assert_eq!(plain.candidates, 7);
    }

    #[test]
    fn a_reversed_page_range_and_a_field_of_another_fusion_are_refused() {
        let mut cfg = RetrievalConfig::default();
        cfg.filter.pages = Some((5, 1));
        assert!(cfg.validate().unwrap_err().to_string().contains("write [1, 5]"));
        cfg.filter.pages = Some((1, 1));
        cfg.validate().unwrap();
        assert!(crate::cli::page_range("5-1").unwrap_err().contains("write 1-5"));
        let e = serde_json::from_str::<gauge_rank::Fusion>(r#"{"kind": "rrf", "alpha": 0.9}"#).unwrap_err().to_string();
        assert!(e.contains("alpha"), "{e}");
    }
}
