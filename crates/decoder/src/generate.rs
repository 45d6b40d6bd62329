//! Generation: greedy or seeded sampling (temperature, top-k, top-p), stopping on end-of-
//! sequence ids, stop strings or a token budget, optionally streaming text to stderr.
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::{DecoderError, JsonConstraint, LanguageModel};

/// How to generate (serde, with defaults: greedy, 256 new tokens).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GenerateOptions {
    /// New tokens at most.
    pub max_new_tokens: usize,
    /// 0: greedy; otherwise logits are divided by it before sampling.
    pub temperature: f32,
    /// Sample among the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Sample among the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Seed of sampling.
    pub seed: u64,
    /// Texts that end generation (not included in the output).
    pub stop: Vec<String>,
    /// Sequences the local decoder decodes in lock-step when a stage has several prompts
    /// (continuous batching; replies are identical at any size). 8 measured fastest per
    /// token on 2 cores (README, "generation speed"); endpoints ignore it.
    pub batch_size: usize,
    /// Write each piece to stderr as it is generated (a run setting: not part of a config).
    #[serde(skip)]
    pub stream: bool,
}

/// The default of [`GenerateOptions::batch_size`].
pub const DEFAULT_BATCH_SIZE: usize = 8;

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_new_tokens: 256, temperature: 0.0, top_k: 0, top_p: 1.0, seed: 42, stop: Vec::new(), batch_size: DEFAULT_BATCH_SIZE, stream: false }
    }
}

/// What a generation produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The new token ids (the end-of-sequence id included when it stopped generation).
    pub ids: Vec<u32>,
    /// The decoded text (cut before a stop string).
    pub text: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Why it stopped: `eos`, `stop`, `length`.
    pub finish_reason: String,
    /// Seconds spent on the prompt.
    pub prefill_seconds: f64,
    /// Seconds spent generating.
    pub decode_seconds: f64,
}

/// Picks the next token from logits.
pub fn pick(logits: &[f32], opts: &GenerateOptions, rng: &mut gauge_core::rng::SplitMix64) -> u32 {
    if opts.temperature <= 0.0 {
        return argmax(logits);
    }
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if opts.top_k > 0 {
        idx.truncate(opts.top_k);
    }
    let max = logits[idx[0]];
    let mut probs: Vec<f64> = idx.iter().map(|&i| (((logits[i] - max) / opts.temperature) as f64).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    if opts.top_p < 1.0 {
        let mut acc = 0.0;
        let keep = probs.iter().position(|p| {
            acc += p;
            acc >= opts.top_p as f64
        });
        let keep = keep.map_or(probs.len(), |k| k + 1);
        probs.truncate(keep);
        idx.truncate(keep);
    }
    let total: f64 = probs.iter().sum();
    let mut r = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    for (p, &i) in probs.iter().zip(&idx) {
        if r < *p {
            return i as u32;
        }
        r -= p;
    }
    idx[idx.len() - 1] as u32
}

/// Index of the largest logit (the first on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// One prompt of a batch: its token ids and, when the reply must be JSON of a schema, the
/// constraint that keeps it so.
pub struct BatchItem<'a> {
    /// The rendered chat prompt, tokenised.
    pub prompt_ids: &'a [u32],
    /// Constrained decoding for this prompt.
    pub constraint: Option<&'a mut JsonConstraint>,
}

/// A sequence being decoded.
struct Active<'a> {
    index: usize,
    cache: crate::KvCache,
    rng: gauge_core::rng::SplitMix64,
    ids: Vec<u32>,
    text: String,
    logits: Vec<f32>,
    constraint: Option<&'a mut JsonConstraint>,
    prompt_tokens: usize,
    prefill_seconds: f64,
    started: std::time::Instant,
}

