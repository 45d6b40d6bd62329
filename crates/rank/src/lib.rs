//! Ranking logic, independent of the indexes that feed it: what happens to retrievers'
//! ranked lists on their way to the final passages.
//!
//! Retrievers (dense, BM25, …) each return a [`RankedList`]; [`fusion`] combines them,
//! keeping every candidate's per-stage rank and score so a result can say why it is there;
//! [`dedup`], [`rerank`], [`cutoff`] and [`window`] are the later switchable layers, applied
//! by the engine in that order.
#![deny(missing_docs)]
pub mod cutoff;
pub mod dedup;
pub mod fusion;
pub mod rerank;
pub mod window;

pub use cutoff::{apply_cutoff, Refusal};
pub use dedup::dedup_per_doc;
pub use fusion::{fuse, Candidate, Fusion, Normalization, RankedList, StageHit};
pub use rerank::{rerank_candidates, RerankConfig, RerankFusion, RerankKind, Reranker};
pub use window::{small_to_big, ChunkPosition, Window};
