//! How likely a given reply is: the local decoder's mean log-probability of a reply's tokens
//! after a chat prompt, computed by prefill and teacher forcing (no sampling). With the
//! passage in the prompt and the question as the reply this is the query likelihood
//! log P(question | passage) of UPR (Sachan et al. 2022): a zero-shot reranker, and a teacher
//! whose scores a smaller ranker can be distilled from.
//!
//! Each distinct prompt is prefilled once into a key/value cache (pairs sharing a prompt —
//! a passage asked several questions — start from copies of it); the replies' tokens are then fed
//! one position at a time, the sequences of a batch stepped together
//! ([`gauge_decoder::Llama::forward_batch`] reads every weight once per step), and the
//! log-softmax of each next reply token is summed. [`CallCache::likelihoods`] keeps each
//! (model, messages, reply) score, so a rerun scores nothing again.
use std::collections::HashMap;

use gauge_chat_client::Message;
use gauge_decoder::{KvCache, LanguageModel};
use serde::{Deserialize, Serialize};

use crate::cache::CallCache;
use crate::{Backend, Generator, GeneratorError};

/// Sequences stepped together (bounds the key/value memory of one batch).
pub const LIKELIHOOD_BATCH: usize = 16;

/// A reply's log-probability under a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplyLikelihood {
    /// Σ log P(token | prompt, earlier reply tokens), natural log.
    pub log_prob: f64,
    /// Reply tokens scored.
    pub tokens: usize,
}

impl ReplyLikelihood {
    /// The mean log-probability per reply token (UPR's score; −∞ for an empty reply).
    pub fn mean(&self) -> f64 {
        if self.tokens == 0 {
            f64::NEG_INFINITY
        } else {
            self.log_prob / self.tokens as f64
        }
    }
}

/// `logits[target] − log Σ exp(logits)`, in f64.
pub fn log_softmax_at(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    logits[target as usize] as f64 - max - sum.ln()
}

impl Generator {
    /// The log-probability of each `(messages, reply)` pair's reply after its chat prompt
    /// (generation prompt included), in order. Local decoder only: an endpoint does not return
    /// the probabilities of tokens it did not choose.
    pub fn reply_likelihoods(&self, items: &[(Vec<Message>, String)]) -> Result<Vec<ReplyLikelihood>, GeneratorError> {
        let Backend::Local { lm, busy, .. } = &self.backend else {
            return Err(GeneratorError::Unsupported(format!("{}: reply likelihoods need the local decoder (an endpoint does not score given tokens)", self.name)));
        };
        let mut prepared = Vec::with_capacity(items.len());
        for (messages, reply) in items {
            let prompt = Self::local_prompt(lm, messages)?;
            let reply = lm.tokenizer.encode(reply.trim(), false).map_err(|e| GeneratorError::Tokenizer(format!("tokenize: {e}")))?.get_ids().to_vec();
            prepared.push((prompt, reply));
        }
        // Pairs with the same prompt side by side (in order of first appearance), so a batch
        // prefills each prompt once; the scores go back to the callers' order.
        let mut first_seen: HashMap<&[u32], usize> = HashMap::new();
        let group: Vec<usize> = prepared.iter().enumerate().map(|(i, (p, _))| *first_seen.entry(p.as_slice()).or_insert(i)).collect();
        let mut order: Vec<usize> = (0..prepared.len()).collect();
        order.sort_by_key(|&i| (group[i], i));
        let _one_batch_at_a_time = busy.lock().expect("generator lock");
        let mut out = vec![ReplyLikelihood { log_prob: 0.0, tokens: 0 }; items.len()];
        for batch in order.chunks(LIKELIHOOD_BATCH) {
            let pairs: Vec<&(Vec<u32>, Vec<u32>)> = batch.iter().map(|&i| &prepared[i]).collect();
            for (&i, score) in batch.iter().zip(score_batch(lm, &pairs)?) {
                out[i] = score;
            }
        }
        Ok(out)
    }
}

