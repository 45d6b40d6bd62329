//! The Hugging Face safetensors path against `../shared/fixtures/tiny-llama` (PyTorch fp32
//! reference: untied head, grouped-query attention): last-position logits to 1e-4, top-5 ids,
//! 8 greedy tokens; and cached decoding equals recomputing the whole sequence.
use std::path::PathBuf;

use gauge_decoder::generate::argmax;
use gauge_decoder::LanguageModel;

fn fixture() -> PathBuf {
    gauge_test_support::shared_path("fixtures/tiny-llama/model.safetensors").parent().unwrap().to_path_buf()
}

#[test]
fn logits_top5_and_greedy_tokens_match_transformers() {
    let lm = LanguageModel::load(fixture().to_str().unwrap(), &gauge_tensor::device::cpu()).unwrap();
    assert_eq!((lm.model.config.num_attention_heads, lm.model.config.kv_heads(), lm.model.config.tie_word_embeddings), (4, 2, false));
    let text = std::fs::read_to_string(fixture().join("reference.jsonl")).unwrap();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let ids: Vec<u32> = r["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let mut cache = lm.model.new_cache();
        let logits = lm.model.forward(&ids, &mut cache).unwrap();
        for (i, want) in r["last_logits_first16"].as_array().unwrap().iter().enumerate() {
            let want = want.as_f64().unwrap() as f32;
            assert!((logits[i] - want).abs() <= 1e-4, "input {n}, logit {i}: {} vs {want}", logits[i]);
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let top5: Vec<u64> = order[..5].iter().map(|&i| i as u64).collect();
        let want5: Vec<u64> = r["last_logits_top5"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(top5, want5, "input {n}");
        // Greedy decoding with the KV cache.
        let mut greedy = Vec::new();
        let mut next = argmax(&logits);
        for _ in 0..8 {
            greedy.push(next as u64);
            next = argmax(&lm.model.forward(&[next], &mut cache).unwrap());
        }
        let want8: Vec<u64> = r["greedy_8"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(greedy, want8, "input {n}");
        n += 1;
    }
    assert_eq!(n, 8);
}

#[test]
fn cached_decoding_equals_full_recomputation() {
    let lm = LanguageModel::load(fixture().to_str().unwrap(), &gauge_tensor::device::cpu()).unwrap();
    let ids: Vec<u32> = vec![101, 2054, 7285, 5906, 2024, 2800, 2043, 27455, 1996, 17760, 102];
    let mut full = lm.model.new_cache();
    let whole = lm.model.forward(&ids, &mut full).unwrap();
    // Prefill in two parts, then one token at a time.
    let mut cache = lm.model.new_cache();
    lm.model.forward(&ids[..4], &mut cache).unwrap();
    lm.model.forward(&ids[4..9], &mut cache).unwrap();
    lm.model.forward(&ids[9..10], &mut cache).unwrap();
    let stepped = lm.model.forward(&ids[10..], &mut cache).unwrap();
    assert_eq!(cache.len(), ids.len());
    let worst = whole.iter().zip(&stepped).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-5, "cached vs full: {worst}");
    // Bad input is refused by name.
    assert!(lm.model.forward(&[], &mut lm.model.new_cache()).unwrap_err().to_string().contains("no tokens"));
    assert!(lm.model.forward(&[999_999], &mut lm.model.new_cache()).unwrap_err().to_string().contains("outside the vocabulary"));
}
