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
    /// Write each piece to stderr as it is generated (a run setting: not part of a config).
    #[serde(skip)]
    pub stream: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_new_tokens: 256, temperature: 0.0, top_k: 0, top_p: 1.0, seed: 42, stop: Vec::new(), stream: false }
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

impl LanguageModel {
    /// Generates after `prompt_ids` (a rendered chat prompt, tokenised).
    pub fn generate(&self, prompt_ids: &[u32], opts: &GenerateOptions) -> Result<Generation, DecoderError> {
        self.generate_with(prompt_ids, opts, None)
    }

    /// Generates after `prompt_ids`; with a constraint, every token is picked among those
    /// that keep the reply a valid document of its schema, and generation ends when the
    /// document is complete.
    pub fn generate_with(&self, prompt_ids: &[u32], opts: &GenerateOptions, mut constraint: Option<&mut JsonConstraint>) -> Result<Generation, DecoderError> {
        let mut rng = gauge_core::rng::SplitMix64::new(opts.seed);
        let mut cache = self.model.new_cache();
        let started = std::time::Instant::now();
        let mut logits = self.model.forward(prompt_ids, &mut cache)?;
        let prefill_seconds = started.elapsed().as_secs_f64();
        let started = std::time::Instant::now();
        let mut ids = Vec::new();
        let mut finish = "length";
        let mut text = String::new();
        while ids.len() < opts.max_new_tokens {
            if let Some(c) = constraint.as_deref_mut() {
                c.mask(&mut logits)?;
            }
            let next = pick(&logits, opts, &mut rng);
            ids.push(next);
            if let Some(c) = constraint.as_deref_mut() {
                c.advance(next)?;
            }
            if self.eos_ids.contains(&next) {
                finish = "eos";
                break;
            }
            // The text so far is only needed to stream it or to look for stop strings.
            if opts.stream || !opts.stop.is_empty() {
                let decoded = self.tokenizer.decode(&ids, true).map_err(|e| DecoderError::Model(format!("decode: {e}")))?;
                if opts.stream && decoded.len() > text.len() && decoded.is_char_boundary(text.len()) {
                    eprint!("{}", &decoded[text.len()..]);
                    let _ = std::io::stderr().flush();
                }
                text = decoded;
                if let Some(pos) = opts.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
                    text.truncate(pos);
                    finish = "stop";
                    break;
                }
            }
            if ids.len() < opts.max_new_tokens {
                logits = self.model.forward(&[next], &mut cache)?;
            }
        }
        if finish != "stop" {
            let content: Vec<u32> = ids.iter().copied().filter(|i| !self.eos_ids.contains(i)).collect();
            text = self.tokenizer.decode(&content, true).map_err(|e| DecoderError::Model(format!("decode: {e}")))?;
        }
        if opts.stream {
            eprintln!();
        }
        Ok(Generation { ids, text, prompt_tokens: prompt_ids.len(), finish_reason: finish.into(), prefill_seconds, decode_seconds: started.elapsed().as_secs_f64() })
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
