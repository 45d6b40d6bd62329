//! Prefix caching (`gauge_decoder::prefix`) on SmolLM2-135M-Instruct (Q4_1 blocks kept): prompts
//! that share a long system turn reuse its keys and values, and give exactly what an uncached
//! prefill gives — the last position's logits bit for bit, and the greedy replies to the 41 FRA
//! dev questions token for token, alone and in batches. Needs `just models` and `../shared`.
use gauge_decoder::generate::BatchItem;
use gauge_decoder::prefix::{PrefixCache, MIN_REST, MIN_SHARED};
use gauge_decoder::{GenerateOptions, LanguageModel};

const SYSTEM: &str = "You answer questions about regulatory and technical documents using only the passages given. Each passage starts with its tag, such as [manual.pdf p. 12]. Cite every claim with the tag of the passage it comes from, written exactly as the tag. If the passages do not contain the answer, say: \"The provided documents do not contain this information.\"";

mod common;

fn model() -> LanguageModel {
    common::smollm2()
}

/// The FRA dev questions as chat prompts.
fn prompts(lm: &LanguageModel) -> Vec<Vec<u32>> {
    common::fra_prompts(lm, SYSTEM)
}

fn set_budget(lm: &LanguageModel, bytes: usize) {
    *lm.prefix_cache.lock().unwrap() = PrefixCache::with_budget(bytes);
}

#[test]
fn a_reused_prefix_gives_the_logits_of_a_whole_prefill() {
    let lm = model();
    let p = prompts(&lm);
    let (a, b) = (&p[0], &p[1]);
    let shared = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    assert!(shared >= MIN_SHARED && b.len() - shared >= MIN_REST, "the prompts share {shared} tokens");
    let mut first = lm.model.new_cache();
    lm.model.forward(a, &mut first).unwrap();
    let mut from_prefix = first.prefix(shared, b.len()).expect("a host cache");
    assert_eq!(from_prefix.len(), shared);
    let cached = lm.model.forward(&b[shared..], &mut from_prefix).unwrap();
    let whole = lm.model.forward(b, &mut lm.model.new_cache()).unwrap();
    assert_eq!(cached.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
}

#[test]
fn cached_and_uncached_generation_give_the_same_tokens() {
    let lm = model();
    let prompts = prompts(&lm);
    let opts = GenerateOptions { max_new_tokens: 16, ..Default::default() };
    let run = |size: usize| -> Vec<Vec<u32>> {
        let items = prompts.iter().map(|p| BatchItem { prompt_ids: p, constraint: None }).collect();
        lm.generate_batch(items, &opts, size).into_iter().map(|g| g.unwrap().ids).collect()
    };
    set_budget(&lm, 0);
    let uncached = run(1);
    for size in [1, 4] {
        set_budget(&lm, 256 << 20);
        assert_eq!(run(size), uncached, "batch of {size}");
        let kept = lm.prefix_cache.lock().unwrap();
        // Every prompt after the first starts from the system turn it shares.
        let total: usize = prompts.iter().map(Vec::len).sum();
        assert_eq!(kept.prompt_tokens, total as u64);
        assert!(kept.reused_tokens >= 40 * MIN_SHARED as u64, "{} of {total} prompt tokens reused", kept.reused_tokens);
    }
}

#[test]
fn a_cache_over_its_budget_keeps_nothing_and_prompts_still_run() {
    let lm = model();
    let prompts = prompts(&lm);
    set_budget(&lm, 1024);
    let opts = GenerateOptions { max_new_tokens: 4, ..Default::default() };
    for p in &prompts[..3] {
        lm.generate(p, &opts).unwrap();
    }
    assert_eq!(lm.prefix_cache.lock().unwrap().reused_tokens, 0);
}
