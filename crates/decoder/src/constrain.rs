//! Constrained decoding: the reply is held to a JSON Schema by masking, at every step, the
//! tokens that cannot continue a valid document.
//!
//! The schema is compiled to a grammar and the per-step token masks are computed by
//! [`llguidance`] (the structured-output engine behind llama.cpp's, vLLM's and SGLang's
//! `json_schema` support). gauge supplies it the vocabulary as raw bytes: each token of the
//! model's tokenizer is turned back into the bytes it stands for (byte-level BPE's
//! character map, or SentencePiece's `<0xNN>` byte-fallback tokens and `▁` spaces), special
//! tokens are marked as such, and the model's first end-of-sequence id ends the document.
//! [`TokenConstraint`] is what generation asks of any constraint (this one, and
//! [`crate::citation`]'s on citation tags).
use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use tokenizers::{DecoderWrapper, Tokenizer};
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::DecoderError;

/// A constraint on the tokens of one reply, applied at every step of [`crate::generate`].
pub trait TokenConstraint: Send {
    /// Sets the logits of the tokens that cannot come next to −∞.
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), DecoderError>;
    /// Advances past the chosen token.
    fn advance(&mut self, token: u32) -> Result<(), DecoderError>;
}

/// The GPT-2 byte-level alphabet: printable bytes map to themselves, the others to
/// code points from U+0100 on, in byte order.
fn byte_level_map() -> std::collections::HashMap<char, u8> {
    let mut map = std::collections::HashMap::new();
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        let c = b as char;
        if matches!(c, '!'..='~' | '\u{00A1}'..='\u{00AC}' | '\u{00AE}'..='\u{00FF}') {
            map.insert(c, b);
        } else {
            map.insert(char::from_u32(next).expect("valid code point"), b);
            next += 1;
        }
    }
    map
}

fn decoder_kinds(d: &DecoderWrapper, byte_level: &mut bool, byte_fallback: &mut bool) {
    match d {
        DecoderWrapper::ByteLevel(_) => *byte_level = true,
        DecoderWrapper::ByteFallback(_) => *byte_fallback = true,
        DecoderWrapper::Sequence(s) => s.get_decoders().iter().for_each(|d| decoder_kinds(d, byte_level, byte_fallback)),
        _ => {}
    }
}

/// The bytes each token id stands for (special tokens: [`TokTrie::SPECIAL_TOKEN_MARKER`]
/// followed by their text, so that they never match document text).
pub fn token_bytes(tokenizer: &Tokenizer) -> Result<Vec<Vec<u8>>, DecoderError> {
    let (mut byte_level, mut byte_fallback) = (false, false);
    if let Some(d) = tokenizer.get_decoder() {
        decoder_kinds(d, &mut byte_level, &mut byte_fallback);
    }
    if !byte_level && !byte_fallback {
        return Err(DecoderError::Model("constrained decoding needs a byte-level BPE or byte-fallback (SentencePiece) tokenizer; this one has neither decoder".into()));
    }
    let n = tokenizer.get_vocab_size(true);
    let specials: std::collections::HashSet<u32> = tokenizer.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special || (t.content.starts_with('<') && t.content.ends_with('>'))).map(|(id, _)| id).collect();
    let map = byte_level_map();
    let mut out = Vec::with_capacity(n);
    for id in 0..n as u32 {
        let Some(name) = tokenizer.id_to_token(id) else {
            // A hole in the vocabulary: a special token that matches nothing.
            out.push([&[TokTrie::SPECIAL_TOKEN_MARKER][..], format!("<[{id}]>").as_bytes()].concat());
            continue;
        };
        let bytes = if specials.contains(&id) {
            [&[TokTrie::SPECIAL_TOKEN_MARKER][..], name.as_bytes()].concat()
        } else if byte_level {
            match name.chars().map(|c| map.get(&c).copied()).collect::<Option<Vec<u8>>>() {
                Some(b) => b,
                // An added token written as plain text (not in the byte alphabet).
                None => name.as_bytes().to_vec(),
            }
        } else if name.len() == 6 && name.starts_with("<0x") && name.ends_with('>') {
            vec![u8::from_str_radix(&name[3..5], 16).map_err(|_| DecoderError::Model(format!("token {id} `{name}` is not a byte token")))?]
        } else {
            name.replace('\u{2581}', " ").into_bytes()
        };
        out.push(bytes);
    }
    Ok(out)
}