/// What one sequence does after picking a token.
enum Next {
    /// Run this token and continue.
    Run(u32),
    /// Finished for this reason.
    Done(&'static str),
}

impl LanguageModel {
    /// Generates after `prompt_ids` (a rendered chat prompt, tokenised).
    pub fn generate(&self, prompt_ids: &[u32], opts: &GenerateOptions) -> Result<Generation, DecoderError> {
        self.generate_with(prompt_ids, opts, None)
    }

    /// Generates after `prompt_ids`; with a constraint, every token is picked among those
    /// that keep the reply a valid document of its schema, and generation ends when the
    /// document is complete.
    pub fn generate_with(&self, prompt_ids: &[u32], opts: &GenerateOptions, constraint: Option<&mut JsonConstraint>) -> Result<Generation, DecoderError> {
        self.generate_batch(vec![BatchItem { prompt_ids, constraint }], opts, 1).pop().expect("one result per item")
    }

    /// Generates a reply to each item, decoding up to `batch_size` sequences in lock-step
    /// (continuous batching: one pass over the weights serves every active sequence; a
    /// finished one leaves and the next prompt is prefilled and joins). Results come in the
    /// items' order. Each sequence samples with its own generator seeded by `opts.seed`, and
    /// its logits do not depend on its neighbours, so every reply equals what
    /// [`Self::generate_with`] gives for it alone. Streaming is honoured for a batch of 1 only.
    pub fn generate_batch<'a>(&self, items: Vec<BatchItem<'a>>, opts: &GenerateOptions, batch_size: usize) -> Vec<Result<Generation, DecoderError>> {
        self.generate_batch_observed(items, opts, batch_size, &|_| {})
    }

