//! `evaluate --verify eval/fra`: the committed result re-derives on this checkout (inputs that
//! are here re-hashed, runs re-judged and re-scored, metrics re-derived with the recorded
//! seed), and one changed byte — in an output table or in an input — fails it, naming the file.
use std::path::Path;
use std::process::Command;

use gauge::{bin, repo_root, shared};

fn verify(cwd: &Path, dir: &Path) -> (bool, String) {
    let out = Command::new(bin("evaluate")).current_dir(cwd).arg("--verify").arg(dir).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

fn flip_one_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] = if bytes[at] == b'7' { b'8' } else { b'7' };
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn the_committed_fra_result_verifies_and_a_changed_byte_is_named() {
    let root = repo_root();
    let committed = root.join("eval/fra");
    let (ok, text) = verify(&root, &committed);
    assert!(ok, "{text}");
    assert!(text.contains("output files hash as recorded") && text.contains("ranked passages re-judged") && text.contains("metric values re-derived"), "{text}");
    assert!(!text.contains("CHANGED"), "{text}");

    // An output edited after the run.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("fra");
    copy_dir(&committed, &copy);
    flip_one_byte(&copy.join("trec/00-vector.run"), 40);
    let (ok, text) = verify(&root, &copy);
    assert!(!ok, "a changed run file passed:\n{text}");
    assert!(text.contains("trec/00-vector.run: changed since the evaluation wrote it"), "{text}");

    // An input changed: the golden set the manifest names (../shared/golden/fra-dev.jsonl from
    // where evaluate ran), one byte different.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let golden = tmp.path().join("shared/golden/fra-dev.jsonl");
    std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
    std::fs::copy(shared().join("golden/fra-dev.jsonl"), &golden).unwrap();
    let text_now = std::fs::read_to_string(&golden).unwrap();
    let at = text_now.find("\"question\"").unwrap() + 14;
    flip_one_byte(&golden, at);
    let (ok, text) = verify(&work, &committed);
    assert!(!ok, "a changed golden set passed:\n{text}");
    assert!(text.contains("../shared/golden/fra-dev.jsonl: input `golden` changed"), "{text}");
}

/// A manifest is data anyone can send: absolute paths, escapes and devices are never opened,
/// and an output path cannot leave its folder. (Naming `/dev/zero` as the golden set used to
/// hang the check.)
#[test]
fn a_hostile_manifest_reads_nothing_outside() {
    let root = repo_root();
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("fra");
    copy_dir(&root.join("eval/fra"), &copy);
    let path = copy.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for input in m["inputs"].as_array_mut().unwrap() {
        if input["name"] == "golden" {
            input["path"] = "/dev/zero".into();
        }
    }
    m["inputs"].as_array_mut().unwrap().push(serde_json::json!({"path": "../../../../../../etc/passwd", "name": "corpus:x", "hash": "0", "rows": null}));
    m["outputs"].as_array_mut().unwrap().push(serde_json::json!({"path": "../../../../etc/hostname", "name": "x", "hash": "0", "rows": null}));
    std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let child = Command::new(bin("evaluate")).current_dir(&root).arg("--verify").arg(&copy).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("/dev/zero: golden set not read (an absolute path"), "{text}");
    assert!(text.contains("etc/passwd (corpus:x): not read:") && text.contains("leads outside"), "{text}");
    assert!(text.contains("output `../../../../etc/hostname` not read"), "{text}");
    assert!(!out.status.success(), "an output path escaping its folder must fail the check:\n{text}");
}

/// A result whose golden set is not here is "not verified" (exit 1), never "verified": the runs
/// were not re-scored. (Before: exit 0 and "verified" after a "not checked" line.)
#[test]
fn without_its_golden_set_a_result_is_not_verified() {
    let root = repo_root();
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("fra");
    copy_dir(&root.join("eval/fra"), &copy);
    let path = copy.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for input in m["inputs"].as_array_mut().unwrap() {
        if input["name"] == "golden" {
            input["path"] = "golden/not-on-this-machine.jsonl".into();
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let (ok, text) = verify(&root, &copy);
    assert!(!ok && text.contains("not verified: golden/not-on-this-machine.jsonl: golden set not here"), "{text}");
}

/// An output table that is a link (to a file elsewhere that happens to parse) is not read: the
/// check names it. (Before: --verify followed a linked runs.parquet to any file.)
#[test]
fn a_linked_output_table_is_not_followed() {
    let root = repo_root();
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("fra");
    copy_dir(&root.join("eval/fra"), &copy);
    let elsewhere = tmp.path().join("elsewhere.parquet");
    std::fs::rename(copy.join("runs.parquet"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, copy.join("runs.parquet")).unwrap();
    let (ok, text) = verify(&root, &copy);
    assert!(!ok && text.contains("runs.parquet") && text.contains("symbolic link"), "{text}");
}

/// `--report-only` on a folder whose manifest names a device or a file that is not its golden set
/// finishes and shows none of it (before: `/dev/zero` spun at 100 % CPU).
#[test]
fn report_only_opens_no_file_a_manifest_names_outside_the_checkout() {
    let root = repo_root();
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("fra");
    copy_dir(&root.join("eval/fra"), &copy);
    std::fs::remove_file(copy.join("questions.parquet")).unwrap();
    for target in ["/dev/zero", "/etc/passwd", "../../../../../../etc/passwd"] {
        let path = copy.join("manifest.json");
        let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for input in m["inputs"].as_array_mut().unwrap() {
            if input["name"] == "golden" {
                input["path"] = target.into();
            }
        }
        std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
        let mut child = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&copy).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(120), "--report-only with golden = {target} did not finish");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "golden = {target}: the page is drawn without the questions");
        let page = std::fs::read_to_string(copy.join("report.html")).unwrap();
        assert!(!page.contains("root:x:0:0"), "golden = {target}: /etc/passwd reached the page");
    }
}
