//! Content-addressed, crash-safe stage output directories.
//!
//! A stage run lives in `<root>/<stage>/<fingerprint>/`, where the fingerprint hashes the
//! stage name, its format version, its effective config and its inputs' content hashes.
//! Work happens in a hidden temporary sibling (`.tmp-<fingerprint>-<owner>-<pid>`, see
//! [`crate::owner`]) that is renamed into place only after every file and `manifest.json` are
//! written, so a crash or `kill -9` never leaves a directory that looks complete. When another
//! process committed the same fingerprint first, the loser's commit is a cache hit: it drops
//! its own copy and answers with the one in place.
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::{hash, CoreError, GAUGE_VERSION, GIT_COMMIT};

mod inputs;
mod replace;
mod verify;
pub use verify::{check_input, verify_outputs};
pub use inputs::{artifact_dir, embedded_chunks, input_file, EmbeddedChunks};
pub use replace::{copy_tree, manifest_of_stage, replace_dir_with_copy, replace_dir_with_finished_copy, ResultKind, FILES_RECORD};

/// File name of the manifest inside every artifact directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// One input or output file of a stage run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    /// Path as given on the command line (inputs) or file name inside the artifact (outputs).
    pub path: String,
    /// The name that determines the output (e.g. the source path relative to the input root);
    /// part of the fingerprint, unlike `path`, so moving a corpus keeps its cache.
    pub name: String,
    /// BLAKE3 hash of the file's bytes.
    pub hash: String,
    /// Rows contributed (inputs) or written (outputs), where that means something.
    pub rows: Option<u64>,
}

impl FileEntry {
    /// An input known by a hash computed elsewhere (a model's weights, an artifact's
    /// fingerprint): `name` enters the fingerprint, `path` is only shown.
    pub fn hashed(name: impl Into<String>, path: impl std::fmt::Display, hash: impl Into<String>) -> FileEntry {
        FileEntry { path: path.to_string(), name: name.into(), hash: hash.into(), rows: None }
    }

    /// A file input, hashed now (BLAKE3 of its bytes).
    pub fn file(name: impl Into<String>, path: &Path) -> Result<FileEntry, CoreError> {
        Ok(FileEntry::hashed(name, path.display(), hash::file_hash(path)?))
    }

    /// An input that is text rather than a file (a prompt, a question given on the command
    /// line): its bytes are hashed; `label` says where it came from.
    pub fn text(name: impl Into<String>, label: impl std::fmt::Display, text: &str) -> FileEntry {
        FileEntry::hashed(name, label, hash::bytes_hash(text.as_bytes()))
    }

    /// The same entry with its row count.
    pub fn with_rows(mut self, rows: usize) -> FileEntry {
        self.rows = Some(rows as u64);
        self
    }

    /// The same entry under another name.
    pub fn named(mut self, name: impl Into<String>) -> FileEntry {
        self.name = name.into();
        self
    }
}

/// `manifest.json`: everything needed to know how an artifact was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Stage name (`extract`, `chunk`, ...).
    pub stage: String,
    /// Version of the stage's output format; part of the fingerprint.
    pub format_version: u32,
    /// Content fingerprint naming the directory.
    pub fingerprint: String,
    /// gauge version that wrote it.
    pub gauge_version: String,
    /// Git commit gauge was built from.
    pub git_commit: String,
    /// The full effective configuration, after defaults.
    pub config: serde_json::Value,
    /// Every input file.
    pub inputs: Vec<FileEntry>,
    /// Every output file.
    pub outputs: Vec<FileEntry>,
    /// Random seed, for stages that use one.
    pub seed: Option<u64>,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time.
    pub finished_at: String,
    /// Wall-clock seconds of the run.
    pub wall_seconds: f64,
    /// Stage-specific counts (pages extracted, chunks filtered, ...).
    pub stats: serde_json::Map<String, serde_json::Value>,
}

impl Manifest {
    /// Reads `manifest.json` from an artifact directory.
    pub fn read(dir: &Path) -> Result<Manifest, CoreError> {
        let path = dir.join(MANIFEST_FILE);
        let text = crate::read::read_bounded_string(&path, crate::read::MANIFEST_LIMIT).map_err(|e| CoreError::Artifact {
            path: dir.to_path_buf(),
            message: format!("not a complete gauge artifact (no readable {MANIFEST_FILE}: {e}); rerun the stage that makes it"),
        })?;
        serde_json::from_str(&text).map_err(|e| CoreError::Artifact {
            path: path.clone(),
            message: format!("invalid manifest: {e}"),
        })
    }
}

