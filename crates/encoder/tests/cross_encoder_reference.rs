//! The cross-encoder against transformers' reference (`../shared/fixtures/tiny-bert-cross-encoder`):
//! identical pair encodings (ids and token types, `only_second` truncation at 128) and each
//! logit within 1e-4.
use std::path::PathBuf;

use gauge_encoder::device;
use gauge_encoder::{CrossEncoder, CrossEncoderOptions, ModelSource};

fn fixture() -> PathBuf {
    gauge_test_support::shared_path("fixtures/tiny-bert-cross-encoder/reference.jsonl").parent().unwrap().to_path_buf()
}

#[test]
fn pair_encodings_and_logits_match_transformers() {
    let dir = fixture();
    let model = CrossEncoder::load(&ModelSource { id: "tiny".into(), dir: dir.clone() }, &CrossEncoderOptions { max_length: Some(128), ..Default::default() }, &device::cpu()).unwrap();
    let text = std::fs::read_to_string(dir.join("reference.jsonl")).unwrap();
    let cases: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(cases.len() >= 5);
    let mut worst = 0.0f32;
    for c in &cases {
        assert_eq!(c["max_length"], 128);
        let (q, p) = (c["query"].as_str().unwrap(), c["passage"].as_str().unwrap());
        let enc = model.encode_pairs(q, &[p]).unwrap().remove(0);
        let want_ids: Vec<u32> = c["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let want_types: Vec<u32> = c["token_type_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(enc.ids, want_ids, "ids of {q:?} / {p:?}");
        assert_eq!(enc.types, want_types, "token types of {q:?}");
        let got = model.score(q, &[p]).unwrap()[0];
        let want = c["logit"].as_f64().unwrap() as f32;
        worst = worst.max((got - want).abs());
        assert!((got - want).abs() <= 1e-4, "{q:?}: logit {got} vs {want}");
    }
    // Batched scoring (all passages of all cases at once, mixed lengths) gives the same logits.
    let queries: Vec<&str> = cases.iter().map(|c| c["query"].as_str().unwrap()).collect();
    let passages: Vec<&str> = cases.iter().map(|c| c["passage"].as_str().unwrap()).collect();
    let pairs: Vec<_> = queries.iter().zip(&passages).map(|(q, p)| model.encode_pairs(q, &[*p]).unwrap().remove(0)).collect();
    let batched = model.logits(&pairs);
    for (c, got) in cases.iter().zip(batched) {
        assert!((got - c["logit"].as_f64().unwrap() as f32).abs() <= 1e-4);
    }
    eprintln!("worst |logit - reference| = {worst:e}");
}

#[test]
fn a_bi_encoder_folder_is_not_a_cross_encoder() {
    let minilm = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../models/all-MiniLM-L6-v2");
    if !minilm.is_dir() {
        panic!("{}: missing; run `just models`", minilm.display());
    }
    let err = CrossEncoder::load(&ModelSource { id: "minilm".into(), dir: minilm }, &CrossEncoderOptions::default(), &device::cpu()).err().unwrap().to_string();
    assert!(err.contains("classifier.weight") && err.contains("model.safetensors"), "{err}");
}
