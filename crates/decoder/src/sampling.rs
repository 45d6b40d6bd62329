//! Sampling controls against repetition, each with the semantics of the engine it is named
//! after, and the loop stop:
//!
//! - [`repetition_penalty`]: transformers' `RepetitionPenaltyLogitsProcessor` / llama.cpp's
//!   `repeat_penalty` — the logit of every token seen in the window (prompt included) is
//!   divided by the factor when positive, multiplied when not.
//! - [`frequency_presence_penalty`]: the OpenAI API's — `logit -= count × frequency +
//!   (count > 0) × presence`, counting the tokens generated so far.
//! - [`no_repeat_ngram_bans`]: transformers' `no_repeat_ngram_size` — no n-gram of the
//!   sequence (prompt included) occurs twice.
//! - [`min_p_keep`]: llama.cpp's `min_p` — keep the tokens whose probability is at least
//!   `min_p` times the most likely one's (on the logits before temperature).
//! - [`Dry`]: llama.cpp's DRY ("don't repeat yourself", from koboldcpp): a token that would
//!   extend a repeat of an earlier span longer than `allowed_length` loses
//!   `multiplier × base^(length − allowed_length)`; sequence breakers end spans.
//! - [`LoopDetector`]: ends a generation whose last tokens repeat one span over and over.
use std::collections::HashMap;


/// Divides (positive logits) or multiplies (others) the logit of each distinct token of
/// `window` by `penalty` (1: no change), as transformers and llama.cpp do.
pub fn repetition_penalty(logits: &mut [f32], window: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    for t in distinct(window) {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if *l <= 0.0 { *l * penalty } else { *l / penalty };
        }
    }
}

/// Subtracts `count × frequency + presence` from the logit of each token generated
/// `count > 0` times (the OpenAI API's frequency and presence penalties).
pub fn frequency_presence_penalty(logits: &mut [f32], generated: &[u32], frequency: f32, presence: f32) {
    if frequency == 0.0 && presence == 0.0 {
        return;
    }
    let mut sorted = generated.to_vec();
    sorted.sort_unstable();
    for run in sorted.chunk_by(|a, b| a == b) {
        if let Some(l) = logits.get_mut(run[0] as usize) {
            *l -= run.len() as f32 * frequency + presence;
        }
    }
}

fn distinct(window: &[u32]) -> Vec<u32> {
    let mut d = window.to_vec();
    d.sort_unstable();
    d.dedup();
    d
}

/// The tokens that would complete an n-gram already in `sequence` (transformers'
/// `no_repeat_ngram_size = n`: every earlier n-gram whose first n−1 tokens are the last n−1
/// of the sequence bans its last token). Empty when `n` is 0 or the sequence is shorter
/// than n−1.
pub fn no_repeat_ngram_bans(sequence: &[u32], n: usize) -> Vec<u32> {
    if n == 0 || sequence.len() + 1 < n {
        return Vec::new();
    }
    let prefix = &sequence[sequence.len() + 1 - n..];
    let mut banned: Vec<u32> = sequence.windows(n).filter(|w| w[..n - 1] == *prefix).map(|w| w[n - 1]).collect();
    banned.sort_unstable();
    banned.dedup();
    banned
}

/// How many of the candidates `sorted` (indices, most likely first) `min_p` keeps: those
/// whose logit is at least the best one's plus `ln(min_p)` (llama.cpp; at least one).
pub fn min_p_keep(logits: &[f32], sorted: &[usize], min_p: f32) -> usize {
    if min_p <= 0.0 || sorted.is_empty() {
        return sorted.len();
    }
    let floor = logits[sorted[0]] + min_p.ln();
    1 + sorted[1..].iter().take_while(|&&i| logits[i] >= floor).count()
}

pub use gauge_chat::DrySettings;

/// DRY with its sequence breakers resolved against a vocabulary (prepared once per model and
/// breaker list: it scans every token).
#[derive(Debug, Clone)]
pub struct Dry {
    settings: DrySettings,
    /// Head token → tails (token sequences after the head that complete a breaker; empty:
    /// the head alone is one).
    breakers: HashMap<u32, Vec<Vec<u32>>>,
}

/// Breakers longer than this many bytes are truncated (llama.cpp).
const MAX_BREAKER_BYTES: usize = 40;
/// A breaker's tail keeps at most this many tokens (llama.cpp).
const MAX_BREAKER_TAIL: usize = 20;

