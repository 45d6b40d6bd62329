//! Tokenizers of GGUF files, built from `tokenizer.ggml.*` metadata as a Hugging Face
//! `tokenizers` byte-level BPE with the pre-tokenizer that `tokenizer.ggml.pre` names.
use serde_json::json;
use tokenizers::Tokenizer;

use crate::gguf::{Gguf, Value};
use crate::DecoderError;

/// Llama 3's pre-tokenizer regex (`llama-bpe`).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer of a `tokenizer.ggml.pre` name, or `None` when gauge does not know it.
fn pre_tokenizer(pre: &str) -> Option<serde_json::Value> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    Some(match pre {
        // SmolLM / StarCoder: every digit alone, then GPT-2's regex.
        "smollm" | "starcoder" | "refact" => json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        // GPT-2 and friends.
        "gpt2" | "default" => byte_level(true),
        // Llama 3.
        "llama-bpe" | "llama3" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": false},
            byte_level(false)
        ]}),
        _ => return None,
    })
}

/// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.model = gpt2`, byte-level BPE).
pub fn from_gguf(g: &Gguf) -> Result<Tokenizer, DecoderError> {
    let err = |m: String| DecoderError::file(&g.path, m);
    let model = g.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("");
    if model != "gpt2" {
        return Err(err(format!("tokenizer.ggml.model `{model}` is not supported (gauge builds byte-level BPE `gpt2` tokenizers; SentencePiece `llama` files are not read yet)")));
    }
    let pre_name = g.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
    let pre = pre_tokenizer(pre_name).ok_or_else(|| err(format!("tokenizer.ggml.pre `{pre_name}` is not known to gauge (known: smollm, starcoder, refact, gpt2, default, llama-bpe)")))?;
    let tokens: Vec<&str> = g.get("tokenizer.ggml.tokens").and_then(Value::as_array).ok_or_else(|| err("no tokenizer.ggml.tokens".into()))?.iter().map(|v| v.as_str().unwrap_or("")).collect();
    let merges: Vec<&str> = g.get("tokenizer.ggml.merges").and_then(Value::as_array).map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect()).unwrap_or_default();
    let types: Vec<u64> = g.get("tokenizer.ggml.token_type").and_then(Value::as_array).map(|a| a.iter().map(|v| v.as_u64().unwrap_or(1)).collect()).unwrap_or_default();
    if types.len() > tokens.len() {
        return Err(err(format!("tokenizer.ggml.token_type has {} entries for {} tokens (corrupt file?)", types.len(), tokens.len())));
    }
    let vocab: serde_json::Map<String, serde_json::Value> = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), json!(i))).collect();
    // Control (3) and user-defined (4) tokens are matched whole, before the pre-tokenizer.
    let added: Vec<serde_json::Value> = types
        .iter()
        .enumerate()
        .filter(|(_, &t)| t == 3 || t == 4)
        .map(|(i, &t)| json!({"id": i, "content": tokens[i], "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": t == 3}))
        .collect();
    let spec = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": pre_name == "llama-bpe" || pre_name == "llama3",
            "vocab": vocab, "merges": merges,
        },
    });
    Tokenizer::from_bytes(serde_json::to_vec(&spec).expect("spec serialises")).map_err(|e| err(format!("cannot build the tokenizer: {e}")))
}

#[cfg(test)]
mod tests {
    use crate::gguf::tests::{gguf_file, open_bytes};

    fn strings(items: &[&str]) -> Vec<u8> {
        let mut b = 8u32.to_le_bytes().to_vec();
        b.extend((items.len() as u64).to_le_bytes());
        for s in items {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        }
        b
    }

    #[test]
    fn more_token_types_than_tokens_is_an_error_not_a_panic() {
        let model = [4u64.to_le_bytes().to_vec(), b"gpt2".to_vec()].concat();
        let mut types = 5u32.to_le_bytes().to_vec(); // i32 items
        types.extend(3u64.to_le_bytes());
        for t in [1i32, 3, 3] {
            types.extend(t.to_le_bytes());
        }
        let g = open_bytes(&gguf_file(&[("tokenizer.ggml.model", 8, model.clone()), ("tokenizer.ggml.tokens", 9, strings(&["a", "b"])), ("tokenizer.ggml.token_type", 9, types)], &[], &[])).unwrap();
        let e = super::from_gguf(&g).expect_err("refused").to_string();
        assert!(e.contains("token_type has 3 entries for 2 tokens"), "{e}");
        // Two types for two tokens build.
        let mut types = 5u32.to_le_bytes().to_vec();
        types.extend(2u64.to_le_bytes());
        for t in [1i32, 3] {
            types.extend(t.to_le_bytes());
        }
        let g = open_bytes(&gguf_file(&[("tokenizer.ggml.model", 8, model), ("tokenizer.ggml.tokens", 9, strings(&["a", "b"])), ("tokenizer.ggml.token_type", 9, types)], &[], &[])).unwrap();
        assert!(super::from_gguf(&g).is_ok());
    }
}
