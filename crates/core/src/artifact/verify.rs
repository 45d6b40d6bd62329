//! Reading an artifact's bytes only when they are the bytes its stage wrote.
//!
//! A committed artifact is content-addressed by its inputs, but a byte can still change on disk
//! afterwards (a bad sector, a careless edit, a half-restored backup). Every stage that reads an
//! upstream artifact checks the files it reads against the BLAKE3 hashes the artifact's manifest
//! recorded ([`check_input`], [`verify_outputs`]); a mismatch is an error naming the file, never a
//! silently different result. Each artifact folder is hashed once per process (memoised by its
//! canonical path, fingerprint, and each file's size and modification time), so a stage that opens
//! an index many times pays once.
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::{FileEntry, Manifest, MANIFEST_FILE};
use crate::{hash, CoreError};

/// What was verified: a folder, its fingerprint, and each checked file's (name, size, mtime).
type VerifiedKey = (PathBuf, String, Vec<(String, u64, Option<std::time::SystemTime>)>);

fn verified() -> &'static Mutex<HashSet<VerifiedKey>> {
    static VERIFIED: OnceLock<Mutex<HashSet<VerifiedKey>>> = OnceLock::new();
    VERIFIED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The error for a file whose bytes differ from its manifest's record.
fn changed(dir: &Path, file: &str, stage: &str, got: &str, want: &str) -> CoreError {
    CoreError::Artifact {
        path: dir.join(file),
        message: format!(
            "changed since `{stage}` wrote it (BLAKE3 {}…, the manifest records {}…); its results cannot be trusted: delete {} and rerun `{stage}` (or restore the file)",
            &got[..got.len().min(12)],
            &want[..want.len().min(12)],
            dir.display()
        ),
    }
}

/// The manifest's record of output `file` (matched by its path inside the artifact or its name).
fn recorded<'a>(manifest: &'a Manifest, file: &str) -> Option<&'a FileEntry> {
    manifest.outputs.iter().find(|o| o.path == file || o.name == file)
}

/// Checks an input file already hashed (`entry`, from [`FileEntry::file`]) against the manifest
/// of the artifact folder `dir` it lies in: a folder without a manifest (a user's own file) or a
/// manifest that does not list the file passes; a different hash is an error.
pub fn check_input(dir: &Path, file: &str, entry: &FileEntry) -> Result<(), CoreError> {
    if !dir.join(MANIFEST_FILE).is_file() {
        return Ok(());
    }
    let manifest = Manifest::read(dir)?;
    match recorded(&manifest, file) {
        Some(want) if want.hash != entry.hash => Err(changed(dir, file, &manifest.stage, &entry.hash, &want.hash)),
        _ => Ok(()),
    }
}

/// Checks every file an artifact's manifest lists among its outputs against its recorded BLAKE3
/// hash (folders among the outputs are skipped; a listed file that is missing is an error).
/// Memoised per process: a folder whose files keep their size and modification time is hashed once.
pub fn verify_outputs(dir: &Path) -> Result<(), CoreError> {
    let manifest = Manifest::read(dir)?;
    let mut files = Vec::new();
    for o in &manifest.outputs {
        let path = crate::names::confined(dir, Path::new(&o.path)).map_err(|message| CoreError::Artifact { path: dir.join(MANIFEST_FILE), message })?;
        // A link is followed (an index assembled from links to another's files is fine: its
        // target's bytes are what is checked); what it ends at must be a plain file.
        let meta = std::fs::metadata(&path).map_err(|e| CoreError::Artifact {
            path: path.clone(),
            message: format!("listed in the manifest but not readable ({e}); delete {} and rerun `{}`", dir.display(), manifest.stage),
        })?;
        if meta.is_dir() {
            continue;
        }
        if !meta.is_file() {
            return Err(CoreError::Artifact { path, message: "not a regular file (a device, a FIFO or a socket); an artifact's outputs are plain files".into() });
        }
        files.push((o, path, meta.len(), meta.modified().ok()));
    }
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let key: VerifiedKey = (canonical, manifest.fingerprint.clone(), files.iter().map(|(o, _, len, t)| (o.path.clone(), *len, *t)).collect());
    if verified().lock().expect("verified set").contains(&key) {
        return Ok(());
    }
    for (o, path, _, _) in &files {
        let got = hash::file_hash(path)?;
        if got != o.hash {
            return Err(changed(dir, &o.path, &manifest.stage, &got, &o.hash));
        }
    }
    verified().lock().expect("verified set").insert(key);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::{ArtifactStore, StageOutcome, StageSpec};

    fn artifact(root: &Path) -> PathBuf {
        let store = ArtifactStore::new(root);
        let config = serde_json::json!({});
        let spec = StageSpec { stage: "probe", format_version: 1, config: &config, inputs: vec![], seed: None };
        let StageOutcome::Run(mut run) = store.begin(spec, false).unwrap() else { unreachable!("a fresh root") };
        std::fs::write(run.dir().join("data.bin"), b"the bytes the stage wrote").unwrap();
        run.add_output("data.bin", None).unwrap();
        run.commit().unwrap()
    }

    #[test]
    fn a_changed_byte_is_an_error_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = artifact(tmp.path());
        verify_outputs(&dir).unwrap();
        let file = dir.join("data.bin");
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[4] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        let e = verify_outputs(&dir).unwrap_err().to_string();
        assert!(e.contains("data.bin") && e.contains("changed since `probe` wrote it"), "{e}");
        let entry = FileEntry::file("data.bin", &file).unwrap();
        assert!(check_input(&dir, "data.bin", &entry).is_err());
    }

    #[test]
    fn a_missing_output_is_an_error_and_a_file_without_a_manifest_passes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = artifact(tmp.path());
        std::fs::remove_file(dir.join("data.bin")).unwrap();
        assert!(verify_outputs(&dir).unwrap_err().to_string().contains("listed in the manifest"));
        let loose = tmp.path().join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::write(loose.join("x.parquet"), b"x").unwrap();
        let entry = FileEntry::file("x.parquet", &loose.join("x.parquet")).unwrap();
        check_input(&loose, "x.parquet", &entry).unwrap();
    }
}