impl Dry {
    /// Resolves `breakers` against the vocabulary (`token_text[id]` is token `id`'s bytes;
    /// `tokenize` encodes a string without special tokens), as llama.cpp's
    /// `get_overlapping_token_sequences`: a token containing a breaker is one; a token ending
    /// with a breaker's beginning is a head whose tail is the rest of the breaker, tokenised.
    pub fn new(settings: DrySettings, breakers: &[String], token_text: &[Vec<u8>], tokenize: &dyn Fn(&str) -> Vec<u32>) -> Dry {
        let mut map: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
        for breaker in breakers.iter().filter(|b| !b.is_empty()) {
            let b = &breaker.as_bytes()[..breaker.len().min(MAX_BREAKER_BYTES)];
            for (id, word) in token_text.iter().enumerate() {
                let id = id as u32;
                if word.windows(b.len()).any(|w| w == b) {
                    let tails = map.entry(id).or_default();
                    if !tails.contains(&Vec::new()) {
                        tails.push(Vec::new());
                    }
                    continue;
                }
                for pos in (0..word.len()).filter(|&p| word[p] == b[0]) {
                    let matched = (word.len() - pos).min(b.len());
                    if word[pos..pos + matched] != b[..matched] {
                        continue;
                    }
                    let mut tail = tokenize(&String::from_utf8_lossy(&b[matched..]));
                    tail.truncate(MAX_BREAKER_TAIL);
                    let tails = map.entry(id).or_default();
                    if !tails.contains(&tail) {
                        tails.push(tail);
                    }
                }
            }
        }
        Dry { settings, breakers: map }
    }

    /// The settings.
    pub fn settings(&self) -> &DrySettings {
        &self.settings
    }

    /// Whether the settings penalise anything.
    pub fn enabled(&self) -> bool {
        self.settings.enabled()
    }

