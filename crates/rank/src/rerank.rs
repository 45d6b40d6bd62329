//! Reranking the head of a fused list with a [`Reranker`] (cross-encoder, MaxSim…).
use serde::Serialize;

use crate::fusion::{fuse, Candidate, Fusion, Normalization, RankedList};

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
    /// A local decoder's query likelihood (UPR): the mean log-probability of the question's
    /// tokens after a prompt carrying the passage, computed by prefill and teacher forcing.
    /// `model` is a decoder (a GGUF file, a model folder or a name in the models directory).
    QueryLikelihood,
}

/// What the reranked head's order is made from: the reranker's score alone, or the reranker
/// fused with the first stage (the fused list the reranker read). The candidate's score becomes
/// the fused score, so a `cutoff` applies on that scale (an RRF score is at most 2/(k + 1)).
/// `weighted` reads the first stage's scores, so an identifier promoted to the top
/// (`promote_exact`) keeps its own score there; `rrf` reads positions and keeps the promotion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RerankFusion {
    /// The reranker's score replaces the first stage's (the score cutoff applies to it).
    #[default]
    Replace,
    /// Reciprocal rank fusion of the first-stage rank and the reranker's rank:
    /// `1/(k + rank₁) + 1/(k + rank₂)`.
    Rrf {
        /// The RRF constant.
        #[serde(default = "default_rrf_k")]
        k: f32,
    },
    /// `weight · s₂ + (1 − weight) · s₁` over the head's scores, each min-max scaled to [0, 1]
    /// (s₁ the first stage's, s₂ the reranker's).
    Weighted {
        /// The reranker's share, in [0, 1].
        #[serde(default = "default_rerank_weight")]
        weight: f32,
    },
}

fn default_rrf_k() -> f32 {
    60.0
}

fn default_rerank_weight() -> f32 {
    0.5
}

impl RerankFusion {
    /// Refuses a weight outside [0, 1] or an RRF constant that is not positive.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            RerankFusion::Rrf { k } if k.is_nan() || k <= 0.0 => Err(format!("rerank.fuse.k must be positive, got {k}")),
            RerankFusion::Weighted { weight } if !(0.0..=1.0).contains(&weight) => Err(format!("rerank.fuse.weight is a share in [0, 1], got {weight}")),
            _ => Ok(()),
        }
    }

    /// The list fusion it is ([`crate::fusion::fuse`] over the reranker's list, then the first
    /// stage's): replace is the reranker's list alone.
    fn as_fusion(&self) -> Fusion {
        match *self {
            RerankFusion::Replace => Fusion::None,
            RerankFusion::Rrf { k } => Fusion::Rrf { k },
            RerankFusion::Weighted { weight } => Fusion::Weighted { alpha: weight, normalization: Normalization::MinMax },
        }
    }
}


/// Rerank settings: the model, how many fused candidates to read and how many to keep, and
/// the text around query and passage.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RerankConfig {
    /// Cross-encoder, MaxSim or query likelihood.
    pub kind: RerankKind,
    /// Model folder or hub id (a cross-encoder; a bi-encoder for MaxSim; a decoder for query
    /// likelihood).
    pub model: String,
    /// Whether the reranker's score replaces the first stage's or is fused with it.
    #[serde(skip_serializing_if = "is_replace")]
    pub fuse: RerankFusion,
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

fn is_replace(f: &RerankFusion) -> bool {
    *f == RerankFusion::Replace
}

