//! all-MiniLM-L6-v2 in Burn against sentence-transformers / transformers reference outputs
//! (../shared/fixtures/minilm-reference.jsonl). Needs `just models`.
use std::path::PathBuf;

use gauge_encoder::embedder::TokenIds;
use gauge_test_support::{bits, cosine};
use gauge_encoder::{device, Embedder, EmbedderOptions, ModelSource, Pooling};

fn root() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test")).join("../..")
}

struct Case {
    text: String,
    ids: Vec<u32>,
    sentence: Vec<f32>,
    mean: Vec<f32>,
    cls: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let path = gauge_test_support::shared_path("fixtures/minilm-reference.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let floats = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<_>>();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Case {
                text: v["text"].as_str().unwrap().to_string(),
                ids: v["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
                sentence: floats(&v["sentence_embedding"]),
                mean: floats(&v["mean_pooled_unnormalized"]),
                cls: floats(&v["cls_pooled_unnormalized"]),
            }
        })
        .collect()
}

fn embedder() -> Embedder {
    let dir = root().join("models/all-MiniLM-L6-v2");
    assert!(dir.join("model.safetensors").is_file(), "{}: missing; run `just models`", dir.display());
    let source = ModelSource { id: "sentence-transformers/all-MiniLM-L6-v2".into(), dir };
    Embedder::load(&source, &EmbedderOptions::default(), &device::parse("cpu").unwrap()).unwrap()
}


#[test]
fn minilm_matches_the_reference() {
    let cases = cases();
    assert_eq!(cases.len(), 24);
    let e = embedder();
    assert_eq!((e.info.pooling, e.info.normalize, e.info.max_length, e.info.dimension), (Pooling::Mean, true, 256, 384));

    // Identical token ids, truncation included.
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let ids = e.tokenize(&texts).unwrap();
    for (c, got) in cases.iter().zip(&ids) {
        assert_eq!(got, &c.ids, "token ids of {:?}", c.text);
    }

    // Sentence embeddings, batched together.
    let (vectors, stats) = e.embed_ids(&ids, |_| {});
    assert_eq!(stats.texts, 24);
    for (c, v) in cases.iter().zip(&vectors) {
        let cos = cosine(v, &c.sentence);
        assert!(cos >= 0.9999, "cosine {cos} for {:?}", c.text);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }

    // Mean and CLS pooling of the same hidden states, unnormalised.
    for c in &cases {
        let row: Vec<&TokenIds> = vec![&c.ids];
        for (pooling, reference) in [(Pooling::Mean, &c.mean), (Pooling::Cls, &c.cls)] {
            let (hidden, padding, _) = e.hidden_states(&row);
            let pooled: Vec<f32> = Embedder::pool(hidden, padding, pooling).into_data().into_vec().unwrap();
            let cos = cosine(&pooled, reference);
            assert!(cos >= 0.9999, "{pooling:?} cosine {cos} for {:?}", c.text);
        }
    }

    // Batch composition does not matter, to the bit: alone vs inside the padded batch (each
    // output of a product sums in one order whatever the rows beside it).
    for (i, c) in cases.iter().enumerate() {
        let alone = &e.embed_batch(&[&c.ids])[0];
        assert_eq!(bits(alone), bits(&vectors[i]), "alone vs batched differ for {:?}", c.text);
    }
    // And a mixed batch of short and long texts gives the same as the sorted batches.
    let mixed: Vec<&TokenIds> = vec![&ids[20], &ids[2], &ids[13], &ids[0]];
    let mixed_vectors = e.embed_batch(&mixed);
    for (v, i) in mixed_vectors.iter().zip([20, 2, 13, 0]) {
        assert_eq!(bits(v), bits(&vectors[i]), "mixed batch differs for text {i}");
    }
}


/// The vectors of every third fixture text up to 128 tokens (short, non-ASCII and identifier
/// ones among them; the portable body is slow) as hex bits, one line per text, into the file
/// `GAUGE_TEST_VECTORS` names (run as a child of the test below, under one `GAUGE_MATMUL`).
#[test]
#[ignore = "a child process of every_matmul_body_gives_the_same_vectors"]
fn write_vectors() {
    let Ok(out) = std::env::var("GAUGE_TEST_VECTORS") else { return };
    let e = embedder();
    let cases = cases();
    let texts: Vec<&str> = cases.iter().step_by(3).filter(|c| c.ids.len() <= 128).map(|c| c.text.as_str()).collect();
    let vectors = e.embed_texts(&texts).unwrap();
    let lines: Vec<String> = vectors.iter().map(|v| bits(v).iter().map(|b| format!("{b:08x}")).collect::<String>()).collect();
    std::fs::write(out, lines.join("\n")).unwrap();
}

/// A machine with AVX2 and one without write the same vectors: every matmul body this CPU has
/// (`GAUGE_MATMUL`, the portable one included) embeds the fixture texts to the same bits.
#[test]
fn every_matmul_body_gives_the_same_vectors() {
    let tmp = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for path in gauge_encoder::matmul::MatmulPath::available() {
        let file = tmp.path().join(path.name());
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "write_vectors", "--ignored", "--test-threads", "1"])
            .env("GAUGE_MATMUL", path.name())
            .env("GAUGE_TEST_VECTORS", &file)
            .env("CARGO_MANIFEST_DIR", std::env::var("CARGO_MANIFEST_DIR").unwrap())
            .status()
            .unwrap();
        assert!(status.success(), "the {} body's run failed", path.name());
        outputs.push((path.name(), std::fs::read_to_string(&file).unwrap()));
    }
    let (first, want) = &outputs[0];
    assert_eq!(want.lines().count(), 7);
    for (name, got) in &outputs[1..] {
        for (i, (a, b)) in want.lines().zip(got.lines()).enumerate() {
            assert_eq!(a, b, "text {i}: the {name} body's vector differs from the {first} body's");
        }
    }
}
