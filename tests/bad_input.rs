//! Bad inputs: each is reported clearly and the rest of the run goes on.
use std::path::Path;

use gauge::{complete_dirs, last_line, ok, repo_root, run, shared};
use gauge_core::schema::{read_errors, read_pages};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn bad_files_go_to_errors_parquet_and_good_ones_are_extracted() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs");
    let real = std::fs::read(shared().join("corpora/fra/FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf")).unwrap();
    write(&input, "manuals/truncated.pdf", &real[..real.len() / 3]);
    write(&input, "manuals/garbage.pdf", b"%PDF-1.7\nthis is not really a pdf\n%%EOF\n");
    write(&input, "manuals/zero.pdf", b"");
    write(&input, "notes/readme.md", "# Track Safety\n\nRoadway workers must be protected.\n".as_bytes());
    write(&input, "notes/latin1.txt", b"Caf\xe9 \x96 d\xe9faut de signalisation\n");
    write(&input, "notes/empty.txt", b"");
    write(&input, "notes/binary.txt", b"\x00\x01\x02binary");
    write(&input, "notes/report.docx", b"PK\x03\x04");
    let art = tmp.path().join("artifacts");
    let out = ok(run("extract", &[input.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stderr.lines().find(|l| l.starts_with("extract:")).unwrap();
    assert!(summary.contains("failed") && summary.contains("manuals/garbage.pdf") && summary.contains("notes/report.docx"), "{summary}");

    let dir = Path::new(&last_line(&out)).to_path_buf();
    let errors = read_errors(&dir.join("errors.parquet")).unwrap();
    let failed: Vec<&str> = errors.iter().map(|e| e.source.as_str()).collect();
    // The truncated PDF lost its cross-reference table with its last two thirds.
    assert_eq!(
        failed,
        vec!["manuals/garbage.pdf", "manuals/truncated.pdf", "manuals/zero.pdf", "notes/binary.txt", "notes/report.docx"],
        "{errors:?}"
    );
    assert!(errors[0].reason.contains("corrupt or unreadable PDF"));
    assert!(errors[2].reason.contains("empty file"));
    assert!(errors[3].reason.contains("binary data"));
    assert!(errors[4].reason.contains("unsupported file type `docx`"));

    let pages = read_pages(&dir.join("pages.parquet")).unwrap();
    let md = pages.iter().find(|p| p.source == "notes/readme.md").unwrap();
    assert_eq!((md.title.as_str(), md.doc_type.as_str(), md.page), ("Track Safety", "notes", 1));
    let latin = pages.iter().find(|p| p.source == "notes/latin1.txt").unwrap();
    assert_eq!(latin.text, "Café – défaut de signalisation");
    assert!(latin.metadata.contains("windows-1252"));
    let empty = pages.iter().find(|p| p.source == "notes/empty.txt").unwrap();
    assert!(empty.empty && empty.text.is_empty());
    assert!(pages.iter().all(|p| p.doc_type == "notes"));
}

#[test]
fn strict_mode_fails_and_leaves_no_artifact() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs");
    write(&input, "good.md", b"# Title\n\nSome text.\n");
    write(&input, "bad.pdf", b"not a pdf");
    let art = tmp.path().join("artifacts");
    let out = run("extract", &[input.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--strict"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.pdf") && err.contains("--strict"), "{err}");
    assert!(complete_dirs(&art, "extract").is_empty());
}

#[test]
fn nothing_extractable_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs");
    write(&input, "only.pdf", b"%PDF-1.4 garbage");
    let art = tmp.path().join("artifacts");
    let out = run("extract", &[input.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing could be extracted") && err.contains("only.pdf"), "{err}");
    let missing = run("extract", &[tmp.path().join("nope").to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope: no such file or directory"));
}

#[test]
fn jsonl_records_become_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("reports");
    write(
        &input,
        "ntsb/reports.jsonl",
        concat!(
            r#"{"report_id": "ERA22LA175", "headline": "Loss of control", "narrative": "The pilot reported a loss of engine power.", "state": "FL"}"#,
            "\n\n",
            r#"{"report_id": "ERA22LA176", "headline": "Hard landing", "narrative": "The airplane landed hard.", "state": "GA"}"#,
            "\n"
        )
        .as_bytes(),
    );
    let art = tmp.path().join("artifacts");
    let args = [
        input.to_str().unwrap(), "--artifacts", art.to_str().unwrap(),
        "--jsonl-id-field", "report_id", "--jsonl-title-field", "headline", "--jsonl-text-field", "narrative",
    ];
    let out = ok(run("extract", &args));
    let pages = read_pages(&Path::new(&last_line(&out)).join("pages.parquet")).unwrap();
    assert_eq!(pages.len(), 2);
    assert_eq!(pages[0].source, "ntsb/reports.jsonl#ERA22LA175");
    assert_eq!(pages[0].title, "Loss of control");
    assert_eq!(pages[0].doc_type, "ntsb");
    assert_eq!(pages[0].metadata, r#"{"state":"FL"}"#);
    assert_ne!(pages[0].doc_id, pages[1].doc_id);
    // Wrong field names: the file is reported with the flag to fix it.
    let out = run("extract", &[input.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reports.jsonl") && err.contains("--jsonl-text-field"), "{err}");
}

#[test]
fn chunk_rejects_a_table_of_the_wrong_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs");
    write(&input, "a.md", "# A\n\nRoadway workers must be protected by on-track safety at all times.\n".as_bytes());
    let art = tmp.path().join("artifacts");
    let pages_dir = last_line(&ok(run("extract", &[input.to_str().unwrap(), "--artifacts", art.to_str().unwrap()])));
    let chunks_dir = last_line(&ok(run("chunk", &[&pages_dir, "--artifacts", art.to_str().unwrap(), "--min-chars", "0"])));
    // A directory whose pages.parquet holds a chunks table.
    let fake = tmp.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::copy(Path::new(&chunks_dir).join("chunks.parquet"), fake.join("pages.parquet")).unwrap();
    let out = run("chunk", &[fake.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pages.parquet") && err.contains("wrong schema") && err.contains("missing column `page`"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Not an artifact at all.
    let out = run("chunk", &[tmp.path().to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no pages.parquet here"));
}

#[test]
fn models_resolve_from_the_models_directory_whatever_the_working_directory() {
    let models = repo_root().join("models");
    assert!(models.join("all-MiniLM-L6-v2/model.safetensors").is_file(), "{}: missing; run `just models`", models.display());
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "docs/note.md", b"# Gate arms\n\nThe gate arm must be fully lowered twenty seconds before the train arrives at the crossing.\n");
    let art = tmp.path().join("artifacts");
    let pages = last_line(&ok(run("extract", &[tmp.path().join("docs").to_str().unwrap(), "--artifacts", art.to_str().unwrap()])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", art.to_str().unwrap(), "--min-chars", "0"])));
    // Run from a folder with no models/ in it: the id resolves through GAUGE_MODELS_DIR.
    let elsewhere = tmp.path().join("notebooks");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let embed = |models_dir: &std::path::Path| {
        std::process::Command::new(gauge::bin("embed"))
            .args([chunks.as_str(), "--model", "sentence-transformers/all-MiniLM-L6-v2", "--artifacts", art.to_str().unwrap()])
            .current_dir(&elsewhere)
            .env("GAUGE_MODELS_DIR", models_dir)
            .env("GAUGE_NO_PROGRESS", "1")
            .output()
            .unwrap()
    };
    ok(embed(&models));
    let empty = tmp.path().join("empty-models");
    std::fs::create_dir_all(&empty).unwrap();
    let out = embed(&empty);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("empty-models") && err.contains("just models") && err.trim().lines().count() == 1, "{err}");
}

#[test]
fn an_index_under_a_non_utf8_folder_is_a_one_line_error() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = gauge::markdown_index(tmp.path(), &[("a", "Brake tests happen in the yard before departure.")]);
    // The same index artifact under a folder whose name is not UTF-8 (faiss takes C strings).
    let odd = tmp.path().join(std::ffi::OsStr::from_bytes(b"idx-\xff"));
    std::fs::create_dir_all(&odd).unwrap();
    for e in std::fs::read_dir(&index).unwrap().flatten() {
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), odd.join(e.file_name())).unwrap();
        } else {
            let sub = odd.join(e.file_name());
            std::fs::create_dir_all(&sub).unwrap();
            for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                std::fs::copy(f.path(), sub.join(f.file_name())).unwrap();
            }
        }
    }
    let out = std::process::Command::new(gauge::bin("query")).arg("--index").arg(&odd).arg("brake tests").arg("--no-bm25").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("UTF-8") && !err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
