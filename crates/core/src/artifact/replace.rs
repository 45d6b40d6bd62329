//! Replacing a result folder in place (`--copy-to`, adapters and models kept outside the
//! artifact root): a copy written beside it, swapped in atomically, refused when the folder
//! there is not a result of the same kind.
use std::path::{Path, PathBuf};

use super::{fsync_dir, Manifest, MANIFEST_FILE};
use crate::CoreError;

/// Copies a folder recursively, leaving out every entry whose name `skip` accepts.
pub fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&str) -> bool) -> Result<(), CoreError> {
    std::fs::create_dir_all(to).map_err(|e| CoreError::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| CoreError::io(from, e))? {
        let entry = entry.map_err(|e| CoreError::io(from, e))?;
        let name = entry.file_name();
        if skip(&name.to_string_lossy()) {
            continue;
        }
        let dest = to.join(&name);
        if entry.file_type().map_err(|e| CoreError::io(entry.path(), e))?.is_dir() {
            copy_tree(&entry.path(), &dest, skip)?;
        } else {
            std::fs::copy(entry.path(), &dest).map_err(|e| CoreError::io(&dest, e))?;
        }
    }
    Ok(())
}

/// What a destination folder must already be for [`replace_dir_with_copy`] to replace it: a
/// previous result of the same kind.
pub struct ResultKind<'a> {
    /// What the folder holds, for messages (`an evaluation folder`, `a LoRA adapter`).
    pub what: &'a str,
    /// Whether an existing folder is a previous result of this kind.
    pub holds: &'a dyn Fn(&Path) -> bool,
    /// Files a result of this kind writes beside what its manifest lists (an evaluation's
    /// `report.html`): a previous result's own, replaced without a word.
    pub derived: &'a [&'a str],
}

/// The record of the files a copy without a manifest holds (an adapter folder), written into it
/// by [`replace_dir_with_finished_copy`], so the next replacement can tell them from a file the
/// user added.
pub const FILES_RECORD: &str = ".gauge-files.json";

/// Replaces the folder `dest` with a copy of `from` so that `dest` is at every moment either
/// the old folder or the complete new one: the copy goes to `.tmp-<name>-<owner>-<pid>` beside
/// it (removed again when the copy fails), the old folder is moved to `.old-<name>-<owner>-<pid>`,
/// the copy renamed in, and the old one removed. A process that died between the two renames
/// left its old folder aside: the next call (for the same `dest`) puts it back first, and
/// removes this host's dead processes' temporaries (never another host's: [`crate::owner`]).
///
/// `dest` is replaced only when it is absent, an empty folder, or what `kind` accepts (a
/// previous result of the same kind); anything else — another kind of folder, a file — is
/// refused, naming it. When two processes race, each retries; one whose copy finds the same
/// manifest (byte for byte: the same commit of the same artifact) already in place stops there. (`dest` may hold dots: nothing is
/// derived from its extension.)
pub fn replace_dir_with_copy(from: &Path, dest: &Path, kind: &ResultKind<'_>) -> Result<(), CoreError> {
    replace_dir_with_finished_copy(from, dest, kind, &|_| Ok(()))
}

