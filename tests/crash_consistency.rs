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

#[test]
fn a_force_run_killed_between_its_renames_loses_nothing() {
    // `--force` moves the old artifact aside, then renames the new one in; a death between the
    // two must not lose the old one (the next run puts it back).
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let corpus = gauge::write_markdown_corpus(tmp.path(), &[("a", "Some text about brakes and gates.")]);
    let args = [corpus.to_str().unwrap(), "--artifacts", art.to_str().unwrap()];
    let dir = last_line(&ok(run("extract", &args)));
    let manifest = std::fs::read_to_string(Path::new(&dir).join("manifest.json")).unwrap();
    let killed = Command::new(bin("extract")).args(args).arg("--force").env("GAUGE_NO_PROGRESS", "1").env("GAUGE_FAILPOINT", "commit-between-renames").output().unwrap();
    assert!(!killed.status.success() && String::from_utf8_lossy(&killed.stderr).contains("failpoint"), "the failpoint did not fire: {}", String::from_utf8_lossy(&killed.stderr));
    assert!(!Path::new(&dir).exists(), "the failpoint sits between the two renames");
    let aside: Vec<_> = std::fs::read_dir(art.join("extract")).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".old-")).collect();
    assert_eq!(aside.len(), 1, "the old artifact is moved aside, not deleted");
    // The next run finds it again: a cache hit on the very same artifact.
    let again = ok(run("extract", &args));
    assert_eq!(last_line(&again), dir);
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(std::fs::read_to_string(Path::new(&dir).join("manifest.json")).unwrap(), manifest);
    assert_eq!(complete_dirs(&art, "extract").len(), 1);
}
