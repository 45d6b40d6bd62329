//! The retrieval engine: it owns query time. Every layer is a switch, every candidate carries
//! its per-stage ranks and scores.
//!
//! enabled retrievers (dense via faiss, BM25 via tantivy, each honouring metadata filters
//! inside) → fusion → exact-identifier promotion → dedup → rerank (cross-encoder or MaxSim) →
//! score cutoff → final `k` → small-to-big windows, each passage's span resolved.
//! [`RetrievalConfig::normalize`] holds the query-time rules, so `query`, `evaluate` and
//! `answer` rank alike.
#![deny(missing_docs)]
pub mod assemble;
pub mod cli;
pub mod config;
pub mod retriever;
pub mod rewrite;

use std::collections::BTreeSet;
use std::path::Path;

use gauge_core::schema::ChunkRecord;
use gauge_encoder::{Embedder, EmbedderOptions};
use gauge_index::{FaissDevice, IndexManifest, IndexReader};
use gauge_rank::{apply_cutoff, dedup_per_doc, fuse, rerank_candidates, small_to_big, Candidate, ChunkPosition, RankedList, Refusal, Reranker, Window};
use serde::Serialize;

pub use assemble::{call_cache_beside, IndexOptions, Models};
pub use config::{DedupKey, Filter, RetrievalConfig, SummaryUse};
pub use retriever::{Bm25Retriever, ChunkTable, DenseRetriever, Retriever};

/// How to open an index.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Load the dense retriever (its query embedder). Off: BM25 only, no model needed.
    pub dense: bool,
    /// Query embedder to use instead of the index's own (refused unless it is the same model).
    pub model: Option<String>,
    /// Device of the query embedder: `cpu` or `cuda[:N]`.
    pub device: String,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { dense: true, model: None, device: "cpu".into() }
    }
}

/// Where a passage's text sits in its document: the chunk, or its small-to-big window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassageSpan {
    /// Source file.
    pub source: String,
    /// First page.
    pub page_start: i32,
    /// Last page.
    pub page_end: i32,
    /// Start offset in the document text (characters).
    pub char_start: i64,
    /// End offset (characters, exclusive).
    pub char_end: i64,
    /// The text (the window's chunks joined by newlines).
    pub text: String,
    /// For a RAPTOR summary node: the spans of the chunks under it (a summary is judged by
    /// its leaves); empty for a chunk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaves: Vec<PassageSpan>,
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
    /// What the passage covers: the chunk, or its window.
    #[serde(skip)]
    pub span: PassageSpan,
}

/// The answer of a search.
#[derive(Debug, Clone, Serialize)]
pub struct SearchResult {
    /// Passages, best first (empty when refused).
    pub passages: Vec<Passage>,
    /// Why nothing was returned, when the cutoff refused.
    pub refusal: Option<Refusal>,
    /// The searches a query rewrite made, when the config has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<rewrite::Rewrite>,
}

/// Every intermediate list of one search, chunk ids best first ([`Engine::search_traced`]):
/// what failure attribution reads to say at which stage a gold passage was lost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SearchTrace {
    /// Each retriever's candidates (name, ids), one entry per retriever and searched text.
    pub lists: Vec<(String, Vec<String>)>,
    /// After fusion (and identifier promotion).
    pub fused: Vec<String>,
    /// After the per-document / per-page cap.
    pub deduped: Vec<String>,
    /// After reranking, when the config reranks (the reranker reads the first `n_initial`).
    pub reranked: Option<Vec<String>>,
    /// The cutoff refused.
    pub refused: bool,
    /// The final top k (before small-to-big windows are judged).
    pub top: Vec<String>,
}

impl SearchResult {
    /// The passages a reader sees: a window merged around several hits counts once, at the
    /// rank of its best hit.
    pub fn distinct(&self) -> Vec<&Passage> {
        let mut seen = BTreeSet::new();
        self.passages.iter().filter(|p| p.window.as_ref().is_none_or(|w| seen.insert((w.doc_id.clone(), w.first)))).collect()
    }
}

/// An opened index with its retrievers.
pub struct Engine {
    table: ChunkTable,
    settings: IndexManifest,
    /// The dense retriever, when the engine was opened with its embedder.
    dense: Option<DenseRetriever>,
    bm25: Bm25Retriever,
    /// Retrievers added with [`Engine::with_retriever`].
    extra: Vec<Box<dyn Retriever>>,
    /// The reranker and rewriter [`Engine::search`] uses ([`Engine::assemble`]).
    models: Models,
    /// The index manifest.
    pub manifest: gauge_core::Manifest,
}

