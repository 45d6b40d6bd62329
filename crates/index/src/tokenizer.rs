//! A BM25 tokenizer that keeps identifiers whole and also indexes their parts.
//!
//! `ERA22LA175` → `era22la175`, `era`, `22`, `la`, `175`; `§ 236.405` → `§`, `236.405`,
//! `236`, `405`; `236.405.A1` → `236.405.a1`, `236`, `405`, `a1`, `a`, `1`. Parts share
//! the whole token's position, so phrase queries still work on whole identifiers.
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Name under which the tokenizer is registered.
pub const IDENTIFIER_TOKENIZER: &str = "gauge_identifiers";

/// The tokenizer (lower-cases; splits on whitespace and punctuation except `.`, `-`, `/`
/// and `_` between alphanumerics).
#[derive(Clone, Default)]
pub struct IdentifierTokenizer;

/// The tokens of one text.
pub struct IdentifierTokenStream {
    tokens: Vec<Token>,
    index: usize,
}

impl TokenStream for IdentifierTokenStream {
    fn advance(&mut self) -> bool {
        if self.index < self.tokens.len() {
            self.index += 1;
            true
        } else {
            false
        }
    }
    fn token(&self) -> &Token {
        &self.tokens[self.index - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.index - 1]
    }
}

impl Tokenizer for IdentifierTokenizer {
    type TokenStream<'a> = IdentifierTokenStream;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> IdentifierTokenStream {
        IdentifierTokenStream { tokens: tokenize(text), index: 0 }
    }
}

fn is_joiner(c: char) -> bool {
    matches!(c, '.' | '-' | '/' | '_')
}

/// Splits a text into whole tokens and their parts (see the module docs).
pub fn tokenize(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut position = 0;
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        if c == '§' {
            out.push(token(start, start + c.len_utf8(), "§".into(), position));
            position += 1;
            i += 1;
            continue;
        }
        if !c.is_alphanumeric() {
            i += 1;
            continue;
        }
        // A whole token: alphanumerics joined by single joiners followed by an alphanumeric.
        let mut j = i;
        while j < chars.len() {
            let cj = chars[j].1;
            let joins = is_joiner(cj) && j + 1 < chars.len() && chars[j + 1].1.is_alphanumeric();
            if !(cj.is_alphanumeric() || joins) {
                break;
            }
            j += 1;
        }
        let end = if j < chars.len() { chars[j].0 } else { text.len() };
        let whole = &text[start..end];
        let lower = whole.to_lowercase();
        out.push(token(start, end, lower.clone(), position));
        // Parts: split at joiners and at letter/digit boundaries.
        let mut parts: Vec<String> = Vec::new();
        for piece in whole.split(is_joiner) {
            let segs = split_letters_digits(piece);
            if segs.len() > 1 {
                parts.push(piece.to_lowercase());
            }
            parts.extend(segs.into_iter().map(|s| s.to_lowercase()));
        }
        let mut seen = std::collections::HashSet::new();
        seen.insert(lower);
        for p in parts {
            if !p.is_empty() && seen.insert(p.clone()) {
                out.push(token(start, end, p, position));
            }
        }
        position += 1;
        i = j;
    }
    out
}

fn split_letters_digits(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev: Option<bool> = None;
    for (i, c) in s.char_indices() {
        let digit = c.is_ascii_digit();
        if let Some(p) = prev {
            if p != digit {
                out.push(&s[start..i]);
                start = i;
            }
        }
        prev = Some(digit);
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

fn token(from: usize, to: usize, text: String, position: usize) -> Token {
    Token { offset_from: from, offset_to: to, position, text, position_length: 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<String> {
        tokenize(s).into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn identifiers_stay_whole_and_parts_are_indexed() {
        assert_eq!(texts("ERA22LA175"), vec!["era22la175", "era", "22", "la", "175"]);
        assert_eq!(texts("§ 174.63"), vec!["§", "174.63", "174", "63"]);
        assert_eq!(texts("236.405.A1 Gate"), vec!["236.405.a1", "236", "405", "a1", "a", "1", "gate"]);
        assert_eq!(texts("49 CFR 234.219."), vec!["49", "cfr", "234.219", "234", "219"]);
        assert_eq!(texts("AADT, highway-rail"), vec!["aadt", "highway-rail", "highway", "rail"]);
    }

    #[test]
    fn parts_share_the_whole_tokens_position() {
        let t = tokenize("see ERA22LA175 now");
        assert_eq!(t.iter().map(|t| t.position).collect::<Vec<_>>(), vec![0, 1, 1, 1, 1, 1, 2]);
    }
}
