//! Citations that cannot be invented: while a reply is inside a bracket (`[` …), only the
//! page tags of the passages it was given may be written (`[source p. N]`,
//! `[source pp. A-B]`, and a single page of a range). Outside brackets the reply is free.
//!
//! A token is allowed when the bytes it adds keep every bracket it opens or continues a prefix
//! of an allowed tag, and every bracket it closes equal to one. The check runs on the bytes
//! each token stands for ([`crate::constrain::token_bytes`]), so a token that opens a tag in
//! its middle (` [`, `([`) or closes one and goes on (`],`) is judged as the text it writes.
//! Outside a tag only the few tokens holding a `[` need a look; inside one, the tokens whose
//! first byte can come next.
use std::sync::Arc;

use tokenizers::Tokenizer;

use crate::constrain::TokenConstraint;
use crate::DecoderError;

/// A model's vocabulary as bytes, prepared once for [`CitationConstraint`]s.
pub struct CitationVocab {
    bytes: Vec<Vec<u8>>,
    /// Special tokens (end of turn, control tokens): free outside a tag, refused inside one.
    special: Vec<bool>,
    /// The ids whose bytes hold a `[`.
    opening: Vec<u32>,
}

impl CitationVocab {
    /// The vocabulary of `tokenizer` (byte-level BPE or byte-fallback SentencePiece).
    pub fn new(tokenizer: &Tokenizer) -> Result<CitationVocab, DecoderError> {
        Ok(Self::from_token_bytes(crate::constrain::token_bytes(tokenizer)?))
    }

    /// The vocabulary from the bytes of each token id (special tokens: the marker byte 0xFF
    /// followed by their name, as [`crate::constrain::token_bytes`] writes them).
    pub fn from_token_bytes(mut bytes: Vec<Vec<u8>>) -> CitationVocab {
        let marker = llguidance::toktrie::TokTrie::SPECIAL_TOKEN_MARKER;
        let special: Vec<bool> = bytes.iter().map(|b| b.len() > 1 && b[0] == marker).collect();
        for (b, s) in bytes.iter_mut().zip(&special) {
            if *s {
                b.clear();
            }
        }
        let opening = bytes.iter().enumerate().filter(|(_, b)| b.contains(&b'[')).map(|(i, _)| i as u32).collect();
        CitationVocab { bytes, special, opening }
    }

    /// A fresh constraint for one reply that may cite `tags` (each written `[` … `]`, as
    /// [`gauge_cite`'s `page_tag`] renders them). A tag holding another bracket is dropped.
    pub fn constraint(self: &Arc<Self>, tags: &[String]) -> CitationConstraint {
        let mut inner: Vec<Vec<u8>> = tags
            .iter()
            .filter_map(|t| {
                let body = t.strip_prefix('[')?;
                let inside = body.strip_suffix(']')?;
                (!inside.is_empty() && !inside.contains(['[', ']'])).then(|| body.as_bytes().to_vec())
            })
            .collect();
        inner.sort();
        inner.dedup();
        CitationConstraint { vocab: self.clone(), tags: inner, open: None }
    }
}

/// The state of one reply under [`CitationVocab::constraint`].
pub struct CitationConstraint {
    vocab: Arc<CitationVocab>,
    /// The allowed tags without their `[` (each ends with `]`).
    tags: Vec<Vec<u8>>,
    /// Inside a tag: what was written since its `[`.
    open: Option<Vec<u8>>,
}

impl CitationConstraint {
    /// The tags it allows, as written.
    pub fn tags(&self) -> Vec<String> {
        self.tags.iter().map(|t| format!("[{}", String::from_utf8_lossy(t))).collect()
    }

    /// Whether `written` (after a `[`) is a prefix of an allowed tag.
    fn begins_tag(&self, head: &[u8], tail: &[u8]) -> bool {
        self.tags.iter().any(|t| t.len() >= head.len() + tail.len() && t.starts_with(head) && t[head.len()..].starts_with(tail))
    }

    /// Whether `head` followed by `tail` equals an allowed tag.
    fn is_tag(&self, head: &[u8], tail: &[u8]) -> bool {
        self.tags.iter().any(|t| t.len() == head.len() + tail.len() && t.starts_with(head) && t[head.len()..] == *tail)
    }

    /// Writes `bytes` from the state `open` (inside a tag: its text so far). `Err`: a bracket
    /// would hold what no allowed tag is or begins with; `Ok(None)`: outside every tag after
    /// them; `Ok(Some((continued, start)))`: inside a tag whose text is `open` (when
    /// `continued`) followed by `bytes[start..]`.
    fn walk(&self, open: Option<&[u8]>, bytes: &[u8]) -> Result<Option<(bool, usize)>, ()> {
        let mut head = open;
        let mut continued = open.is_some();
        let mut i = 0;
        loop {
            match head {
                None => match bytes[i..].iter().position(|&b| b == b'[') {
                    None => return Ok(None),
                    Some(k) => {
                        i += k + 1;
                        head = Some(&[]);
                        continued = false;
                    }
                },
                Some(h) => {
                    let tail = &bytes[i..];
                    match tail.iter().position(|&b| b == b']') {
                        Some(k) if self.is_tag(h, &tail[..=k]) => {
                            i += k + 1;
                            head = None;
                        }
                        None if self.begins_tag(h, tail) => return Ok(Some((continued, i))),
                        _ => return Err(()),
                    }
                }
            }
        }
    }

