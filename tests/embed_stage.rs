//! `embed` end to end on a real manual, and its bad-input errors. Needs `just models`.
use std::path::{Path, PathBuf};

use gauge::{last_line, ok, repo_root, run, shared};
use gauge_core::schema::{read_chunks, read_embeddings};
use gauge_core::Manifest;

fn minilm() -> PathBuf {
    let dir = repo_root().join("models/all-MiniLM-L6-v2");
    assert!(dir.join("model.safetensors").is_file(), "{}: missing; run `just models`", dir.display());
    dir
}

/// A model folder whose files link to MiniLM's, with some replaced or left out.
fn model_variant(root: &Path, name: &str, skip: &[&str], replace: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(minilm()).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().to_string();
        if skip.contains(&file.as_str()) || replace.iter().any(|(f, _)| *f == file) {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.join(&file)).unwrap();
    }
    for (file, text) in replace {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

fn small_chunks(art: &str, tmp: &Path) -> String {
    let input = tmp.join("docs");
    std::fs::create_dir_all(&input).unwrap();
    let name = "FRA-Track_Structures_CM_2026_Vol_III_Ch1_Railroad_Workplace_Safety_General.pdf";
    std::fs::copy(shared().join("corpora/fra").join(name), input.join(name)).unwrap();
    let pages = last_line(&ok(run("extract", &[input.to_str().unwrap(), "--artifacts", art])));
    last_line(&ok(run("chunk", &[&pages, "--artifacts", art, "--size", "1000", "--overlap", "150"])))
}

#[test]
fn embeds_chunks_into_a_valid_artifact_and_caches() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let art_s = art.to_str().unwrap();
    let chunks_dir = small_chunks(art_s, tmp.path());
    let model = minilm();
    let out = ok(run("embed", &[&chunks_dir, "--model", model.to_str().unwrap(), "--artifacts", art_s]));
    let dir = PathBuf::from(last_line(&out));
    let chunks = read_chunks(&Path::new(&chunks_dir).join("chunks.parquet")).unwrap();
    let emb = read_embeddings(&dir.join("embeddings.parquet")).unwrap();
    assert_eq!(emb.dim, 384);
    assert_eq!(emb.ids, chunks.iter().map(|c| c.chunk_id.clone()).collect::<Vec<_>>());
    for v in emb.vectors.chunks(384) {
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    let m = Manifest::read(&dir).unwrap();
    let e = &m.config["embedder"];
    assert_eq!(e["dimension"], 384);
    assert_eq!(e["pooling"], "mean");
    assert_eq!(e["normalize"], true);
    assert_eq!(e["max_length"], 256);
    assert_eq!(e["passage_prefix"], "");
    assert_eq!(e["weights_hash"].as_str().unwrap().len(), 64);
    assert_eq!(m.inputs.iter().find(|i| i.name == "model.safetensors").unwrap().hash, e["weights_hash"].as_str().unwrap());

    let again = ok(run("embed", &[&chunks_dir, "--model", model.to_str().unwrap(), "--artifacts", art_s]));
    assert_eq!(last_line(&again), dir.to_str().unwrap());
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));

    // A passage prefix is a different artifact (prefixes change vectors).
    let prefixed = ok(run("embed", &[&chunks_dir, "--model", model.to_str().unwrap(), "--artifacts", art_s, "--passage-prefix", "passage: "]));
    assert_ne!(last_line(&prefixed), dir.to_str().unwrap());
    let emb2 = read_embeddings(&Path::new(&last_line(&prefixed)).join("embeddings.parquet")).unwrap();
    assert_ne!(emb2.vectors[..384], emb.vectors[..384]);
}

fn embed_error(chunks: &str, model: &Path, art: &str) -> String {
    let out = run("embed", &[chunks, "--model", model.to_str().unwrap(), "--artifacts", art]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one-line error expected:\n{err}");
    err
}

#[test]
fn bad_models_and_tables_are_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let art_s = art.to_str().unwrap();
    // A tiny chunks artifact from a Markdown file.
    let input = tmp.path().join("md");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("a.md"), "# Track\n\nRoadway workers shall be protected by on-track safety procedures at all times.\n").unwrap();
    let pages = last_line(&ok(run("extract", &[input.to_str().unwrap(), "--artifacts", art_s])));
    let chunks = last_line(&ok(run("chunk", &[&pages, "--artifacts", art_s, "--min-chars", "0"])));

    let err = embed_error(&chunks, &tmp.path().join("no-such-model"), art_s);
    assert!(err.contains("no-such-model") && err.contains("just models"), "{err}");

    let no_tok = model_variant(tmp.path(), "no-tokenizer", &["tokenizer.json"], &[]);
    let err = embed_error(&chunks, &no_tok, art_s);
    assert!(err.contains("no-tokenizer/tokenizer.json: missing"), "{err}");

    let gpt = model_variant(tmp.path(), "gpt2", &[], &[("config.json", r#"{"model_type": "gpt2", "vocab_size": 50257}"#)]);
    let err = embed_error(&chunks, &gpt, art_s);
    assert!(err.contains("gpt2/config.json") && (err.contains("unsupported architecture `gpt2`") || err.contains("not a BERT-style config.json")), "{err}");

    let config = std::fs::read_to_string(minilm().join("config.json")).unwrap().replace("\"hidden_size\": 384", "\"hidden_size\": 768");
    let wide = model_variant(tmp.path(), "wide", &[], &[("config.json", &config)]);
    let err = embed_error(&chunks, &wide, art_s);
    assert!(err.contains("model.safetensors") && err.contains("has shape") && err.contains("config.json implies"), "{err}");

    // A pages table where a chunks table is expected.
    let fake = tmp.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::copy(Path::new(&pages).join("pages.parquet"), fake.join("chunks.parquet")).unwrap();
    let err = embed_error(fake.to_str().unwrap(), &minilm(), art_s);
    assert!(err.contains("chunks.parquet") && err.contains("wrong schema") && err.contains("chunk_id"), "{err}");
}
