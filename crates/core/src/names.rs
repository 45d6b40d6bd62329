//! Names that become paths: a pipeline's `name`, a destination, a path read from a manifest.
//!
//! Every such value is checked where it is parsed, so that no stage writes, deletes or reads
//! outside the folder it belongs to: a *plain name* is one path component (no separator, not
//! `.` or `..`, not hidden, no control characters); a *confined path* is relative and stays
//! inside its root once `.` and `..` are resolved.
use std::path::{Component, Path, PathBuf};

/// The longest plain name accepted (bytes); file systems allow 255.
pub const MAX_NAME_BYTES: usize = 120;

/// Checks that `value` is a single plain path component; the error says why, for a message
/// that names the field and file.
pub fn plain_name(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("is empty; give a plain name such as `fra`".into());
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(format!("is {} bytes long; at most {MAX_NAME_BYTES}", value.len()));
    }
    if value == "." || value == ".." {
        return Err(format!("`{value}` is not a name; give a plain name such as `fra`"));
    }
    if let Some(c) = value.chars().find(|c| matches!(c, '/' | '\\' | ':') || c.is_control()) {
        return Err(format!("`{}` holds {:?}: a name is one folder, not a path", value.escape_debug(), c));
    }
    if value.starts_with('.') {
        return Err(format!("`{value}` starts with `.` (hidden names are gauge's temporaries); give a plain name"));
    }
    if value != value.trim() {
        return Err(format!("`{value}` starts or ends with white space"));
    }
    Ok(())
}

/// Resolves a relative path inside `root`: `.` and `..` are resolved lexically and the result
/// must stay inside `root`; an absolute path, a drive prefix or an escape is an error (why).
pub fn confined(root: &Path, relative: &Path) -> Result<PathBuf, String> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in relative.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(format!("`{}` leads outside {}", relative.display(), root.display()));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("`{}` is absolute; only paths relative to {} are read", relative.display(), root.display()));
            }
        }
    }
    let mut out = root.to_path_buf();
    out.extend(parts);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names() {
        for ok in ["fra", "fra-trained", "fra_llm.v2", "études", "a b"] {
            assert!(plain_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", ".hidden", "../x", "a/b", "/abs", "a\\b", "c:x", "a\nb", " fra", &"x".repeat(121)] {
            assert!(plain_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn confined_paths() {
        let root = Path::new("/repo");
        assert_eq!(confined(root, Path::new("artifacts/x/./y")).unwrap(), Path::new("/repo/artifacts/x/y"));
        assert_eq!(confined(root, Path::new("a/../b")).unwrap(), Path::new("/repo/b"));
        for bad in ["../etc/passwd", "a/../../b", "/dev/zero"] {
            assert!(confined(root, Path::new(bad)).is_err(), "{bad}");
        }
    }
}
