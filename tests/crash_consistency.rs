//! A stage killed at the worst moment leaves nothing that looks complete; the rerun succeeds.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gauge::{bin, complete_dirs, last_line, ok, run, shared};

#[test]
fn kill_9_before_commit_leaves_no_complete_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let corpus = shared().join("corpora/fra");
    let mut child = Command::new(bin("extract"))
        .args([corpus.to_str().unwrap(), "--artifacts", art.to_str().unwrap()])
        .env("GAUGE_NO_PROGRESS", "1")
        .env("GAUGE_TEST_PAUSE_BEFORE_COMMIT_MS", "60000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until every output and the manifest are written into the temporary directory.
    let started = Instant::now();
    let tmp_manifest = loop {
        let found = std::fs::read_dir(art.join("extract")).ok().and_then(|entries| {
            entries.flatten().map(|e| e.path()).find(|p| {
                p.file_name().unwrap().to_string_lossy().starts_with(".tmp-") && p.join("manifest.json").is_file()
            })
        });
        if let Some(dir) = found {
            break dir;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "extract never reached the commit point");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(tmp_manifest.exists(), "the killed run's temporary directory is left as it was");
    assert!(complete_dirs(&art, "extract").is_empty(), "a killed run must not leave a complete-looking directory");

    let out = ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]));
    let dir = last_line(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("cache hit"));
    assert!(Path::new(&dir).join("manifest.json").is_file());
    assert_eq!(complete_dirs(&art, "extract").len(), 1);
    assert!(!tmp_manifest.exists(), "the dead run's temporary directory is cleaned up");
    // And a forced rerun replaces it in place.
    let forced = ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--force"]));
    assert_eq!(last_line(&forced), dir);
    assert_eq!(complete_dirs(&art, "extract").len(), 1);
}
