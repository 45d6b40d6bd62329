//! The retrieval engine: every layer a switch, every candidate carrying its per-stage ranks
//! and scores.
//!
//! dense top-k (faiss) and BM25 top-k (tantivy), both honouring metadata filters inside the
//! retriever → fusion → per-document dedup → rerank (cross-encoder or MaxSim) → score cutoff →
//! final `k` → small-to-big windows.
use std::collections::HashMap;
use std::path::Path;

use gauge_core::schema::{read_chunks, ChunkRecord};
use gauge_core::Manifest;
use gauge_encoder::Embedder;
use gauge_index::{DenseIndex, FaissDevice};
use gauge_retrieve::{
    apply_cutoff, dedup_per_doc, fuse, rerank_candidates, small_to_big, Candidate, ChunkPosition, Fusion, RankedList, Refusal, RerankConfig, Reranker,
    Window,
};
use serde::{Deserialize, Serialize};
use tantivy::query::{BooleanQuery, Occur, Query, RangeQuery, TermQuery, TermSetQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

/// Metadata filters, applied inside both retrievers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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

    fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.doc_types.is_empty() && self.pages.is_none()
    }
}

/// The unit per-document dedup counts in.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DedupKey {
    /// The whole document (`doc_id`).
    #[default]
    Doc,
    /// One page of a document (`doc_id` + `page_start`): useful when a corpus has few, long
    /// documents whose overlapping chunks crowd the list.
    Page,
}

/// Retrieval settings (serde, with defaults); every layer can be switched.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalConfig {
    /// Dense retrieval on.
    pub dense: bool,
    /// BM25 retrieval on.
    pub bm25: bool,
    /// Candidates from each retriever.
    pub candidates: usize,
    /// Fusion of the two lists.
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
    /// Reranking of the fused list (the engine's reranker, or the one passed to
    /// [`Engine::search_with`]).
    pub rerank: Option<RerankConfig>,
    /// faiss `nprobe` for IVF indexes (query time).
    pub nprobe: Option<usize>,
    /// faiss `efSearch` for HNSW indexes (query time).
    pub ef_search: Option<usize>,
    /// Final number of results.
    pub k: usize,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        RetrievalConfig {
            dense: true,
            bm25: true,
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
        }
    }
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct Passage {
    /// 1-based rank.
    pub rank: usize,
    /// The fused candidate (score, per-stage ranks and scores).
    pub candidate: Candidate,
    /// The chunk.
    #[serde(skip)]
    pub chunk: ChunkRecord,
    /// Small-to-big window around it, when enabled.
    pub window: Option<Window>,
}

/// The answer of a search.
#[derive(Debug, Clone, Serialize)]
pub struct SearchResult {
    /// Passages, best first (empty when refused).
    pub passages: Vec<Passage>,
    /// Why nothing was returned, when the cutoff refused.
    pub refusal: Option<Refusal>,
}

/// Sets `nprobe` / `efSearch` on a CPU faiss index, naming the index type when it has no such
/// parameter.
fn apply_search_parameters(index: &faiss::index::IndexImpl, cfg: &RetrievalConfig, kind: &str) -> anyhow::Result<()> {
    if let Some(n) = cfg.nprobe {
        gauge_index::dense::set_parameter(index, "nprobe", n as f64).map_err(|e| anyhow::anyhow!("nprobe applies to IVF indexes; this index is `{kind}` ({e})"))?;
    }
    if let Some(ef) = cfg.ef_search {
        gauge_index::dense::set_parameter(index, "efSearch", ef as f64).map_err(|e| anyhow::anyhow!("efSearch applies to HNSW indexes; this index is `{kind}` ({e})"))?;
    }
    Ok(())
}

/// An opened index directory.
pub struct Engine {
    dense: std::sync::Mutex<DenseIndex>,
    /// `nprobe` / `efSearch` fixed when the index moved to a GPU (see [`Engine::on_faiss_device`]).
    placed_parameters: (Option<usize>, Option<usize>),
    reader: tantivy::IndexReader,
    fields: gauge_index::Bm25Fields,
    /// The chunk table, in faiss row order.
    pub chunks: Vec<ChunkRecord>,
    by_id: HashMap<String, usize>,
    page_keys: Vec<String>,
    doc_chunks: HashMap<String, Vec<String>>,
    embedder: Option<Embedder>,
    reranker: Option<Box<dyn Reranker>>,
    /// The index manifest.
    pub manifest: Manifest,
}

