//! What the decoder's SmolLM2 tests share: the model and the FRA dev questions as chat prompts.
use gauge_decoder::{LanguageModel, Message};

/// SmolLM2-135M-Instruct (Q4_1 blocks kept); needs `just models`.
pub fn smollm2() -> LanguageModel {
    let path = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{}: missing; run `just models`", path.display());
    LanguageModel::load(path.to_str().unwrap(), &gauge_tensor::device::cpu()).unwrap()
}

/// The 41 FRA dev questions, each after the system turn `system`, rendered and tokenised.
pub fn fra_prompts(lm: &LanguageModel, system: &str) -> Vec<Vec<u32>> {
    let golden = gauge_test_support::shared_path("golden/fra-dev.jsonl");
    let text = std::fs::read_to_string(&golden).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
    let chat = lm.chat.as_ref().unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let m = vec![Message::new("system", system), Message::new("user", r["question"].as_str().unwrap())];
            lm.tokenizer.encode(chat.render(&m, true).unwrap().as_str(), false).unwrap().get_ids().to_vec()
        })
        .collect()
}
