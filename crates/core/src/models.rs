//! Finding a model folder from a config's `model`: a folder path, the gauge models directory
//! (independent of the working directory), the Hugging Face cache. Every model-loading crate
//! (encoder, decoder, chunk tokenizers) resolves through here.
use std::path::{Path, PathBuf};

/// A model that is in none of the places looked at.
#[derive(Debug, thiserror::Error)]
#[error("model `{spec}` not found (looked in {searched}); run `just models`, pass a model folder, or set GAUGE_MODELS_DIR")]
pub struct ModelNotFound {
    /// What was asked for.
    pub spec: String,
    /// Where it looked.
    pub searched: String,
}

/// A model folder and the id it was asked for by.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSource {
    /// What the user asked for (folder path or hub id).
    pub id: String,
    /// The folder holding `config.json`, `tokenizer.json`, `model.safetensors`.
    pub dir: PathBuf,
}

/// Where `just models` puts models, whatever the working directory: `$GAUGE_MODELS_DIR`, else
/// `$XDG_DATA_HOME/gauge/models`, else `~/.local/share/gauge/models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GAUGE_MODELS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("gauge/models")
}

/// The Hugging Face hub cache: `$HF_HUB_CACHE`, `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hf_cache_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        return Some(PathBuf::from(p).join("hub"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
}

/// A snapshot of `org/name` in a hub cache (`models--org--name/snapshots/<refs/main>`).
pub fn find_in_hf_cache(cache: &Path, id: &str) -> Option<PathBuf> {
    let repo = cache.join(format!("models--{}", id.replace('/', "--")));
    let rev = std::fs::read_to_string(repo.join("refs/main")).ok();
    let snapshots = repo.join("snapshots");
    if let Some(rev) = rev {
        let dir = snapshots.join(rev.trim());
        if dir.join("config.json").is_file() {
            return Some(dir);
        }
    }
    // No refs/main: take any snapshot that has a config.
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&snapshots).ok()?.flatten().map(|e| e.path()).filter(|p| p.join("config.json").is_file()).collect();
    dirs.sort();
    dirs.pop()
}

/// Resolves a model: an existing folder; else `<models dir>/<id>` or `<models dir>/<last part
/// of id>` (see [`models_dir`]); else the Hugging Face cache. Nothing is downloaded here: fetching is `just models`' job
/// (or `huggingface-cli download` for hub models), so runs are reproducible offline.
pub fn resolve_model(spec: &str) -> Result<ModelSource, ModelNotFound> {
    let path = Path::new(spec);
    if path.is_dir() {
        return Ok(ModelSource { id: spec.to_string(), dir: path.to_path_buf() });
    }
    if path.exists() {
        return Err(ModelNotFound { spec: spec.to_string(), searched: format!("{spec} is a file; a model is a folder or a hub id") });
    }
    let models = models_dir();
    let last = spec.rsplit('/').next().unwrap_or(spec);
    for candidate in [models.join(spec), models.join(last)] {
        if candidate.is_dir() {
            return Ok(ModelSource { id: spec.to_string(), dir: candidate });
        }
    }
    if spec.contains('/') && !spec.starts_with('.') && !spec.starts_with('/') {
        if let Some(cache) = hf_cache_dir() {
            if let Some(dir) = find_in_hf_cache(&cache, spec) {
                return Ok(ModelSource { id: spec.to_string(), dir });
            }
        }
    }
    Err(ModelNotFound {
        spec: spec.to_string(),
        searched: format!(
            "{}, {}, Hugging Face cache {}",
            home_relative(&models.join(spec)),
            home_relative(&models.join(last)),
            hf_cache_dir().map(|p| home_relative(&p)).unwrap_or_else(|| "(no HOME)".into())
        ),
    })
}

/// A path with the home directory written `~`, so messages that end up in reports and
/// manifests do not carry one machine's layout.
fn home_relative(path: &Path) -> String {
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if path.starts_with(&home) => format!("~/{}", path.strip_prefix(&home).expect("checked prefix").display()),
        _ => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hub_cache_snapshots() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("models--BAAI--bge-small-en-v1.5");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(repo.join("snapshots/abc123/config.json"), "{}").unwrap();
        assert_eq!(find_in_hf_cache(tmp.path(), "BAAI/bge-small-en-v1.5"), Some(repo.join("snapshots/abc123")));
        assert_eq!(find_in_hf_cache(tmp.path(), "BAAI/other"), None);
    }

    #[test]
    fn missing_model_names_the_recipe() {
        let err = resolve_model("nobody/no-such-model-xyz").unwrap_err().to_string();
        assert!(err.contains("nobody/no-such-model-xyz") && err.contains("just models"), "{err}");
        assert_eq!(err.lines().count(), 1);
        if let Some(home) = std::env::var_os("HOME").filter(|h| h.len() > 1) {
            assert!(!err.contains(&*home.to_string_lossy()), "the home directory is written ~: {err}");
        }
    }
}
