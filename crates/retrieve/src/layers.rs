//! Layers applied after fusion: per-document dedup, small-to-big windows, score cutoff.
use std::collections::HashMap;

use serde::Serialize;

use crate::fusion::Candidate;

/// Keeps at most `max_per_doc` candidates of each document, in order (`0` keeps all).
pub fn dedup_per_doc<'a>(candidates: Vec<Candidate>, doc_of: impl Fn(&str) -> Option<&'a str>, max_per_doc: usize) -> Vec<Candidate> {
    if max_per_doc == 0 {
        return candidates;
    }
    let mut count: HashMap<String, usize> = HashMap::new();
    candidates
        .into_iter()
        .filter(|c| {
            let doc = doc_of(&c.chunk_id).unwrap_or(c.chunk_id.as_str()).to_string();
            let n = count.entry(doc).or_default();
            *n += 1;
            *n <= max_per_doc
        })
        .collect()
}

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

/// Why nothing is returned: the best score is under the cutoff.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("refused: best score {best:?} is under the cutoff {threshold}")]
pub struct Refusal {
    /// The best final score, if there was any candidate.
    pub best: Option<f32>,
    /// The cutoff.
    pub threshold: f32,
}

/// Returns the candidates when the best final score reaches `threshold`, else a refusal,
/// so that a caller never sends noise to an LLM. `None` disables the cutoff.
pub fn apply_cutoff(candidates: Vec<Candidate>, threshold: Option<f32>) -> Result<Vec<Candidate>, Refusal> {
    let Some(threshold) = threshold else { return Ok(candidates) };
    let best = candidates.iter().map(|c| c.score).fold(None, |m: Option<f32>, s| Some(m.map_or(s, |m| m.max(s))));
    match best {
        Some(b) if b >= threshold => Ok(candidates),
        _ => Err(Refusal { best, threshold }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: &str, score: f32) -> Candidate {
        Candidate { chunk_id: id.into(), score, stages: Vec::new() }
    }

    #[test]
    fn dedup_keeps_the_first_per_document() {
        let docs: HashMap<&str, &str> = [("a1", "A"), ("a2", "A"), ("b1", "B"), ("a3", "A")].into_iter().collect();
        let c = vec![cand("a1", 4.0), cand("a2", 3.0), cand("b1", 2.0), cand("a3", 1.0)];
        let kept = dedup_per_doc(c.clone(), |id| docs.get(id).copied(), 1);
        assert_eq!(kept.iter().map(|c| c.chunk_id.as_str()).collect::<Vec<_>>(), vec!["a1", "b1"]);
        assert_eq!(dedup_per_doc(c.clone(), |id| docs.get(id).copied(), 2).len(), 3);
        assert_eq!(dedup_per_doc(c, |id| docs.get(id).copied(), 0).len(), 4);
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

    #[test]
    fn cutoff_refuses_noise() {
        let c = vec![cand("x", 0.31), cand("y", 0.2)];
        assert_eq!(apply_cutoff(c.clone(), Some(0.3)).unwrap().len(), 2);
        let refusal = apply_cutoff(c.clone(), Some(0.5)).unwrap_err();
        assert_eq!(refusal, Refusal { best: Some(0.31), threshold: 0.5 });
        assert!(refusal.to_string().contains("under the cutoff 0.5"));
        assert_eq!(apply_cutoff(Vec::new(), Some(0.1)).unwrap_err().best, None);
        assert_eq!(apply_cutoff(c, None).unwrap().len(), 2);
    }
}

/// Scores (query, passage) pairs; higher is more relevant. `gauge-rerank` implements it with
/// a cross-encoder and with late interaction (MaxSim).
pub trait Reranker: Send + Sync {
    /// Name recorded as the stage of its scores.
    fn name(&self) -> &str;
    /// One score per passage, in order.
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, String>;
}

/// Which kind of reranker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankKind {
    /// A cross-encoder reading query and passage together (a sequence-classification folder).
    #[default]
    CrossEncoder,
    /// Late interaction over a bi-encoder's token vectors: each query token's best cosine
    /// against the passage's tokens, summed (ColBERT-style MaxSim).
    MaxSim,
}

/// Rerank settings: the model, how many fused candidates to read and how many to keep, and
/// the text around query and passage.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerankConfig {
    /// Cross-encoder or MaxSim.
    pub kind: RerankKind,
    /// Model folder or hub id (a cross-encoder; a bi-encoder for MaxSim).
    pub model: String,
    /// Fused candidates passed to the reranker.
    pub n_initial: usize,
    /// Candidates kept after reranking.
    pub top_n: usize,
    /// Text put before the query (e.g. `Query: `).
    pub query_prefix: String,
    /// Text put before each passage (e.g. `Passage: `).
    pub passage_prefix: String,
    /// Instruction put before the (prefixed) query.
    pub instruction: String,
    /// Squash scores into (0, 1) with the logistic function (default: raw logits).
    pub sigmoid: bool,
    /// Maximum tokens per pair (default: the model's, at most 512).
    pub max_length: Option<usize>,
}