impl Engine {
    /// Opens an index; with an embedder, checks it is the model (weights and dimension) the
    /// index was built with.
    pub fn open(dir: &Path, embedder: Option<Embedder>) -> anyhow::Result<Engine> {
        let manifest = Manifest::read(dir)?;
        anyhow::ensure!(manifest.stage == gauge_index::STAGE, "{}: not an index artifact (stage `{}`)", dir.display(), manifest.stage);
        let built = &manifest.config["embedder"];
        if let Some(e) = &embedder {
            let dim = built["dimension"].as_u64().unwrap_or(0) as usize;
            let weights = built["weights_hash"].as_str().unwrap_or_default();
            anyhow::ensure!(
                dim == e.info.dimension && weights == e.info.weights_hash,
                "{}: index built with model `{}` (dimension {dim}); the query embedder is `{}` (dimension {}); pass --model {} or rebuild the index",
                dir.display(),
                built["model"].as_str().unwrap_or("?"),
                e.info.model,
                e.info.dimension,
                built["model"].as_str().unwrap_or("?")
            );
        }
        let dense = faiss::read_index(dir.join("dense.faiss").to_str().expect("utf-8 path")).map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("dense.faiss").display()))?;
        let bm25 = tantivy::Index::open_in_dir(dir.join("bm25"))?;
        let stemming = manifest.config["index"]["stemming"].as_bool().unwrap_or(false);
        gauge_index::register_tokenizer(&bm25, stemming);
        let reader = bm25.reader()?;
        let (_, fields) = gauge_index::bm25_schema();
        let chunks = read_chunks(&dir.join("chunks.parquet"))?;
        let by_id = chunks.iter().enumerate().map(|(i, c)| (c.chunk_id.clone(), i)).collect();
        let page_keys = chunks.iter().map(|c| format!("{}#{}", c.doc_id, c.page_start)).collect();
        let mut doc_chunks: HashMap<String, Vec<String>> = HashMap::new();
        for c in &chunks {
            doc_chunks.entry(c.doc_id.clone()).or_default().push(c.chunk_id.clone());
        }
        Ok(Engine { dense: std::sync::Mutex::new(DenseIndex::Cpu(dense)), placed_parameters: (None, None), reader, fields, chunks, by_id, page_keys, doc_chunks, embedder, reranker: None, manifest })
    }

    /// A chunk by id.
    pub fn chunk(&self, id: &str) -> Option<&ChunkRecord> {
        self.by_id.get(id).map(|&i| &self.chunks[i])
    }

    /// Adds a reranker, used when a search's config asks for reranking.
    pub fn with_reranker(mut self, reranker: Box<dyn Reranker>) -> Engine {
        self.reranker = Some(reranker);
        self
    }

    /// Moves the dense index to `device` (a GPU copy for `cuda[:N]`, in builds with the
    /// `faiss-gpu` feature), with `cfg`'s `nprobe` / `efSearch` set first: a GPU index keeps
    /// the values it was placed with, and a search asking for others is refused.
    pub fn on_faiss_device(mut self, device: FaissDevice, cfg: &RetrievalConfig) -> anyhow::Result<Engine> {
        if device.is_cpu() {
            return Ok(self);
        }
        let kind = self.index_kind();
        let dense = self.dense.get_mut().expect("no panic while placing");
        let placed = match dense {
            DenseIndex::Cpu(cpu) => {
                apply_search_parameters(cpu, cfg, &kind)?;
                DenseIndex::copy_to(cpu, device)?
            }
            #[allow(unreachable_patterns)]
            other => anyhow::bail!("the dense index already searches on {}", other.device()),
        };
        *dense = placed;
        self.placed_parameters = (cfg.nprobe, cfg.ef_search);
        Ok(self)
    }

    /// Where the dense index searches.
    pub fn faiss_device(&self) -> FaissDevice {
        self.dense.lock().expect("no panic while searching").device()
    }

    fn index_kind(&self) -> String {
        self.manifest.config["index"]["faiss"].as_str().unwrap_or("?").to_string()
    }

    /// Sets faiss query-time parameters (`nprobe`, `efSearch`) on the dense index (on a GPU:
    /// checks they are the values it was placed with).
    fn set_search_parameters(&self, index: &mut DenseIndex, cfg: &RetrievalConfig) -> anyhow::Result<()> {
        match index {
            DenseIndex::Cpu(cpu) => apply_search_parameters(cpu, cfg, &self.index_kind()),
            #[allow(unreachable_patterns)]
            gpu => {
                anyhow::ensure!(
                    (cfg.nprobe, cfg.ef_search) == self.placed_parameters,
                    "this index searches on {} with nprobe {:?} / efSearch {:?}, fixed when it moved there; open it with the values wanted",
                    gpu.device(),
                    self.placed_parameters.0,
                    self.placed_parameters.1
                );
                Ok(())
            }
        }
    }

    /// Dense top-`n` passing the filter: faiss is asked for more until `n` survive or the
    /// whole index has been seen, so a filter never starves the list.
    pub fn dense_search(&self, query: &str, n: usize, filter: &Filter) -> anyhow::Result<RankedList> {
        self.dense_search_with(query, n, filter, &RetrievalConfig::default())
    }

    fn dense_search_with(&self, query: &str, n: usize, filter: &Filter, cfg: &RetrievalConfig) -> anyhow::Result<RankedList> {
        let embedder = self.embedder.as_ref().ok_or_else(|| anyhow::anyhow!("dense retrieval needs a query embedder (--model)"))?;
        let q = embedder.embed_queries(&[query])?.remove(0);
        let total = self.chunks.len();
        let mut ask = if filter.is_empty() { n } else { (n * 4).max(64) }.min(total);
        let mut index = self.dense.lock().expect("no panic while searching");
        if cfg.nprobe.is_some() || cfg.ef_search.is_some() || !index.device().is_cpu() {
            self.set_search_parameters(&mut index, cfg)?;
        }
        loop {
            let res = index.search(&q, ask)?;
            let hits: Vec<(String, f32)> = res
                .labels
                .iter()
                .zip(&res.distances)
                .filter_map(|(l, d)| l.get().map(|row| (row as usize, *d)))
                .filter(|(row, _)| filter.accepts(&self.chunks[*row]))
                .take(n)
                .map(|(row, d)| (self.chunks[row].chunk_id.clone(), d))
                .collect();
            if hits.len() >= n || ask >= total {
                return Ok(RankedList { stage: "dense".into(), hits });
            }
            ask = (ask * 4).min(total);
        }
    }

    /// BM25 top-`n` with the filter inside the tantivy query.
    pub fn bm25_search(&self, query: &str, n: usize, filter: &Filter) -> anyhow::Result<RankedList> {
        let f = &self.fields;
        let mut should: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for t in gauge_index::tokenizer::tokenize(query) {
            if !seen.insert(t.text.clone()) {
                continue;
            }
            for field in [f.text, f.title, f.section] {
                should.push((Occur::Should, Box::new(TermQuery::new(Term::from_field_text(field, &t.text), IndexRecordOption::WithFreqs))));
            }
        }
        if should.is_empty() {
            return Ok(RankedList { stage: "bm25".into(), hits: Vec::new() });
        }
        let mut must: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, Box::new(BooleanQuery::new(should)))];
        if !filter.sources.is_empty() {
            must.push((Occur::Must, Box::new(TermSetQuery::new(filter.sources.iter().map(|s| Term::from_field_text(f.source, s))))));
        }
        if !filter.doc_types.is_empty() {
            must.push((Occur::Must, Box::new(TermSetQuery::new(filter.doc_types.iter().map(|s| Term::from_field_text(f.doc_type, s))))));
        }
        if let Some((a, b)) = filter.pages {
            // Overlap: page_end >= a and page_start <= b.
            must.push((Occur::Must, Box::new(RangeQuery::new(std::ops::Bound::Included(Term::from_field_i64(f.page_end, a as i64)), std::ops::Bound::Unbounded))));
            must.push((Occur::Must, Box::new(RangeQuery::new(std::ops::Bound::Unbounded, std::ops::Bound::Included(Term::from_field_i64(f.page_start, b as i64))))));
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&BooleanQuery::new(must), &tantivy::collector::TopDocs::with_limit(n).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let doc: tantivy::TantivyDocument = searcher.doc(addr)?;
            let row = doc.get_first(f.row).and_then(|v| tantivy::schema::Value::as_u64(&v)).unwrap_or(0) as usize;
            hits.push((self.chunks[row].chunk_id.clone(), score));
        }
        Ok(RankedList { stage: "bm25".into(), hits })
    }

    /// Moves candidates holding every identifier of the query (see
    /// [`RetrievalConfig::promote_exact`]) to the front, recording an `exact` stage.
    pub fn promote_exact(&self, query: &str, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let identifiers: Vec<String> = gauge_index::tokenizer::tokenize(query)
            .into_iter()
            .map(|t| t.text)
            .filter(|t| t.chars().any(|c| c.is_ascii_digit()) && t.chars().count() >= 3 && t.chars().any(|c| !c.is_ascii_digit()))
            .collect();
        if identifiers.is_empty() {
            return candidates;
        }
        let (mut exact, rest): (Vec<Candidate>, Vec<Candidate>) = candidates.into_iter().partition(|c| {
            let tokens: std::collections::HashSet<String> =
                gauge_index::tokenizer::tokenize(&self.chunks[self.by_id[&c.chunk_id]].text).into_iter().map(|t| t.text).collect();
            identifiers.iter().all(|id| tokens.contains(id))
        });
        for (i, c) in exact.iter_mut().enumerate() {
            c.stages.push(gauge_retrieve::StageHit { stage: "exact".into(), rank: i + 1, score: 1.0 });
        }
        exact.extend(rest);
        exact
    }

    /// Runs the configured pipeline for one query (reranking, when configured, with the
    /// reranker given to [`Engine::with_reranker`]).
    pub fn search(&self, query: &str, cfg: &RetrievalConfig) -> anyhow::Result<SearchResult> {
        self.search_with(query, cfg, self.reranker.as_deref())
    }

    /// Runs the configured pipeline for one query with this reranker (several configs can
    /// share one engine and differ in their reranker).
    pub fn search_with(&self, query: &str, cfg: &RetrievalConfig, reranker: Option<&dyn Reranker>) -> anyhow::Result<SearchResult> {
        anyhow::ensure!(cfg.dense || cfg.bm25, "both retrievers are off; enable dense or BM25");
        let mut lists = Vec::new();
        if cfg.dense {
            lists.push(self.dense_search_with(query, cfg.candidates, &cfg.filter, cfg)?);
        }
        if cfg.bm25 {
            lists.push(self.bm25_search(query, cfg.candidates, &cfg.filter)?);
        }
        let mut fused = fuse(&lists, &cfg.fusion);
        if cfg.promote_exact {
            fused = self.promote_exact(query, fused);
        }
        let deduped = dedup_per_doc(
            fused,
            |id| {
                self.by_id.get(id).map(|&i| match cfg.dedup_by {
                    DedupKey::Doc => self.chunks[i].doc_id.as_str(),
                    DedupKey::Page => self.page_keys[i].as_str(),
                })
            },
            cfg.max_per_doc,
        );
        let deduped = match (&cfg.rerank, reranker) {
            (Some(rc), Some(reranker)) => rerank_candidates(query, deduped, rc, reranker, |id| self.chunks[self.by_id[id]].text.clone())
                .map_err(|e| anyhow::anyhow!("rerank: {e}"))?,
            (Some(_), None) => anyhow::bail!("the config asks for reranking but no reranker is loaded"),
            _ => deduped,
        };
        let kept = match apply_cutoff(deduped, cfg.cutoff) {
            Ok(c) => c,
            Err(refusal) => return Ok(SearchResult { passages: Vec::new(), refusal: Some(refusal) }),
        };
        let top: Vec<Candidate> = kept.into_iter().take(cfg.k).collect();
        let windows: Vec<Window> = if cfg.window > 0 {
            small_to_big(
                &top,
                cfg.window,
                |id| self.by_id.get(id).map(|&i| ChunkPosition { doc_id: self.chunks[i].doc_id.clone(), index: self.chunks[i].chunk_index as usize }),
                |doc| self.doc_chunks.get(doc).cloned(),
            )
        } else {
            Vec::new()
        };
        let passages = top
            .into_iter()
            .enumerate()
            .map(|(i, candidate)| {
                let chunk = self.chunks[self.by_id[&candidate.chunk_id]].clone();
                let window = windows.iter().find(|w| w.hits.contains(&candidate.chunk_id)).cloned();
                Passage { rank: i + 1, candidate, chunk, window }
            })
            .collect();
        Ok(SearchResult { passages, refusal: None })
    }
}
