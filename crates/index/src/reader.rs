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
        // Bytes first: the manifest's hashes for dense.faiss and chunks.parquet (once per
        // process), tantivy's own per-file checksums for bm25/ (which the manifest does not list).
        gauge_core::artifact::verify_outputs(dir)?;
        let faiss_path = dir.join("dense.faiss");
        let utf8 = faiss_path.to_str().ok_or_else(|| anyhow::anyhow!("{}: faiss reads only UTF-8 paths; move the index to a folder whose name is UTF-8", faiss_path.display()))?;
        let dense = faiss::read_index(utf8).map_err(|e| anyhow::anyhow!("{}: {e}", faiss_path.display()))?;
        let bm25 = open_committed_bm25(&dir.join("bm25")).map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("bm25").display()))?;
        check_bm25_once(&bm25, &dir.join("bm25"), dir)?;
        crate::register_tokenizer(&bm25, settings.index.analysis());
        let chunks = read_chunks(&dir.join("chunks.parquet"))?;
        Ok(IndexReader { dir: dir.to_path_buf(), manifest, settings, chunks, dense, bm25 })
    }
}

/// What was checked of a BM25 folder: its canonical path and each file's (name, size, mtime).
type Bm25Key = (PathBuf, Vec<(std::ffi::OsString, u64, Option<std::time::SystemTime>)>);

/// tantivy's per-file checksums of a committed BM25 folder, verified once per process (an
/// evaluation opens an index per config and per search rung; the folder is read once).
fn check_bm25_once(bm25: &tantivy::Index, folder: &Path, index_dir: &Path) -> anyhow::Result<()> {
    static CHECKED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<Bm25Key>>> = std::sync::OnceLock::new();
    let mut files: Vec<_> = std::fs::read_dir(folder)
        .map_err(|e| anyhow::anyhow!("{}: {e}", folder.display()))?
        .flatten()
        .filter_map(|e| e.metadata().ok().map(|m| (e.file_name(), m.len(), m.modified().ok())))
        .collect();
    files.sort();
    let key: Bm25Key = (folder.canonicalize().unwrap_or_else(|_| folder.to_path_buf()), files);
    let checked = CHECKED.get_or_init(Default::default);
    if checked.lock().expect("checked set").contains(&key) {
        return Ok(());
    }
    let corrupt = bm25.validate_checksum().map_err(|e| anyhow::anyhow!("{}: {e}", folder.display()))?;
    if let Some(f) = corrupt.iter().next() {
        anyhow::bail!("{}: changed since `index` wrote it (its checksum fails); delete {} and rerun `index`", folder.join(f).display(), index_dir.display());
    }
    checked.lock().expect("checked set").insert(key);
    Ok(())
}

/// A tantivy directory for a committed BM25 index, which is never written again: reads go
/// through tantivy's memory-mapped directory, and no lock file is taken (tantivy locks its meta
/// file while opening segments, to keep a concurrent writer's garbage collection away; a
/// committed artifact has no writer, and a read-only mount has no room for the lock file).
#[derive(Debug, Clone)]
struct CommittedDirectory(tantivy::directory::MmapDirectory);

impl tantivy::Directory for CommittedDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<std::sync::Arc<dyn tantivy::directory::FileHandle>, tantivy::directory::error::OpenReadError> {
        self.0.get_file_handle(path)
    }
    fn delete(&self, path: &Path) -> Result<(), tantivy::directory::error::DeleteError> {
        self.0.delete(path)
    }
    fn exists(&self, path: &Path) -> Result<bool, tantivy::directory::error::OpenReadError> {
        self.0.exists(path)
    }
    fn open_write(&self, path: &Path) -> Result<tantivy::directory::WritePtr, tantivy::directory::error::OpenWriteError> {
        self.0.open_write(path)
    }
    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, tantivy::directory::error::OpenReadError> {
        self.0.atomic_read(path)
    }
    fn atomic_write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.0.atomic_write(path, data)
    }
    fn sync_directory(&self) -> std::io::Result<()> {
        self.0.sync_directory()
    }
    fn acquire_lock(&self, _lock: &tantivy::directory::Lock) -> Result<tantivy::directory::DirectoryLock, tantivy::directory::error::LockError> {
        Ok(tantivy::directory::DirectoryLock::from(Box::new(())))
    }
    fn watch(&self, callback: tantivy::directory::WatchCallback) -> tantivy::Result<tantivy::directory::WatchHandle> {
        self.0.watch(callback)
    }
}

/// Opens a committed BM25 index folder for reading only: no lock file is created, so an index
/// on a read-only mount opens (see [`CommittedDirectory`]).
pub fn open_committed_bm25(dir: &Path) -> tantivy::Result<tantivy::Index> {
    tantivy::Index::open(CommittedDirectory(tantivy::directory::MmapDirectory::open(dir)?))
}
