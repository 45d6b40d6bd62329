//! Small-to-big: each hit widened to its neighbouring chunks, overlapping windows merged.
use serde::Serialize;

use crate::fusion::Candidate;

/// Where a chunk sits: its document and its `chunk_index` there.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkPosition {
    /// Document id.
    pub doc_id: String,
    /// 0-based index in the document.
    pub index: usize,
}

/// A run of neighbouring chunks of one document around one or more hits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Document id.
    pub doc_id: String,
    /// First chunk index.
    pub first: usize,
    /// Last chunk index (inclusive).
    pub last: usize,
    /// The chunks, in document order.
    pub chunk_ids: Vec<String>,
    /// The hits it was built around, best first.
    pub hits: Vec<String>,
    /// The best hit's score.
    pub score: f32,
}

/// Replaces each hit by the window of `w` chunks on each side of it in its document,
/// merging windows of the same document that overlap or touch. Windows keep the order of
/// their best hit. `position` locates a chunk; `doc_chunks` lists a document's chunk ids
/// by index.
pub fn small_to_big(
    hits: &[Candidate],
    w: usize,
    position: impl Fn(&str) -> Option<ChunkPosition>,
    doc_chunks: impl Fn(&str) -> Option<Vec<String>>,
) -> Vec<Window> {
    let mut windows: Vec<Window> = Vec::new();
    for hit in hits {
        let Some(pos) = position(&hit.chunk_id) else { continue };
        let Some(chunks) = doc_chunks(&pos.doc_id) else { continue };
        let first = pos.index.saturating_sub(w);
        let last = (pos.index + w).min(chunks.len().saturating_sub(1));
        // Merge with every earlier window of the same document it overlaps or touches.
        let mut merged = Window { doc_id: pos.doc_id.clone(), first, last, chunk_ids: Vec::new(), hits: vec![hit.chunk_id.clone()], score: hit.score };
        let mut keep_at: Option<usize> = None;
        let mut i = 0;
        while i < windows.len() {
            let other = &windows[i];
            if other.doc_id == merged.doc_id && other.first <= merged.last + 1 && merged.first <= other.last + 1 {
                let other = windows.remove(i);
                merged.first = merged.first.min(other.first);
                merged.last = merged.last.max(other.last);
                let mut hits = other.hits;
                hits.extend(merged.hits);
                merged.hits = hits;
                merged.score = merged.score.max(other.score);
                keep_at = Some(keep_at.map_or(i, |k: usize| k.min(i)));
            } else {
                i += 1;
            }
        }
        merged.chunk_ids = chunks[merged.first..=merged.last].to_vec();
        match keep_at {
            Some(k) => windows.insert(k, merged),
            None => windows.push(merged),
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: &str, score: f32) -> Candidate {
        Candidate { chunk_id: id.into(), score, stages: Vec::new() }
    }

    #[test]
    fn small_to_big_builds_and_merges_windows() {
        // Document A has chunks A0..A9, B has B0..B2.
        let doc = |d: &str, n: usize| (0..n).map(|i| format!("{d}{i}")).collect::<Vec<_>>();
        let position = |id: &str| Some(ChunkPosition { doc_id: id[..1].to_string(), index: id[1..].parse().unwrap() });
        let chunks = |d: &str| Some(doc(d, if d == "A" { 10 } else { 3 }));
        // Hits: A5 (best), B0, A7 (window 6..8 touches 4..6 → merged into 4..8), A0.
        let hits = vec![cand("A5", 0.9), cand("B0", 0.8), cand("A7", 0.7), cand("A0", 0.6)];
        let windows = small_to_big(&hits, 1, position, chunks);
        assert_eq!(windows.len(), 3);
        assert_eq!((windows[0].doc_id.as_str(), windows[0].first, windows[0].last), ("A", 4, 8));
        assert_eq!(windows[0].hits, vec!["A5", "A7"]);
        assert_eq!(windows[0].chunk_ids, doc("A", 9)[4..].to_vec());
        assert_eq!(windows[0].score, 0.9);
        assert_eq!((windows[1].doc_id.as_str(), windows[1].first, windows[1].last), ("B", 0, 1));
        assert_eq!((windows[2].first, windows[2].last), (0, 1));
        // w = 0 gives the hits themselves.
        assert_eq!(small_to_big(&hits, 0, position, chunks).len(), 4);
    }

}