/// Root directory holding every stage's artifacts (usually `artifacts/`).
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
}

/// What [`ArtifactStore::begin`] decided.
pub enum StageOutcome {
    /// The complete output already exists at this directory; nothing to do.
    CacheHit(PathBuf),
    /// The stage must run; write outputs into the run's temporary directory.
    Run(Box<StageRun>),
}

/// The identity of a stage run, from which its fingerprint is computed.
#[derive(Debug, Clone)]
pub struct StageSpec<'a, C: Serialize> {
    /// Stage name.
    pub stage: &'a str,
    /// Output format version; bump it when the output of the same config changes.
    pub format_version: u32,
    /// Effective config (after defaults).
    pub config: &'a C,
    /// Inputs with their content hashes.
    pub inputs: Vec<FileEntry>,
    /// Seed, if the stage is randomised.
    pub seed: Option<u64>,
}

impl ArtifactStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ArtifactStore { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Computes the fingerprint of a spec (16 hex characters).
    pub fn fingerprint<C: Serialize>(spec: &StageSpec<'_, C>) -> Result<String, CoreError> {
        let inputs: Vec<(&str, &str)> =
            spec.inputs.iter().map(|i| (i.name.as_str(), i.hash.as_str())).collect();
        let key = serde_json::json!({
            "stage": spec.stage,
            "format_version": spec.format_version,
            "config": serde_json::to_value(spec.config).map_err(|e| CoreError::Artifact {
                path: PathBuf::new(),
                message: format!("config cannot be serialised: {e}"),
            })?,
            "inputs": inputs,
            "seed": spec.seed,
        });
        Ok(hash::bytes_hash(key.to_string().as_bytes())[..16].to_string())
    }

    /// Starts a stage run: a cache hit if its complete output exists (and `force` is off),
    /// else a [`StageRun`] writing into a fresh temporary directory.
    pub fn begin<C: Serialize>(&self, spec: StageSpec<'_, C>, force: bool) -> Result<StageOutcome, CoreError> {
        let fingerprint = Self::fingerprint(&spec)?;
        let stage_dir = self.root.join(spec.stage);
        let final_dir = stage_dir.join(&fingerprint);
        std::fs::create_dir_all(&stage_dir).map_err(|e| CoreError::io(&stage_dir, e))?;
        remove_stale_temporaries(&stage_dir);
        if !force && final_dir.join(MANIFEST_FILE).is_file() {
            return Ok(StageOutcome::CacheHit(final_dir));
        }
        let checkpoint_dir = stage_dir.join(format!(".resume-{fingerprint}"));
        let checkpoint_lock = std::sync::OnceLock::new();
        if force && checkpoint_dir.exists() {
            // Another run may own these checkpoints: take them over first (or stop, saying so),
            // never delete what a live run is writing.
            let _ = checkpoint_lock.set(take_owner(&checkpoint_dir, spec.stage, &fingerprint)?);
            std::fs::remove_dir_all(&checkpoint_dir).map_err(|e| CoreError::io(&checkpoint_dir, e))?;
        }
        let tmp_dir = stage_dir.join(format!(".tmp-{fingerprint}-{}", crate::owner::suffix()));
        if tmp_dir.exists() {
            std::fs::remove_dir_all(&tmp_dir).map_err(|e| CoreError::io(&tmp_dir, e))?;
        }
        std::fs::create_dir_all(&tmp_dir).map_err(|e| CoreError::io(&tmp_dir, e))?;
        let config = serde_json::to_value(spec.config).map_err(|e| CoreError::Artifact {
            path: tmp_dir.clone(),
            message: format!("config cannot be serialised: {e}"),
        })?;
        let now = chrono::Utc::now();
        Ok(StageOutcome::Run(Box::new(StageRun {
            manifest: Manifest {
                stage: spec.stage.to_string(),
                format_version: spec.format_version,
                fingerprint,
                gauge_version: GAUGE_VERSION.to_string(),
                git_commit: GIT_COMMIT.to_string(),
                config,
                inputs: spec.inputs,
                outputs: Vec::new(),
                seed: spec.seed,
                started_at: now.to_rfc3339(),
                finished_at: String::new(),
                wall_seconds: 0.0,
                stats: serde_json::Map::new(),
            },
            final_dir,
            tmp_dir,
            checkpoint_dir,
            checkpoint_lock,
            started: Instant::now(),
            committed: false,
            force,
        })))
    }
}

