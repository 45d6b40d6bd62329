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

/// Every bracket of `text`: closed ones and a last one left open.
fn brackets(text: &str) -> (Vec<String>, Option<String>) {
    let mut closed = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('[') {
        match rest[i..].find(']') {
            Some(j) => {
                closed.push(rest[i..=i + j].to_string());
                rest = &rest[i + j + 1..];
            }
            None => return (closed, Some(rest[i..].to_string())),
        }
    }
    (closed, None)
}

#[test]
fn walks_held_to_citation_tags_write_only_the_given_tags_on_the_real_vocabulary() {
    // Random logits that favour every token holding a bracket, over SmolLM2's 49,152 tokens:
    // unconstrained, such walks write brackets of every kind; held to the tags, each bracket
    // they write is one of the tags (or the start of one, when the walk ends inside it).
    let lm = model();
    let vocab = std::sync::Arc::new(gauge_decoder::CitationVocab::new(&lm.tokenizer).unwrap());
    let tags: Vec<String> = ["[FRA-HRGC.pdf pp. 12-13]", "[FRA-HRGC.pdf p. 12]", "[FRA-HRGC.pdf p. 13]", "[manuals/Track Safety.pdf p. 4]"].map(String::from).to_vec();
    let n = lm.tokenizer.get_vocab_size(true);
    let bracket: Vec<bool> = (0..n as u32).map(|i| lm.tokenizer.decode(&[i], false).is_ok_and(|t| t.contains('[') || t.contains(']'))).collect();
    let eos: std::collections::HashSet<u32> = lm.eos_ids.iter().copied().collect();
    let walk = |seed: u64, constrained: bool| -> String {
        let mut rng = gauge_core::rng::SplitMix64::new(seed);
        let mut c = vocab.constraint(&tags);
        let mut ids = Vec::new();
        for _ in 0..400 {
            let mut logits: Vec<f32> = (0..n).map(|i| (rng.next_u64() % 1000) as f32 / 1000.0 + if bracket[i] { 0.9 } else { 0.0 } - if eos.contains(&(i as u32)) { 9.0 } else { 0.0 }).collect();
            if constrained {
                gauge_decoder::TokenConstraint::mask(&mut c, &mut logits).unwrap();
            }
            let next = gauge_decoder::generate::argmax(&logits);
            if constrained {
                gauge_decoder::TokenConstraint::advance(&mut c, next).unwrap();
            }
            ids.push(next);
        }
        lm.tokenizer.decode(&ids, false).unwrap()
    };
    let mut written = 0;
    for seed in 1..=4 {
        let (closed, open) = brackets(&walk(seed, true));
        written += closed.len();
        for b in &closed {
            assert!(tags.contains(b), "seed {seed}: `{b}` is not a given tag");
        }
        if let Some(o) = open {
            assert!(tags.iter().any(|t| t.starts_with(&o)), "seed {seed}: `{o}` begins no tag");
        }
    }
    assert!(written >= 20, "the walks wrote {written} tags: too few to test anything");
    let (free, _) = brackets(&walk(1, false));
    assert!(free.iter().any(|b| !tags.contains(b)), "unconstrained, the same walk writes other brackets");
}

#[test]
fn a_greedy_answer_held_to_citation_tags_cites_only_its_passages() {
    // The user turn shows a page that was not given as its example; held to the tags, the reply
    // can only cite the given pages.
    let lm = model();
    let vocab = std::sync::Arc::new(gauge_decoder::CitationVocab::new(&lm.tokenizer).unwrap());
    let tags = vec!["[Track.pdf p. 4]".to_string()];
    let chat = lm.chat.as_ref().unwrap();
    let user = "[Track.pdf p. 4]\nTrack inspections must be made at least twice weekly on main track.\n\nQuestion: How often is main track inspected? Answer in one sentence and cite the page in brackets, like [Track.pdf p. 9].";
    let prompt = chat.render(&[Message::new("system", "You answer from the passages and cite them."), Message::new("user", user)], true).unwrap();
    let ids = lm.tokenizer.encode(prompt.as_str(), false).unwrap().get_ids().to_vec();
    let opts = GenerateOptions { max_new_tokens: 60, ..Default::default() };
    let mut c = vocab.constraint(&tags);
    let g = lm.generate_with(&ids, &opts, Some(&mut c)).unwrap();
    let (closed, _) = brackets(&g.text);
    assert!(closed.iter().all(|b| tags.contains(b)), "{}", g.text);
    // The constraint leaves a reply without brackets as it was.
    let free = lm.generate(&ids, &opts).unwrap();
    if !free.text.contains('[') {
        assert_eq!(free.text, g.text);
    }
}