impl Default for RerankConfig {
    fn default() -> Self {
        RerankConfig {
            kind: RerankKind::CrossEncoder,
            model: "cross-encoder/ms-marco-MiniLM-L-6-v2".into(),
            n_initial: 25,
            top_n: 10,
            query_prefix: String::new(),
            passage_prefix: String::new(),
            instruction: String::new(),
            sigmoid: false,
            max_length: None,
        }
    }
}

/// Reranks the first `n_initial` candidates by the reranker's scores (stable for ties), keeps
/// `top_n`, and makes the rerank score the candidate's score (so the cutoff applies to it).
/// The reranker reads `instruction + query_prefix + query` and `passage_prefix + passage`.
pub fn rerank_candidates(
    query: &str,
    candidates: Vec<Candidate>,
    config: &RerankConfig,
    reranker: &dyn Reranker,
    text_of: impl Fn(&str) -> String,
) -> Result<Vec<Candidate>, String> {
    let mut head: Vec<Candidate> = candidates.into_iter().take(config.n_initial).collect();
    let texts: Vec<String> = head.iter().map(|c| format!("{}{}", config.passage_prefix, text_of(&c.chunk_id))).collect();
    let query = format!("{}{}{query}", config.instruction, config.query_prefix);
    let mut scores = reranker.score(&query, &texts.iter().map(String::as_str).collect::<Vec<_>>())?;
    if config.sigmoid {
        for s in scores.iter_mut() {
            *s = 1.0 / (1.0 + (-*s).exp());
        }
    }
    if scores.len() != head.len() {
        return Err(format!("reranker `{}` returned {} scores for {} passages", reranker.name(), scores.len(), head.len()));
    }
    let mut order: Vec<usize> = (0..head.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut out = Vec::with_capacity(config.top_n.min(head.len()));
    for (rank, &i) in order.iter().take(config.top_n).enumerate() {
        let mut c = std::mem::replace(&mut head[i], Candidate { chunk_id: String::new(), score: 0.0, stages: Vec::new() });
        c.stages.push(crate::fusion::StageHit { stage: reranker.name().to_string(), rank: rank + 1, score: scores[i] });
        c.score = scores[i];
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod rerank_tests {
    use super::*;

    struct LengthReranker;
    impl Reranker for LengthReranker {
        fn name(&self) -> &str {
            "length"
        }
        fn score(&self, _query: &str, passages: &[&str]) -> Result<Vec<f32>, String> {
            Ok(passages.iter().map(|p| p.len() as f32).collect())
        }
    }

    #[test]
    fn reranks_the_first_n_initial_and_keeps_top_n() {
        let texts: HashMap<&str, &str> = [("a", "x"), ("b", "xxxx"), ("c", "xx"), ("d", "xxxxxxxx")].into_iter().collect();
        let c: Vec<Candidate> = ["a", "b", "c", "d"].iter().map(|id| Candidate { chunk_id: id.to_string(), score: 1.0, stages: Vec::new() }).collect();
        let cfg = RerankConfig { n_initial: 3, top_n: 2, ..RerankConfig::default() };
        let out = rerank_candidates("q", c.clone(), &cfg, &LengthReranker, |id| texts[id].to_string()).unwrap();
        // d is beyond n_initial, so it cannot come back; b (4) beats c (2).
        assert_eq!(out.iter().map(|c| c.chunk_id.as_str()).collect::<Vec<_>>(), vec!["b", "c"]);
        assert_eq!(out[0].score, 4.0);
        assert_eq!(out[0].stages.last().unwrap().stage, "length");
        // The cutoff then applies to rerank scores.
        assert!(apply_cutoff(out, Some(5.0)).is_err());
        // Prefixes reach the reranker: "P: " adds 3 characters to every passage.
        let prefixed = RerankConfig { passage_prefix: "P: ".into(), ..cfg.clone() };
        let out = rerank_candidates("q", c.clone(), &prefixed, &LengthReranker, |id| texts[id].to_string()).unwrap();
        assert_eq!(out[0].score, 7.0);
        // Sigmoid squashes scores into (0, 1).
        let squashed = RerankConfig { sigmoid: true, ..cfg };
        let out = rerank_candidates("q", c, &squashed, &LengthReranker, |id| texts[id].to_string()).unwrap();
        assert!((out[0].score - 1.0 / (1.0 + (-4.0f32).exp())).abs() < 1e-6);
    }
}
