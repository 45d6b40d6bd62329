//! The sources a bench measures, stamped into its file so staleness cannot hide.
//!
//! A bench names the workspace crates it measures and any other paths (its example, its
//! script); the stamp holds the closure of those crates over their workspace `[dependencies]`,
//! the commit, and one BLAKE3 hash of every file under those paths — each crate's `src/`,
//! `Cargo.toml` and `build.rs`, and the extra paths (relative path and bytes, in path order;
//! `target/` and hidden entries skipped). [`stale`] recomputes the hash of each
//! bench file's paths: a file whose measured sources changed since it was written is stale.
//! Dependency versions (Cargo.lock) are not in the hash: a registry bump does not stale a file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{BenchError, Result};

/// What a bench measured, as of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamp {
    /// `git rev-parse HEAD` at the run (`None` outside a git checkout).
    pub commit: Option<String>,
    /// Whether any measured path had uncommitted changes (`git status --porcelain`).
    pub dirty: bool,
    /// The workspace crates named by the bench and every workspace crate they depend on.
    pub crates: Vec<String>,
    /// Every path hashed, relative to the repository root.
    pub paths: Vec<String>,
    /// BLAKE3 of the files under `paths`.
    pub hash: String,
}

/// Workspace crates under `root/crates`: package name → (folder, workspace dependencies).
fn workspace_crates(root: &Path) -> Result<BTreeMap<String, (String, Vec<String>)>> {
    let dir = root.join("crates");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).map_err(|e| BenchError::io(&dir, e))?.flatten() {
        let manifest = e.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
        let t: toml::Table = text.parse().map_err(|e| BenchError::Invalid(format!("{}: {e}", manifest.display())))?;
        let Some(name) = t.get("package").and_then(|p| p.get("name")).and_then(|n| n.as_str()) else { continue };
        let deps = t.get("dependencies").and_then(|d| d.as_table()).map(|d| d.keys().filter(|k| k.starts_with("gauge-")).cloned().collect()).unwrap_or_default();
        out.insert(name.to_string(), (format!("crates/{}", e.file_name().to_string_lossy()), deps));
    }
    Ok(out)
}

/// The crates named and every workspace crate they depend on, sorted.
pub fn closure(root: &Path, crates: &[String]) -> Result<Vec<String>> {
    let all = workspace_crates(root)?;
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = crates.to_vec();
    while let Some(c) = todo.pop() {
        let (_, deps) = all.get(&c).ok_or_else(|| BenchError::Invalid(format!("`{c}` is no crate under {}/crates", root.display())))?;
        if seen.insert(c.clone()) {
            todo.extend(deps.iter().cloned());
        }
    }
    Ok(seen.into_iter().collect())
}

fn walk(root: &Path, rel: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let full = root.join(rel);
    let meta = std::fs::metadata(&full).map_err(|e| BenchError::io(&full, e))?;
    if meta.is_file() {
        files.push(rel.to_path_buf());
        return Ok(());
    }
    for e in std::fs::read_dir(&full).map_err(|e| BenchError::io(&full, e))?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        walk(root, &rel.join(&name), files)?;
    }
    Ok(())
}