impl Engine {
    /// Opens an index directory with the query embedder it was built with (or `options.model`,
    /// when that is the same model).
    pub fn open(dir: &Path, options: &EngineOptions) -> anyhow::Result<Engine> {
        Engine::open_shards(&[dir.to_path_buf()], options)
    }

    /// Opens shard indexes (`index --shard i/n`, one per shard) as one engine: one chunk table,
    /// dense hits merged by score across the shards' faiss indexes (exact for `Flat`), BM25
    /// hits merged by score (each shard with its own term statistics). The shards must share
    /// the embedder and the index settings (all but the shard), and no chunk may repeat.
    pub fn open_shards(dirs: &[std::path::PathBuf], options: &EngineOptions) -> anyhow::Result<Engine> {
        anyhow::ensure!(!dirs.is_empty(), "no index given");
        let readers = dirs.iter().map(|d| IndexReader::open(d)).collect::<anyhow::Result<Vec<_>>>()?;
        let dir = &dirs[0];
        let reader = &readers[0];
        let embedder = if options.dense {
            // The embedder exactly as `embed` resolved it (prefixes, pooling, normalisation, length).
            let built = &reader.settings.embedder;
            let model = options.model.clone().unwrap_or_else(|| built.model.clone());
            let embedder_options = EmbedderOptions {
                pooling: gauge_core::config::parse_as(&built.pooling).ok(),
                normalize: Some(built.normalize),
                max_length: Some(built.max_length),
                query_prefix: Some(built.query_prefix.clone()),
                passage_prefix: Some(built.passage_prefix.clone()),
                token_budget: Some(2048),
                workers: None,
                adapter: built.adapter.as_ref().map(std::path::PathBuf::from),
            };
            let load = || -> anyhow::Result<Embedder> {
                let source = gauge_encoder::resolve_model(&model)?;
                Ok(Embedder::load(&source, &embedder_options, &gauge_encoder::device::parse(&options.device)?)?)
            };
            Some(load().map_err(|e| anyhow::anyhow!("{}: the dense retriever needs the query embedder this index was built with: {e:#}", dir.display()))?)
        } else {
            None
        };
        Engine::from_readers(readers, embedder)
    }

    /// An engine over an opened index; with an embedder, checks it is the model (weights and
    /// dimension) the index was built with.
    pub fn from_reader(reader: IndexReader, embedder: Option<Embedder>) -> anyhow::Result<Engine> {
        Engine::from_readers(vec![reader], embedder)
    }

    /// [`Engine::from_reader`] over shard indexes (see [`Engine::open_shards`]).
    pub fn from_readers(readers: Vec<IndexReader>, embedder: Option<Embedder>) -> anyhow::Result<Engine> {
        let first = &readers[0];
        if let Some(e) = &embedder {
            let built = &first.settings.embedder;
            anyhow::ensure!(
                built.dimension == e.info.dimension && built.weights_hash == e.info.weights_hash && built.adapter_hash == e.info.adapter_hash,
                "{}: index built with model `{}` (dimension {}, adapter {}); the query embedder is `{}` (dimension {}, adapter {}); pass --model {} or rebuild the index",
                first.dir.display(),
                built.model,
                built.dimension,
                built.adapter.as_deref().unwrap_or("none"),
                e.info.model,
                e.info.dimension,
                e.info.adapter.as_deref().unwrap_or("none"),
                built.model
            );
        }
        for r in &readers[1..] {
            let same_index = gauge_index::IndexConfig { shard: None, ..r.settings.index.clone() } == gauge_index::IndexConfig { shard: None, ..first.settings.index.clone() };
            anyhow::ensure!(
                r.settings.embedder == first.settings.embedder && same_index,
                "{}: built with other settings than {} (embedder or index type); shard indexes searched together must differ only in their shard",
                r.dir.display(),
                first.dir.display()
            );
        }
        let mut seen = std::collections::HashSet::new();
        for r in &readers {
            if let Some(c) = r.chunks.iter().find(|c| !seen.insert(c.chunk_id.clone())) {
                anyhow::bail!("{}: chunk `{}` is also in another index given; pass each shard once", r.dir.display(), c.chunk_id);
            }
        }
        let mut readers = readers.into_iter();
        let IndexReader { manifest, settings, chunks, dense, bm25, .. } = readers.next().expect("one reader");
        let mut table = chunks;
        let mut faiss = vec![dense];
        let mut offsets = vec![0];
        let mut bm25s = vec![bm25];
        for r in readers {
            offsets.push(table.len());
            table.extend(r.chunks);
            faiss.push(r.dense);
            bm25s.push(r.bm25);
        }
        let dense = embedder.map(|e| DenseRetriever::sharded(faiss, &settings.index.faiss, e));
        let pairs: Vec<(&tantivy::Index, usize)> = bm25s.iter().zip(offsets).collect();
        let bm25 = Bm25Retriever::sharded(&pairs)?;
        Ok(Engine { table: ChunkTable::new(table), settings, dense, bm25, extra: Vec::new(), models: Models::none(), manifest })
    }

