//! Rerankers behind the engine's rerank stage ([`gauge_rank::Reranker`]).
//!
//! - [`CrossEncoderReranker`]: a cross-encoder folder (`BertForSequenceClassification`, e.g.
//!   cross-encoder/ms-marco-MiniLM-L-6-v2) reading `[CLS] query [SEP] passage [SEP]`; one raw
//!   logit per passage.
//! - [`MaxSimReranker`]: late interaction with a bi-encoder's token vectors (the embedding
//!   model we already have): for each query token its best cosine against the passage's
//!   tokens, summed, ColBERT-style. No extra weights.
//! - [`QueryLikelihoodReranker`]: a local decoder's query likelihood (UPR): the mean
//!   log-probability of the query's tokens after a prompt carrying the passage. Zero-shot, and
//!   cached per (model, passage, query) in the model-call cache.
#![deny(missing_docs)]
pub mod likelihood;

use std::sync::Arc;

use gauge_encoder::{CrossEncoder, CrossEncoderOptions, Embedder, EmbedderOptions};
use gauge_generator::cache::CallCache;
use gauge_rank::{RerankConfig, RerankKind, Reranker};

pub use likelihood::QueryLikelihoodReranker;

/// A cross-encoder as a reranker.
pub struct CrossEncoderReranker {
    model: CrossEncoder,
}

impl CrossEncoderReranker {
    /// Wraps a loaded cross-encoder.
    pub fn new(model: CrossEncoder) -> Self {
        CrossEncoderReranker { model }
    }
    /// The model.
    pub fn model(&self) -> &CrossEncoder {
        &self.model
    }
}

impl Reranker for CrossEncoderReranker {
    fn name(&self) -> &str {
        "rerank"
    }
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, String> {
        self.model.score(query, passages).map_err(|e| e.to_string())
    }
}

/// Late-interaction (MaxSim) reranking with a bi-encoder.
pub struct MaxSimReranker {
    embedder: Embedder,
}

impl MaxSimReranker {
    /// Wraps a loaded bi-encoder (its query/passage prefixes apply).
    pub fn new(embedder: Embedder) -> Self {
        MaxSimReranker { embedder }
    }
}

/// `Σ_i max_j q_i · p_j` over L2-normalised token vectors (`[n × h]` row-major each).
pub fn max_sim(query: &[f32], passage: &[f32], h: usize) -> f32 {
    if passage.is_empty() {
        return 0.0;
    }
    query
        .chunks_exact(h)
        .map(|q| passage.chunks_exact(h).map(|p| q.iter().zip(p).map(|(a, b)| a * b).sum::<f32>()).fold(f32::NEG_INFINITY, f32::max))
        .sum()
}

impl Reranker for MaxSimReranker {
    fn name(&self) -> &str {
        "maxsim"
    }
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, String> {
        let info = &self.embedder.info;
        let q = format!("{}{query}", info.query_prefix);
        let texts: Vec<String> = passages.iter().map(|p| format!("{}{p}", info.passage_prefix)).collect();
        let mut all: Vec<&str> = vec![q.as_str()];
        all.extend(texts.iter().map(String::as_str));
        let vectors = self.embedder.token_vectors(&all).map_err(|e| e.to_string())?;
        let h = info.dimension;
        Ok(vectors[1..].iter().map(|(p, _)| max_sim(&vectors[0].0, p, h)).collect())
    }
}

/// What a rerank config's model is: the BLAKE3 of its weights, or why it cannot be used
/// (for fingerprints, and to skip configs whose model is not on this machine).
pub fn reranker_identity(cfg: &RerankConfig) -> Result<String, String> {
    if cfg.kind == RerankKind::QueryLikelihood {
        return likelihood::decoder_identity(&cfg.model).map_err(|e| e.to_string());
    }
    let source = resolve_reranker(cfg).map_err(|e| e.to_string())?;
    gauge_core::hash::file_hash(&source.dir.join("model.safetensors")).map_err(|e| e.to_string())
}

/// The model folder of a rerank config: `model`, or `fallback` when `model` does not resolve
/// (and the fallback does); the error names `model`.
pub fn resolve_reranker(cfg: &RerankConfig) -> Result<gauge_encoder::ModelSource, gauge_core::models::ModelNotFound> {
    match gauge_encoder::resolve_model(&cfg.model) {
        Ok(s) => Ok(s),
        Err(e) => match cfg.fallback.as_deref().map(gauge_encoder::resolve_model) {
            Some(Ok(s)) => Ok(s),
            _ => Err(e),
        },
    }
}

/// Loads the reranker a config describes (`device`: `cpu`, …), from [`resolve_reranker`]'s
/// folder (a query-likelihood reranker: the decoder `model` names, its scores kept in `calls`
/// when given).
pub fn load_reranker(cfg: &RerankConfig, device: &str, calls: Option<Arc<CallCache>>) -> anyhow::Result<Box<dyn Reranker>> {
    match cfg.kind {
        RerankKind::QueryLikelihood => Ok(Box::new(QueryLikelihoodReranker::load(&cfg.model, cfg.max_length, device, calls)?)),
        RerankKind::CrossEncoder => {
            let source = resolve_reranker(cfg)?;
            let options = CrossEncoderOptions { max_length: cfg.max_length, ..Default::default() };
            let model = CrossEncoder::load(&source, &options, &gauge_encoder::device::parse(device)?)?;
            Ok(Box::new(CrossEncoderReranker::new(model)))
        }
        RerankKind::MaxSim => {
            let source = resolve_reranker(cfg)?;
            // The batch budget `embed` uses, so token vectors are computed alike.
            let options = EmbedderOptions { max_length: cfg.max_length, token_budget: Some(2048), ..Default::default() };
            let embedder = Embedder::load(&source, &options, &gauge_encoder::device::parse(device)?)?;
            Ok(Box::new(MaxSimReranker::new(embedder)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_falls_back_only_when_the_fallback_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let there = dir.path().display().to_string();
        let cfg = RerankConfig { model: "no-such/cross-encoder".into(), fallback: Some(there.clone()), ..Default::default() };
        assert_eq!(resolve_reranker(&cfg).unwrap().dir, dir.path());
        let present = RerankConfig { model: there.clone(), fallback: Some("no-such/other".into()), ..Default::default() };
        assert_eq!(resolve_reranker(&present).unwrap().dir, dir.path());
        let neither = RerankConfig { fallback: Some("no-such/other".into()), ..cfg.clone() };
        let err = resolve_reranker(&neither).unwrap_err().to_string();
        assert!(err.contains("no-such/cross-encoder"), "{err}");
    }

    #[test]
    fn max_sim_by_hand() {
        // Query tokens e1, e2; passage tokens e1, (e1+e2)/√2.
        let r = std::f32::consts::FRAC_1_SQRT_2;
        let q = [1.0, 0.0, 0.0, 1.0];
        let p = [1.0, 0.0, r, r];
        // e1 → best 1 (itself); e2 → best r.
        assert!((max_sim(&q, &p, 2) - (1.0 + r)).abs() < 1e-6);
        assert_eq!(max_sim(&q, &[], 2), 0.0);
    }
}