/// BLAKE3 of every file under `paths` (relative to `root`), in path order.
pub fn hash(root: &Path, paths: &[String]) -> Result<String> {
    let mut files = Vec::new();
    for p in paths {
        walk(root, Path::new(p), &mut files)?;
    }
    files.sort();
    files.dedup();
    let mut h = blake3::Hasher::new();
    for f in &files {
        let bytes = std::fs::read(root.join(f)).map_err(|e| BenchError::io(root.join(f), e))?;
        h.update(f.to_string_lossy().as_bytes());
        h.update(&[0]);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(h.finalize().to_hex().to_string())
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Stamp {
    /// Stamps the crates named (and their closure) and the extra paths, now.
    pub fn take(root: &Path, crates: &[String], extra: &[String]) -> Result<Stamp> {
        let all = workspace_crates(root)?;
        let crates = closure(root, crates)?;
        let mut paths: Vec<String> = crates.iter().flat_map(|c| crate_sources(root, &all[c].0)).chain(extra.iter().cloned()).collect();
        paths.sort();
        paths.dedup();
        let hash = hash(root, &paths)?;
        let commit = git(root, &["rev-parse", "HEAD"]);
        let mut status = vec!["status", "--porcelain", "--"];
        status.extend(paths.iter().map(String::as_str));
        let dirty = git(root, &status).is_some_and(|s| !s.is_empty());
        Ok(Stamp { commit, dirty, crates, paths, hash })
    }
}

/// What of a crate's folder is its code: `src/`, `Cargo.toml` and `build.rs` (not its tests,
/// examples or benches: another bench's example does not stale this one; a bench names its own
/// example among its paths).
fn crate_sources(root: &Path, dir: &str) -> Vec<String> {
    ["src", "Cargo.toml", "build.rs"].iter().map(|p| format!("{dir}/{p}")).filter(|p| root.join(p).exists()).collect()
}

/// Rewrites a bench file's stamp with the current rule ([`crate_sources`]) when its measured
/// sources have not changed since its run (the old stamp still holds); the run's commit is kept,
/// and the file's paths are made portable as a run writes them ([`crate::paths::portable`]).
pub fn restamp(root: &Path, file: &str) -> Result<()> {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io(&path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| BenchError::Invalid(format!("{file}: {e}")))?;
    let old: Stamp = serde_json::from_value(v["sources"].clone()).map_err(|e| BenchError::Invalid(format!("{file}: `sources`: {e}")))?;
    if hash(root, &old.paths)? != old.hash {
        return Err(BenchError::Invalid(format!("{file}: its measured sources changed since its run; rerun its recipe instead")));
    }
    let crate_dirs: Vec<String> = workspace_crates(root)?.into_iter().filter(|(n, _)| old.crates.contains(n)).map(|(_, (d, _))| d).collect();
    // Extra paths are what the stamp lists besides the crates' own folders or code (an example
    // inside a crate folder stays: the bench named it).
    let extra: Vec<String> = old.paths.iter().filter(|p| !crate_dirs.iter().any(|d| *p == d || ["src", "Cargo.toml", "build.rs"].iter().any(|c| **p == format!("{d}/{c}")))).cloned().collect();
    let mut new = Stamp::take(root, &old.crates, &extra)?;
    (new.commit, new.dirty) = (old.commit, old.dirty);
    // The file's text is edited, not re-serialised: parsing and printing its floats again could
    // move their last digit, and its figures are the run's as written.
    let begin = "\n  \"sources\": {";
    let at = text.find(begin).ok_or_else(|| BenchError::Invalid(format!("{file}: no top-level `sources` object as the harness writes it")))? + begin.len() - 1;
    let end = text[at..].find("\n  }").ok_or_else(|| BenchError::Invalid(format!("{file}: `sources` is not closed as the harness writes it")))? + at + "\n  }".len();
    let block = serde_json::to_string_pretty(&new).expect("a stamp").replace('\n', "\n  ");
    let edited = format!("{}{block}{}", &text[..at], &text[end..]);
    let tmp = path.with_extension(format!("json.partial-{}", std::process::id()));
    std::fs::write(&tmp, crate::paths::portable(&edited, root)).map_err(|e| BenchError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| BenchError::io(&path, e))
}

/// Stamps a file another tool wrote (a one-run curve, a check's report: a JSON object without
/// the harness's pairs) with what it measured, now: its `sources` key is set to a fresh
/// [`Stamp`] of `crates` and `extra`, so [`stale`] can tell when it no longer describes the code.
/// Run it right after the tool, from the commit the tool ran at.
pub fn stamp(root: &Path, file: &str, crates: &[String], extra: &[String]) -> Result<()> {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io(&path, e))?;
    let mut v: serde_json::Value = serde_json::from_str(&text).map_err(|e| BenchError::Invalid(format!("{file}: {e}")))?;
    let Some(object) = v.as_object_mut() else {
        return Err(BenchError::Invalid(format!("{file}: not a JSON object; only an object can carry a `sources` stamp")));
    };
    if let Some(missing) = extra.iter().find(|p| !root.join(p).exists()) {
        return Err(BenchError::Invalid(format!("{file}: the path `{missing}` to stamp does not exist under {}", root.display())));
    }
    object.insert("sources".into(), serde_json::to_value(Stamp::take(root, crates, extra)?).expect("a stamp"));
    let tmp = path.with_extension(format!("json.partial-{}", std::process::id()));
    std::fs::write(&tmp, crate::paths::portable(&(serde_json::to_string_pretty(&v).expect("JSON") + "\n"), root)).map_err(|e| BenchError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| BenchError::io(&path, e))
}

/// A bench file whose measured sources changed since it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct StaleFile {
    /// The bench file, relative to the root.
    pub file: String,
    /// Why: the hash differs, or a path it measured is gone.
    pub why: String,
}

/// Bench files under `root/bench` (`*.json` and `*/*.json`) with a `sources` stamp.
pub fn stamped_files(root: &Path) -> Result<Vec<(String, Stamp)>> {
    Ok(bench_files(root)?.into_iter().filter_map(|(f, s)| s.map(|s| (f, s))).collect())
}

