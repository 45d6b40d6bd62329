//! gauge's tokenizer and chat template against llama.cpp's on Qwen2.5-Coder-1.5B-Instruct, without
//! the model: `just check-llamacpp` writes the fixture from the GGUF (the tokenizer cut to the
//! merges its texts use, which gives the same ids) and llama-server's answers (`/tokenize`,
//! `/apply-template`). The full check (every FRA page, greedy continuations) is the recipe's report,
//! `eval/llamacpp/`.
use gauge_decoder::{ChatTemplate, Message};

const FIXTURE: &str = "tests/fixtures/qwen2.5-coder-1.5b-instruct-q4_k_m.llamacpp.json";

fn fixture() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).expect("fixture JSON")
}

fn tokenizer(f: &serde_json::Value, pre: &str) -> tokenizers::Tokenizer {
    let vocab: Vec<(u32, String, u64)> = f["vocab"].as_array().unwrap().iter().map(|v| (v[0].as_u64().unwrap() as u32, v[1].as_str().unwrap().to_string(), v[2].as_u64().unwrap())).collect();
    let merges: Vec<&str> = f["merges"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    gauge_decoder::tokenizer::byte_level_bpe(pre, vocab.iter().map(|(i, t, ty)| (*i, t.as_str(), *ty)), &merges).unwrap()
}

/// (equal, total) over the fixture's texts.
fn agreement(f: &serde_json::Value, tok: &tokenizers::Tokenizer) -> (usize, usize, Vec<String>) {
    let cases = f["cases"].as_array().unwrap();
    let mut differ = Vec::new();
    for c in cases {
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got = tok.encode(c["text"].as_str().unwrap(), false).unwrap().get_ids().to_vec();
        if got != want {
            differ.push(format!("{}: gauge {:?}… llama.cpp {:?}…", c["id"], &got[..got.len().min(12)], &want[..want.len().min(12)]));
        }
    }
    (cases.len() - differ.len(), cases.len(), differ)
}

#[test]
fn qwen2_token_ids_equal_llama_cpp() {
    let f = fixture();
    assert_eq!(f["pre"], "qwen2");
    let (equal, total, differ) = agreement(&f, &tokenizer(&f, "qwen2"));
    assert!(total >= 50, "the fixture holds the golden questions, edge cases and page openings");
    assert_eq!(equal, total, "{differ:#?}");
}

#[test]
fn the_check_tells_pre_tokenizers_apart() {
    // GPT-2's regex splits a punctuation-led word (`(c`, `“quoted`) and newline runs otherwise:
    // the same vocabulary and merges then give other ids, so the fixture sees a wrong
    // pre-tokenizer. (Llama 3's regex, which groups digits in threes, gives Qwen's ids: Qwen's
    // vocabulary has no token of two digits to merge them into.)
    let f = fixture();
    let (equal, total, _) = agreement(&f, &tokenizer(&f, "gpt2"));
    assert!(equal < total, "gpt2 gave every id of the qwen2 fixture");
}

#[test]
fn chat_template_from_the_gguf_equals_llama_cpp_apply_template() {
    let f = fixture();
    let t = &f["template"];
    let template = ChatTemplate::new(t["source"].as_str().unwrap(), t["bos"].as_str().unwrap(), t["eos"].as_str().unwrap());
    let cases = t["cases"].as_array().unwrap();
    assert!(cases.len() >= 4);
    for c in cases {
        let messages: Vec<Message> = serde_json::from_value(c["messages"].clone()).unwrap();
        assert_eq!(template.render(&messages, true).unwrap(), c["prompt"].as_str().unwrap(), "{}", c["id"]);
    }
}
