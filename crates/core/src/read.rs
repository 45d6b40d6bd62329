//! One bounded reader for every file a manifest or a user names.
//!
//! `read_to_string` on a path a user (or a manifest) gave reads whatever is there: `/dev/zero`
//! until memory runs out, a FIFO forever. [`read_bounded`] reads regular files only (checked
//! before opening, so a FIFO never blocks, and again on the open handle) and at most `limit`
//! bytes; anything else is a one-line error naming the file.
use std::io::Read;
use std::path::Path;

use crate::CoreError;

/// Limit for a `manifest.json` (the largest committed one is well under 1 MiB).
pub const MANIFEST_LIMIT: u64 = 64 << 20;
/// Limit for a config or pipeline file (TOML or JSON).
pub const CONFIG_LIMIT: u64 = 16 << 20;
/// Limit for a question set or a relevance file (JSON Lines, TSV).
pub const DATA_LIMIT: u64 = 4 << 30;

fn refuse(path: &Path, message: String) -> CoreError {
    CoreError::Artifact { path: path.to_path_buf(), message }
}

/// The bytes of the regular file at `path`, at most `limit` of them.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, CoreError> {
    let meta = std::fs::metadata(path).map_err(|e| CoreError::io(path, e))?;
    if !meta.is_file() {
        let what = if meta.is_dir() { "a folder" } else { "not a regular file (a FIFO, a device or a socket)" };
        return Err(refuse(path, format!("{what}; give the path of a file")));
    }
    let file = std::fs::File::open(path).map_err(|e| CoreError::io(path, e))?;
    if !file.metadata().map_err(|e| CoreError::io(path, e))?.is_file() {
        return Err(refuse(path, "changed into something other than a regular file while it was opened".into()));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(limit) as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| CoreError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(refuse(path, format!("larger than {} MiB, more than such a file can hold; check the path", limit >> 20)));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_bounded_string(path: &Path, limit: u64) -> Result<String, CoreError> {
    String::from_utf8(read_bounded(path, limit)?).map_err(|e| refuse(path, format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_folders_and_oversized_files_are_refused_in_one_line() {
        let e = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("/dev/zero") && e.contains("not a regular file"), "{e}");
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_bounded(tmp.path(), 10).unwrap_err().to_string().contains("a folder"));
        let f = tmp.path().join("big.json");
        std::fs::write(&f, vec![b'x'; 11]).unwrap();
        assert!(read_bounded(&f, 10).unwrap_err().to_string().contains("larger than"));
        assert_eq!(read_bounded(&f, 11).unwrap().len(), 11);
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_bounded_string(&f, 10).unwrap_err().to_string().contains("not UTF-8"));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo on this system: nothing to try
        }
        assert!(read_bounded(&fifo, 10).unwrap_err().to_string().contains("not a regular file"));
    }
}
