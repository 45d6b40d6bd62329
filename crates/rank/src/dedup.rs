//! Per-document (or per-page) dedup of a ranked candidate list.
use std::collections::HashMap;

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

}