/// A stage run in progress: outputs go into [`StageRun::dir`] until [`StageRun::commit`].
pub struct StageRun {
    manifest: Manifest,
    final_dir: PathBuf,
    tmp_dir: PathBuf,
    checkpoint_dir: PathBuf,
    /// The lock on `checkpoint_dir`'s owner file, once taken ([`StageRun::checkpoint_dir`]).
    checkpoint_lock: std::sync::OnceLock<std::fs::File>,
    started: Instant,
    committed: bool,
    /// A `--force` run replaces an artifact already in place; any other run that finds one at
    /// commit time lost a race and answers with it.
    force: bool,
}

impl StageRun {
    /// The temporary directory to write outputs into.
    pub fn dir(&self) -> &Path {
        &self.tmp_dir
    }

    /// Path of an output file inside the temporary directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.tmp_dir.join(file)
    }

    /// A directory for resumable state (a journal, training checkpoints): it survives a
    /// crash or `kill -9`, so a rerun of the same fingerprint finds it, and is removed when
    /// the run commits or when it is forced. Created on first call.
    pub fn checkpoint_dir(&self) -> Result<&Path, CoreError> {
        // One owner at a time: two concurrent runs of one fingerprint would append to one journal
        // and overwrite each other's checkpoints. The lock (on a file beside the folder, held
        // until this run ends, released by the kernel when a process dies) makes the second one
        // stop at once, saying why.
        if self.checkpoint_lock.get().is_none() {
            let _ = self.checkpoint_lock.set(take_owner(&self.checkpoint_dir, &self.manifest.stage, &self.manifest.fingerprint)?);
        }
        std::fs::create_dir_all(&self.checkpoint_dir).map_err(|e| CoreError::io(&self.checkpoint_dir, e))?;
        Ok(&self.checkpoint_dir)
    }

    /// Where the artifact will live once committed.
    pub fn final_dir(&self) -> &Path {
        &self.final_dir
    }

    /// Records an output file already written into the run's directory (hashes it).
    pub fn add_output(&mut self, file: &str, rows: Option<u64>) -> Result<(), CoreError> {
        let hash = hash::file_hash(&self.path(file))?;
        self.manifest.outputs.push(FileEntry { path: file.to_string(), name: file.to_string(), hash, rows });
        Ok(())
    }

    /// Sets the row count of the input named `name` (rows it contributed or held).
    pub fn set_input_rows(&mut self, name: &str, rows: u64) {
        for input in self.manifest.inputs.iter_mut().filter(|i| i.name == name) {
            input.rows = Some(rows);
        }
    }

    /// Records every field of a serialisable struct of counts as a statistic.
    pub fn set_stats<T: Serialize>(&mut self, stats: &T) {
        if let Ok(serde_json::Value::Object(map)) = serde_json::to_value(stats) {
            self.manifest.stats.extend(map);
        }
    }

    /// Records a stage-specific statistic in the manifest.
    pub fn set_stat(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.manifest.stats.insert(key.to_string(), value.into());
    }

    /// The manifest as it stands.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Writes `manifest.json` and renames the directory into place; returns the final path.
    pub fn commit(mut self) -> Result<PathBuf, CoreError> {
        let now = chrono::Utc::now();
        self.manifest.finished_at = now.to_rfc3339();
        self.manifest.wall_seconds = self.started.elapsed().as_secs_f64();
        let manifest_path = self.path(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(&self.manifest).expect("manifest serialises");
        write_synced(&manifest_path, (text + "\n").as_bytes()).map_err(|e| CoreError::io(&manifest_path, e))?;
        fsync_dir(&self.tmp_dir);
        // Test hook: pause after everything is written but before the rename, so tests can
        // kill the process at the worst moment.
        if let Some(ms) = std::env::var("GAUGE_TEST_PAUSE_BEFORE_COMMIT_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
            eprintln!("gauge: pausing {ms} ms before commit (GAUGE_TEST_PAUSE_BEFORE_COMMIT_MS)");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        if !self.force {
            // Never move an artifact aside without --force: rename(2) refuses a non-empty
            // destination, so whoever renames first wins and the other run answers with it.
            if let Err(e) = std::fs::rename(&self.tmp_dir, &self.final_dir) {
                if self.final_dir.join(MANIFEST_FILE).is_file() {
                    return Ok(self.lost_race());
                }
                return Err(CoreError::io(&self.final_dir, e));
            }
        } else {
            let mut trash = Vec::new();
            let mut attempt = 0;
            loop {
                attempt += 1;
                if self.final_dir.exists() {
                    let old = self.final_dir.with_file_name(format!(".old-{}-{}", self.manifest.fingerprint, crate::owner::suffix()));
                    let _ = std::fs::remove_dir_all(&old);
                    match std::fs::rename(&self.final_dir, &old) {
                        Ok(()) => trash.push(old),
                        // Another run moved it aside a moment ago.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(CoreError::io(&self.final_dir, e)),
                    }
                    // A death here leaves the old artifact as `.old-<fingerprint>-<owner>-<pid>`
                    // and no `<fingerprint>`: the next run's cleanup puts it back.
                    crate::failpoint("commit-between-renames");
                }
                match std::fs::rename(&self.tmp_dir, &self.final_dir) {
                    Ok(()) => break,
                    // Another run renamed its copy in between: --force replaces it, again.
                    Err(_) if attempt < 8 && self.final_dir.exists() => continue,
                    Err(e) => {
                        if !self.final_dir.exists() {
                            if let Some(old) = trash.pop() {
                                let _ = std::fs::rename(old, &self.final_dir);
                            }
                        }
                        return Err(CoreError::io(&self.final_dir, e));
                    }
                }
            }
            for old in trash {
                let _ = std::fs::remove_dir_all(old);
            }
        }
        if let Some(parent) = self.final_dir.parent() {
            fsync_dir(parent);
        }
        self.committed = true;
        let _ = std::fs::remove_dir_all(&self.checkpoint_dir);
        Ok(self.final_dir.clone())
    }

    /// Another process committed this fingerprint first: its artifact stands, this run's copy
    /// goes (the same config and inputs make the same output).
    fn lost_race(&mut self) -> PathBuf {
        tracing::info!("{}: another run committed this artifact first; using it (cache hit)", self.final_dir.display());
        let _ = std::fs::remove_dir_all(&self.tmp_dir);
        self.committed = true;
        self.final_dir.clone()
    }
}

impl Drop for StageRun {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp_dir);
        }
    }
}

