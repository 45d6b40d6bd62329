//! Reranking the head of a fused list with a [`Reranker`] (cross-encoder, MaxSim…).
use serde::Serialize;

use crate::fusion::Candidate;

/// Scores (query, passage) pairs; higher is more relevant. `gauge-rerank` implements it with
/// a cross-encoder and with late interaction (MaxSim).
pub trait Reranker: Send + Sync {
    /// Name recorded as the stage of its scores.
    fn name(&self) -> &str;
    /// One score per passage, in order.
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, String>;
}

/// Which kind of reranker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RerankKind {
    /// A cross-encoder reading query and passage together (a sequence-classification folder).
    #[default]
    CrossEncoder,
    /// Late interaction over a bi-encoder's token vectors: each query token's best cosine
    /// against the passage's tokens, summed (ColBERT-style MaxSim).
    #[serde(alias = "maxsim")]
    MaxSim,
}

/// Rerank settings: the model, how many fused candidates to read and how many to keep, and
/// the text around query and passage.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
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
    /// A model used instead when `model` does not resolve (e.g. the cross-encoder `just
    /// train-retrievers` trains, where no published one can be downloaded); `evaluate` says
    /// which one each config used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
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
            fallback: None,
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
mod tests {
    use super::*;
    use std::collections::HashMap;
    use crate::cutoff::apply_cutoff;

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
