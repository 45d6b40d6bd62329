//! Token windows measured by a Hugging Face `tokenizer.json`.
use std::path::Path;

use crate::ChunkError;

/// A tokenizer that cuts texts into overlapping token windows.
pub struct TokenWindows {
    tokenizer: tokenizers::Tokenizer,
}

impl TokenWindows {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<TokenWindows, ChunkError> {
        let tokenizer = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| ChunkError::Tokenizer { path: path.to_path_buf(), message: e.to_string() })?;
        Ok(TokenWindows { tokenizer })
    }

    /// Byte ranges of windows of `size` tokens, each starting `size - overlap` tokens after
    /// the previous one (no special tokens, no truncation).
    pub fn windows(&self, text: &str, size: usize, overlap: usize) -> Vec<(usize, usize)> {
        let mut tk = self.tokenizer.clone();
        let _ = tk.with_truncation(None);
        tk.with_padding(None);
        let Ok(enc) = tk.encode(text, false) else { return Vec::new() };
        let offsets: Vec<(usize, usize)> = enc.get_offsets().iter().copied().filter(|(s, e)| e > s).collect();
        let mut out = Vec::new();
        let step = size - overlap;
        let mut i = 0;
        while i < offsets.len() {
            let j = (i + size).min(offsets.len());
            out.push((offsets[i].0, offsets[j - 1].1));
            if j == offsets.len() {
                break;
            }
            i += step;
        }
        out
    }

    /// Number of tokens in a text (no special tokens).
    pub fn count(&self, text: &str) -> usize {
        self.tokenizer.encode(text, false).map(|e| e.len()).unwrap_or(0)
    }
}
