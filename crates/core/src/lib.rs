//! The contracts every gauge stage shares (the lowest floor: it depends on no other gauge
//! crate).
//!
//! - [`stage`]: the stage contract ([`stage::Stage`], [`stage::run`], [`stage::Dag`]).
//! - [`cli`]: the stage binaries' shared command line ([`cli::stage_main`]).
//! - [`config`]: one config language (defaults → file → `--set` → flags; pipelines too).
//! - [`schema`]: every Parquet column of every artifact, documented in one place.
//! - [`table`]: reading and writing those tables (arrow-rs + parquet, zstd).
//! - [`artifact`]: content-addressed, crash-safe output directories with a `manifest.json`.
//! - [`golden`]: the golden-set format (written by `synth-data`, read by `evaluate`).
//! - [`models`]: where model folders are found (models directory, Hugging Face cache).
//! - [`hash`]: content hashes used for ids and fingerprints.
//! - [`names`]: names that become paths (plain names, paths confined to a root).
//! - [`owner`]: which host, boot and process made a temporary folder.
//! - [`text`]: text utilities shared by stages.
//! - [`rng`]: the seeded generator behind every sampled or resampled result.
//! - [`progress`]: progress bars on stderr.
#![deny(missing_docs)]

pub mod artifact;
pub mod cli;
pub mod config;
pub mod font;
pub mod golden;
pub mod hash;
pub mod machine;
pub mod models;
pub mod names;
pub mod owner;
pub mod progress;
pub mod read;
pub mod rng;
pub mod schema;
pub mod shard;
pub mod stage;
pub mod table;
pub mod text;

pub use artifact::{ArtifactStore, FileEntry, Manifest, StageOutcome, StageRun};
pub use stage::{Built, Plan, Stage};

/// Version of gauge, recorded in manifests.
pub const GAUGE_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Git commit gauge was built from (`-dirty` when the tree had changes), recorded in manifests.
pub const GIT_COMMIT: &str = env!("GAUGE_GIT_COMMIT");

/// Errors from artifact I/O.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// An I/O failure on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A Parquet file could not be read or written.
    #[error("{path}: {message}")]
    Parquet {
        /// The Parquet file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A table does not have the columns the stage expects.
    #[error("{path}: wrong schema: {message}")]
    Schema {
        /// The Parquet file.
        path: std::path::PathBuf,
        /// What was expected and what was found.
        message: String,
    },
    /// An artifact directory is missing or incomplete.
    #[error("{path}: {message}")]
    Artifact {
        /// The directory involved.
        path: std::path::PathBuf,
        /// What went wrong and how to fix it.
        message: String,
    },
}

impl CoreError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<std::path::PathBuf>, source: std::io::Error) -> Self {
        CoreError::Io { path: path.into(), source }
    }
}

/// Sets up `tracing` logs on stderr; `RUST_LOG` overrides the default `info` level.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person at a terminal: a log file or a pipe gets plain text, and
    // `NO_COLOR` (no-color.org) turns it off everywhere.
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Reports a stage's outcome: the summary (or the cache hit) on stderr, then the artifact
/// directory as the last line of stdout, for the next stage to read.
pub fn report_outcome(stage: &str, dir: &std::path::Path, cache_hit: bool, summary: impl FnOnce() -> String) {
    if cache_hit {
        eprintln!("{stage}: cache hit, output already complete");
    } else {
        eprintln!("{stage}: {}", summary());
    }
    outln!("{}", dir.display());
}

/// The exit status after stdout was closed early: 128 + SIGPIPE, as a shell reports a tool the
/// signal ended.
pub const BROKEN_PIPE_STATUS: i32 = 141;

/// Writes one line to stdout, like `println!`, but a reader that closed the pipe early
/// (`extract … | head`) ends the process quietly with status 141 — what a Unix tool killed by
/// SIGPIPE reports, so `set -o pipefail` still sees that not everything was delivered (a check
/// piped to `grep -m1` never reads as passed) — instead of a panic; any other write error is one
/// line on stderr and status 1. Use it through [`outln!`].
pub fn write_stdout_line(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(BROKEN_PIPE_STATUS),
        Err(e) => {
            eprintln!("gauge: cannot write to stdout ({e})");
            std::process::exit(1)
        }
    }
}

/// `println!` for a stage's stdout: a closed pipe ends the process quietly
/// ([`write_stdout_line`]).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_stdout_line(format_args!($($arg)*))
    };
}

/// Runs a binary's body; on error prints one line (`<stage>: error: …`, causes joined by
/// `: `) to stderr and exits with status 1.
pub fn run_main(stage: &str, body: impl FnOnce() -> anyhow::Result<()>) {
    init_logging();
    if let Err(e) = body() {
        let line = format!("{e:#}").replace('\n', " ");
        eprintln!("{stage}: error: {line}");
        std::process::exit(1);
    }
}

/// A crash-test hook: when the environment variable `GAUGE_FAILPOINT` names this point, the
/// process aborts here (as a `kill -9` would stop it), so tests can prove that a death between
/// two steps loses nothing. Costs one environment lookup when unset.
pub fn failpoint(name: &str) {
    if std::env::var("GAUGE_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("gauge: failpoint `{name}`: aborting");
        std::process::abort();
    }
}
