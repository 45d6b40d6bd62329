//! Constrained decoding on SmolLM2-135M-Instruct (GGUF, `just models`): the vocabulary's
//! bytes are exactly the bytes the tokenizer produces, a greedy reply held to a JSON Schema
//! parses and satisfies it (also under every repetition control), and a schema that cannot
//! be compiled is refused with the reason.
use gauge_decoder::{GenerateOptions, LanguageModel, Message, SchemaCompiler};

fn model() -> LanguageModel {
    let path = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{}: missing; run `just models`", path.display());
    LanguageModel::load(path.to_str().unwrap(), &gauge_tensor::device::cpu()).unwrap()
}

#[test]
fn token_bytes_concatenate_to_the_encoded_text() {
    let lm = model();
    let bytes = gauge_decoder::constrain::token_bytes(&lm.tokenizer).unwrap();
    assert_eq!(bytes.len(), lm.tokenizer.get_vocab_size(true));
    for text in ["§ 174.63 applies to ERA22LA175.", "Zugführer — naïve “quotes” 🚆\n\tindent", "{\"a\": [1, 2.5e-3]}"] {
        let ids = lm.tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        let joined: Vec<u8> = ids.iter().flat_map(|&i| bytes[i as usize].clone()).collect();
        assert_eq!(String::from_utf8(joined).unwrap(), text);
    }
    let im_end = lm.tokenizer.token_to_id("<|im_end|>").unwrap();
    assert_eq!(bytes[im_end as usize][0], 0xff, "special tokens are marked so they never match text");
}

#[test]
fn a_greedy_reply_held_to_a_schema_parses_and_satisfies_it() {
    let lm = model();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "question": {"type": "string", "maxLength": 120},
            "pages": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "maxItems": 3},
            "style": {"enum": ["factual", "scenario"]},
            "grounded": {"type": "boolean"}
        },
        "required": ["question", "pages", "style", "grounded"],
        "additionalProperties": false
    });
    let chat = lm.chat.as_ref().unwrap();
    let prompt = chat
        .render(&[Message::new("system", "You write exam questions."), Message::new("user", "Passage (page 12): Each brake test must be recorded by the inspector. Write one question about it.")], true)
        .unwrap();
    let ids = lm.tokenizer.encode(prompt.as_str(), false).unwrap().get_ids().to_vec();
    let compiler = SchemaCompiler::new(&lm.tokenizer, &lm.eos_ids).unwrap();
    let mut constraint = compiler.constraint(&schema).unwrap();
    let g = lm.generate_with(&ids, &GenerateOptions { max_new_tokens: 160, ..Default::default() }, Some(&mut constraint)).unwrap();
    assert_eq!(g.finish_reason, "eos", "the document closed before the token budget: {:?}", g.text);
    assert!(constraint.is_complete());
    let v: serde_json::Value = serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", g.text));
    let o = v.as_object().unwrap();
    assert_eq!(o.len(), 4, "{v}");
    assert!(o["question"].as_str().unwrap().chars().count() <= 120);
    let pages = o["pages"].as_array().unwrap();
    assert!((1..=3).contains(&pages.len()) && pages.iter().all(|p| p.as_u64().is_some_and(|p| p >= 1)), "{v}");
    assert!(["factual", "scenario"].contains(&o["style"].as_str().unwrap()));
    assert!(o["grounded"].is_boolean());

    // With every repetition control on, the reply is still a valid document of the schema
    // (the controls act after the constraint's mask; a ban that would leave no allowed token
    // is skipped).
    let mut constraint = compiler.constraint(&schema).unwrap();
    let hard = GenerateOptions { max_new_tokens: 160, repetition_penalty: 1.3, frequency_penalty: 0.5, no_repeat_ngram_size: 2, dry_multiplier: 0.8, ..Default::default() };
    let g = lm.generate_with(&ids, &hard, Some(&mut constraint)).unwrap();
    assert_eq!(g.finish_reason, "eos", "{:?}", g.text);
    let v: serde_json::Value = serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", g.text));
    assert_eq!(v.as_object().unwrap().len(), 4, "{v}");

    // The same prompt without the constraint is free text, not this document.
    let free = lm.generate(&ids, &GenerateOptions { max_new_tokens: 24, ..Default::default() }).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&free.text).is_err(), "{}", free.text);
}

#[test]
fn a_schema_that_cannot_be_compiled_is_refused() {
    let lm = model();
    let compiler = SchemaCompiler::new(&lm.tokenizer, &lm.eos_ids).unwrap();
    let err = compiler.constraint(&serde_json::json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}, "required": ["a"]})).err().expect("a dangling $ref is an error");
    assert!(err.to_string().contains("cannot be compiled"), "{err}");
}