    /// Adds a retriever, fused after the built-in ones when its config switch is on.
    pub fn with_retriever(mut self, retriever: Box<dyn Retriever>) -> Engine {
        self.extra.push(retriever);
        self
    }

    /// Moves the dense index to `device` (a GPU copy for `cuda[:N]`, in builds with the
    /// `faiss-gpu` feature), with `cfg`'s `nprobe` / `efSearch` set first: a GPU index keeps
    /// the values it was placed with, and a search asking for others is refused.
    pub fn on_faiss_device(mut self, device: FaissDevice, cfg: &RetrievalConfig) -> anyhow::Result<Engine> {
        if device.is_cpu() {
            return Ok(self);
        }
        let dense = self.dense.as_mut().ok_or_else(|| anyhow::anyhow!("no dense retriever to place on {device} (dense retrieval is off)"))?;
        dense.place(device, cfg.nprobe, cfg.ef_search)?;
        Ok(self)
    }

    /// Where the dense index searches (`None` without a dense retriever).
    pub fn faiss_device(&self) -> Option<FaissDevice> {
        self.dense.as_ref().map(DenseRetriever::device)
    }

    /// Every retriever, in fusion order: dense, BM25, then the added ones.
    pub fn retrievers(&self) -> impl Iterator<Item = &dyn Retriever> {
        self.dense.iter().map(|d| d as &dyn Retriever).chain(std::iter::once(&self.bm25 as &dyn Retriever)).chain(self.extra.iter().map(|r| r.as_ref()))
    }

    /// The chunk table.
    pub fn chunks(&self) -> &ChunkTable {
        &self.table
    }

    /// A chunk by id.
    pub fn chunk(&self, id: &str) -> Option<&ChunkRecord> {
        self.table.get(id)
    }

    /// The index's typed settings (its faiss type, stemming, embedder).
    pub fn settings(&self) -> &IndexManifest {
        &self.settings
    }