    fn allows(&self, id: usize) -> bool {
        let v = &self.vocab;
        if v.special[id] {
            return self.open.is_none();
        }
        self.walk(self.open.as_deref(), &v.bytes[id]).is_ok()
    }
}

impl TokenConstraint for CitationConstraint {
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), DecoderError> {
        let n = self.vocab.bytes.len().min(logits.len());
        match &self.open {
            None => {
                for &id in &self.vocab.opening {
                    let id = id as usize;
                    if id < n && !self.allows(id) {
                        logits[id] = f32::NEG_INFINITY;
                    }
                }
            }
            Some(open) => {
                // The bytes that may come next, to pass over most of the vocabulary at once.
                let mut next = [false; 256];
                for t in self.tags.iter().filter(|t| t.len() > open.len() && t.starts_with(open)) {
                    next[t[open.len()] as usize] = true;
                }
                for (id, l) in logits.iter_mut().enumerate().take(n) {
                    let b = &self.vocab.bytes[id];
                    if b.is_empty() || !next[b[0] as usize] || !self.allows(id) {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
        for l in logits.iter_mut().skip(n) {
            *l = f32::NEG_INFINITY;
        }
        if logits.iter().all(|l| *l == f32::NEG_INFINITY) {
            return Err(DecoderError::Model("citation constraint: no token can continue the reply".into()));
        }
        Ok(())
    }

    fn advance(&mut self, token: u32) -> Result<(), DecoderError> {
        let id = token as usize;
        let Some(bytes) = self.vocab.bytes.get(id) else { return Ok(()) };
        if self.vocab.special[id] {
            return if self.open.is_some() { Err(DecoderError::Model("citation constraint: a special token inside a tag".into())) } else { Ok(()) };
        }
        self.open = match self.walk(self.open.as_deref(), bytes) {
            Err(()) => return Err(DecoderError::Model(format!("citation constraint: token {token} writes a tag no passage has"))),
            Ok(None) => None,
            Ok(Some((true, start))) => Some([self.open.as_deref().unwrap_or_default(), &bytes[start..]].concat()),
            Ok(Some((false, start))) => Some(bytes[start..].to_vec()),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of whole words and pieces, as a BPE would have them.
    fn vocab() -> (Arc<CitationVocab>, Vec<&'static str>) {
        let words = vec!["See", " [", "[", "a.pdf", " p", ".", " 3", " 4", "]", "],", " 1", "2", "-", "pp", "b.pdf", " text", "[a", "]. [", " (", "<eos>", "[note]"];
        let mut bytes: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
        bytes[19] = [&[0xFF][..], b"<eos>"].concat();
        (Arc::new(CitationVocab::from_token_bytes(bytes)), words)
    }

    fn allowed(c: &mut CitationConstraint, words: &[&str]) -> Vec<String> {
        let mut logits = vec![0.0f32; words.len()];
        c.mask(&mut logits).unwrap();
        words.iter().zip(&logits).filter(|(_, l)| l.is_finite()).map(|(w, _)| w.to_string()).collect()
    }

    fn write(c: &mut CitationConstraint, words: &[&str], text: &[&str]) {
        for t in text {
            let id = words.iter().position(|w| w == t).unwrap();
            c.advance(id as u32).unwrap();
        }
    }

    #[test]
    fn inside_a_bracket_only_the_given_tags_are_written() {
        let (v, words) = vocab();
        let mut c = v.constraint(&["[a.pdf p. 3]".to_string(), "[b.pdf pp. 1-2]".to_string(), "[bad [x] p. 1]".to_string()]);
        assert_eq!(c.tags(), vec!["[a.pdf p. 3]", "[b.pdf pp. 1-2]"], "a tag holding a bracket is dropped");
        // Outside: every token but brackets that open no tag ("[note]"); "[a" may begin "[a.pdf".
        let free = allowed(&mut c, &words);
        assert!(free.contains(&"See".to_string()) && free.contains(&"<eos>".to_string()) && free.contains(&" [".to_string()) && free.contains(&"[a".to_string()));
        assert!(!free.contains(&"[note]".to_string()), "a bracket that is no tag is refused");
        write(&mut c, &words, &["See", " ["]);
        assert_eq!(allowed(&mut c, &words), vec!["a.pdf", "b.pdf"], "inside: only sources of given passages; no end of sequence");
        write(&mut c, &words, &["a.pdf", " p", "."]);
        assert_eq!(allowed(&mut c, &words), vec![" 3"], "page 4 of a.pdf was not given");
        write(&mut c, &words, &[" 3"]);
        let close = allowed(&mut c, &words);
        assert!(close.contains(&"]".to_string()) && close.contains(&"],".to_string()) && close.contains(&"]. [".to_string()), "{close:?}");
        write(&mut c, &words, &["]. ["]);
        assert_eq!(allowed(&mut c, &words), vec!["a.pdf", "b.pdf"], "a token that closes one tag and opens the next");
        write(&mut c, &words, &["b.pdf"]);
        assert_eq!(allowed(&mut c, &words), vec![" p"]);
        assert!(c.advance(words.iter().position(|w| *w == " 4").unwrap() as u32).is_err(), "a token the mask refused is an error");
        // No passages: no bracket at all.
        let mut none = v.constraint(&[]);
        assert!(allowed(&mut none, &words).iter().all(|w| !w.contains('[')));
    }
}