/// [`replace_dir_with_copy`], with `finish` run on the copy before it is swapped in: files
/// derived from the copy (an evaluation's report page) are there the moment the folder is, and
/// no other process ever sees the folder without them or writes them while it is swapped. A
/// failing `finish` removes the copy and leaves `dest` as it was. (The copy sits beside `dest`,
/// so paths relative to it resolve as from `dest`.)
pub fn replace_dir_with_finished_copy(from: &Path, dest: &Path, kind: &ResultKind<'_>, finish: &dyn Fn(&Path) -> anyhow::Result<()>) -> Result<(), CoreError> {
    let name = match dest.components().next_back() {
        Some(std::path::Component::Normal(n)) => n.to_string_lossy().to_string(),
        _ => return Err(CoreError::Artifact { path: dest.to_path_buf(), message: "not a folder name (it ends in `.`, `..` or a root); name the folder to write".into() }),
    };
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dest = parent.join(&name);
    let dest = dest.as_path();
    refuse_unless_replaceable(dest, kind)?;
    std::fs::create_dir_all(&parent).map_err(|e| CoreError::io(&parent, e))?;
    // What a dead process left for this destination.
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for entry in entries.flatten() {
            let n = entry.file_name().to_string_lossy().to_string();
            for (prefix, recover) in [(".old-", true), (".tmp-", false)] {
                let Some(owned) = n.strip_prefix(prefix).and_then(crate::owner::parse) else { continue };
                if owned.base != name || !crate::owner::is_dead(owned.owner, owned.pid) {
                    continue;
                }
                if recover && !dest.exists() && std::fs::rename(entry.path(), dest).is_ok() {
                    continue;
                }
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let suffix = crate::owner::suffix();
    let tmp = parent.join(format!(".tmp-{name}-{suffix}"));
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = copy_tree(from, &tmp, &|_| false) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if let Err(e) = finish(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(CoreError::Artifact { path: dest.to_path_buf(), message: format!("{e:#}") });
    }
    if !tmp.join(MANIFEST_FILE).is_file() {
        let files = relative_files(&tmp);
        let written = serde_json::to_string_pretty(&files).map_err(|e| CoreError::Artifact { path: tmp.clone(), message: e.to_string() }).and_then(|t| std::fs::write(tmp.join(FILES_RECORD), t + "\n").map_err(|e| CoreError::io(tmp.join(FILES_RECORD), e)));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    }
    fsync_dir(&tmp);
    let old = parent.join(format!(".old-{name}-{suffix}"));
    // The same commit of the same artifact (its manifest byte for byte, times included: a
    // `--force` rerun of one fingerprint is a new result and does replace the old copy), with
    // every file of the copy in place as it is in the copy (what `finish` wrote included: a
    // page deleted since, or drawn by an older renderer, is replaced; a file only `dest` holds
    // stays).
    let fingerprint = |dir: &Path| std::fs::read(dir.join(MANIFEST_FILE)).ok();
    let ours = fingerprint(&tmp);
    // A concurrent writer can move `dest` between any two steps: retry a few times.
    let mut last_error = None;
    for _ in 0..16 {
        if ours.is_some() && fingerprint(dest) == ours && holds_same_files(&tmp, dest) {
            // Another process put this very result in place: done.
            let _ = std::fs::remove_dir_all(&tmp);
            return Ok(());
        }
        // Nothing the new result does not hold is deleted without a word: a file the user added
        // (notes beside an evaluation, a file beside an adapter) that is neither in the copy nor
        // among the outputs the previous result's manifest lists refuses the replacement.
        if let Some(f) = foreign_files(dest, &tmp, kind).into_iter().next() {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(CoreError::Artifact {
                path: dest.join(&f),
                message: format!("is not part of the new result and would be lost when {} is replaced; move it out of that folder (or delete it) and rerun", dest.display()),
            });
        }
        let had_old = match std::fs::rename(dest, &old) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(CoreError::io(dest, e));
            }
        };
        if had_old {
            crate::failpoint("replace-between-renames");
        }
        match std::fs::rename(&tmp, dest) {
            Ok(()) => {
                fsync_dir(&parent);
                let _ = std::fs::remove_dir_all(&old);
                return Ok(());
            }
            Err(e) => {
                let raced = matches!(e.kind(), std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::AlreadyExists) && dest.exists();
                if had_old {
                    if raced {
                        // Someone else's copy took the place between the two renames: ours goes
                        // back round (theirs, now in place, is a result of the same kind).
                        let _ = std::fs::remove_dir_all(&old);
                    } else {
                        // Any other failure (a full disk, a stale NFS handle): the previous
                        // result goes back in place, and the error is reported.
                        let _ = std::fs::rename(&old, dest);
                    }
                }
                if !raced {
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(CoreError::io(dest, e));
                }
                last_error = Some(e);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Err(CoreError::io(dest, last_error.unwrap_or_else(|| std::io::Error::other("kept being replaced by another process"))))
}

/// Every file under `dir` (relative paths with `/`), sorted; links are listed, not followed.
fn relative_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else { continue };
        for e in entries.flatten() {
            let r = rel.join(e.file_name());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(r);
            } else {
                out.push(r.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }
    out.sort();
    out
}

/// Files (relative paths) under `dest` that the replacement would delete although no result
/// wrote them: not in the new `copy`, and none of what the previous result owned — its
/// manifest, the outputs the manifest lists, the files `kind` derives from them, the files the
/// [`FILES_RECORD`] of a copy without a manifest lists — nor a desktop's or an interrupted
/// gauge write's litter (`.DS_Store`, `Thumbs.db`, `.*.partial-*`). A previous result that
/// recorded nothing (a folder copied before the record existed) is replaced as it always was.
fn foreign_files(dest: &Path, copy: &Path, kind: &ResultKind<'_>) -> Vec<String> {
    let mut owned: std::collections::BTreeSet<String> = kind.derived.iter().map(|s| s.to_string()).collect();
    owned.extend([MANIFEST_FILE.to_string(), FILES_RECORD.to_string()]);
    let manifest = Manifest::read(dest).ok();
    let record: Option<Vec<String>> = crate::read::read_bounded_string(&dest.join(FILES_RECORD), crate::read::MANIFEST_LIMIT).ok().and_then(|t| serde_json::from_str(&t).ok());
    if !dest.join(MANIFEST_FILE).is_file() && record.is_none() {
        return Vec::new();
    }
    owned.extend(manifest.into_iter().flat_map(|m| m.outputs.into_iter().map(|o| o.path)));
    owned.extend(record.into_iter().flatten());
    let litter = |name: &str| {
        let base = name.rsplit('/').next().unwrap_or(name);
        matches!(base, ".DS_Store" | "Thumbs.db" | "desktop.ini") || (base.starts_with('.') && base.contains(".partial-"))
    };
    relative_files(dest).into_iter().filter(|r| !owned.contains(r) && !litter(r) && std::fs::symlink_metadata(copy.join(r)).is_err()).collect()
}

/// Whether every file under `copy` is under `dest` with the same bytes.
fn holds_same_files(copy: &Path, dest: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(copy) else { return false };
    entries.flatten().all(|e| {
        let there = dest.join(e.file_name());
        match e.file_type() {
            Ok(t) if t.is_dir() => holds_same_files(&e.path(), &there),
            Ok(_) => match (std::fs::metadata(e.path()), std::fs::metadata(&there)) {
                (Ok(a), Ok(b)) if a.len() == b.len() => std::fs::read(e.path()).ok().is_some_and(|x| std::fs::read(&there).ok().is_some_and(|y| x == y)),
                _ => false,
            },
            Err(_) => false,
        }
    })
}

/// Refuses a destination that is neither absent, an empty folder, nor a previous result of
/// `kind`.
fn refuse_unless_replaceable(dest: &Path, kind: &ResultKind<'_>) -> Result<(), CoreError> {
    let Ok(meta) = std::fs::symlink_metadata(dest) else { return Ok(()) };
    let refuse = |what: &str| {
        Err(CoreError::Artifact {
            path: dest.to_path_buf(),
            message: format!("{what}, not {}; gauge replaces only a previous result of the same kind: choose another destination or remove it", kind.what),
        })
    };
    if meta.file_type().is_symlink() {
        return refuse("is a symbolic link");
    }
    if !meta.is_dir() {
        return refuse("is a file");
    }
    let empty = std::fs::read_dir(dest).map(|mut d| d.next().is_none()).unwrap_or(false);
    if empty || (kind.holds)(dest) {
        Ok(())
    } else {
        refuse("exists and holds something else")
    }
}

/// A [`ResultKind`] test: the folder's `manifest.json` was written by `stage`.
pub fn manifest_of_stage(dir: &Path, stage: &str) -> bool {
    Manifest::read(dir).is_ok_and(|m| m.stage == stage)
}


#[cfg(test)]
mod tests {
    use super::*;

    /// A previous result's manifest listing `outputs`.
    fn write_manifest(dir: &Path, outputs: &[&str]) {
        let outputs: Vec<_> = outputs.iter().map(|o| serde_json::json!({ "path": o, "name": o, "hash": "0", "rows": null })).collect();
        let m = serde_json::json!({ "stage": "evaluate", "format_version": 1, "fingerprint": "f", "gauge_version": "0", "git_commit": "c", "config": {},
            "inputs": [], "outputs": outputs, "seed": null, "started_at": "", "finished_at": "", "wall_seconds": 0.0, "stats": {} });
        std::fs::write(dir.join(MANIFEST_FILE), m.to_string()).unwrap();
        Manifest::read(dir).expect("a readable manifest");
    }

    #[test]
    fn a_copy_without_a_manifest_records_its_files_so_a_retrain_may_drop_one_but_not_a_users() {
        let root = tempfile::tempdir().unwrap();
        let (v1, v2, dest) = (root.path().join("v1"), root.path().join("v2"), root.path().join("adapters/fra"));
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::create_dir_all(&v2).unwrap();
        for f in ["adapter_config.json", "adapter_model.safetensors", "training_pages.json"] {
            std::fs::write(v1.join(f), "v1").unwrap();
        }
        for f in ["adapter_config.json", "adapter_model.safetensors"] {
            std::fs::write(v2.join(f), "v2").unwrap();
        }
        let kind = ResultKind { what: "a LoRA adapter", holds: &|d: &Path| d.join("adapter_config.json").is_file(), derived: &[] };
        replace_dir_with_copy(&v1, &dest, &kind).unwrap();
        // A retrain that writes no page record: the old one was the adapter's own.
        replace_dir_with_copy(&v2, &dest, &kind).unwrap();
        assert!(!dest.join("training_pages.json").exists() && dest.join(FILES_RECORD).is_file());
        // A file the user put beside it, and Finder's litter.
        std::fs::write(dest.join("NOTES.md"), "tried lr 1e-3").unwrap();
        std::fs::write(dest.join(".DS_Store"), "x").unwrap();
        let e = replace_dir_with_copy(&v1, &dest, &kind).unwrap_err().to_string();
        assert!(e.contains("NOTES.md") && !e.contains("DS_Store"), "{e}");
        std::fs::remove_file(dest.join("NOTES.md")).unwrap();
        replace_dir_with_copy(&v1, &dest, &kind).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("training_pages.json")).unwrap(), "v1");
    }

    #[test]
    fn a_file_the_user_added_refuses_the_replacement_and_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let (src, dest) = (root.path().join("src"), root.path().join("eval/study"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("metrics.parquet"), "new").unwrap();
        std::fs::create_dir_all(dest.join("notes")).unwrap();
        std::fs::write(dest.join("metrics.parquet"), "old").unwrap();
        write_manifest(&dest, &["metrics.parquet"]);
        std::fs::write(dest.join("notes/mine.md"), "my notes").unwrap();
        let kind = ResultKind { what: "an evaluation", holds: &|d: &Path| d.join(MANIFEST_FILE).is_file(), derived: &[] };
        let e = replace_dir_with_copy(&src, &dest, &kind).unwrap_err().to_string();
        assert!(e.contains("notes/mine.md") && e.contains("would be lost"), "{e}");
        assert_eq!(std::fs::read_to_string(dest.join("notes/mine.md")).unwrap(), "my notes");
        assert_eq!(std::fs::read_to_string(dest.join("metrics.parquet")).unwrap(), "old", "the previous result stays whole");
        assert_eq!(std::fs::read_dir(root.path().join("eval")).unwrap().count(), 1, "no temporaries left");
        // Moved out, the rerun replaces the folder.
        std::fs::remove_dir_all(dest.join("notes")).unwrap();
        replace_dir_with_copy(&src, &dest, &kind).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("metrics.parquet")).unwrap(), "new");
    }

    #[test]
    fn a_folder_is_replaced_whole_and_recovered_after_a_death_between_renames() {
        let root = tempfile::tempdir().unwrap();
        let (src, dest) = (root.path().join("src"), root.path().join("adapters/v1.2"));
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a.txt"), "new").unwrap();
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("old.txt"), "old").unwrap();
        // The previous result wrote old.txt (its manifest lists it): the new one may drop it.
        write_manifest(&dest, &["old.txt"]);
        // A sibling whose name a `with_extension` would have produced is not touched.
        let sibling = root.path().join("adapters/v1.partial");
        std::fs::create_dir_all(&sibling).unwrap();
        let kind = ResultKind { what: "a test result", holds: &|d: &Path| d.join("sub").is_dir() || d.join("old.txt").is_file(), derived: &[] };
        replace_dir_with_copy(&src, &dest, &kind).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(), "new");
        assert!(!dest.join("old.txt").exists() && sibling.exists());
        assert_eq!(std::fs::read_dir(root.path().join("adapters")).unwrap().count(), 2, "no temporaries left");
        // A dead process's old folder moved aside comes back; its temporary goes.
        std::fs::rename(&dest, root.path().join("adapters/.old-v1.2-4000000000")).unwrap();
        std::fs::create_dir_all(root.path().join("adapters/.tmp-v1.2-4000000000")).unwrap();
        std::fs::write(src.join("sub/a.txt"), "newer").unwrap();
        std::fs::remove_dir_all(src.join("sub")).unwrap();
        // A copy that fails (its source is gone) leaves the recovered folder in place.
        assert!(replace_dir_with_copy(&root.path().join("nope"), &dest, &kind).is_err());
        assert_eq!(std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(), "new");
        assert_eq!(std::fs::read_dir(root.path().join("adapters")).unwrap().count(), 2, "nothing left beside it");
    }

    #[test]
    fn what_finish_writes_into_the_copy_arrives_with_it_and_a_failed_finish_changes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let (src, dest) = (root.path().join("src"), root.path().join("eval/fra"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("table.txt"), "rows").unwrap();
        let kind = ResultKind { what: "a test result", holds: &|d: &Path| d.join("table.txt").is_file(), derived: &[] };
        // `finish` sees the copy (not `dest`, not the source) beside `dest`, the tables in it.
        let page = |staged: &Path| -> anyhow::Result<()> {
            anyhow::ensure!(staged.parent() == dest.parent() && staged != dest && !staged.starts_with(&src), "finish ran on {}", staged.display());
            std::fs::write(staged.join("page.html"), std::fs::read_to_string(staged.join("table.txt"))? + " drawn")?;
            Ok(())
        };
        replace_dir_with_finished_copy(&src, &dest, &kind, &page).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("page.html")).unwrap(), "rows drawn");
        assert!(!src.join("page.html").exists(), "the source is left as it was");
        // A failing finish: the error names the folder and the cause, `dest` keeps its page,
        // and no copy is left beside it.
        std::fs::write(src.join("table.txt"), "new rows").unwrap();
        let e = replace_dir_with_finished_copy(&src, &dest, &kind, &|_| anyhow::bail!("the page: disk full")).unwrap_err().to_string();
        assert!(e.contains("eval/fra") && e.contains("the page: disk full"), "{e}");
        assert_eq!(std::fs::read_to_string(dest.join("page.html")).unwrap(), "rows drawn");
        assert_eq!(std::fs::read_dir(root.path().join("eval")).unwrap().count(), 1, "no temporaries");
        // The same result again (a cached rerun): a page deleted since comes back (the copy is
        // swapped in); with every file of the copy in place nothing is swapped, and a file only
        // `dest` holds stays.
        std::fs::write(src.join("table.txt"), "rows").unwrap();
        std::fs::write(src.join(MANIFEST_FILE), "{}").unwrap();
        replace_dir_with_finished_copy(&src, &dest, &kind, &page).unwrap();
        std::fs::remove_file(dest.join("page.html")).unwrap();
        std::fs::write(dest.join("kept.txt"), "recorded").unwrap();
        // Swapping the copy in would lose kept.txt (the user's): refused, naming it.
        let e = replace_dir_with_finished_copy(&src, &dest, &kind, &page).unwrap_err().to_string();
        assert!(e.contains("kept.txt"), "{e}");
        std::fs::remove_file(dest.join("kept.txt")).unwrap();
        replace_dir_with_finished_copy(&src, &dest, &kind, &page).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("page.html")).unwrap(), "rows drawn", "the page is back");
        std::fs::write(dest.join("kept.txt"), "recorded").unwrap();
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = inode(&dest.join("page.html"));
        replace_dir_with_finished_copy(&src, &dest, &kind, &page).unwrap();
        assert_eq!(inode(&dest.join("page.html")), before, "the same result, complete: left alone");
        assert!(dest.join("kept.txt").is_file());
        assert_eq!(std::fs::read_dir(root.path().join("eval")).unwrap().count(), 1, "no temporaries");
    }

    #[test]
    fn only_a_previous_result_of_the_same_kind_is_replaced() {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("adapter_config.json"), "{}").unwrap();
        let kind = ResultKind { what: "a LoRA adapter", holds: &|d: &Path| d.join("adapter_config.json").is_file(), derived: &[] };
        // A folder of other things (the parent of every adapter): refused, untouched.
        let shelf = root.path().join("adapters");
        std::fs::create_dir_all(shelf.join("other")).unwrap();
        std::fs::write(shelf.join("other/adapter_config.json"), "{}").unwrap();
        let e = replace_dir_with_copy(&src, &shelf, &kind).unwrap_err().to_string();
        assert!(e.contains("holds something else") && e.contains("adapters") && !e.contains('\n'), "{e}");
        assert!(shelf.join("other/adapter_config.json").is_file());
        // A regular file: refused, still a file.
        let file = root.path().join("notes.txt");
        std::fs::write(&file, "keep").unwrap();
        assert!(replace_dir_with_copy(&src, &file, &kind).unwrap_err().to_string().contains("is a file"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
        // `.` and `..` name no folder.
        assert!(replace_dir_with_copy(&src, &shelf.join(".."), &kind).is_err());
        assert!(replace_dir_with_copy(&src, &shelf.join("."), &kind).is_err());
        // An empty folder and a previous adapter are replaced.
        let empty = root.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        replace_dir_with_copy(&src, &empty, &kind).unwrap();
        replace_dir_with_copy(&src, &shelf.join("other"), &kind).unwrap();
        assert!(empty.join("adapter_config.json").is_file());
        assert_eq!(std::fs::read_dir(root.path()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with('.')).count(), 0, "no temporaries");
    }
}