impl Default for RerankConfig {
    fn default() -> Self {
        RerankConfig {
            kind: RerankKind::CrossEncoder,
            model: "cross-encoder/ms-marco-MiniLM-L-6-v2".into(),
            fuse: RerankFusion::Replace,
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

/// Reranks the first `n_initial` candidates by the reranker's scores (stable for ties), or by
/// those fused with the first stage's ([`RerankFusion`]), keeps `top_n`, and makes the final
/// score the candidate's score (so the cutoff applies to it).
/// The reranker reads `instruction + query_prefix + query` and `passage_prefix + passage`.
pub fn rerank_candidates(
    query: &str,
    candidates: Vec<Candidate>,
    config: &RerankConfig,
    reranker: &dyn Reranker,
    text_of: impl Fn(&str) -> String,
) -> Result<Vec<Candidate>, String> {
    config.fuse.validate()?;
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
    // The reranker's list (ties by first-stage position) and the first stage's, fused as lists;
    // candidates are named by their zero-padded first-stage position, so fusion's last tie
    // break (the id) is that position.
    let name = |i: usize| format!("{i:08}");
    let mut order: Vec<usize> = (0..head.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut ranks = vec![0; head.len()];
    for (r, &i) in order.iter().enumerate() {
        ranks[i] = r + 1;
    }
    let reranked = RankedList { stage: reranker.name().to_string(), hits: order.iter().map(|&i| (name(i), scores[i])).collect() };
    let first = RankedList { stage: "first".into(), hits: head.iter().enumerate().map(|(i, c)| (name(i), c.score)).collect() };
    let fused = fuse(&[reranked, first], &config.fuse.as_fusion());
    let mut out = Vec::with_capacity(config.top_n.min(head.len()));
    for f in fused.iter().take(config.top_n) {
        let i: usize = f.chunk_id.parse().expect("a position");
        let mut c = std::mem::replace(&mut head[i], Candidate { chunk_id: String::new(), score: 0.0, stages: Vec::new() });
        c.stages.push(crate::fusion::StageHit { stage: reranker.name().to_string(), rank: ranks[i], score: scores[i] });
        c.score = f.score;
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
    fn fusion_keeps_the_first_stage_in_the_order() {
        // First stage a > b > c (scores 3, 2, 1); the reranker prefers c > b > a (lengths).
        let texts: HashMap<&str, &str> = [("a", "x"), ("b", "xx"), ("c", "xxxxxx")].into_iter().collect();
        let c: Vec<Candidate> = [("a", 3.0), ("b", 2.0), ("c", 1.0)].iter().map(|(id, s)| Candidate { chunk_id: id.to_string(), score: *s, stages: Vec::new() }).collect();
        let ids = |out: &[Candidate]| out.iter().map(|c| c.chunk_id.clone()).collect::<Vec<_>>();
        let run = |fuse| rerank_candidates("q", c.clone(), &RerankConfig { fuse, n_initial: 3, top_n: 3, ..RerankConfig::default() }, &LengthReranker, |id| texts[id].to_string()).unwrap();
        assert_eq!(ids(&run(RerankFusion::Replace)), ["c", "b", "a"]);
        // RRF, k 1: a 1/2 + 1/4, b 1/3 + 1/3, c 1/4 + 1/2 — a tie of a and c broken by the first stage.
        let rrf = run(RerankFusion::Rrf { k: 1.0 });
        assert_eq!(ids(&rrf), ["a", "c", "b"]);
        assert!((rrf[2].score - 2.0 / 3.0).abs() < 1e-6);
        // The stage records the reranker's own rank and score.
        assert_eq!((rrf[0].stages[0].rank, rrf[0].stages[0].score), (3, 1.0));
        // Weighted 0.75: min-max first (1, 0.5, 0), reranker (0, 0.2, 1): a 0.25, b 0.275, c 0.75.
        let w = run(RerankFusion::Weighted { weight: 0.75 });
        assert_eq!(ids(&w), ["c", "b", "a"]);
        assert!((w[1].score - 0.275).abs() < 1e-6);
        // Weight 0 is the first stage's order.
        assert_eq!(ids(&run(RerankFusion::Weighted { weight: 0.0 })), ["a", "b", "c"]);
    }

    #[test]
    fn fusion_configs_parse_with_defaults() {
        let cfg: RerankConfig = serde_json::from_str(r#"{"kind": "query_likelihood", "fuse": {"kind": "rrf"}}"#).unwrap();
        assert_eq!((cfg.kind, cfg.fuse), (RerankKind::QueryLikelihood, RerankFusion::Rrf { k: 60.0 }));
        let cfg: RerankConfig = serde_json::from_str(r#"{"fuse": {"kind": "weighted", "weight": 0.3}}"#).unwrap();
        assert_eq!(cfg.fuse, RerankFusion::Weighted { weight: 0.3 });
        assert!(serde_json::from_str::<RerankConfig>(r#"{"fuse": {"kind": "average"}}"#).is_err());
        assert!(RerankFusion::Rrf { k: 0.0 }.validate().is_err() && RerankFusion::Weighted { weight: 1.5 }.validate().is_err());
        assert!(RerankFusion::Rrf { k: 60.0 }.validate().is_ok() && RerankFusion::Weighted { weight: 1.0 }.validate().is_ok());
        // Replace is left out of the serialised config, so fingerprints of older configs hold.
        assert!(!serde_json::to_string(&RerankConfig::default()).unwrap().contains("fuse"));
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
