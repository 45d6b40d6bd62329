//! What the crates' own tests share: where the shared test data lives. Tests and benchmarks
//! read `../shared/` beside the checkout (the FRA corpus, the golden sets, the model fixtures),
//! never a copy in the repository; `GAUGE_SHARED` names another folder.
//!
//! (Record and golden-question builders are constructors on the types themselves, in
//! `gauge-core`: `ChunkRecord::new`, `GoldenQuestion::new`; the end-to-end tests' pipeline
//! builder is the root package's `gauge::pipeline`.)
use std::path::PathBuf;

/// The shared data folder: `$GAUGE_SHARED`, or `../shared` beside the workspace — found from
/// where this crate was compiled, else from the working directory up (a test runs in its
/// package's folder): a build cache shared by checkouts at other paths may hold this crate
/// compiled elsewhere.
pub fn shared() -> PathBuf {
    if let Some(dir) = std::env::var_os("GAUGE_SHARED").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let compiled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    if compiled.is_dir() {
        return compiled;
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    cwd.ancestors().find(|a| a.join("Cargo.lock").is_file()).map_or(compiled, |root| root.join("../shared"))
}

/// `relative` under the shared data folder; panics with one line naming the path and the fix
/// when it is missing.
pub fn shared_path(relative: &str) -> PathBuf {
    let p = shared().join(relative);
    assert!(p.exists(), "{}: missing; the tests read ../shared beside the checkout (or set GAUGE_SHARED)", p.display());
    p
}

/// Cosine of two vectors, accumulated in f64 (the fixture tests' measure of agreement).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The bit patterns of a vector (for "the same bits" assertions).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_folder_is_beside_the_checkout_and_a_missing_file_is_named() {
        assert!(shared().join("golden/fra-dev.jsonl").is_file(), "{}", shared().display());
        assert!(shared_path("golden/fra-dev.jsonl").is_file());
        let err = std::panic::catch_unwind(|| shared_path("no/such/file")).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("no/such/file") && msg.contains("GAUGE_SHARED"), "{msg}");
    }
}