/// The tokenizer as llguidance sees it.
struct ByteEnv {
    tokenizer: Tokenizer,
    trie: TokTrie,
}

impl TokenizerEnv for ByteEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |s| self.tokenizer.encode(s, false).map(|e| e.get_ids().to_vec()).unwrap_or_default())
    }
}

/// Compiles JSON Schemas into per-step token masks for one tokenizer (build once per model).
pub struct SchemaCompiler {
    factory: ParserFactory,
    eos: u32,
}

impl SchemaCompiler {
    /// A compiler for `tokenizer`, whose documents end with `eos_ids[0]`.
    pub fn new(tokenizer: &Tokenizer, eos_ids: &[u32]) -> Result<SchemaCompiler, DecoderError> {
        let eos = *eos_ids.first().ok_or_else(|| DecoderError::Model("constrained decoding needs an end-of-sequence id; the model declares none".into()))?;
        let words = token_bytes(tokenizer)?;
        let info = TokRxInfo::new(words.len() as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        if eos_ids.len() > 1 {
            trie = trie.with_eos_tokens(eos_ids);
        }
        let env: TokEnv = Arc::new(ByteEnv { tokenizer: tokenizer.clone(), trie });
        let factory = ParserFactory::new_simple(&env).map_err(|e| DecoderError::Model(format!("constrained decoding: {e}")))?;
        Ok(SchemaCompiler { factory, eos })
    }

    /// A fresh constraint for one reply. The document is written compactly (no free
    /// whitespace between tokens): a small model cannot then loop on blank lines, and the
    /// reply is still valid JSON of the schema.
    pub fn constraint(&self, schema: &serde_json::Value) -> Result<JsonConstraint, DecoderError> {
        let mut schema = schema.clone();
        if let Some(obj) = schema.as_object_mut() {
            obj.entry("x-guidance").or_insert_with(|| serde_json::json!({ "whitespace_flexible": false }));
        }
        let parser = self.factory.create_parser(TopLevelGrammar::from_json_schema(schema)).map_err(|e| DecoderError::Model(format!("the JSON Schema cannot be compiled to a grammar: {e}")))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(DecoderError::Model(format!("the JSON Schema cannot be compiled to a grammar: {e}")));
        }
        Ok(JsonConstraint { matcher, eos: self.eos })
    }
}

/// The state of one constrained reply.
pub struct JsonConstraint {
    matcher: Matcher,
    eos: u32,
}

impl TokenConstraint for JsonConstraint {
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), DecoderError> {
        JsonConstraint::mask(self, logits)
    }

    fn advance(&mut self, token: u32) -> Result<(), DecoderError> {
        JsonConstraint::advance(self, token)
    }
}

impl JsonConstraint {
    /// Sets the logits of every token that cannot come next to −∞ (only end-of-sequence
    /// once the document is complete).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), DecoderError> {
        let allowed = self.matcher.compute_mask_or_eos().map_err(|e| DecoderError::Model(format!("constrained decoding: {e}")))?;
        if allowed.num_set() == 0 {
            return Err(DecoderError::Model("constrained decoding: no token can continue the document".into()));
        }
        let n = allowed.len();
        for (i, l) in logits.iter_mut().enumerate() {
            if i >= n || !allowed.is_allowed(i as TokenId) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Advances past the chosen token.
    pub fn advance(&mut self, token: u32) -> Result<(), DecoderError> {
        if token == self.eos && self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher.consume_token(token).map_err(|e| DecoderError::Model(format!("constrained decoding: {e}")))
    }

    /// Whether the document is complete (only end-of-sequence may follow).
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// The end-of-sequence id that closes the document.
    pub fn eos(&self) -> u32 {
        self.eos
    }
}
