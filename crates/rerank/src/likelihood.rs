//! Query likelihood as a reranker (UPR, Sachan et al. 2022): [`QueryLikelihood`] — a local
//! decoder scored on the query as its reply to a prompt carrying the passage — behind the
//! engine's [`Reranker`]. No training; each (model, passage, query) score is kept in the
//! model-call cache, so an evaluation reruns without the model.
use std::sync::Arc;

use gauge_generator::cache::CallCache;
pub use gauge_generator::query_likelihood::{decoder_identity, QueryLikelihood, DEFAULT_PASSAGE_TOKENS, NULL_PROMPT, PROMPT};
use gauge_rank::Reranker;

/// A local decoder scoring log P(query | passage).
pub struct QueryLikelihoodReranker {
    scorer: QueryLikelihood,
}

impl QueryLikelihoodReranker {
    /// Loads the decoder `model` (see [`QueryLikelihood::load`]).
    pub fn load(model: &str, max_length: Option<usize>, device: &str, calls: Option<Arc<CallCache>>) -> anyhow::Result<QueryLikelihoodReranker> {
        Ok(QueryLikelihoodReranker { scorer: QueryLikelihood::load(model, max_length, device, calls)? })
    }

    /// The scorer.
    pub fn scorer(&self) -> &QueryLikelihood {
        &self.scorer
    }
}

impl Reranker for QueryLikelihoodReranker {
    fn name(&self) -> &str {
        "query_likelihood"
    }
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, String> {
        self.scorer.likelihoods(query, passages).map(|s| s.into_iter().map(|x| x as f32).collect()).map_err(|e| e.to_string())
    }
}
