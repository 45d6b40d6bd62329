//! A stage's inputs from upstream artifacts: an input file hashed for the plan, the embedded
//! chunks of an embedding artifact, the artifact folder a path names.
use std::path::{Path, PathBuf};

use super::{FileEntry, Manifest};
use crate::CoreError;

/// An input file of an upstream artifact, hashed: `arg` is the artifact directory (or the
/// file itself); `made_by` names the stage whose printed directory to pass when it is missing.
pub fn input_file(arg: &Path, file: &str, made_by: &str) -> Result<(PathBuf, FileEntry), CoreError> {
    let dir = artifact_dir(arg);
    let path = dir.join(file);
    if !path.is_file() {
        return Err(CoreError::Artifact { path: dir, message: format!("no {file} here; pass the directory printed by `{made_by}`") });
    }
    let entry = FileEntry::file(file, &path)?;
    // The bytes must be the ones the upstream stage recorded (a flipped byte is an error, not a
    // different result).
    super::check_input(&dir, file, &entry)?;
    Ok((path, entry))
}

/// An embed artifact and the chunk artifact its rows were made from.
#[derive(Debug, Clone)]
pub struct EmbeddedChunks {
    /// `chunks.parquet`.
    pub chunks_path: PathBuf,
    /// Its manifest input entry.
    pub chunks_entry: FileEntry,
    /// `embeddings.parquet`.
    pub embeddings_path: PathBuf,
    /// Its manifest input entry.
    pub embeddings_entry: FileEntry,
    /// The embed artifact's manifest.
    pub embeddings_manifest: Manifest,
}

/// Resolves an embed artifact and its chunks: `chunks` when given (it must be the artifact
/// `embed` read: same hash), else the one the embed manifest names.
pub fn embedded_chunks(embeddings: &Path, chunks: Option<&Path>) -> Result<EmbeddedChunks, CoreError> {
    let (embeddings_path, embeddings_entry) = input_file(embeddings, "embeddings.parquet", "embed")?;
    let emb_dir = artifact_dir(embeddings);
    let embeddings_manifest = Manifest::read(&emb_dir)?;
    let named = embeddings_manifest.inputs.iter().find(|i| i.name == "chunks.parquet");
    let chunks_arg = match chunks {
        Some(c) => c.to_path_buf(),
        None => named
            .map(|i| PathBuf::from(&i.path))
            .ok_or_else(|| CoreError::Artifact { path: emb_dir.clone(), message: "the manifest names no chunk artifact; pass --chunks".into() })?,
    };
    let (chunks_path, chunks_entry) = input_file(&chunks_arg, "chunks.parquet", "chunk")?;
    if named.map(|i| i.hash.as_str()) != Some(chunks_entry.hash.as_str()) {
        return Err(CoreError::Artifact { path: emb_dir, message: "these embeddings were made from another chunk artifact; pass the chunks that `embed` read".into() });
    }
    Ok(EmbeddedChunks { chunks_path, chunks_entry, embeddings_path, embeddings_entry, embeddings_manifest })
}

/// Resolves an artifact argument: the directory itself, or a file inside it.
pub fn artifact_dir(arg: &Path) -> PathBuf {
    if arg.is_file() {
        arg.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        arg.to_path_buf()
    }
}
