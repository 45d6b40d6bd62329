//! Finding the input documents: the files and folders given, walked with folder links followed
//! once (a loop back into a folder already walked, or a link outside the inputs, is skipped and
//! counted), each file named by its path under its input root.
use std::path::{Path, PathBuf};

use crate::ExtractError;

/// One input file with the name it gets in the output.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Where it is.
    pub path: PathBuf,
    /// Path relative to its input root, with `/` separators.
    pub source: String,
    /// First folder under the root, empty if none.
    pub doc_type: String,
}

/// What a walk of the input folders left out, and why.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WalkSkips {
    /// Folder links that lead back into a folder already walked (`loop -> .`).
    pub loops: usize,
    /// Links whose target lies outside the input folder (not followed unless asked).
    pub outside: usize,
    /// Links whose target does not exist.
    pub broken: usize,
}

impl WalkSkips {
    /// All links skipped.
    pub fn total(&self) -> usize {
        self.loops + self.outside + self.broken
    }
}

/// Finds the input files: folders are walked recursively (hidden entries skipped, sorted);
/// a file's root is its parent folder. Symbolic links are followed only when their target
/// lies inside the input folder (`follow_outside` follows any), and every folder is walked
/// once (by device and inode), so a link back up the tree is skipped instead of looping.
pub fn discover(inputs: &[PathBuf], follow_outside: bool) -> Result<(Vec<InputFile>, WalkSkips), ExtractError> {
    discover_skipping(inputs, follow_outside, &[])
}

/// [`discover`], never entering the folders `skip` names (those that exist: the artifact store
/// when it lies inside an input folder).
pub fn discover_skipping(inputs: &[PathBuf], follow_outside: bool, skip: &[PathBuf]) -> Result<(Vec<InputFile>, WalkSkips), ExtractError> {
    let skip: Vec<(u64, u64, PathBuf)> = skip.iter().filter_map(|d| folder_id(d).ok()).collect();
    let mut files = Vec::new();
    let mut skips = WalkSkips::default();
    for input in inputs {
        if input.is_dir() {
            let canonical = input.canonicalize().map_err(|e| gauge_core::CoreError::io(input, e))?;
            let mut walker = Walker { root: input, canonical_root: &canonical, follow_outside, visited: skip.iter().cloned().collect(), skips: &mut skips };
            walker.visited.insert(folder_id(input).map_err(|e| gauge_core::CoreError::io(input, e))?);
            walker.walk(input, &mut files)?;
        } else if input.is_file() {
            let name = input.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            files.push(InputFile { path: input.clone(), source: name, doc_type: String::new() });
        } else if std::fs::metadata(input).is_ok() {
            return Err(ExtractError::NotAFile(input.clone()));
        } else {
            return Err(ExtractError::MissingInput(input.clone()));
        }
    }
    files.sort_by(|a, b| a.source.cmp(&b.source).then(a.path.cmp(&b.path)));
    if skips.total() > 0 {
        tracing::warn!(
            "skipped {} symbolic link(s): {} looping back into a folder already read, {} leading outside the input folder (--follow-symlinks follows those), {} broken",
            skips.total(),
            skips.loops,
            skips.outside,
            skips.broken
        );
    }
    Ok((files, skips))
}

/// A folder's identity: (device, inode) on Unix, the canonical path elsewhere.
#[cfg(unix)]
fn folder_id(path: &Path) -> std::io::Result<(u64, u64, PathBuf)> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino(), PathBuf::new()))
}

#[cfg(not(unix))]
fn folder_id(path: &Path) -> std::io::Result<(u64, u64, PathBuf)> {
    Ok((0, 0, path.canonicalize()?))
}

struct Walker<'a> {
    root: &'a Path,
    canonical_root: &'a Path,
    follow_outside: bool,
    visited: std::collections::HashSet<(u64, u64, PathBuf)>,
    skips: &'a mut WalkSkips,
}

impl Walker<'_> {
    fn walk(&mut self, dir: &Path, out: &mut Vec<InputFile>) -> Result<(), ExtractError> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| gauge_core::CoreError::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
            .collect();
        entries.sort();
        // Real entries before links, so a folder reached both ways is read under its own name.
        let (links, real): (Vec<PathBuf>, Vec<PathBuf>) = entries.into_iter().partition(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()));
        for (is_link, path) in real.into_iter().map(|p| (false, p)).chain(links.into_iter().map(|p| (true, p))) {
            if is_link {
                match path.canonicalize() {
                    Err(_) => {
                        self.skips.broken += 1;
                        continue;
                    }
                    Ok(target) if !self.follow_outside && !target.starts_with(self.canonical_root) => {
                        self.skips.outside += 1;
                        continue;
                    }
                    Ok(_) => {}
                }
            }
            if path.is_dir() {
                let id = folder_id(&path).map_err(|e| gauge_core::CoreError::io(&path, e))?;
                if !self.visited.insert(id) {
                    // A folder read already (through a link), or the artifact store (entered as
                    // visited, and skipped without a count).
                    if is_link {
                        self.skips.loops += 1;
                    }
                    continue;
                }
                self.walk(&path, out)?;
            } else if path.is_file() {
                let rel = path.strip_prefix(self.root).unwrap_or(&path);
                let parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().to_string()).collect();
                let doc_type = if parts.len() > 1 { parts[0].clone() } else { String::new() };
                out.push(InputFile { path: path.clone(), source: parts.join("/"), doc_type });
            }
        }
        Ok(())
    }
}
