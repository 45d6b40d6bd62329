//! The `evaluate` stage: golden sets, chunking-independent relevance, retrieval metrics with
//! seeded bootstrap intervals and paired tests, and the ablation pipeline (`just ablate`).
pub mod ablate;
pub mod golden;
pub mod metrics;
pub mod pipeline;
pub mod relevance;
pub mod report;
pub mod stats;

pub use ablate::{run_pipeline, AblateOptions, AblateOutput};
pub use golden::{load_golden, GoldItem, GoldenQuestion};
pub use pipeline::{Pipeline, StageConfigs, Variant};
pub use relevance::RelevanceMode;
