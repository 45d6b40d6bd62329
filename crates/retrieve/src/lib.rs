//! The retrieval engine's ranking logic, independent of the indexes that feed it.
//!
//! Retrievers (dense, BM25) each return a [`RankedList`]; [`fuse`] combines them with the
//! configured [`Fusion`], keeping every candidate's per-stage rank and score so a result can
//! say why it is there; [`dedup_per_doc`], [`small_to_big`] and [`apply_cutoff`] are the
//! later switchable layers. (The faiss/tantivy retrievers and the `query` command are the
//! rest of this work.)
pub mod fusion;
pub mod layers;

pub use fusion::{fuse, Candidate, Fusion, Normalization, RankedList, StageHit};
pub use layers::{apply_cutoff, dedup_per_doc, rerank_candidates, small_to_big, ChunkPosition, Refusal, RerankConfig, RerankKind, Reranker, Window};
