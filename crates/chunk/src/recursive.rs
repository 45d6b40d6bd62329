//! LangChain-compatible recursive character splitting, on byte ranges of the source text.
//!
//! Reproduces `RecursiveCharacterTextSplitter(chunk_size, chunk_overlap)` with its defaults
//! (`keep_separator=True`, separators kept at the start of the following piece,
//! `strip_whitespace=True`, `length_function=len`, i.e. lengths in characters), so the same
//! settings give the same chunks. Because every chunk is a contiguous, stripped slice of
//! the input, chunks are returned as byte ranges and carry exact offsets.

/// Default separators, as LangChain's.
pub const DEFAULT_SEPARATORS: [&str; 5] = ["\n\n", "\n", ". ", " ", ""];

/// A recursive character splitter.
#[derive(Debug, Clone)]
pub struct RecursiveSplitter {
    /// Target chunk size in characters.
    pub size: usize,
    /// Overlap between consecutive chunks in characters.
    pub overlap: usize,
    /// Separators tried in order; `""` splits into characters.
    pub separators: Vec<String>,
}

/// A piece of text: byte range plus its length in characters.
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: usize,
    end: usize,
    chars: usize,
}

impl RecursiveSplitter {
    /// A splitter with LangChain's default separators.
    pub fn new(size: usize, overlap: usize) -> Self {
        RecursiveSplitter { size, overlap, separators: DEFAULT_SEPARATORS.iter().map(|s| s.to_string()).collect() }
    }

    /// Splits `text[start..end]`, returning stripped, non-empty byte ranges into `text`.
    pub fn split_range(&self, text: &str, start: usize, end: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        self.split_rec(text, start, end, &self.separators, &mut out);
        out
    }

    /// Splits a whole text; convenience for tests and callers that want strings.
    pub fn split_text<'a>(&self, text: &'a str) -> Vec<&'a str> {
        self.split_range(text, 0, text.len()).into_iter().map(|(s, e)| &text[s..e]).collect()
    }

    fn split_rec(&self, text: &str, start: usize, end: usize, separators: &[String], out: &mut Vec<(usize, usize)>) {
        let slice = &text[start..end];
        // The first separator that occurs (or "" when reached), and the ones after it.
        let mut separator = separators.last().map(String::as_str).unwrap_or("");
        let mut rest: &[String] = &[];
        for (i, s) in separators.iter().enumerate() {
            if s.is_empty() {
                separator = "";
                break;
            }
            if slice.contains(s.as_str()) {
                separator = s;
                rest = &separators[i + 1..];
                break;
            }
        }
        let pieces = split_keep_start(text, start, end, separator);
        let mut good: Vec<Piece> = Vec::new();
        for p in pieces {
            if p.chars < self.size {
                good.push(p);
            } else {
                if !good.is_empty() {
                    self.merge(text, &good, out);
                    good.clear();
                }
                if rest.is_empty() {
                    push_stripped(text, p.start, p.end, out);
                } else {
                    self.split_rec(text, p.start, p.end, rest, out);
                }
            }
        }
        if !good.is_empty() {
            self.merge(text, &good, out);
        }
    }

    /// LangChain's `_merge_splits` with an empty joining separator (pieces are contiguous).
    fn merge(&self, text: &str, pieces: &[Piece], out: &mut Vec<(usize, usize)>) {
        let mut current: std::collections::VecDeque<Piece> = std::collections::VecDeque::new();
        let mut total = 0usize;
        for &p in pieces {
            if total + p.chars > self.size && !current.is_empty() {
                push_stripped(text, current[0].start, current[current.len() - 1].end, out);
                while total > self.overlap || (total + p.chars > self.size && total > 0) {
                    let first = current.pop_front().expect("total > 0 implies pieces");
                    total -= first.chars;
                }
            }
            current.push_back(p);
            total += p.chars;
        }
        if !current.is_empty() {
            push_stripped(text, current[0].start, current[current.len() - 1].end, out);
        }
    }
}