/// Every bench file under `root/bench` (`*.json` and `*/*.json`), with its stamp when it has one.
fn bench_files(root: &Path) -> Result<Vec<(String, Option<Stamp>)>> {
    let mut out = Vec::new();
    let dir = root.join("bench");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| BenchError::io(&dir, e))?.flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).map_err(|e| BenchError::io(&p, e))?.flatten().map(|e| e.path()));
        } else {
            files.push(p);
        }
    }
    files.sort();
    for p in files.into_iter().filter(|p| p.extension().is_some_and(|x| x == "json")) {
        let text = std::fs::read_to_string(&p).map_err(|e| BenchError::io(&p, e))?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        let name = p.strip_prefix(root).unwrap_or(&p).to_string_lossy().to_string();
        match v.get("sources").filter(|s| s.get("hash").is_some()) {
            Some(s) => {
                let stamp: Stamp = serde_json::from_value(s.clone()).map_err(|e| BenchError::Invalid(format!("{}: `sources`: {e}", p.display())))?;
                out.push((name, Some(stamp)));
            }
            None => out.push((name, None)),
        }
    }
    Ok(out)
}

/// Every bench file whose measured sources changed since its run, and every file written
/// before the harness (no stamp: what it measured cannot be told).
pub fn stale(root: &Path) -> Result<Vec<StaleFile>> {
    let mut out = Vec::new();
    for (file, stamp) in bench_files(root)? {
        let Some(stamp) = stamp else {
            out.push(StaleFile { file, why: "no sources stamp: written before the harness (rerun its recipe)".into() });
            continue;
        };
        match hash(root, &stamp.paths) {
            Ok(h) if h == stamp.hash => {}
            Ok(_) => out.push(StaleFile { file, why: format!("the sources it measured changed since commit {} ({})", stamp.commit.as_deref().unwrap_or("?"), stamp.paths.join(", ")) }),
            Err(e) => out.push(StaleFile { file, why: format!("a path it measured is gone: {e}") }),
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tiny workspace: crates a → b → c, and d alone.
    pub(crate) fn toy_root() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, deps) in [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec![]), ("d", vec![])] {
            let dir = d.path().join("crates").join(name);
            std::fs::create_dir_all(dir.join("src")).unwrap();
            let deps: String = deps.iter().map(|x| format!("gauge-{x}.workspace = true\n")).collect();
            std::fs::write(dir.join("Cargo.toml"), format!("[package]\nname = \"gauge-{name}\"\n[dependencies]\nserde = \"1\"\n{deps}")).unwrap();
            std::fs::write(dir.join("src/lib.rs"), format!("// {name}\n")).unwrap();
            std::fs::create_dir_all(dir.join("target")).unwrap();
            std::fs::write(dir.join("target/junk"), "x").unwrap();
        }
        std::fs::create_dir_all(d.path().join("bench")).unwrap();
        d
    }

    #[test]
    fn restamp_moves_a_current_file_to_the_rule_and_refuses_a_stale_one() {
        let d = toy_root();
        // A stamp of the old rule: whole crate folders.
        std::fs::create_dir_all(d.path().join("crates/b/examples")).unwrap();
        std::fs::write(d.path().join("crates/b/examples/bench.rs"), "fn main() {}\n").unwrap();
        let paths = vec!["crates/b".to_string(), "crates/b/examples/bench.rs".to_string(), "crates/c".to_string(), "crates/d/src/lib.rs".to_string()];
        let old = Stamp { commit: Some("abc".into()), dirty: false, crates: vec!["gauge-b".into(), "gauge-c".into()], hash: hash(d.path(), &paths).unwrap(), paths };
        let figure = 0.1963872395609531_f64;
        std::fs::write(d.path().join("bench/x.json"), serde_json::to_string_pretty(&serde_json::json!({ "harness": 1, "sources": old, "figures": 1, "ratio": figure })).unwrap() + "\n").unwrap();
        restamp(d.path(), "bench/x.json").unwrap();
        // The figures' text is untouched (no float printed again).
        assert!(std::fs::read_to_string(d.path().join("bench/x.json")).unwrap().contains(&format!("\"ratio\": {figure}")));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.path().join("bench/x.json")).unwrap()).unwrap();
        assert_eq!(v["sources"]["paths"], serde_json::json!(["crates/b/Cargo.toml", "crates/b/examples/bench.rs", "crates/b/src", "crates/c/Cargo.toml", "crates/c/src", "crates/d/src/lib.rs"]));
        // Restamping a current file changes nothing.
        restamp(d.path(), "bench/x.json").unwrap();
        let again: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.path().join("bench/x.json")).unwrap()).unwrap();
        assert_eq!(again, v);
        assert_eq!((v["sources"]["commit"].as_str(), v["figures"].as_i64()), (Some("abc"), Some(1)));
        assert!(stale(d.path()).unwrap().is_empty());
        std::fs::write(d.path().join("crates/d/src/lib.rs"), "// changed\n").unwrap();
        assert!(restamp(d.path(), "bench/x.json").unwrap_err().to_string().contains("rerun"));
    }

    #[test]
    fn stamp_marks_another_tools_file_and_refuses_what_cannot_carry_one() {
        let d = toy_root();
        std::fs::write(d.path().join("bench/curve.json"), "{\"rows\": [1, 2]}").unwrap();
        // Unstamped: listed as written before the harness.
        assert!(stale(d.path()).unwrap()[0].why.contains("no sources stamp"));
        std::fs::create_dir_all(d.path().join("scripts")).unwrap();
        std::fs::write(d.path().join("scripts/plot.py"), "print(1)\n").unwrap();
        stamp(d.path(), "bench/curve.json", &["gauge-b".into()], &["scripts/plot.py".into()]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.path().join("bench/curve.json")).unwrap()).unwrap();
        assert_eq!(v["rows"], serde_json::json!([1, 2]));
        assert_eq!(v["sources"]["crates"], serde_json::json!(["gauge-b", "gauge-c"]));
        assert!(stale(d.path()).unwrap().is_empty());
        // The stamp sees a change to the script or a measured crate.
        std::fs::write(d.path().join("scripts/plot.py"), "print(2)\n").unwrap();
        assert_eq!(stale(d.path()).unwrap().len(), 1);
        // Bad input: not an object, a missing path, a missing file.
        std::fs::write(d.path().join("bench/list.json"), "[1]").unwrap();
        assert!(stamp(d.path(), "bench/list.json", &["gauge-b".into()], &[]).unwrap_err().to_string().contains("not a JSON object"));
        assert!(stamp(d.path(), "bench/curve.json", &["gauge-b".into()], &["scripts/nope.py".into()]).unwrap_err().to_string().contains("scripts/nope.py"));
        assert!(stamp(d.path(), "bench/none.json", &["gauge-b".into()], &[]).is_err());
    }

    #[test]
    fn closure_follows_workspace_dependencies() {
        let d = toy_root();
        assert_eq!(closure(d.path(), &["gauge-a".into()]).unwrap(), vec!["gauge-a", "gauge-b", "gauge-c"]);
        assert_eq!(closure(d.path(), &["gauge-d".into()]).unwrap(), vec!["gauge-d"]);
        assert!(closure(d.path(), &["gauge-zz".into()]).unwrap_err().to_string().contains("gauge-zz"));
    }

    #[test]
    fn a_changed_dependency_makes_the_file_stale_and_target_does_not() {
        let d = toy_root();
        let stamp = Stamp::take(d.path(), &["gauge-b".into()], &[]).unwrap();
        assert_eq!(stamp.paths, vec!["crates/b/Cargo.toml", "crates/b/src", "crates/c/Cargo.toml", "crates/c/src"]);
        std::fs::write(d.path().join("bench/x.json"), serde_json::to_string(&serde_json::json!({ "sources": stamp })).unwrap()).unwrap();
        assert!(stale(d.path()).unwrap().is_empty());
        // A file from before the harness is listed as such.
        std::fs::write(d.path().join("bench/plain.json"), "{\"old\": 1}").unwrap();
        let s = stale(d.path()).unwrap();
        assert_eq!((s.len(), s[0].file.as_str()), (1, "bench/plain.json"));
        assert!(s[0].why.contains("before the harness"));
        std::fs::remove_file(d.path().join("bench/plain.json")).unwrap();
        // Build output and an unrelated crate do not count.
        std::fs::write(d.path().join("crates/c/target/junk"), "y").unwrap();
        std::fs::write(d.path().join("crates/d/src/lib.rs"), "// changed\n").unwrap();
        assert!(stale(d.path()).unwrap().is_empty());
        // Nor does another bench's example in a measured crate.
        std::fs::create_dir_all(d.path().join("crates/b/examples")).unwrap();
        std::fs::write(d.path().join("crates/b/examples/other.rs"), "fn main() {}\n").unwrap();
        assert!(stale(d.path()).unwrap().is_empty());
        // A dependency two floors down does.
        std::fs::write(d.path().join("crates/c/src/lib.rs"), "// changed\n").unwrap();
        let s = stale(d.path()).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].file, "bench/x.json");
        // A new file counts too, and so does a removed path.
        std::fs::write(d.path().join("crates/c/src/lib.rs"), "// c\n").unwrap();
        assert!(stale(d.path()).unwrap().is_empty());
        std::fs::write(d.path().join("crates/b/src/new.rs"), "").unwrap();
        assert_eq!(stale(d.path()).unwrap().len(), 1);
        std::fs::remove_dir_all(d.path().join("crates/b")).unwrap();
        assert!(stale(d.path()).unwrap()[0].why.contains("gone"));
    }
}