fn fsync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Writes a file and flushes it to the disk before returning.
pub fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Cleans up after runs of this host whose process no longer exists ([`crate::owner`]):
/// removes their `.tmp-*` directories, and an `.old-<fingerprint>-…` (an artifact a `--force`
/// run had moved aside) is put back as `<fingerprint>` when that process died before its new
/// artifact took the place, else removed. Another host's temporaries are never touched.
/// The lock that makes this process the one owner of a fingerprint's checkpoints: an exclusive
/// lock on `.owner-<fingerprint>` beside `.resume-<fingerprint>/` (a name of its own, so tools
/// that look for the resume folder by its prefix find only the folder), held until the run ends
/// and released by the kernel when its process dies. Another owner: an error saying so.
fn take_owner(checkpoint_dir: &Path, stage: &str, fingerprint: &str) -> Result<std::fs::File, CoreError> {
    let name = checkpoint_dir.file_name().map(|n| n.to_string_lossy().replacen(".resume-", ".owner-", 1)).unwrap_or_default();
    let path = checkpoint_dir.with_file_name(name);
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(|e| CoreError::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(CoreError::Artifact {
            path: checkpoint_dir.to_path_buf(),
            message: format!("another gauge process is running this same `{stage}` run (fingerprint {fingerprint}) and owns its checkpoints; wait for it (its result is then a cache hit) or stop it and rerun to resume"),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(CoreError::io(&path, e)),
    }
}

fn remove_stale_temporaries(stage_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(stage_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some((is_old, rest)) = name.strip_prefix(".old-").map(|r| (true, r)).or_else(|| name.strip_prefix(".tmp-").map(|r| (false, r))) else { continue };
        let owned = crate::owner::parse(rest);
        if owned.as_ref().is_some_and(|o| !crate::owner::is_dead(o.owner, o.pid)) {
            continue;
        }
        if is_old {
            let fingerprint = owned.as_ref().map_or(rest, |o| o.base);
            let home = stage_dir.join(fingerprint);
            if !home.exists() && entry.path().join(MANIFEST_FILE).is_file() && std::fs::rename(entry.path(), &home).is_ok() {
                tracing::warn!("{}: recovered the artifact a killed --force run had moved aside", home.display());
                fsync_dir(stage_dir);
                continue;
            }
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(config: &'a serde_json::Value) -> StageSpec<'a, serde_json::Value> {
        StageSpec {
            stage: "demo",
            format_version: 1,
            config,
            inputs: vec![FileEntry { path: "x".into(), name: "x".into(), hash: "abc".into(), rows: Some(1) }],
            seed: None,
        }
    }

    #[test]
    fn commit_then_cache_hit_and_force() {
        let root = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({"size": 3});
        let StageOutcome::Run(mut run) = store.begin(spec(&config), false).unwrap() else { panic!("expected a run") };
        std::fs::write(run.path("out.txt"), "hello").unwrap();
        run.add_output("out.txt", None).unwrap();
        let dir = run.commit().unwrap();
        let manifest = Manifest::read(&dir).unwrap();
        assert_eq!(manifest.outputs[0].hash, hash::bytes_hash(b"hello"));
        assert_eq!(manifest.config, config);
        assert!(matches!(store.begin(spec(&config), false).unwrap(), StageOutcome::CacheHit(d) if d == dir));
        assert!(matches!(store.begin(spec(&config), true).unwrap(), StageOutcome::Run(_)));
        // A different config is a different directory.
        let other = serde_json::json!({"size": 4});
        assert!(matches!(store.begin(spec(&other), false).unwrap(), StageOutcome::Run(_)));
    }

    #[test]
    fn an_artifact_moved_aside_by_a_dead_force_run_is_put_back() {
        let root = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({"size": 3});
        let StageOutcome::Run(mut run) = store.begin(spec(&config), false).unwrap() else { panic!("expected a run") };
        std::fs::write(run.path("out.txt"), "hello").unwrap();
        run.add_output("out.txt", None).unwrap();
        let dir = run.commit().unwrap();
        // What a --force run that died between its two renames leaves (pid 4000000000: no such process).
        let aside = dir.with_file_name(format!(".old-{}-4000000000", dir.file_name().unwrap().to_string_lossy()));
        std::fs::rename(&dir, &aside).unwrap();
        assert!(matches!(store.begin(spec(&config), false).unwrap(), StageOutcome::CacheHit(d) if d == dir));
        assert!(!aside.exists() && dir.join("out.txt").is_file());
        // When the new artifact did take its place, the one aside is only removed.
        let spare = dir.with_file_name(format!(".old-{}-4000000000", dir.file_name().unwrap().to_string_lossy()));
        copy_dir(&dir, &spare);
        assert!(matches!(store.begin(spec(&config), false).unwrap(), StageOutcome::CacheHit(_)));
        assert!(!spare.exists());
    }

    #[test]
    fn a_commit_that_finds_the_artifact_in_place_is_a_cache_hit() {
        let root = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({"size": 3});
        let StageOutcome::Run(mut run) = store.begin(spec(&config), false).unwrap() else { panic!("expected a run") };
        std::fs::write(run.path("out.txt"), "mine").unwrap();
        run.add_output("out.txt", None).unwrap();
        // Another process commits the same fingerprint while this run works.
        let theirs = run.final_dir().to_path_buf();
        std::fs::create_dir_all(&theirs).unwrap();
        std::fs::write(theirs.join("out.txt"), "theirs").unwrap();
        std::fs::write(theirs.join(MANIFEST_FILE), serde_json::to_string(run.manifest()).unwrap()).unwrap();
        let tmp = run.dir().to_path_buf();
        let dir = run.commit().unwrap();
        assert_eq!(dir, theirs);
        assert_eq!(std::fs::read_to_string(dir.join("out.txt")).unwrap(), "theirs", "the first commit stands");
        assert!(!tmp.exists());
        // A --force run does replace it.
        let StageOutcome::Run(mut run) = store.begin(spec(&config), true).unwrap() else { panic!("expected a run") };
        std::fs::write(run.path("out.txt"), "forced").unwrap();
        run.add_output("out.txt", None).unwrap();
        assert_eq!(std::fs::read_to_string(run.commit().unwrap().join("out.txt")).unwrap(), "forced");
        assert_eq!(std::fs::read_dir(root.path().join("demo")).unwrap().count(), 1);
    }

    #[test]
    fn another_hosts_temporaries_are_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let mine: Vec<&str> = crate::owner::token().split('.').collect();
        let foreign_ns = format!("{}.{}.{}", mine[0], mine[1], if mine[2] == "00000000" { "11111111" } else { "00000000" });
        let foreign = root.path().join(format!("demo/.tmp-0123456789abcdef-{foreign_ns}-1"));
        let own_dead = root.path().join(format!("demo/.tmp-0123456789abcdef-{}-4000000000", crate::owner::token()));
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::create_dir_all(&own_dead).unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({});
        let _ = store.begin(spec(&config), false).unwrap();
        assert!(foreign.exists(), "another PID namespace's build was removed");
        assert!(!own_dead.exists());
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }

    #[test]
    fn two_runs_of_one_fingerprint_never_share_its_checkpoints() {
        let root = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({"n": 2});
        let StageOutcome::Run(first) = store.begin(spec(&config), false).unwrap() else { panic!() };
        let StageOutcome::Run(second) = store.begin(spec(&config), false).unwrap() else { panic!() };
        first.checkpoint_dir().unwrap();
        // Before: both appended to one journal, and the loser failed at its next checkpoint.
        let e = second.checkpoint_dir().unwrap_err().to_string();
        assert!(e.contains("another gauge process is running this same `demo` run"), "{e}");
        // --force while the owner runs: refused, and the owner's checkpoints are left alone.
        std::fs::write(first.checkpoint_dir().unwrap().join("journal"), "1").unwrap();
        let Err(e) = store.begin(spec(&config), true) else { panic!("--force took another run's checkpoints") };
        let e = e.to_string();
        assert!(e.contains("owns its checkpoints"), "{e}");
        assert!(first.checkpoint_dir().unwrap().join("journal").is_file());
        drop(first); // the owner ends (or dies): the next run takes over and resumes
        second.checkpoint_dir().unwrap();
    }

    #[test]
    fn checkpoints_survive_a_failed_run_and_go_on_commit() {
        let root = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({"n": 1});
        let StageOutcome::Run(run) = store.begin(spec(&config), false).unwrap() else { panic!() };
        let ck = run.checkpoint_dir().unwrap().to_path_buf();
        std::fs::write(ck.join("journal"), "1").unwrap();
        drop(run); // a failed run
        let StageOutcome::Run(run) = store.begin(spec(&config), false).unwrap() else { panic!() };
        assert_eq!(std::fs::read_to_string(run.checkpoint_dir().unwrap().join("journal")).unwrap(), "1");
        run.commit().unwrap();
        assert!(!ck.exists());
        // --force starts over.
        let StageOutcome::Run(run) = store.begin(spec(&config), false).map(|_| store.begin(spec(&config), true).unwrap()).unwrap() else { panic!() };
        std::fs::write(run.checkpoint_dir().unwrap().join("journal"), "2").unwrap();
        drop(run);
        let StageOutcome::Run(run) = store.begin(spec(&config), true).unwrap() else { panic!() };
        assert!(!run.checkpoint_dir().unwrap().join("journal").exists());
    }

    #[test]
    fn dropped_run_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({});
        let StageOutcome::Run(run) = store.begin(spec(&config), false).unwrap() else { panic!() };
        let tmp = run.dir().to_path_buf();
        assert!(tmp.exists());
        drop(run);
        assert!(!tmp.exists());
        assert_eq!(std::fs::read_dir(root.path().join("demo")).unwrap().count(), 0);
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let stale = root.path().join("demo/.tmp-0123456789abcdef-999999999");
        std::fs::create_dir_all(&stale).unwrap();
        let store = ArtifactStore::new(root.path());
        let config = serde_json::json!({});
        let _ = store.begin(spec(&config), false).unwrap();
        assert!(!stale.exists());
    }
}