/// Prefills each distinct prompt once (a pair whose prompt an earlier pair of the batch
/// already ran starts from a copy of that pair's cache: the same keys, values and logits),
/// then feeds the replies' tokens one step at a time (the still unfinished sequences
/// together), summing each next token's log-probability.
fn score_batch(lm: &LanguageModel, batch: &[&(Vec<u32>, Vec<u32>)]) -> Result<Vec<ReplyLikelihood>, GeneratorError> {
    let mut caches: Vec<KvCache> = Vec::with_capacity(batch.len());
    let mut out: Vec<ReplyLikelihood> = batch.iter().map(|_| ReplyLikelihood { log_prob: 0.0, tokens: 0 }).collect();
    let mut prefilled: HashMap<&[u32], (usize, Vec<f32>)> = HashMap::new();
    for (i, (prompt, reply)) in batch.iter().map(|p| (&p.0, &p.1)).enumerate() {
        if prompt.is_empty() {
            return Err(GeneratorError::Tokenizer("an empty prompt cannot be scored".into()));
        }
        let capacity = prompt.len() + reply.len();
        let shared = prefilled.get(prompt.as_slice()).and_then(|(j, logits)| Some((caches[*j].prefix(prompt.len(), capacity)?, logits.clone())));
        let logits = match shared {
            Some((cache, logits)) => {
                caches.push(cache);
                logits
            }
            None => {
                let mut cache = lm.model.new_cache_with_capacity(capacity);
                let logits = lm.model.forward(prompt, &mut cache)?;
                caches.push(cache);
                prefilled.insert(prompt.as_slice(), (i, logits.clone()));
                logits
            }
        };
        if let Some(&first) = reply.first() {
            out[i] = ReplyLikelihood { log_prob: log_softmax_at(&logits, first), tokens: 1 };
        }
    }
    let longest = batch.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
    for t in 1..longest {
        // Sequences with a token at position t: feed their token t − 1, score token t.
        let (active, mut refs): (Vec<usize>, Vec<&mut KvCache>) = caches.iter_mut().enumerate().filter(|(i, _)| batch[*i].1.len() > t).unzip();
        let tokens: Vec<u32> = active.iter().map(|&i| batch[i].1[t - 1]).collect();
        let logits = lm.model.forward_batch(&tokens, &mut refs)?;
        for (&i, l) in active.iter().zip(&logits) {
            out[i].log_prob += log_softmax_at(l, batch[i].1[t]);
            out[i].tokens += 1;
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct LikelihoodKey<'a> {
    what: &'static str,
    model: &'a str,
    messages: &'a [Message],
    reply: &'a str,
}

impl CallCache {
    /// The key of a reply's likelihood under a model ([`crate::cache::model_identity`]).
    pub fn likelihood_key(model: &str, messages: &[Message], reply: &str) -> String {
        let parts = LikelihoodKey { what: "reply_likelihood", model, messages, reply: reply.trim() };
        gauge_core::hash::bytes_hash(serde_json::to_string(&parts).expect("key parts serialise").as_bytes())
    }

    /// [`Generator::reply_likelihoods`] through the cache: the pairs scored before are read,
    /// the others scored in one call and stored.
    pub fn likelihoods(&self, generator: &Generator, model: &str, items: &[(Vec<Message>, String)]) -> Result<Vec<ReplyLikelihood>, GeneratorError> {
        let keys: Vec<String> = items.iter().map(|(m, r)| Self::likelihood_key(model, m, r)).collect();
        let mut out: Vec<Option<ReplyLikelihood>> = keys.iter().map(|k| self.get_value(k)).collect();
        let missing: Vec<usize> = (0..items.len()).filter(|&i| out[i].is_none()).collect();
        self.count(items.len() - missing.len(), missing.len());
        if !missing.is_empty() {
            let asked: Vec<(Vec<Message>, String)> = missing.iter().map(|&i| items[i].clone()).collect();
            for (&i, score) in missing.iter().zip(generator.reply_likelihoods(&asked)?) {
                self.put_value(&keys[i], &score)?;
                out[i] = Some(score);
            }
        }
        Ok(out.into_iter().map(|s| s.expect("every pair scored")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_by_hand() {
        // logits (0, ln 3): probabilities 1/4 and 3/4.
        let l = [0.0, 3f32.ln()];
        assert!((log_softmax_at(&l, 0) - 0.25f64.ln()).abs() < 1e-6);
        assert!((log_softmax_at(&l, 1) - 0.75f64.ln()).abs() < 1e-6);
        // Large logits do not overflow.
        assert!((log_softmax_at(&[1000.0, 1000.0], 1) - 0.5f64.ln()).abs() < 1e-9);
    }

    #[test]
    fn the_mean_of_an_empty_reply_is_minus_infinity() {
        assert_eq!(ReplyLikelihood { log_prob: 0.0, tokens: 0 }.mean(), f64::NEG_INFINITY);
        assert_eq!(ReplyLikelihood { log_prob: -3.0, tokens: 2 }.mean(), -1.5);
    }
}
