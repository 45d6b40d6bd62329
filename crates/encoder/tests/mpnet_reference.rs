//! all-mpnet-base-v2 against sentence-transformers (crates/encoder/tests/fixtures/
//! mpnet-reference.jsonl, written by scripts/mpnet_reference.py: 56 texts, empty to 1,500
//! tokens, non-ASCII in five scripts, a literal `<pad>`). Needs `just models all-mpnet-base-v2`.
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
}

fn cases() -> Vec<Case> {
    let path = root().join("crates/encoder/tests/fixtures/mpnet-reference.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["max_seq_length"], 384);
    let cases: Vec<Case> = lines
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let hex = v["sentence_embedding_f32le"].as_str().unwrap().as_bytes();
            let bytes: Vec<u8> = hex.chunks_exact(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect();
            Case {
                text: v["text"].as_str().unwrap().to_string(),
                ids: v["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
                sentence: bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            }
        })
        .collect();
    assert_eq!(cases.len() as u64, header["texts"].as_u64().unwrap());
    cases
}

fn embedder() -> Embedder {
    let dir = root().join("models/all-mpnet-base-v2");
    assert!(dir.join("model.safetensors").is_file(), "{}: missing; run `just models all-mpnet-base-v2`", dir.display());
    let source = ModelSource { id: "sentence-transformers/all-mpnet-base-v2".into(), dir };
    Embedder::load(&source, &EmbedderOptions::default(), &device::parse("cpu").unwrap()).unwrap()
}



/// Tolerances: cosine ≥ 0.99999 per text and every component within 2e-6 of PyTorch's (the
/// largest difference is printed: 6.6e-7 on this machine; it comes from summation order, GELU's erf and
/// PyTorch's own batch-dependent kernels).
#[test]
fn mpnet_matches_sentence_transformers() {
    let cases = cases();
    assert!(cases.len() >= 50);
    assert!(cases.iter().any(|c| c.ids.len() == 384) && cases.iter().any(|c| c.ids.len() <= 2) && cases.iter().any(|c| !c.text.is_ascii()));
    let e = embedder();
    assert_eq!((e.info.pooling, e.info.normalize, e.info.max_length, e.info.dimension), (Pooling::Mean, true, 384, 768));

    // Identical token ids (`<s> … </s>`, truncation to 384 included).
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let ids = e.tokenize(&texts).unwrap();
    for (c, got) in cases.iter().zip(&ids) {
        assert_eq!(got, &c.ids, "token ids of {:?}", c.text);
    }

    // Sentence embeddings, batched together by the token budget.
    let (vectors, stats) = e.embed_ids(&ids, |_| {});
    assert_eq!(stats.texts, cases.len());
    let (mut worst_cos, mut worst_abs) = (1.0f64, 0.0f32);
    for (c, v) in cases.iter().zip(&vectors) {
        let cos = cosine(v, &c.sentence);
        let abs = v.iter().zip(&c.sentence).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(cos >= 0.99999, "cosine {cos} for {:?}", c.text);
        assert!(abs <= 2e-6, "max |gauge - sentence-transformers| {abs} for {:?}", c.text);
        worst_cos = worst_cos.min(cos);
        worst_abs = worst_abs.max(abs);
    }
    eprintln!("all-mpnet-base-v2 vs sentence-transformers over {} texts: min cosine {worst_cos:.9}, max abs error {worst_abs:.3e}", cases.len());

    // Batch composition does not matter, to the bit: each text alone, and a mixed batch of
    // long and short texts (padding, and the literal `<pad>` text's own position ids).
    for (i, c) in cases.iter().enumerate() {
        let alone = &e.embed_batch(&[&c.ids])[0];
        assert_eq!(bits(alone), bits(&vectors[i]), "alone vs batched differ for {:?}", c.text);
    }
    let pad_text = cases.iter().position(|c| c.text.contains("<pad>")).expect("a text with a literal <pad>");
    let longest = (0..cases.len()).max_by_key(|&i| cases[i].ids.len()).unwrap();
    let order = [longest, 2, pad_text, 40, 0];
    let mixed: Vec<&TokenIds> = order.iter().map(|&i| &ids[i]).collect();
    for (v, &i) in e.embed_batch(&mixed).iter().zip(&order) {
        assert_eq!(bits(v), bits(&vectors[i]), "mixed batch differs for text {i}");
    }
}