    /// Lowers the logits of tokens that would extend a repeat in `sequence` (prompt and
    /// generated tokens; the last `penalty_last_n` are scanned). A port of llama.cpp's
    /// `llama_sampler_dry_apply`: the longest suffix of the window that also ends earlier
    /// (reverse Z-algorithm, capped at the last breaker), then each token that followed such
    /// an earlier occurrence loses `multiplier × base^(length − allowed_length)`.
    pub fn apply(&self, logits: &mut [f32], sequence: &[u32]) {
        if !self.enabled() {
            return;
        }
        let s = &self.settings;
        let n = if s.penalty_last_n < 0 { sequence.len() } else { sequence.len().min(s.penalty_last_n as usize) };
        if n <= s.allowed_length {
            return;
        }
        let window = &sequence[sequence.len() - n..];
        // rev(i): the i-th token from the end.
        let rev = |i: usize| window[n - 1 - i];
        // Step 1: spans do not cross the most recent breaker.
        let mut rep_limit = n;
        for i in 0..n {
            let Some(tails) = self.breakers.get(&rev(i)) else { continue };
            let longest = tails.iter().filter(|t| t.len() <= i && (0..t.len()).all(|o| t[o] == rev(i - o - 1))).map(Vec::len).max();
            if let Some(len) = longest {
                rep_limit = i - len;
                break;
            }
        }
        if rep_limit < s.allowed_length {
            return;
        }
        // Step 2: count[j] = length of the longest suffix of the window that also ends at
        // position j (capped at rep_limit).
        let last = n - 1;
        let mut count = vec![0usize; n];
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            if k > rt {
                let mut m = 0;
                while m + k < n && rev(m) == rev(m + k) {
                    m += 1;
                }
                count[last - k] = m.min(rep_limit);
                if m > 0 {
                    lt = k;
                    rt = k + m - 1;
                }
            } else {
                let p = k - lt;
                let right = rt - k + 1;
                if count[last - p] < right {
                    count[last - k] = count[last - p].min(rep_limit);
                } else {
                    let mut i = rt + 1;
                    while i < n && rev(i) == rev(i - k) {
                        i += 1;
                    }
                    count[last - k] = (i - k).min(rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
        // Step 3: the token after each such occurrence would extend the repeat.
        let mut longest: HashMap<u32, usize> = HashMap::new();
        for (j, &len) in count.iter().enumerate().take(n - 1) {
            if len >= s.allowed_length {
                let e = longest.entry(window[j + 1]).or_insert(len);
                *e = (*e).max(len);
            }
        }
        // Step 4: the penalty (its exponent clamped to keep it finite).
        let max_exponent = if s.base > 1.000001 { (88.722_84_f32 / s.base.ln()) as usize } else { 0 };
        for (token, len) in longest {
            let single_breaker = self.breakers.get(&token).is_some_and(|t| t.iter().any(Vec::is_empty));
            if single_breaker {
                continue;
            }
            let mut exponent = len - s.allowed_length;
            if max_exponent > 0 && exponent > max_exponent {
                exponent = max_exponent;
            }
            if let Some(l) = logits.get_mut(token as usize) {
                *l -= (s.multiplier as f64 * (s.base as f64).powi(exponent as i32)) as f32;
            }
        }
    }
}

pub use gauge_chat::LoopStop;

/// Follows a generation token by token; `runs[l − 1]` is how many of the last tokens equal
/// the token `l` before them (a periodic tail of period `l` is `runs + l` tokens long).
#[derive(Debug, Clone, Default)]
pub struct LoopDetector {
    runs: Vec<usize>,
}

impl LoopDetector {
    /// Takes the newest token (the last of `ids`, the tokens generated so far); when the tail
    /// loops under `stop`, returns how many tokens to keep (up to the end of the first copy).
    /// The shortest period that loops wins. O(length) per token.
    pub fn observe(&mut self, ids: &[u32], stop: &LoopStop) -> Option<usize> {
        let n = ids.len();
        if n < 2 {
            return None;
        }
        let newest = ids[n - 1];
        self.runs.resize(n - 1, 0);
        for l in 1..n {
            self.runs[l - 1] = if ids[n - 1 - l] == newest { self.runs[l - 1] + 1 } else { 0 };
        }
        if !stop.enabled() {
            return None;
        }
        (1..n).find_map(|l| {
            let run = self.runs[l - 1];
            let covered = run + l;
            (covered >= l * stop.repeats && covered >= stop.min_tokens).then_some(n - run)
        })
    }
}

/// Token texts for [`Dry::new`]: each token's bytes (byte-level and SentencePiece
/// tokenizers; special tokens as their names), or its decoding for other tokenizers.
pub fn token_texts(tokenizer: &tokenizers::Tokenizer) -> Vec<Vec<u8>> {
    match crate::constrain::token_bytes(tokenizer) {
        Ok(bytes) => bytes.into_iter().map(|b| if b.first() == Some(&0xff) { b[1..].to_vec() } else { b }).collect(),
        Err(_) => (0..tokenizer.get_vocab_size(true) as u32).map(|id| tokenizer.decode(&[id], false).unwrap_or_default().into_bytes()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
        // transformers: torch.where(score < 0, score * p, score / p) over the seen tokens.
        let mut logits = vec![2.0, -1.0, 0.5, 3.0, 0.0];
        repetition_penalty(&mut logits, &[0, 1, 1, 4], 2.0);
        assert_eq!(logits, vec![1.0, -2.0, 0.5, 3.0, 0.0]);
        let mut same = vec![2.0, -1.0];
        repetition_penalty(&mut same, &[0, 1], 1.0);
        assert_eq!(same, vec![2.0, -1.0]);
        // An out-of-vocabulary id is ignored, -inf stays -inf.
        let mut masked = vec![f32::NEG_INFINITY, 1.0];
        repetition_penalty(&mut masked, &[0, 7], 1.5);
        assert_eq!(masked[0], f32::NEG_INFINITY);
    }

    #[test]
    fn frequency_and_presence_follow_the_openai_formula() {
        // mu[j] -= c[j] * alpha_frequency + (c[j] > 0) * alpha_presence
        let mut logits = vec![1.0, 1.0, 1.0];
        frequency_presence_penalty(&mut logits, &[0, 0, 0, 2], 0.5, 0.25);
        assert_eq!(logits, vec![1.0 - 1.5 - 0.25, 1.0, 1.0 - 0.5 - 0.25]);
    }

    #[test]
    fn no_repeat_ngram_bans_what_transformers_bans() {
        // Sequence 5 6 7 5 6: with n = 3 the prefix (5, 6) was followed by 7 → 7 banned.
        assert_eq!(no_repeat_ngram_bans(&[5, 6, 7, 5, 6], 3), vec![7]);
        // n = 2: prefix (6) was followed by 7 → banned; n = 1 bans every seen token.
        assert_eq!(no_repeat_ngram_bans(&[5, 6, 7, 5, 6], 2), vec![7]);
        assert_eq!(no_repeat_ngram_bans(&[5, 6, 7, 5, 6], 1), vec![5, 6, 7]);
        // Several continuations of one prefix; a prefix never seen bans nothing.
        assert_eq!(no_repeat_ngram_bans(&[1, 2, 9, 1, 2, 8, 1, 2], 3), vec![8, 9]);
        assert!(no_repeat_ngram_bans(&[1, 2, 3, 4], 3).is_empty());
        assert!(no_repeat_ngram_bans(&[1], 3).is_empty());
        assert!(no_repeat_ngram_bans(&[1, 1, 1], 0).is_empty());
    }

    #[test]
    fn min_p_keeps_tokens_within_a_factor_of_the_best() {
        // probabilities ∝ exp(logit): ratios to the best are 1, e^-1, e^-2, e^-3.
        let logits = [0.0, -1.0, -2.0, -3.0];
        let sorted = [0, 1, 2, 3];
        assert_eq!(min_p_keep(&logits, &sorted, 0.3), 2); // e^-1 = 0.37 ≥ 0.3 > e^-2
        assert_eq!(min_p_keep(&logits, &sorted, 0.1), 3);
        assert_eq!(min_p_keep(&logits, &sorted, 0.0), 4);
        assert_eq!(min_p_keep(&logits, &sorted, 1.0), 1);
    }

    /// DRY by its definition, without the Z-algorithm: for every earlier position, the
    /// longest common suffix with the window (capped at the breaker limit).
    fn dry_naive(d: &Dry, logits: &mut [f32], sequence: &[u32]) {
        let s = d.settings();
        let n = if s.penalty_last_n < 0 { sequence.len() } else { sequence.len().min(s.penalty_last_n as usize) };
        if !d.enabled() || n <= s.allowed_length {
            return;
        }
        let w = &sequence[sequence.len() - n..];
        let mut rep_limit = n;
        'outer: for i in 0..n {
            if let Some(tails) = d.breakers.get(&w[n - 1 - i]) {
                let mut best: Option<usize> = None;
                for t in tails {
                    if t.len() <= i && (0..t.len()).all(|o| t[o] == w[n - 1 - (i - o - 1)]) {
                        best = Some(best.map_or(t.len(), |b| b.max(t.len())));
                    }
                }
                if let Some(b) = best {
                    rep_limit = i - b;
                    break 'outer;
                }
            }
        }
        if rep_limit < s.allowed_length {
            return;
        }
        let mut longest: HashMap<u32, usize> = HashMap::new();
        for j in 0..n - 1 {
            let mut m = 0;
            while m <= j && w[j - m] == w[n - 1 - m] {
                m += 1;
            }
            let m = m.min(rep_limit);
            if m >= s.allowed_length {
                let e = longest.entry(w[j + 1]).or_insert(m);
                *e = (*e).max(m);
            }
        }
        for (t, len) in longest {
            if d.breakers.get(&t).is_some_and(|x| x.iter().any(Vec::is_empty)) {
                continue;
            }
            logits[t as usize] -= (s.multiplier as f64 * (s.base as f64).powi((len - s.allowed_length) as i32)) as f32;
        }
    }

    fn toy_dry(last_n: i32) -> Dry {
        // Vocabulary: 0..8 plain words, 8 = "\n", 9 = "a:" (ends with the breaker ':' inside), 10 = "x" "y"
        let mut texts: Vec<Vec<u8>> = (0..8).map(|i| format!("w{i}").into_bytes()).collect();
        texts.push(b"\n".to_vec());
        texts.push(b"a:".to_vec());
        texts.push(b"<e".to_vec()); // 10: the head of breaker "<end>"
        texts.push(b"nd>".to_vec()); // 11
        let tokenize = |s: &str| if s == "nd>" { vec![11] } else { vec![] };
        let settings = DrySettings { multiplier: 0.8, base: 1.75, allowed_length: 2, penalty_last_n: last_n };
        Dry::new(settings, &["\n".into(), ":".into(), "<end>".into()], &texts, &tokenize)
    }

    #[test]
    fn dry_breakers_resolve_like_llama_cpp() {
        let d = toy_dry(-1);
        assert_eq!(d.breakers.get(&8), Some(&vec![vec![]]), "a token holding a breaker is one");
        assert_eq!(d.breakers.get(&9), Some(&vec![vec![]]));
        assert_eq!(d.breakers.get(&10), Some(&vec![vec![11]]), "a head with its tail");
        assert!(!d.breakers.contains_key(&0));
    }

    #[test]
    fn dry_penalises_the_token_that_extends_a_repeat() {
        let d = toy_dry(-1);
        // a b c d a b c: the repeat "a b c" (3 > allowed 2) would be extended by d.
        let seq = [0, 1, 2, 3, 0, 1, 2];
        let mut logits = vec![0.0f32; 12];
        d.apply(&mut logits, &seq);
        let expected = -(0.8f64 * 1.75f64.powi(1)) as f32;
        assert_eq!(logits[3], expected);
        assert!(logits.iter().enumerate().all(|(i, &l)| i == 3 || l == 0.0));
        // A breaker caps a repeat at the tokens after it: "x ␤ a b c d … x ␤ a b c" repeats
        // five tokens, but the newline 3 back limits the span to "a b c".
        let penalty = |seq: &[u32]| {
            let mut l = vec![0.0f32; 12];
            d.apply(&mut l, seq);
            l[3]
        };
        assert_eq!(penalty(&[4, 8, 0, 1, 2, 3, 4, 8, 0, 1, 2]), -(0.8f64 * 1.75f64.powi(1)) as f32);
        assert_eq!(penalty(&[4, 7, 0, 1, 2, 3, 4, 7, 0, 1, 2]), -(0.8f64 * 1.75f64.powi(3)) as f32);
        // A two-token breaker ("<e" "nd>") caps it the same way; a repeat no longer than the
        // allowed length is free, one that reaches it pays the multiplier.
        assert_eq!(penalty(&[4, 10, 11, 0, 1, 2, 3, 4, 10, 11, 0, 1, 2]), -(0.8f64 * 1.75f64.powi(1)) as f32);
        assert_eq!(penalty(&[0, 3, 5, 0]), 0.0);
        assert_eq!(penalty(&[0, 1, 3, 5, 0, 1]), -0.8);
        // The window: with the last 4 tokens only, the earlier copy is out of sight.
        let mut l = vec![0.0f32; 12];
        toy_dry(4).apply(&mut l, &seq);
        assert!(l.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn dry_z_algorithm_equals_its_definition() {
        let mut rng = gauge_core::rng::SplitMix64::new(5);
        for case in 0..400 {
            let last_n = [-1, 8, 16, 64][case % 4];
            let d = toy_dry(last_n);
            let alphabet = 2 + case % 11; // small alphabets make long repeats
            let len = 1 + (rng.next_u64() % 60) as usize;
            let seq: Vec<u32> = (0..len).map(|_| (rng.next_u64() % alphabet as u64) as u32).collect();
            let mut fast = vec![0.0f32; 12];
            let mut slow = vec![0.0f32; 12];
            d.apply(&mut fast, &seq);
            dry_naive(&d, &mut slow, &seq);
            assert_eq!(fast, slow, "sequence {seq:?}, last_n {last_n}");
        }
    }

    #[test]
    fn loop_detector_stops_on_copies_and_keeps_the_first() {
        let stop = LoopStop { repeats: 3, min_tokens: 9 };
        let span = [7u32, 8, 9, 10];
        let mut ids = vec![1, 2];
        let mut det = LoopDetector::default();
        let mut stopped = None;
        for t in span.iter().cycle().take(40) {
            ids.push(*t);
            if let Some(keep) = det.observe(&ids, &stop) {
                stopped = Some((ids.len(), keep));
                break;
            }
        }
        // 3 copies = 12 tokens ≥ 9: stops when the third copy completes; keeps 2 + one copy.
        assert_eq!(stopped, Some((14, 6)));
        // One token repeated needs min_tokens copies; then keeps one.
        let mut det = LoopDetector::default();
        let ids: Vec<u32> = std::iter::once(3).chain(std::iter::repeat_n(5, 20)).collect();
        let at = (2..=ids.len()).find_map(|n| det.observe(&ids[..n], &stop).map(|k| (n, k)));
        assert_eq!(at, Some((10, 2)));
        // Text that does not repeat never stops; off never stops.
        let mut det = LoopDetector::default();
        let ids: Vec<u32> = (0..200).collect();
        assert!((1..=200).all(|n| det.observe(&ids[..n], &stop).is_none()));
        let mut det = LoopDetector::default();
        let ids: Vec<u32> = std::iter::repeat_n(4, 100).collect();
        assert!((1..=100).all(|n| det.observe(&ids[..n], &LoopStop::OFF).is_none()));
        // Short legitimate repeats (below min_tokens) go on.
        let mut det = LoopDetector::default();
        let table: Vec<u32> = [20, 21].iter().cycle().take(8).copied().collect();
        assert!((1..=8).all(|n| det.observe(&table[..n], &stop).is_none()));
    }
}
