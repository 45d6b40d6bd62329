//! Artifact roots on object stores: `s3://bucket/prefix` (credentials and endpoint from the
//! usual `AWS_*` variables: `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ALLOW_HTTP`), `gs://bucket/prefix` (`GOOGLE_*`), or `file:///path`, through
//! the `object_store` crate.
//!
//! The layout is the local one (`<root>/<stage>/<fingerprint>/…`), and so is the commit rule:
//! an object store has no rename, so [`RemoteRoot::push`] uploads every file of an artifact
//! first and its `manifest.json` **last**; a reader trusts only an artifact whose manifest is
//! there ([`RemoteRoot::list`], [`RemoteRoot::pull`]): a push that dies half-way leaves files
//! nobody reads, and the next push of the same artifact (same fingerprint, same bytes)
//! completes it. Stages still run on local files: a node pulls the artifacts it reads into a
//! local mirror (an artifact root like any other), runs the stage there, and pushes what it
//! built (`artifact-store`, or `scripts/ray_ablate.py --remote URL`).
#![deny(missing_docs)]
pub mod cli;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

/// Errors of remote artifact roots.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is not one gauge can open.
    #[error("{url}: {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The object store failed.
    #[error("{url}: {source}")]
    Store {
        /// The object's URL.
        url: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// The artifact is not there, or not complete (no manifest).
    #[error("{url}: no manifest.json, so no complete artifact here (never pushed, or a push that did not finish); push it again")]
    Incomplete {
        /// The artifact's URL.
        url: String,
    },
    /// A symbolic link where an artifact holds only its own files.
    #[error("{path}: a symbolic link; an artifact holds only its own files, and gauge never copies what a link points to (a loop, a secret): replace the link with the file")]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// Local files.
    #[error(transparent)]
    Core(#[from] gauge_core::CoreError),
    /// Local I/O.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

/// An artifact root on an object store.
pub struct RemoteRoot {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    runtime: tokio::runtime::Runtime,
    /// The folder of a `file://` root (its links are refused when pulling).
    local: Option<PathBuf>,
}

/// Whether an artifact root argument is a URL (`s3://`, `gs://`, `file://`).
pub fn is_url(root: &str) -> bool {
    root.starts_with("s3://") || root.starts_with("gs://") || root.starts_with("file://")
}

/// Files under `dir` (relative paths with `/`), sorted.
fn files(dir: &Path) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(io(&d))? {
            let p = e.map_err(io(&d))?.path();
            let meta = std::fs::symlink_metadata(&p).map_err(io(&p))?;
            if meta.file_type().is_symlink() {
                return Err(StoreError::Link { path: p });
            }
            if meta.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("under dir").components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

impl RemoteRoot {
    /// Opens `url` for reading (see the module docs for credentials): a `file://` root that
    /// does not exist is an error, and nothing is created.
    pub fn open(url: &str) -> Result<RemoteRoot, StoreError> {
        RemoteRoot::open_with(url, false)
    }

    /// Opens `url` to push to: a `file://` root is created when missing.
    pub fn open_for_push(url: &str) -> Result<RemoteRoot, StoreError> {
        RemoteRoot::open_with(url, true)
    }

    fn open_with(url: &str, create: bool) -> Result<RemoteRoot, StoreError> {
        let bad = |message: String| StoreError::Url { url: url.to_string(), message };
        let parsed = url::Url::parse(url).map_err(|e| bad(format!("not a URL ({e})")))?;
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" => Arc::new(object_store::aws::AmazonS3Builder::from_env().with_url(url).build().map_err(|e| bad(format!("cannot open the bucket ({e}); set AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (and AWS_ALLOW_HTTP=true for http)")))?),
            "gs" => Arc::new(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url).build().map_err(|e| bad(format!("cannot open the bucket ({e}); set GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS")))?),
            "file" => {
                let path = parsed.to_file_path().map_err(|_| bad("not a local path".into()))?;
                if create {
                    std::fs::create_dir_all(&path).map_err(io(&path))?;
                } else if !path.is_dir() {
                    return Err(bad("no such folder, so no store here (`gauge-store push` creates one)".into()));
                }
                Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&path).map_err(|e| bad(e.to_string()))?)
            }
            other => return Err(bad(format!("scheme `{other}` is not supported; use s3://, gs:// or file://"))),
        };
        let prefix = match parsed.scheme() {
            "file" => ObjectPath::default(),
            _ => ObjectPath::from(parsed.path().trim_matches('/')),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| StoreError::Io { path: PathBuf::from(url), source: e })?;
        let local = (parsed.scheme() == "file").then(|| parsed.to_file_path().ok()).flatten();
        Ok(RemoteRoot { store, prefix, url: url.trim_end_matches('/').to_string(), runtime, local })
    }

    fn key(&self, rel: &str) -> ObjectPath {
        rel.split('/').filter(|p| !p.is_empty()).fold(self.prefix.clone(), |p, part| p.child(part))
    }

    fn object_url(&self, rel: &str) -> String {
        format!("{}/{rel}", self.url)
    }

    fn err(&self, rel: &str) -> impl FnOnce(object_store::Error) -> StoreError + '_ {
        let url = self.object_url(rel);
        move |source| StoreError::Store { url, source }
    }

    /// Whether `<stage>/<fingerprint>` is complete here (its manifest is there).
    pub fn is_complete(&self, stage: &str, fingerprint: &str) -> Result<bool, StoreError> {
        let rel = format!("{stage}/{fingerprint}/manifest.json");
        match self.runtime.block_on(self.store.head(&self.key(&rel))) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err(&rel)(e)),
        }
    }

    /// Uploads a local artifact directory: every file, then `manifest.json` last. An artifact
    /// already complete here is left as it is. Returns `<stage>/<fingerprint>`.
    pub fn push(&self, dir: &Path) -> Result<String, StoreError> {
        self.push_files(dir, true)
    }

    /// [`RemoteRoot::push`], optionally stopping before the manifest (what a crash mid-push
    /// leaves; for tests).
    pub fn push_files(&self, dir: &Path, with_manifest: bool) -> Result<String, StoreError> {
        let manifest = gauge_core::Manifest::read(dir)?;
        let name = format!("{}/{}", manifest.stage, manifest.fingerprint);
        if self.is_complete(&manifest.stage, &manifest.fingerprint)? {
            return Ok(name);
        }
        let mut all = files(dir)?;
        all.retain(|f| f != "manifest.json");
        if with_manifest {
            all.push("manifest.json".into());
        }
        for f in &all {
            let local = dir.join(f);
            let bytes = std::fs::read(&local).map_err(io(&local))?;
            let rel = format!("{name}/{f}");
            self.runtime.block_on(self.store.put(&self.key(&rel), PutPayload::from(bytes))).map_err(self.err(&rel))?;
        }
        Ok(name)
    }

    /// Downloads complete artifact `<stage>/<fingerprint>` into the local root `mirror`
    /// (`mirror/<stage>/<fingerprint>`, through a temporary directory renamed into place); a
    /// copy already there is kept. Refuses an artifact without its manifest.
    pub fn pull(&self, name: &str, mirror: &Path) -> Result<PathBuf, StoreError> {
        let (stage, fingerprint) = name.trim_matches('/').split_once('/').ok_or_else(|| StoreError::Url { url: self.object_url(name), message: "name an artifact as <stage>/<fingerprint>".into() })?;
        // Both parts become folders under the mirror: one plain name each, never a path.
        for (what, part) in [("stage", stage), ("fingerprint", fingerprint)] {
            gauge_core::names::plain_name(part).map_err(|why| StoreError::Url { url: self.object_url(name), message: format!("the {what} {why}; name an artifact as <stage>/<fingerprint>") })?;
        }
        let dest = mirror.join(stage).join(fingerprint);
        if dest.join("manifest.json").is_file() {
            return Ok(dest);
        }
        if !self.is_complete(stage, fingerprint)? {
            return Err(StoreError::Incomplete { url: self.object_url(name) });
        }
        let base = self.key(name);
        let objects: Vec<object_store::ObjectMeta> = self.runtime.block_on(self.store.list(Some(&base)).try_collect()).map_err(self.err(name))?;
        let tmp = mirror.join(stage).join(format!(".pull-{fingerprint}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        for o in &objects {
            let rel: Vec<String> = o.location.prefix_match(&base).map(|parts| parts.map(|p| p.as_ref().to_string()).collect()).unwrap_or_default();
            if rel.is_empty() {
                continue;
            }
            if let Some(root) = &self.local {
                // A local store is a folder anyone may have put links in: none is followed.
                let mut at = root.join(stage).join(fingerprint);
                for part in &rel {
                    at.push(part);
                    if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                        let _ = std::fs::remove_dir_all(&tmp);
                        return Err(StoreError::Link { path: at });
                    }
                }
            }
            let path = rel.iter().fold(tmp.clone(), |p, part| p.join(part));
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let bytes = self.runtime.block_on(async { self.store.get(&o.location).await?.bytes().await }).map_err(self.err(&rel.join("/")))?;
            std::fs::write(&path, &bytes).map_err(io(&path))?;
        }
        match std::fs::rename(&tmp, &dest) {
            Ok(()) => Ok(dest),
            // Another process pulled it first: theirs is the same artifact.
            Err(_) if dest.join("manifest.json").is_file() => {
                let _ = std::fs::remove_dir_all(&tmp);
                Ok(dest)
            }
            Err(e) => Err(StoreError::Io { path: dest, source: e }),
        }
    }

    /// The complete artifacts here, as `<stage>/<fingerprint>`, sorted.
    pub fn list(&self) -> Result<Vec<String>, StoreError> {
        let objects: Vec<object_store::ObjectMeta> = self.runtime.block_on(self.store.list(Some(&self.prefix)).try_collect()).map_err(self.err(""))?;
        let mut out: Vec<String> = objects
            .iter()
            .filter_map(|o| {
                let parts: Vec<String> = o.location.prefix_match(&self.prefix)?.map(|p| p.as_ref().to_string()).collect();
                (parts.len() == 3 && parts[2] == "manifest.json").then(|| format!("{}/{}", parts[0], parts[1]))
            })
            .collect();
        out.sort();
        Ok(out)
    }
}
