//! Retrieval metrics and the statistics around them (the `evaluate` stage builds on these).
pub mod metrics;
pub mod stats;