    /// [`Self::generate_batch`], calling `done(index)` as each item finishes (progress bars).
    pub fn generate_batch_observed<'a>(&self, items: Vec<BatchItem<'a>>, opts: &GenerateOptions, batch_size: usize, done: &dyn Fn(usize)) -> Vec<Result<Generation, DecoderError>> {
        let n = items.len();
        let batch_size = batch_size.max(1);
        let stream = opts.stream && batch_size == 1;
        let mut results: Vec<Option<Result<Generation, DecoderError>>> = (0..n).map(|_| None).collect();
        let mut queue = items.into_iter().enumerate();
        let mut active: Vec<Active<'a>> = Vec::with_capacity(batch_size);
        loop {
            while active.len() < batch_size {
                let Some((index, item)) = queue.next() else { break };
                match self.prefill(index, item, opts) {
                    Ok(a) => active.push(a),
                    Err(e) => {
                        results[index] = Some(Err(e));
                        done(index);
                    }
                }
            }
            if active.is_empty() {
                break;
            }
            // Each sequence picks its next token; finished ones leave.
            let mut tokens = Vec::with_capacity(active.len());
            let mut still = Vec::with_capacity(active.len());
            for mut a in active.drain(..) {
                match self.pick_next(&mut a, opts, stream) {
                    Ok(Next::Run(t)) => {
                        tokens.push(t);
                        still.push(a);
                    }
                    Ok(Next::Done(reason)) => {
                        let index = a.index;
                        results[index] = Some(self.finish(a, reason, stream));
                        done(index);
                    }
                    Err(e) => {
                        results[a.index] = Some(Err(e));
                        done(a.index);
                    }
                }
            }
            active = still;
            if active.is_empty() {
                continue;
            }
            let mut caches: Vec<&mut crate::KvCache> = active.iter_mut().map(|a| &mut a.cache).collect();
            match self.model.forward_batch(&tokens, &mut caches) {
                Ok(logits) => active.iter_mut().zip(logits).for_each(|(a, l)| a.logits = l),
                Err(e) => {
                    let message = e.to_string();
                    for a in active.drain(..) {
                        results[a.index] = Some(Err(DecoderError::Model(message.clone())));
                        done(a.index);
                    }
                }
            }
        }
        results.into_iter().map(|r| r.expect("every item finishes")).collect()
    }

    fn prefill<'a>(&self, index: usize, item: BatchItem<'a>, opts: &GenerateOptions) -> Result<Active<'a>, DecoderError> {
        let mut cache = self.model.new_cache_with_capacity(item.prompt_ids.len() + opts.max_new_tokens);
        let started = std::time::Instant::now();
        let logits = self.model.forward(item.prompt_ids, &mut cache)?;
        let prefill_seconds = started.elapsed().as_secs_f64();
        Ok(Active {
            index,
            cache,
            rng: gauge_core::rng::SplitMix64::new(opts.seed),
            ids: Vec::new(),
            text: String::new(),
            logits,
            constraint: item.constraint,
            prompt_tokens: item.prompt_ids.len(),
            prefill_seconds,
            started: std::time::Instant::now(),
        })
    }

    fn pick_next(&self, a: &mut Active<'_>, opts: &GenerateOptions, stream: bool) -> Result<Next, DecoderError> {
        if a.ids.len() >= opts.max_new_tokens {
            return Ok(Next::Done("length"));
        }
        if let Some(c) = a.constraint.as_deref_mut() {
            c.mask(&mut a.logits)?;
        }
        let next = pick(&a.logits, opts, &mut a.rng);
        a.ids.push(next);
        if let Some(c) = a.constraint.as_deref_mut() {
            c.advance(next)?;
        }
        if self.eos_ids.contains(&next) {
            return Ok(Next::Done("eos"));
        }
        // The text so far is only needed to stream it or to look for stop strings.
        if stream || !opts.stop.is_empty() {
            let decoded = self.tokenizer.decode(&a.ids, true).map_err(|e| DecoderError::Model(format!("decode: {e}")))?;
            if stream && decoded.len() > a.text.len() && decoded.is_char_boundary(a.text.len()) {
                eprint!("{}", &decoded[a.text.len()..]);
                let _ = std::io::stderr().flush();
            }
            a.text = decoded;
            if let Some(pos) = opts.stop.iter().filter_map(|s| a.text.find(s.as_str())).min() {
                a.text.truncate(pos);
                return Ok(Next::Done("stop"));
            }
        }
        if a.ids.len() >= opts.max_new_tokens {
            return Ok(Next::Done("length"));
        }
        Ok(Next::Run(next))
    }

    fn finish(&self, a: Active<'_>, reason: &'static str, stream: bool) -> Result<Generation, DecoderError> {
        let mut text = a.text;
        if reason != "stop" {
            let content: Vec<u32> = a.ids.iter().copied().filter(|i| !self.eos_ids.contains(i)).collect();
            text = self.tokenizer.decode(&content, true).map_err(|e| DecoderError::Model(format!("decode: {e}")))?;
        }
        if stream {
            eprintln!();
        }
        Ok(Generation { ids: a.ids, text, prompt_tokens: a.prompt_tokens, finish_reason: reason.into(), prefill_seconds: a.prefill_seconds, decode_seconds: a.started.elapsed().as_secs_f64() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_and_seeded_sampling() {
        let logits = [0.1, 2.0, 1.9, -1.0];
        let greedy = GenerateOptions::default();
        let mut rng = gauge_core::rng::SplitMix64::new(1);
        assert_eq!(pick(&logits, &greedy, &mut rng), 1);
        let sample = GenerateOptions { temperature: 1.0, top_k: 2, ..Default::default() };
        let draws: Vec<u32> = (0..200).map(|_| pick(&logits, &sample, &mut rng)).collect();
        assert!(draws.iter().all(|&d| d == 1 || d == 2) && draws.contains(&1) && draws.contains(&2));
        let again: Vec<u32> = {
            let mut r = gauge_core::rng::SplitMix64::new(1);
            pick(&logits, &greedy, &mut r);
            (0..200).map(|_| pick(&logits, &sample, &mut r)).collect()
        };
        assert_eq!(draws, again, "a seed fixes the draws");
        let nucleus = GenerateOptions { temperature: 1.0, top_p: 0.3, ..Default::default() };
        assert!((0..50).all(|_| pick(&logits, &nucleus, &mut rng) == 1));
    }
}
