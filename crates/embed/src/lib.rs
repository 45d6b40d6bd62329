//! The `embed` stage: `chunks.parquet` → `embeddings.parquet`.
//!
//! Embeds each chunk's `embed_text` when the chunk artifact has one, else its `text`, with
//! the passage prefix of the model family (or `--passage-prefix`). Query-time code uses the
//! same [`gauge_encoder::Embedder`] (loaded once) through [`load_embedder`].
use std::path::{Path, PathBuf};

use gauge_core::artifact::{artifact_dir, StageSpec};
use gauge_core::schema::{read_chunks, write_embeddings};
use gauge_core::{hash, ArtifactStore, FileEntry, StageOutcome};
use gauge_encoder::{device, resolve_model, Embedder, EmbedderOptions, Pooling};
use serde::{Deserialize, Serialize};

/// Stage name.
pub const STAGE: &str = "embed";
/// Output format version.
pub const FORMAT_VERSION: u32 = 1;
/// The default model (fetched by `just models`).
pub const DEFAULT_MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// Effective configuration of `embed`, echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedConfig {
    /// Model folder or hub id.
    pub model: String,
    /// Query prefix (default: the model family's).
    pub query_prefix: Option<String>,
    /// Passage prefix (default: the model family's).
    pub passage_prefix: Option<String>,
    /// Pooling override.
    pub pooling: Option<Pooling>,
    /// Normalisation override.
    pub normalize: Option<bool>,
    /// Maximum tokens per text override.
    pub max_length: Option<usize>,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig { model: DEFAULT_MODEL.into(), query_prefix: None, passage_prefix: None, pooling: None, normalize: None, max_length: None }
    }
}

/// Runtime settings that do not change the output (beyond float rounding).
#[derive(Debug, Clone)]
pub struct Runtime {
    /// `cpu` or `cuda[:N]`.
    pub device: String,
    /// Padded tokens per batch.
    pub token_budget: usize,
    /// Batches encoded at once (default: available cores).
    pub workers: Option<usize>,
    /// Recompute even when the output exists.
    pub force: bool,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime { device: "cpu".into(), token_budget: 2048, workers: None, force: false }
    }
}

/// Loads the embedder a config describes.
pub fn load_embedder(config: &EmbedConfig, runtime: &Runtime) -> anyhow::Result<Embedder> {
    let source = resolve_model(&config.model)?;
    let options = EmbedderOptions {
        pooling: config.pooling,
        normalize: config.normalize,
        max_length: config.max_length,
        query_prefix: config.query_prefix.clone(),
        passage_prefix: config.passage_prefix.clone(),
        token_budget: Some(runtime.token_budget),
        workers: runtime.workers,
    };
    Ok(Embedder::load(&source, &options, &device::parse(&runtime.device)?)?)
}

/// The result of a run.
pub struct EmbedOutput {
    /// Artifact directory.
    pub dir: PathBuf,
    /// Whether it already existed.
    pub cache_hit: bool,
    /// Chunks embedded (0 on a cache hit).
    pub chunks: usize,
    /// Seconds spent encoding.
    pub seconds: f64,
}

/// Runs the stage on a chunks artifact (directory or `chunks.parquet`).
pub fn run(chunks_arg: &Path, config: &EmbedConfig, runtime: &Runtime, store: &ArtifactStore) -> anyhow::Result<EmbedOutput> {
    let chunks_dir = artifact_dir(chunks_arg);
    let chunks_path = chunks_dir.join("chunks.parquet");
    if !chunks_path.is_file() {
        anyhow::bail!("{}: no chunks.parquet here; pass the directory printed by `chunk`", chunks_dir.display());
    }
    // Schema first: a wrong table is reported before the model is loaded.
    let chunks = read_chunks(&chunks_path)?;
    let embedder = load_embedder(config, runtime)?;
    let info = &embedder.info;
    let inputs = vec![
        FileEntry { path: chunks_path.display().to_string(), name: "chunks.parquet".into(), hash: hash::file_hash(&chunks_path)?, rows: Some(chunks.len() as u64) },
        FileEntry { path: format!("{}/model.safetensors", config.model), name: "model.safetensors".into(), hash: info.weights_hash.clone(), rows: None },
        FileEntry { path: format!("{}/tokenizer.json", config.model), name: "tokenizer.json".into(), hash: info.tokenizer_hash.clone(), rows: None },
    ];
    // The effective settings (after family defaults) are what the output depends on.
    let effective = serde_json::json!({ "config": config, "embedder": info });
    let spec = StageSpec { stage: STAGE, format_version: FORMAT_VERSION, config: &effective, inputs, seed: None };
    let mut run = match store.begin(spec, runtime.force)? {
        StageOutcome::CacheHit(dir) => return Ok(EmbedOutput { dir, cache_hit: true, chunks: 0, seconds: 0.0 }),
        StageOutcome::Run(run) => run,
    };
    let texts: Vec<String> = chunks
        .iter()
        .map(|c| format!("{}{}", info.passage_prefix, c.embed_text.as_deref().unwrap_or(&c.text)))
        .collect();
    let started = std::time::Instant::now();
    let ids = embedder.tokenize(&texts.iter().map(String::as_str).collect::<Vec<_>>())?;
    let bar = gauge_core::progress::bar(chunks.len() as u64, "chunks");
    let (vectors, stats) = embedder.embed_ids(&ids, |n| bar.inc(n as u64));
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let dim = info.dimension;
    let flat: Vec<f32> = vectors.into_iter().flatten().collect();
    let chunk_ids: Vec<String> = chunks.iter().map(|c| c.chunk_id.clone()).collect();
    let rows = write_embeddings(&run.path("embeddings.parquet"), &chunk_ids, &flat, dim)?;
    run.add_output("embeddings.parquet", Some(rows))?;
    run.set_stat("chunks", chunks.len());
    run.set_stat("text_column", if chunks.iter().any(|c| c.embed_text.is_some()) { "embed_text" } else { "text" });
    run.set_stat("tokens", stats.tokens);
    run.set_stat("padding_share", stats.padding_share());
    run.set_stat("batches", stats.batches);
    run.set_stat("encode_seconds", seconds);
    run.set_stat("chunks_per_second", chunks.len() as f64 / seconds.max(1e-9));
    run.set_stat("tokens_per_second", stats.tokens as f64 / seconds.max(1e-9));
    run.set_stat("device", runtime.device.clone());
    run.set_stat("token_budget", runtime.token_budget);
    let dir = run.commit()?;
    Ok(EmbedOutput { dir, cache_hit: false, chunks: chunks.len(), seconds })
}
