//! Generation: greedy or seeded sampling (temperature, top-k, top-p, min-p) after the
//! repetition controls of [`crate::sampling`], stopping on end-of-sequence ids, stop strings,
//! a loop or a token budget, optionally streaming text to stderr.
use std::io::Write;
use std::sync::Arc;


use crate::sampling::{self, Dry, LoopDetector};
use crate::{DecoderError, LanguageModel, TokenConstraint};

pub use gauge_chat::{GenerateOptions, DEFAULT_BATCH_SIZE};

/// Applies the repetition controls of `opts` to `logits` (in this order: repetition
/// penalty, frequency and presence, DRY, n-gram bans), for `sequence` = the prompt followed
/// by the `generated` tokens so far. An n-gram ban that would leave no token possible (under
/// a JSON constraint) is skipped.
pub fn apply_penalties(logits: &mut [f32], sequence: &[u32], generated: usize, opts: &GenerateOptions, dry: Option<&Dry>) {
    let window = match opts.repeat_last_n {
        n if n < 0 => sequence,
        n => &sequence[sequence.len().saturating_sub(n as usize)..],
    };
    sampling::repetition_penalty(logits, window, opts.repetition_penalty);
    sampling::frequency_presence_penalty(logits, &sequence[sequence.len() - generated..], opts.frequency_penalty, opts.presence_penalty);
    if let Some(d) = dry {
        d.apply(logits, sequence);
    }
    let bans = sampling::no_repeat_ngram_bans(sequence, opts.no_repeat_ngram_size);
    if !bans.is_empty() && logits.iter().enumerate().any(|(i, l)| *l > f32::NEG_INFINITY && bans.binary_search(&(i as u32)).is_err()) {
        for b in bans {
            if let Some(l) = logits.get_mut(b as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
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
    /// Why it stopped: `eos`, `stop`, `loop`, `length`.
    pub finish_reason: String,
    /// Seconds spent on the prompt.
    pub prefill_seconds: f64,
    /// Seconds spent generating.
    pub decode_seconds: f64,
}

/// Picks the next token from logits: the best (temperature 0), or a draw among the top-k,
/// min-p (on the logits as given) and top-p (at the temperature) survivors.
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
    // min-p after top-p, as llama.cpp's chain.
    let keep = sampling::min_p_keep(logits, &idx, opts.min_p);
    probs.truncate(keep);
    idx.truncate(keep);
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

/// One prompt of a batch: its token ids and, when the reply is constrained (JSON of a schema,
/// citations of the passages given), the constraint that keeps it so.
pub struct BatchItem<'a> {
    /// The rendered chat prompt, tokenised.
    pub prompt_ids: &'a [u32],
    /// Constrained decoding for this prompt.
    pub constraint: Option<&'a mut (dyn TokenConstraint + 'static)>,
}

/// A sequence being decoded.
struct Active<'a> {
    index: usize,
    cache: crate::KvCache,
    rng: gauge_core::rng::SplitMix64,
    /// The prompt followed by the tokens generated so far (from `prompt_tokens` on).
    sequence: Vec<u32>,
    loops: LoopDetector,
    /// Tokens of `ids` the reply keeps (a loop's extra copies cut).
    keep: Option<usize>,
    text: String,
    logits: Vec<f32>,
    constraint: Option<&'a mut (dyn TokenConstraint + 'static)>,
    prompt_tokens: usize,
    prefill_seconds: f64,
    started: std::time::Instant,
}