/// `re.split` keeping each separator at the start of the following piece; empty pieces dropped.
fn split_keep_start(text: &str, start: usize, end: usize, separator: &str) -> Vec<Piece> {
    let slice = &text[start..end];
    let mut pieces = Vec::new();
    let mut push = |s: usize, e: usize| {
        if e > s {
            pieces.push(Piece { start: s, end: e, chars: text[s..e].chars().count() });
        }
    };
    if separator.is_empty() {
        for (i, c) in slice.char_indices() {
            push(start + i, start + i + c.len_utf8());
        }
        return pieces;
    }
    let mut piece_start = start;
    for (i, _) in slice.match_indices(separator) {
        push(piece_start, start + i);
        piece_start = start + i;
    }
    push(piece_start, end);
    pieces
}

fn push_stripped(text: &str, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let slice = &text[start..end];
    let lead = slice.len() - slice.trim_start().len();
    let trail = slice.len() - slice.trim_end().len();
    if lead + trail < slice.len() {
        out.push((start + lead, end - trail));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected outputs are what langchain-text-splitters 1.1.3 returns for
    // RecursiveCharacterTextSplitter(chunk_size, chunk_overlap) with the same separators
    // (LangChain's own default list has no ". "; it is passed explicitly where used).

    fn lc_defaults(size: usize, overlap: usize) -> RecursiveSplitter {
        RecursiveSplitter { size, overlap, separators: ["\n\n", "\n", " ", ""].iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn paragraphs_merge_up_to_size_inclusive() {
        // "aaaa" (4) + "\n\nbbbb" (6) = 10 is not over 10, so they merge.
        assert_eq!(lc_defaults(10, 0).split_text("aaaa\n\nbbbb\n\ncccc"), vec!["aaaa\n\nbbbb", "cccc"]);
        assert_eq!(lc_defaults(9, 0).split_text("aaaa\n\nbbbb\n\ncccc"), vec!["aaaa", "bbbb", "cccc"]);
    }

    #[test]
    fn words_with_overlap() {
        assert_eq!(lc_defaults(10, 4).split_text("one two three four five"), vec!["one two", "two three", "four five"]);
    }

    #[test]
    fn long_word_falls_to_characters() {
        assert_eq!(lc_defaults(4, 0).split_text("abcdefghij"), vec!["abcd", "efgh", "ij"]);
        assert_eq!(lc_defaults(4, 2).split_text("abcdefgh"), vec!["abcd", "cdef", "efgh"]);
        // The piece "\nefghijklmn" keeps its separator, so it is 11 characters long.
        assert_eq!(lc_defaults(8, 0).split_text("ab\ncd\nefghijklmn"), vec!["ab\ncd", "efghijk", "lmn"]);
    }

    #[test]
    fn sentence_separator_when_given() {
        assert_eq!(lc_defaults(15, 0).split_text("First. Second. Third."), vec!["First. Second.", "Third."]);
        // With ". " the pieces are "First", ". Second", ". Third." (5, 8, 8).
        assert_eq!(RecursiveSplitter::new(15, 0).split_text("First. Second. Third."), vec!["First. Second", ". Third."]);
    }

    #[test]
    fn offsets_are_exact_and_multibyte_safe() {
        let text = "  héllo wörld ünïcode  ";
        let s = lc_defaults(7, 0);
        for (a, b) in s.split_range(text, 0, text.len()) {
            assert_eq!(text[a..b].trim(), &text[a..b]);
        }
        assert_eq!(s.split_text(text), vec!["héllo", "wörld", "ünïcod", "e"]);
    }

    #[test]
    fn whitespace_only_gives_nothing() {
        assert!(RecursiveSplitter::new(10, 2).split_text(" \n\n \n").is_empty());
    }

    #[test]
    fn matches_langchain_on_generated_cases() {
        let path = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test")).join("../../tests/fixtures/langchain_recursive.json");
        let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let cases = fixture["cases"].as_array().unwrap();
        assert!(cases.len() >= 50);
        for (i, case) in cases.iter().enumerate() {
            let text = case["text"].as_str().unwrap();
            let splitter = RecursiveSplitter {
                size: case["size"].as_u64().unwrap() as usize,
                overlap: case["overlap"].as_u64().unwrap() as usize,
                separators: case["separators"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect(),
            };
            let expected: Vec<&str> = case["chunks"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
            assert_eq!(splitter.split_text(text), expected, "case {i}");
        }
    }
}
