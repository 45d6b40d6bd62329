//! Object-store artifact roots (`gauge-store`, `artifact-store`): a pushed artifact is listed
//! and pulls back byte for byte into another local root, where the next stage reads it; a push
//! that stops before its manifest (a crash) is neither listed nor pulled, and pushing again
//! completes it. Against `file://` always; against a real S3 server (`just test-store` starts
//! one, moto's, from PyPI) when `GAUGE_S3_URL` is set.
use std::path::Path;

use gauge::{last_line, ok, refused, run};
use gauge_store::RemoteRoot;

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path().strip_prefix(dir).unwrap().display().to_string(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn check_root(url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (n, t) in [("gates", "Gate arms must be fully lowered before the train arrives."), ("lights", "Flashing lights flash 35 to 65 times a minute.")] {
        std::fs::write(corpus.join(format!("{n}.md")), format!("# {n}\n\n{t}\n")).unwrap();
    }
    let node_a = tmp.path().join("node-a");
    let node_b = tmp.path().join("node-b");
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", node_a.to_str().unwrap()])));

    // Node A pushes; the root lists it; node B pulls the same bytes and chunks them.
    let name = last_line(&ok(run("artifact-store", &["push", &pages, url])));
    assert!(name.starts_with("extract/"), "{name}");
    assert_eq!(last_line(&ok(run("artifact-store", &["ls", url]))), name);
    let pulled = last_line(&ok(run("artifact-store", &["pull", url, &name, "--into", node_b.to_str().unwrap()])));
    assert_eq!(files(Path::new(&pulled)), files(Path::new(&pages)));
    let chunks_b = last_line(&ok(run("chunk", &[&pulled, "--artifacts", node_b.to_str().unwrap(), "--strategy", "page", "--min-chars", "0"])));
    let chunks_a = last_line(&ok(run("chunk", &[&pages, "--artifacts", node_a.to_str().unwrap(), "--strategy", "page", "--min-chars", "0"])));
    assert_eq!(Path::new(&chunks_a).file_name(), Path::new(&chunks_b).file_name(), "the same fingerprint on both nodes");
    ok(run("artifact-store", &["push", &chunks_b, url]));

    // A push that dies before the manifest: not listed, not pulled; pushing again completes it.
    let other = last_line(&ok(run("chunk", &[&pages, "--artifacts", node_a.to_str().unwrap(), "--size", "300", "--overlap", "30", "--min-chars", "0"])));
    let root = RemoteRoot::open(url).unwrap();
    let half = root.push_files(Path::new(&other), false).unwrap();
    assert_eq!(root.list().unwrap().len(), 2, "{:?}", root.list().unwrap());
    refused(&run("artifact-store", &["pull", url, &half, "--into", node_b.to_str().unwrap()]), "no manifest.json");
    assert!(!node_b.join(&half).exists());
    root.push(Path::new(&other)).unwrap();
    assert_eq!(root.list().unwrap().len(), 3);
    let again = root.pull(&half, &node_b).unwrap();
    assert_eq!(files(&again), files(Path::new(&other)));

    // Bad roots are one-line errors.
    refused(&run("artifact-store", &["ls", "ftp://example/x"]), "scheme `ftp` is not supported");
}

#[test]
fn file_roots_publish_the_manifest_last() {
    let tmp = tempfile::tempdir().unwrap();
    check_root(&format!("file://{}", tmp.path().join("bucket").display()));
}

#[test]
#[ignore = "needs an S3 server: `just test-store` starts one and sets GAUGE_S3_URL"]
fn s3_roots_against_a_local_server() {
    let url = std::env::var("GAUGE_S3_URL").expect("GAUGE_S3_URL (e.g. s3://gauge/run-1 with AWS_ENDPOINT set); run `just test-store`");
    check_root(&url);
}

/// Links are never followed and `ls` creates nothing (before: `push` hung on a link loop and
/// uploaded what a link pointed to, `pull` copied link targets out of a `file://` store, and
/// `ls` of a mistyped root created it).
#[test]
fn links_are_never_followed_and_listing_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("gates.md"), "# gates\n\nGate arms must be fully lowered before the train arrives.\n").unwrap();
    let node = tmp.path().join("node");
    let pages = last_line(&ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", node.to_str().unwrap()])));
    let missing = tmp.path().join("no-such-bucket");
    let url_missing = format!("file://{}", missing.display());
    refused(&run("artifact-store", &["ls", &url_missing]), "no such folder");
    assert!(!missing.exists(), "ls created the root");

    // A link inside the artifact: a loop, and a file elsewhere.
    let secret = tmp.path().join("secret.txt");
    std::fs::write(&secret, "a key").unwrap();
    let linked = tmp.path().join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    for e in std::fs::read_dir(&pages).unwrap().flatten() {
        std::fs::copy(e.path(), linked.join(e.file_name())).unwrap();
    }
    std::os::unix::fs::symlink(&linked, linked.join("loop")).unwrap();
    let url = format!("file://{}", tmp.path().join("bucket").display());
    refused(&run("artifact-store", &["push", linked.to_str().unwrap(), &url]), "symbolic link");
    std::fs::remove_file(linked.join("loop")).unwrap();
    std::os::unix::fs::symlink(&secret, linked.join("notes.txt")).unwrap();
    refused(&run("artifact-store", &["push", linked.to_str().unwrap(), &url]), "symbolic link");

    // A store whose artifact holds a link: pull refuses, leaving nothing behind.
    let name = last_line(&ok(run("artifact-store", &["push", &pages, &url])));
    std::os::unix::fs::symlink(&secret, tmp.path().join("bucket").join(&name).join("stolen.txt")).unwrap();
    let into = tmp.path().join("node-b");
    refused(&run("artifact-store", &["pull", &url, &name, "--into", into.to_str().unwrap()]), "symbolic link");
    assert!(!into.join(&name).exists());
}
