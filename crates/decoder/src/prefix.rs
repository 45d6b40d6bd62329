//! Prefix caching: prompts that begin alike (an answer prompt's system turn and instructions, a
//! doc2query or judge prompt's few-shot block) reuse the keys and values of what they share
//! instead of running it again — in one batch and across calls on one [`crate::LanguageModel`].
//!
//! After its prefill, each prompt's cache is kept (a copy of its prompt positions) while the
//! kept caches fit a byte budget (least recently used out first). A new prompt starts from the
//! kept prompt it shares the longest run of first tokens with, when that run is at least
//! [`MIN_SHARED`] tokens, and runs the rest. The rest is always at least [`MIN_REST`] tokens,
//! so that it takes the same matrix path (gemm over the prompt's rows) as the whole prompt
//! would: each position's keys, values and logits are then the bits an uncached prefill gives
//! (a test checks the tokens generated).
//!
//! Budget: `GAUGE_PREFIX_CACHE_MB` (default 1024; 0 turns caching off).
use crate::KvCache;

/// Shared tokens below which a prompt runs whole.
pub const MIN_SHARED: usize = 32;

/// Tokens a prompt always runs itself (the host decoder's gemm threshold, so the rows a prompt
/// runs take one path whether or not a prefix is reused).
pub const MIN_REST: usize = 16;

struct Entry {
    ids: Vec<u32>,
    cache: KvCache,
    used: u64,
}

/// The kept prompt caches of one model.
pub struct PrefixCache {
    entries: Vec<Entry>,
    budget: usize,
    clock: u64,
    /// Prompt tokens seen.
    pub prompt_tokens: u64,
    /// Of those, tokens taken from a kept prompt instead of run.
    pub reused_tokens: u64,
}

impl Default for PrefixCache {
    fn default() -> Self {
        let mb = std::env::var("GAUGE_PREFIX_CACHE_MB").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(1024);
        PrefixCache::with_budget(mb << 20)
    }
}

impl PrefixCache {
    /// A cache keeping at most `budget` bytes of keys and values (0: off).
    pub fn with_budget(budget: usize) -> PrefixCache {
        PrefixCache { entries: Vec::new(), budget, clock: 0, prompt_tokens: 0, reused_tokens: 0 }
    }

    /// A cache to start `ids` from, with room for `capacity` positions, and how many of its
    /// first tokens it holds; `None` when no kept prompt shares enough of it.
    pub fn lookup(&mut self, ids: &[u32]) -> Option<(usize, &KvCache)> {
        self.prompt_tokens += ids.len() as u64;
        let usable = ids.len().checked_sub(MIN_REST)?;
        let (best, shared) = self.entries.iter().enumerate().map(|(i, e)| (i, e.ids.iter().zip(ids).take_while(|(a, b)| a == b).count().min(usable))).max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))?;
        if shared < MIN_SHARED {
            return None;
        }
        self.clock += 1;
        self.reused_tokens += shared as u64;
        let e = &mut self.entries[best];
        e.used = self.clock;
        Some((shared, &e.cache))
    }

    /// Keeps `cache`'s first `ids.len()` positions (the prompt `ids` has just run), evicting
    /// the least recently used kept prompts to stay within the budget.
    pub fn store(&mut self, ids: &[u32], cache: &KvCache) {
        if self.budget == 0 || ids.len() < MIN_SHARED + MIN_REST || self.entries.iter().any(|e| e.ids == ids) {
            return;
        }
        let Some(copy) = cache.prefix(ids.len(), ids.len()) else { return };
        if copy.n_bytes() > self.budget {
            return;
        }
        self.clock += 1;
        self.entries.push(Entry { ids: ids.to_vec(), cache: copy, used: self.clock });
        while self.entries.iter().map(|e| e.cache.n_bytes()).sum::<usize>() > self.budget {
            let oldest = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used).map(|(i, _)| i).expect("not empty");
            self.entries.swap_remove(oldest);
        }
    }

    /// Whether caching is on.
    pub fn enabled(&self) -> bool {
        self.budget > 0
    }
}
