//! Reading an index artifact back: its typed manifest and everything query time opens.
use std::path::{Path, PathBuf};

use gauge_core::schema::{read_chunks, ChunkRecord};
use gauge_core::Manifest;
use serde::{Deserialize, Serialize};

use crate::IndexConfig;

/// The embedder an index was built with, as `embed` recorded it (every setting resolved).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BuiltEmbedder {
    /// Model id or folder as configured.
    pub model: String,
    /// Model family (defaults).
    pub family: String,
    /// BLAKE3 of `model.safetensors`.
    pub weights_hash: String,
    /// BLAKE3 of `tokenizer.json`.
    pub tokenizer_hash: String,
    /// Vector dimension.
    pub dimension: usize,
    /// Pooling (`mean`, `cls`).
    pub pooling: String,
    /// L2 normalisation.
    pub normalize: bool,
    /// Maximum tokens per text.
    pub max_length: usize,
    /// Prefix added to queries.
    pub query_prefix: String,
    /// Prefix added to passages.
    pub passage_prefix: String,
    /// The LoRA adapter merged into the model (`embed`'s `adapter`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_hash: Option<String>,
}

/// The settings an index artifact records in its manifest (`config`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IndexManifest {
    /// The index settings.
    pub index: IndexConfig,
    /// The embedder of its vectors.
    pub embedder: BuiltEmbedder,
}

impl IndexManifest {
    /// Reads and checks the manifest of an index directory.
    pub fn read(dir: &Path) -> anyhow::Result<(Manifest, IndexManifest)> {
        let manifest = Manifest::read(dir)?;
        anyhow::ensure!(manifest.stage == crate::STAGE, "{}: not an index artifact (stage `{}`); pass the directory printed by `index`", dir.display(), manifest.stage);
        let typed: IndexManifest = serde_json::from_value(manifest.config.clone())
            .map_err(|e| anyhow::anyhow!("{}: index manifest from another gauge version ({e}); rebuild the index", dir.display()))?;
        Ok((manifest, typed))
    }
}

/// An opened index directory: manifest, chunk table (faiss row order), faiss and BM25 indexes.
pub struct IndexReader {
    /// The directory.
    pub dir: PathBuf,
    /// The raw manifest.
    pub manifest: Manifest,
    /// Its typed settings.
    pub settings: IndexManifest,
    /// The chunks; row `i` is faiss vector `i`.
    pub chunks: Vec<ChunkRecord>,
    /// The dense index, on the CPU.
    pub dense: faiss::index::IndexImpl,
    /// The BM25 index, with gauge's tokenizer registered.
    pub bm25: tantivy::Index,
}

impl IndexReader {
    /// Opens every part of an index directory.
    pub fn open(dir: &Path) -> anyhow::Result<IndexReader> {
        let (manifest, settings) = IndexManifest::read(dir)?;
        let faiss_path = dir.join("dense.faiss");
        let utf8 = faiss_path.to_str().ok_or_else(|| anyhow::anyhow!("{}: faiss reads only UTF-8 paths; move the index to a folder whose name is UTF-8", faiss_path.display()))?;
        let dense = faiss::read_index(utf8).map_err(|e| anyhow::anyhow!("{}: {e}", faiss_path.display()))?;
        let bm25 = tantivy::Index::open_in_dir(dir.join("bm25")).map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("bm25").display()))?;
        crate::register_tokenizer(&bm25, settings.index.stemming);
        let chunks = read_chunks(&dir.join("chunks.parquet"))?;
        Ok(IndexReader { dir: dir.to_path_buf(), manifest, settings, chunks, dense, bm25 })
    }
}
