//! Tokenizers of GGUF files, built from `tokenizer.ggml.*` metadata as a Hugging Face
//! `tokenizers` byte-level BPE with the pre-tokenizer that `tokenizer.ggml.pre` names.
use serde_json::json;
use tokenizers::Tokenizer;

use crate::gguf::{Gguf, Value};
use crate::DecoderError;

/// Llama 3's pre-tokenizer regex (`llama-bpe`).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's pre-tokenizer regex (`qwen2`, llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN2`): Llama 3's
/// with every digit alone (`\p{N}`, not `\p{N}{1,3}`) and the contractions spelled
/// case-insensitively by hand, as llama.cpp writes it.
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` names gauge builds.
pub const KNOWN_PRE_TOKENIZERS: &str = "smollm, starcoder, refact, gpt2, default, llama-bpe, llama3, qwen2";

/// The pre-tokenizer of a `tokenizer.ggml.pre` name, or `None` when gauge does not know it.
fn pre_tokenizer(pre: &str) -> Option<serde_json::Value> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    Some(match pre {
        // SmolLM / StarCoder: every digit alone, then GPT-2's regex.
        "smollm" | "starcoder" | "refact" => json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        // GPT-2 and friends.
        "gpt2" | "default" => byte_level(true),
        // Llama 3, and Qwen2 (its digits one by one). llama.cpp applies no normaliser for
        // either (Hugging Face's Qwen2 tokenizer.json adds NFC; llama.cpp's ids are the anchor).
        "llama-bpe" | "llama3" | "qwen2" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": if pre == "qwen2" { QWEN2_REGEX } else { LLAMA3_REGEX }}, "behavior": "Isolated", "invert": false},
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
    let tokens: Vec<&str> = g.get("tokenizer.ggml.tokens").and_then(Value::as_array).ok_or_else(|| err("no tokenizer.ggml.tokens".into()))?.iter().map(|v| v.as_str().unwrap_or("")).collect();
    let merges: Vec<&str> = g.get("tokenizer.ggml.merges").and_then(Value::as_array).map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect()).unwrap_or_default();
    let types: Vec<u64> = g.get("tokenizer.ggml.token_type").and_then(Value::as_array).map(|a| a.iter().map(|v| v.as_u64().unwrap_or(1)).collect()).unwrap_or_default();
    if types.len() > tokens.len() {
        return Err(err(format!("tokenizer.ggml.token_type has {} entries for {} tokens (corrupt file?)", types.len(), tokens.len())));
    }
    let vocab = tokens.iter().enumerate().map(|(i, t)| (i as u32, *t, types.get(i).copied().unwrap_or(1)));
    byte_level_bpe(pre_name, vocab, &merges).map_err(err)
}

/// A byte-level BPE tokenizer from its parts, as llama.cpp reads them from GGUF metadata:
/// `(id, token, ggml token type)` (ids may be sparse), the merges in rank order, and the
/// `tokenizer.ggml.pre` name. Control (type 3) and user-defined (type 4) tokens are matched
/// whole before the pre-tokenizer, as llama.cpp matches them in a prompt.
pub fn byte_level_bpe<'a>(pre_name: &str, vocab: impl Iterator<Item = (u32, &'a str, u64)>, merges: &[&str]) -> Result<Tokenizer, String> {
    let pre = pre_tokenizer(pre_name).ok_or_else(|| format!("tokenizer.ggml.pre `{pre_name}` is not known to gauge (known: {KNOWN_PRE_TOKENIZERS})"))?;
    let mut map = serde_json::Map::new();
    let mut added = Vec::new();
    for (id, token, ty) in vocab {
        map.insert(token.to_string(), json!(id));
        if ty == 3 || ty == 4 {
            added.push(json!({"id": id, "content": token, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": ty == 3}));
        }
    }
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
            "vocab": map, "merges": merges,
        },
    });
    Tokenizer::from_bytes(serde_json::to_vec(&spec).expect("spec serialises")).map_err(|e| format!("cannot build the tokenizer: {e}"))
}

/// The control tokens llama.cpp ends generation on besides `tokenizer.ggml.eos_token_id`
/// (`llama_vocab::impl::load`'s end-of-generation list, for the families gauge reads).
pub const END_OF_GENERATION: [&str; 8] = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"];

/// The ids of `tokens` (`tokenizer.ggml.tokens`) that are control tokens (type 3) named in
/// [`END_OF_GENERATION`].
pub fn end_of_generation_ids(g: &Gguf) -> Vec<u32> {
    let (Some(tokens), Some(types)) = (g.get("tokenizer.ggml.tokens").and_then(Value::as_array), g.get("tokenizer.ggml.token_type").and_then(Value::as_array)) else {
        return Vec::new();
    };
    tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (t, ty))| ty.as_u64() == Some(3) && t.as_str().is_some_and(|t| END_OF_GENERATION.contains(&t)))
        .map(|(i, _)| i as u32)
        .collect()
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
