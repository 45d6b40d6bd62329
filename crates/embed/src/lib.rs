//! The `embed` stage: `chunks.parquet` → `embeddings.parquet`.
//!
//! Embeds each chunk's `embed_text` when the chunk artifact has one, else its `text`, with
//! the passage prefix of the model family (or `--passage-prefix`). Query-time code uses the
//! same [`gauge_encoder::Embedder`] (loaded once) through [`load_embedder`].
#![deny(missing_docs)]
pub mod cli;

use std::path::PathBuf;

use gauge_core::schema::{read_chunks, write_embeddings, ChunkRecord};
use gauge_core::{FileEntry, Plan, Stage, StageRun};
use gauge_encoder::{device, resolve_model, Embedder, EmbedderOptions, Pooling};
use serde::{Deserialize, Serialize};

/// Stage name.
pub const STAGE: &str = "embed";
/// Output format version.
pub const FORMAT_VERSION: u32 = 1;
/// The default model (fetched by `just models`).
pub const DEFAULT_MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// Effective configuration of `embed`, echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// A LoRA adapter folder (PEFT `FEATURE_EXTRACTION`, e.g. `train-lora --target embedder`'s
    /// `adapter/`) merged into the model at load; its hash joins the fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Embed only this shard of the chunks (`i/n`, a stable partition by chunk id); `index`
    /// takes every shard's artifact and builds the same index as from an unsharded run.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub shard: Option<gauge_core::shard::Shard>,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig { model: DEFAULT_MODEL.into(), query_prefix: None, passage_prefix: None, pooling: None, normalize: None, max_length: None, adapter: None, shard: None }
    }
}

/// Run settings that do not change the output (beyond float rounding).
#[derive(Debug, Clone)]
pub struct EmbedOptions {
    /// `cpu` or `cuda[:N]`.
    pub device: String,
    /// Padded tokens per batch.
    pub token_budget: usize,
    /// Batches encoded at once (default: available cores).
    pub workers: Option<usize>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { device: "cpu".into(), token_budget: 2048, workers: None }
    }
}

/// Loads the embedder a config describes.
pub fn load_embedder(config: &EmbedConfig, runtime: &EmbedOptions) -> anyhow::Result<Embedder> {
    let source = resolve_model(&config.model)?;
    let options = EmbedderOptions {
        pooling: config.pooling,
        normalize: config.normalize,
        max_length: config.max_length,
        query_prefix: config.query_prefix.clone(),
        passage_prefix: config.passage_prefix.clone(),
        token_budget: Some(runtime.token_budget),
        workers: runtime.workers,
        adapter: config.adapter.as_ref().map(PathBuf::from),
    };
    Ok(Embedder::load(&source, &options, &device::parse(&runtime.device)?)?)
}

/// What a build did.
#[derive(Debug, Default)]
pub struct EmbedSummary {
    /// Chunks embedded.
    pub chunks: usize,
    /// Seconds spent encoding.
    pub seconds: f64,
}

/// The `embed` stage: a chunk artifact → `embeddings.parquet`.
pub struct Embed;

impl Stage for Embed {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = EmbedConfig;
    /// The chunk artifact directory (or its `chunks.parquet`).
    type Inputs = PathBuf;
    type Options = EmbedOptions;
    type State = (Vec<ChunkRecord>, Embedder);
    type Summary = EmbedSummary;

    fn plan(config: &EmbedConfig, chunks: &PathBuf, options: &EmbedOptions) -> anyhow::Result<Plan<Self::State>> {
        let (chunks_path, mut entry) = gauge_core::artifact::input_file(chunks, "chunks.parquet", "chunk")?;
        // Schema first: a wrong table is reported before the model is loaded.
        let mut chunks = read_chunks(&chunks_path)?;
        entry.rows = Some(chunks.len() as u64);
        if let Some(shard) = config.shard {
            chunks.retain(|c| shard.owns(&c.chunk_id));
        }
        let embedder = load_embedder(config, options)?;
        let info = &embedder.info;
        let mut inputs = vec![
            entry,
            FileEntry::hashed("model.safetensors", format!("{}/model.safetensors", config.model), info.weights_hash.clone()),
            FileEntry::hashed("tokenizer.json", format!("{}/tokenizer.json", config.model), info.tokenizer_hash.clone()),
        ];
        if let (Some(dir), Some(hash)) = (&config.adapter, &info.adapter_hash) {
            inputs.push(FileEntry::hashed("adapter", dir, hash.clone()));
        }
        // The effective settings (after family defaults) are what the output depends on.
        let echo = serde_json::json!({ "config": config, "embedder": info });
        Ok(Plan::new(inputs, (chunks, embedder)).echo(echo))
    }

    fn build((chunks, embedder): Self::State, run: &mut StageRun, config: &EmbedConfig, _: &PathBuf, options: &EmbedOptions) -> anyhow::Result<EmbedSummary> {
        let info = &embedder.info;
        let texts: Vec<String> = chunks.iter().map(|c| format!("{}{}", info.passage_prefix, c.embed_text.as_deref().unwrap_or(&c.text))).collect();
        let started = std::time::Instant::now();
        let ids = embedder.tokenize(&texts.iter().map(String::as_str).collect::<Vec<_>>())?;
        let bar = gauge_core::progress::bar(chunks.len() as u64, "chunks");
        let (vectors, stats) = embedder.embed_ids(&ids, |n| bar.inc(n as u64));
        bar.finish_and_clear();
        let seconds = started.elapsed().as_secs_f64();
        let flat: Vec<f32> = vectors.into_iter().flatten().collect();
        let chunk_ids: Vec<String> = chunks.iter().map(|c| c.chunk_id.clone()).collect();
        let rows = write_embeddings(&run.path("embeddings.parquet"), &chunk_ids, &flat, info.dimension)?;
        run.add_output("embeddings.parquet", Some(rows))?;
        run.set_stat("chunks", chunks.len());
        if let Some(shard) = config.shard {
            run.set_stat("shard", shard.to_string());
        }
        run.set_stat("text_column", if chunks.iter().any(|c| c.embed_text.is_some()) { "embed_text" } else { "text" });
        run.set_stat("tokens", stats.tokens);
        run.set_stat("padding_share", stats.padding_share());
        run.set_stat("batches", stats.batches);
        run.set_stat("encode_seconds", seconds);
        run.set_stat("chunks_per_second", chunks.len() as f64 / seconds.max(1e-9));
        run.set_stat("tokens_per_second", stats.tokens as f64 / seconds.max(1e-9));
        run.set_stat("device", options.device.clone());
        run.set_stat("token_budget", options.token_budget);
        Ok(EmbedSummary { chunks: chunks.len(), seconds })
    }

    fn summary_line(s: &EmbedSummary) -> String {
        format!("{} chunks in {:.1} s ({:.1} chunks/s)", s.chunks, s.seconds, s.chunks as f64 / s.seconds.max(1e-9))
    }
}
