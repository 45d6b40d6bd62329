//! The benchmark harness of every `just bench-*` recipe.
//!
//! A recipe writes a [`plan::Plan`]: comparisons of a gauge command against a reference command
//! (llama.cpp's `llama-bench`, PyTorch, ONNX Runtime …), each printing one run's figures.
//! [`plan::run`] runs each comparison as a discarded warm-up pair and then ≥ 5 A/B pairs whose
//! order alternates (gauge first in even pairs, the reference first in odd ones), and writes
//! every figure as its median with min and max over the pairs; a ratio is the median of the
//! per-pair ratios, with their range. With them go the machine's state before and after
//! ([`machine`]: load average, CPU model and flags, governor, measured read bandwidth), what the
//! reference printed about itself (stored as printed, never a hand-written build string), and a
//! stamp of the sources measured ([`sources`]: the commit and a hash of the crates on the
//! path), from which [`sources::stale`] lists the files whose measured code changed since.
//! [`table`] generates the README's "How fast" table from the files.
//!
//! A side prints its figures on stdout as one JSON object `{"figures": {name: number},
//! "describe": {...}}` ([`side::emit`]); `llama-bench -o json` and `llama-batched-bench
//! --output-format jsonl` are read as they print.

pub mod cli;
pub mod machine;
pub mod paths;
pub mod plan;
pub mod side;
pub mod sources;
pub mod stats;
pub mod table;

/// What can go wrong in the harness.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A plan, a side's output or a bench file is not what the harness expects.
    #[error("{0}")]
    Invalid(String),
}

impl BenchError {
    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        BenchError::Io { path: path.as_ref().display().to_string(), source }
    }
}

/// The harness's results.
pub type Result<T> = std::result::Result<T, BenchError>;

/// The format version of a harness bench file (`"harness": {"version": …}`).
pub const HARNESS_VERSION: u32 = 1;