    /// One retriever's list for a query (for benchmarks and debugging).
    pub fn retrieve(&self, name: &str, query: &str, cfg: &RetrievalConfig) -> anyhow::Result<RankedList> {
        let r = self.retrievers().find(|r| r.name() == name).ok_or_else(|| anyhow::anyhow!("no retriever `{name}` in this engine"))?;
        r.retrieve(query, cfg, &self.table)
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
            let text = self.table.get(&c.chunk_id).map_or("", |c| c.text.as_str());
            let tokens: std::collections::HashSet<String> = gauge_index::tokenizer::tokenize(text).into_iter().map(|t| t.text).collect();
            identifiers.iter().all(|id| tokens.contains(id))
        });
        for (i, c) in exact.iter_mut().enumerate() {
            c.stages.push(gauge_rank::StageHit { stage: "exact".into(), rank: i + 1, score: 1.0 });
        }
        exact.extend(rest);
        exact
    }

    /// Runs the configured pipeline for one query with the models [`Engine::assemble`] loaded
    /// for it (its reranker, its rewriter).
    pub fn search(&self, query: &str, cfg: &RetrievalConfig) -> anyhow::Result<SearchResult> {
        let (reranker, rewriter) = self.models.of(cfg);
        self.search_full(query, cfg, reranker, rewriter)
    }

    /// Runs the configured pipeline for one query with this reranker (several configs can
    /// share one engine and differ in their reranker). The config is normalised first.
    pub fn search_with(&self, query: &str, cfg: &RetrievalConfig, reranker: Option<&dyn Reranker>) -> anyhow::Result<SearchResult> {
        self.search_full(query, cfg, reranker, None)
    }

    /// [`Engine::search_with`] with a query rewriter for configs with `rewrite`: every
    /// retriever searches each text the rewrite made (the dense retriever its dense text) and
    /// all the lists are fused; rerank and identifier promotion read the original question.
    pub fn search_full(&self, query: &str, cfg: &RetrievalConfig, reranker: Option<&dyn Reranker>, rewriter: Option<&rewrite::LlmRewriter>) -> anyhow::Result<SearchResult> {
        self.search_inner(query, cfg, reranker, rewriter, None)
    }

    /// [`Engine::search_full`], also recording every intermediate list.
    pub fn search_traced(&self, query: &str, cfg: &RetrievalConfig, reranker: Option<&dyn Reranker>, rewriter: Option<&rewrite::LlmRewriter>) -> anyhow::Result<(SearchResult, SearchTrace)> {
        let mut trace = SearchTrace::default();
        let result = self.search_inner(query, cfg, reranker, rewriter, Some(&mut trace))?;
        Ok((result, trace))
    }

    fn search_inner(&self, query: &str, cfg: &RetrievalConfig, reranker: Option<&dyn Reranker>, rewriter: Option<&rewrite::LlmRewriter>, mut trace: Option<&mut SearchTrace>) -> anyhow::Result<SearchResult> {
        let ids = |c: &[Candidate]| c.iter().map(|c| c.chunk_id.clone()).collect::<Vec<_>>();
        anyhow::ensure!(!query.trim().is_empty(), "the question is empty; ask something");
        anyhow::ensure!(query.len() <= gauge_core::golden::MAX_QUESTION_BYTES, "the question is {} bytes long; at most {} are searched (ask a shorter question)", query.len(), gauge_core::golden::MAX_QUESTION_BYTES);
        cfg.validate()?;
        let cfg = &cfg.clone().normalize().clamped_to(self.table.chunks.len());
        anyhow::ensure!(!cfg.dense || self.dense.is_some(), "dense retrieval needs the query embedder; open the engine with dense on");
        let rewrite = match (&cfg.rewrite, rewriter) {
            (Some(rc), Some(r)) => Some(r.rewrite(query, rc)?),
            (Some(_), None) => anyhow::bail!("the config asks for query rewriting but no rewriter is loaded"),
            (None, _) => None,
        };
        let searches: Vec<(String, String)> = match &rewrite {
            Some(r) => r.queries.clone(),
            None => vec![(query.to_string(), query.to_string())],
        };
        let mut lists = Vec::new();
        for (bm25_text, dense_text) in &searches {
            for r in self.retrievers().filter(|r| r.enabled(cfg)) {
                let text = if r.name() == "dense" { dense_text } else { bm25_text };
                let list = r.retrieve(text, cfg, &self.table)?;
                if let Some(t) = trace.as_deref_mut() {
                    t.lists.push((r.name().to_string(), list.hits.iter().map(|(id, _)| id.clone()).collect()));
                }
                lists.push(list);
            }
        }
        let mut fused = fuse(&lists, &cfg.fusion);
        if cfg.promote_exact {
            fused = self.promote_exact(query, fused);
        }
        if let Some(t) = trace.as_deref_mut() {
            t.fused = ids(&fused);
        }
        let t = &self.table;
        let deduped = dedup_per_doc(
            fused,
            |id| {
                t.row(id).map(|i| match cfg.dedup_by {
                    DedupKey::Doc => t.chunks[i].doc_id.as_str(),
                    DedupKey::Page => t.page_key(i),
                })
            },
            cfg.max_per_doc,
        );
        if let Some(tr) = trace.as_deref_mut() {
            tr.deduped = ids(&deduped);
        }
        let deduped = match (&cfg.rerank, reranker) {
            (Some(rc), Some(reranker)) => {
                let reranked = rerank_candidates(query, deduped, rc, reranker, |id| t.get(id).map(|c| c.text.clone()).unwrap_or_default()).map_err(|e| anyhow::anyhow!("rerank: {e}"))?;
                if let Some(tr) = trace.as_deref_mut() {
                    tr.reranked = Some(ids(&reranked));
                }
                reranked
            }
            (Some(_), None) => anyhow::bail!("the config asks for reranking but no reranker is loaded"),
            _ => deduped,
        };
        let kept = match apply_cutoff(deduped, cfg.cutoff) {
            Ok(c) => c,
            Err(refusal) => {
                if let Some(tr) = trace.as_deref_mut() {
                    tr.refused = true;
                }
                return Ok(SearchResult { passages: Vec::new(), refusal: Some(refusal), rewrite });
            }
        };
        let top: Vec<Candidate> = match cfg.summaries {
            SummaryUse::Keep => kept.into_iter().take(cfg.k).collect(),
            SummaryUse::Exclude => kept.into_iter().filter(|c| t.get(&c.chunk_id).is_none_or(|c| !c.is_summary())).take(cfg.k).collect(),
            SummaryUse::Expand => self.expand_summaries(kept, cfg.k),
        };
        if let Some(tr) = trace {
            tr.top = ids(&top);
        }
        let windows: Vec<Window> = if cfg.window > 0 {
            small_to_big(
                &top,
                cfg.window,
                |id| t.get(id).filter(|c| !c.is_summary()).map(|c| ChunkPosition { doc_id: c.doc_id.clone(), index: c.chunk_index as usize }),
                |doc| t.doc_chunks(doc).cloned(),
            )
        } else {
            Vec::new()
        };
        let passages = top
            .into_iter()
            .enumerate()
            .map(|(i, candidate)| {
                let chunk = t.get(&candidate.chunk_id).expect("candidates come from the table").clone();
                let window = windows.iter().find(|w| w.hits.contains(&candidate.chunk_id)).cloned();
                let span = self.span_of(&chunk, window.as_ref());
                Passage { rank: i + 1, candidate, chunk, window, span }
            })
            .collect();
        Ok(SearchResult { passages, refusal: None, rewrite })
    }

    /// The first `k` passages of `ranked` with each summary node replaced, at its rank, by the
    /// chunks under it: first those also in `ranked` (in its order), then the others in
    /// document order; a chunk already placed is not repeated. An expanded chunk keeps the
    /// summary's score and gains a `summary` stage hit (the summary's rank).
    pub fn expand_summaries(&self, ranked: Vec<Candidate>, k: usize) -> Vec<Candidate> {
        let t = &self.table;
        let position: std::collections::HashMap<&str, usize> = ranked.iter().enumerate().map(|(i, c)| (c.chunk_id.as_str(), i)).collect();
        let mut placed: BTreeSet<String> = BTreeSet::new();
        let mut out = Vec::new();
        for (rank, c) in ranked.iter().enumerate() {
            if out.len() >= k {
                break;
            }
            let Some(chunk) = t.get(&c.chunk_id) else { continue };
            if !chunk.is_summary() {
                if placed.insert(c.chunk_id.clone()) {
                    out.push(c.clone());
                }
                continue;
            }
            let mut leaves = gauge_core::schema::leaves_of([chunk.chunk_id.as_str()], &|id| t.get(id));
            leaves.sort_by_key(|l| (position.get(l.chunk_id.as_str()).copied().unwrap_or(usize::MAX), l.source.clone(), l.chunk_index));
            for leaf in leaves {
                if out.len() >= k {
                    break;
                }
                if !placed.insert(leaf.chunk_id.clone()) {
                    continue;
                }
                let mut stages = position.get(leaf.chunk_id.as_str()).map(|&i| ranked[i].stages.clone()).unwrap_or_default();
                stages.push(gauge_rank::StageHit { stage: "summary".into(), rank: rank + 1, score: c.score });
                out.push(Candidate { chunk_id: leaf.chunk_id.clone(), score: c.score, stages });
            }
        }
        out
    }

    /// The span of a chunk on its own (a summary node's carries its leaves' spans).
    pub fn passage_span(&self, chunk: &ChunkRecord) -> PassageSpan {
        self.span_of(chunk, None)
    }

    /// The span a passage covers: its window's chunks (pages and characters from first to
    /// last, texts joined by newlines), or the chunk.
    fn span_of(&self, chunk: &ChunkRecord, window: Option<&Window>) -> PassageSpan {
        let chunks: Vec<&ChunkRecord> = match window {
            Some(w) => w.chunk_ids.iter().filter_map(|id| self.table.get(id)).collect(),
            None => vec![chunk],
        };
        let chunks = if chunks.is_empty() { vec![chunk] } else { chunks };
        let leaves = if chunk.is_summary() {
            gauge_core::schema::leaves_of([chunk.chunk_id.as_str()], &|id| self.table.get(id)).into_iter().map(|l| self.span_of(l, None)).collect()
        } else {
            Vec::new()
        };
        PassageSpan {
            source: chunk.source.clone(),
            page_start: chunks.iter().map(|c| c.page_start).min().unwrap_or(chunk.page_start),
            page_end: chunks.iter().map(|c| c.page_end).max().unwrap_or(chunk.page_end),
            char_start: chunks.iter().map(|c| c.char_start).min().unwrap_or(chunk.char_start),
            char_end: chunks.iter().map(|c| c.char_end).max().unwrap_or(chunk.char_end),
            text: chunks.iter().map(|c| c.text.as_str()).collect::<Vec<_>>().join("\n"),
            leaves,
        }
    }
}
