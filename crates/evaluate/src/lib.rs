//! The `evaluate` stage: a pipeline's ablation with chunking-independent relevance, retrieval
//! metrics with seeded bootstrap intervals and paired tests (`just ablate`).
//!
//! - [`pipeline`]: pipeline files (baseline + variants, merged by the one config language).
//! - [`chain`]: each config's upstream build chain, as data for the stage DAG.
//! - [`ablate`]: the [`Evaluate`] stage as phases: [`planning`] (upstream built, golden set
//!   checked) → [`config_search`] (`[search]`) → [`retrieve`] (every config's searches) →
//!   [`tables`] (metrics, paired tests, corrections; shared with [`verify`]) → [`answering`]
//!   (answer rows, the judge) → [`gate`] → [`outputs`] (the run's files).
//! - [`relevance`], [`metrics`]: judging passages and per-question metric math.
//! - [`answers`]: answer rows (`[answer]`) and their deterministic metrics.
//! - [`judge`]: the LLM judge of answer rows (`[judge]`).
//! - [`metric`]: the metric registry (name, computation, where it is printed).
//! - [`rows`]: the table rows; [`report`]: Parquet, TREC, Markdown and the chart.
//! - [`stats`]: bootstrap intervals and paired tests, corrected over a family.
//! - [`search`]: `[search]`, the config search confirmed on held-out questions.
#![deny(missing_docs)]
pub mod ablate;
pub mod answering;
pub mod answers;
pub mod chain;
pub mod cli;
pub mod config_search;
pub mod cross_set;
pub mod dag;
pub mod failures;
pub mod gate;
pub mod judge;
pub mod metric;
pub mod metrics;
pub mod outputs;
pub mod pipeline;
pub mod planning;
pub mod provenance;
pub mod refusal;
pub mod variant;
pub mod relevance;
pub mod report;
pub mod report_page;
pub mod retrieve;
pub mod rows;
pub mod search;
pub mod search_space;
pub mod stats;
pub mod tables;
pub mod verify;

pub use ablate::{Evaluate, EvaluateConfig, EvaluateOptions};
pub use gauge_core::golden::{load_golden, GoldItem, GoldenQuestion};
pub use pipeline::{Pipeline, StageConfigs, Variant};
pub use relevance::RelevanceMode;