impl Active<'_> {
    /// The tokens generated so far.
    fn generated(&self) -> &[u32] {
        &self.sequence[self.prompt_tokens..]
    }
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
    pub fn generate_with(&self, prompt_ids: &[u32], opts: &GenerateOptions, constraint: Option<&mut (dyn TokenConstraint + 'static)>) -> Result<Generation, DecoderError> {
        self.generate_batch(vec![BatchItem { prompt_ids, constraint }], opts, 1).pop().expect("one result per item")
    }

    /// Generates a reply to each item, decoding up to `batch_size` sequences in lock-step
    /// (continuous batching: one pass over the weights serves every active sequence; a
    /// finished one leaves and the next prompt is prefilled and joins). Results come in the
    /// items' order. Each sequence samples with its own generator seeded by `opts.seed`, and
    /// its logits do not depend on its neighbours, so every reply equals what
    /// [`Self::generate_with`] gives for it alone. Streaming is honoured for a batch of 1 only.
    pub fn generate_batch<'a>(&self, items: Vec<BatchItem<'a>>, opts: &GenerateOptions, batch_size: usize) -> Vec<Result<Generation, DecoderError>> {
        self.generate_batch_observed(items, opts, batch_size, &|_, _| {})
    }

    /// [`Self::generate_batch`], calling `done(index, result)` as each item finishes (progress
    /// bars; journals that keep each reply before the batch ends).
    pub fn generate_batch_observed<'a>(&self, items: Vec<BatchItem<'a>>, opts: &GenerateOptions, batch_size: usize, done: &dyn Fn(usize, &Result<Generation, DecoderError>)) -> Vec<Result<Generation, DecoderError>> {
        let n = items.len();
        if let Err(e) = opts.validate() {
            let message = e.to_string();
            return (0..n)
                .map(|i| {
                    let r = Err(DecoderError::Model(message.clone()));
                    done(i, &r);
                    r
                })
                .collect();
        }
        let dry = self.dry(opts);
        let dry = dry.as_deref();
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
                        let r = Err(e);
                        done(index, &r);
                        results[index] = Some(r);
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
                match self.pick_next(&mut a, opts, dry, stream) {
                    Ok(Next::Run(t)) => {
                        tokens.push(t);
                        still.push(a);
                    }
                    Ok(Next::Done(reason)) => {
                        let index = a.index;
                        let r = self.finish(a, reason, stream);
                        done(index, &r);
                        results[index] = Some(r);
                    }
                    Err(e) => {
                        let r = Err(e);
                        done(a.index, &r);
                        results[a.index] = Some(r);
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
                        let r = Err(DecoderError::Model(message.clone()));
                        done(a.index, &r);
                        results[a.index] = Some(r);
                    }
                }
            }
        }
        let kept = self.prefix_cache.lock().expect("prefix cache lock");
        if kept.reused_tokens > 0 {
            tracing::debug!("prefix cache: {} of {} prompt tokens reused so far", kept.reused_tokens, kept.prompt_tokens);
        }
        drop(kept);
        results.into_iter().map(|r| r.expect("every item finishes")).collect()
    }

    fn prefill<'a>(&self, index: usize, item: BatchItem<'a>, opts: &GenerateOptions) -> Result<Active<'a>, DecoderError> {
        let ids = item.prompt_ids;
        let capacity = ids.len() + opts.max_new_tokens;
        let started = std::time::Instant::now();
        // The longest kept prompt this one begins with ([`crate::prefix`]), else an empty cache.
        let reused = self.prefix_cache.lock().expect("prefix cache lock").lookup(ids).and_then(|(n, c)| Some((n, c.prefix(n, capacity)?)));
        let (start, mut cache) = reused.unwrap_or_else(|| (0, self.model.new_cache_with_capacity(capacity)));
        let logits = self.model.forward(&ids[start..], &mut cache)?;
        {
            let mut kept = self.prefix_cache.lock().expect("prefix cache lock");
            if kept.enabled() {
                kept.store(ids, &cache);
            }
        }
        let prefill_seconds = started.elapsed().as_secs_f64();
        Ok(Active {
            index,
            cache,
            rng: gauge_core::rng::SplitMix64::new(opts.seed),
            sequence: item.prompt_ids.to_vec(),
            loops: LoopDetector::default(),
            keep: None,
            text: String::new(),
            logits,
            constraint: item.constraint,
            prompt_tokens: item.prompt_ids.len(),
            prefill_seconds,
            started: std::time::Instant::now(),
        })
    }

    /// DRY resolved for this model's vocabulary (prepared once per breaker list and
    /// settings), when `opts` turns it on.
    fn dry(&self, opts: &GenerateOptions) -> Option<Arc<Dry>> {
        let settings = opts.dry();
        if !settings.enabled() {
            return None;
        }
        let mut cache = self.dry_cache.lock().expect("dry cache lock");
        if let Some((breakers, d)) = cache.as_ref() {
            if *breakers == opts.dry_sequence_breakers && *d.settings() == settings {
                return Some(d.clone());
            }
        }
        let texts = sampling::token_texts(&self.tokenizer);
        let tokenize = |s: &str| self.tokenizer.encode(s, false).map(|e| e.get_ids().to_vec()).unwrap_or_default();
        let d = Arc::new(Dry::new(settings, &opts.dry_sequence_breakers, &texts, &tokenize));
        *cache = Some((opts.dry_sequence_breakers.clone(), d.clone()));
        Some(d)
    }

    fn pick_next(&self, a: &mut Active<'_>, opts: &GenerateOptions, dry: Option<&Dry>, stream: bool) -> Result<Next, DecoderError> {
        if a.generated().len() >= opts.max_new_tokens {
            return Ok(Next::Done("length"));
        }
        if let Some(c) = a.constraint.as_deref_mut() {
            c.mask(&mut a.logits)?;
        }
        apply_penalties(&mut a.logits, &a.sequence, a.sequence.len() - a.prompt_tokens, opts, dry);
        let next = pick(&a.logits, opts, &mut a.rng);
        a.sequence.push(next);
        if let Some(c) = a.constraint.as_deref_mut() {
            c.advance(next)?;
        }
        if self.eos_ids.contains(&next) {
            return Ok(Next::Done("eos"));
        }
        // The text so far is only needed to stream it or to look for stop strings.
        if stream || !opts.stop.is_empty() {
            let decoded = self.tokenizer.decode(a.generated(), true).map_err(|e| DecoderError::Model(format!("decode: {e}")))?;
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
        let loop_stop = opts.local_loop_stop();
        if loop_stop.enabled() {
            if let Some(keep) = a.loops.observe(&a.sequence[a.prompt_tokens..], &loop_stop) {
                a.keep = Some(keep);
                return Ok(Next::Done("loop"));
            }
        }
        if a.generated().len() >= opts.max_new_tokens {
            return Ok(Next::Done("length"));
        }
        Ok(Next::Run(next))
    }

    fn finish(&self, mut a: Active<'_>, reason: &'static str, stream: bool) -> Result<Generation, DecoderError> {
        let mut text = std::mem::take(&mut a.text);
        if reason != "stop" {
            let generated = a.generated();
            let kept = &generated[..a.keep.unwrap_or(generated.len())];
            let content: Vec<u32> = kept.iter().copied().filter(|i| !self.eos_ids.contains(i)).collect();
            text = self.tokenizer.decode(&content, true).map_err(|e| DecoderError::Model(format!("decode: {e}")))?;
        }
        if stream {
            eprintln!();
        }
        let ids = a.sequence.split_off(a.prompt_tokens);
        Ok(Generation { ids, text, prompt_tokens: a.prompt_tokens, finish_reason: reason.into(), prefill_seconds: a.prefill_seconds, decode_seconds: a.started.elapsed().as_secs_f64() })
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

    #[test]
    fn min_p_narrows_sampling_and_greedy_ignores_it() {
        // Probabilities ∝ e^0, e^-0.1, e^-3: min_p 0.5 keeps the first two only.
        let logits = [0.0, -0.1, -3.0];
        let opts = GenerateOptions { temperature: 1.0, min_p: 0.5, ..Default::default() };
        let mut rng = gauge_core::rng::SplitMix64::new(3);
        let draws: Vec<u32> = (0..300).map(|_| pick(&logits, &opts, &mut rng)).collect();
        assert!(draws.contains(&0) && draws.contains(&1) && !draws.contains(&2));
        let loose = GenerateOptions { temperature: 1.0, ..Default::default() };
        assert!((0..300).any(|_| pick(&logits, &loose, &mut rng) == 2), "without min_p the third is drawn sometimes");
        assert_eq!(pick(&logits, &GenerateOptions { min_p: 0.9, ..Default::default() }, &mut rng), 0);
    }

    #[test]
    fn penalties_change_the_greedy_choice_in_their_order() {
        // Prompt 1 2, generated 3 3: token 3 leads by a little.
        let sequence = [1u32, 2, 3, 3];
        let base = vec![0.0f32, 0.5, 0.5, 1.0, 0.9];
        let run = |opts: GenerateOptions| {
            let mut l = base.clone();
            apply_penalties(&mut l, &sequence, 2, &opts, None);
            l
        };
        // Off by default: nothing changes.
        assert_eq!(run(GenerateOptions::default()), base);
        // Repetition 2 over the window (prompt included): 1, 2, 3 halved; 4 now wins.
        let l = run(GenerateOptions { repetition_penalty: 2.0, ..Default::default() });
        assert_eq!(l, vec![0.0, 0.25, 0.25, 0.5, 0.9]);
        assert_eq!(argmax(&l), 4);
        // A window of 1 token sees only the last 3.
        assert_eq!(run(GenerateOptions { repetition_penalty: 2.0, repeat_last_n: 1, ..Default::default() }), vec![0.0, 0.5, 0.5, 0.5, 0.9]);
        assert_eq!(run(GenerateOptions { repetition_penalty: 2.0, repeat_last_n: 0, ..Default::default() }), base);
        // Frequency/presence count the generated tokens only (3 twice), not the prompt.
        assert_eq!(run(GenerateOptions { frequency_penalty: 0.1, presence_penalty: 0.05, ..Default::default() }), vec![0.0, 0.5, 0.5, 1.0 - 0.2 - 0.05, 0.9]);
        // Repetition then frequency, as llama.cpp's penalties sampler.
        let l = run(GenerateOptions { repetition_penalty: 2.0, frequency_penalty: 0.1, ..Default::default() });
        assert_eq!(l[3], 0.5 - 0.2);
        // n-gram 2: "3 3" was seen, so 3 after 3 is banned.
        let l = run(GenerateOptions { no_repeat_ngram_size: 2, ..Default::default() });
        assert_eq!(l[3], f32::NEG_INFINITY);
        assert_eq!(argmax(&l), 4);
        // A ban that would leave nothing (a constraint allows 3 only) is skipped.
        let mut only = vec![f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY];
        apply_penalties(&mut only, &sequence, 2, &GenerateOptions { no_repeat_ngram_size: 2, ..Default::default() }, None);
        assert_eq!(argmax(&only), 3);
    }
}
