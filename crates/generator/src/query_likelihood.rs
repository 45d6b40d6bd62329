//! Query likelihood (UPR, Sachan et al. 2022): a local decoder reads a prompt carrying the
//! passage and is scored on the query as its reply — the mean log-probability of the query's
//! tokens ([`crate::likelihood`]). The decoder's own knowledge of what a passage is asked
//! about ranks passages (`gauge-rerank`'s `query_likelihood` reranker), filters generated
//! questions (`synth-data --mode likelihood`) and teaches a smaller ranker (`train-lora`'s
//! `retriever.teacher`). Each (model, passage, query) score is kept in the model-call cache.
use std::sync::Arc;

use gauge_chat_client::{Message, RetryPolicy};

use crate::cache::{model_identity, CallCache};
use crate::{Generator, GeneratorConfig, GeneratorError};

/// The prompt's wording (UPR's): the passage, then the request the query is scored as the reply to.
pub const PROMPT: &str = "Passage: {passage}\n\nPlease write a question based on this passage.";

/// The same request without a passage: how likely a question is on its own (the baseline
/// of a likelihood gain).
pub const NULL_PROMPT: &str = "Please write a question.";

/// Passage tokens kept when the config sets no `max_length`.
pub const DEFAULT_PASSAGE_TOKENS: usize = 512;

/// The identity of a decoder for cache keys and fingerprints (its file's hash).
pub fn decoder_identity(model: &str) -> Result<String, GeneratorError> {
    model_identity(&GeneratorConfig::Local { model: model.to_string(), adapter: None })
}

/// A local decoder scoring log P(query | passage).
pub struct QueryLikelihood {
    generator: Generator,
    identity: String,
    passage_tokens: usize,
    calls: Option<Arc<CallCache>>,
}

impl QueryLikelihood {
    /// Loads the decoder `model` (a GGUF file, a model folder or a name in the models
    /// directory) on `device`; passages are cut to `max_length` tokens (default
    /// [`DEFAULT_PASSAGE_TOKENS`]); scores are kept in `calls` when given.
    pub fn load(model: &str, max_length: Option<usize>, device: &str, calls: Option<Arc<CallCache>>) -> Result<QueryLikelihood, GeneratorError> {
        let config = GeneratorConfig::Local { model: model.to_string(), adapter: None };
        let not_a_decoder = |e: GeneratorError| GeneratorError::ModelFile(format!("`{model}`: {e} (query likelihood needs a local decoder with a chat template, e.g. {})", crate::default_model()));
        let identity = model_identity(&config).map_err(not_a_decoder)?;
        let generator = Generator::open(&config, device, RetryPolicy::default()).map_err(not_a_decoder)?;
        Ok(QueryLikelihood { generator, identity, passage_tokens: max_length.unwrap_or(DEFAULT_PASSAGE_TOKENS).max(1), calls })
    }

    /// The passage cut to its first `passage_tokens` tokens.
    fn cut(&self, passage: &str) -> String {
        let Some(lm) = self.generator.local_model() else { return passage.to_string() };
        match lm.tokenizer.encode(passage, false) {
            Ok(enc) if enc.len() > self.passage_tokens => {
                // The start of the first token left out (a byte offset; a byte-level token may
                // begin inside a character).
                let mut end = enc.get_offsets()[self.passage_tokens].0.min(passage.len());
                while !passage.is_char_boundary(end) {
                    end -= 1;
                }
                passage[..end].to_string()
            }
            _ => passage.to_string(),
        }
    }

    /// The chat whose reply the query is scored as ([`NULL_PROMPT`] for an empty passage).
    pub fn messages(&self, passage: &str) -> Vec<Message> {
        let passage = self.cut(passage);
        match passage.trim() {
            "" => vec![Message::new("user", NULL_PROMPT)],
            p => vec![Message::new("user", &PROMPT.replace("{passage}", p))],
        }
    }

    /// Mean log-probability of `query` after each passage's prompt.
    pub fn likelihoods(&self, query: &str, passages: &[&str]) -> Result<Vec<f64>, GeneratorError> {
        self.pair_likelihoods(&passages.iter().map(|p| (*p, query)).collect::<Vec<_>>())
    }

    /// Mean log-probability of each `(passage, query)` pair's query after its passage's prompt
    /// (an empty passage: after [`NULL_PROMPT`]).
    pub fn pair_likelihoods(&self, pairs: &[(&str, &str)]) -> Result<Vec<f64>, GeneratorError> {
        let items: Vec<(Vec<Message>, String)> = pairs.iter().map(|(p, q)| (self.messages(p), q.to_string())).collect();
        let scores = match &self.calls {
            Some(c) => c.likelihoods(&self.generator, &self.identity, &items)?,
            None => self.generator.reply_likelihoods(&items)?,
        };
        Ok(scores.iter().map(|s| s.mean()).collect())
    }
}
