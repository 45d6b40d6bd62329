//! Batched decoding (`LanguageModel::generate_batch`) against one-at-a-time decoding on
//! SmolLM2-135M-Instruct (Q4_1 blocks kept): greedy replies to the 41 FRA dev questions are
//! identical at batch sizes 4 and 8 (sequences finishing at different steps, so prompts join
//! mid-batch); seeded sampling gives each sequence the same draws whatever its neighbours; a
//! bad prompt fails alone. Needs `just models` and `../shared`.
use std::path::PathBuf;

use gauge_decoder::generate::BatchItem;
use gauge_decoder::{GenerateOptions, LanguageModel, Message};

fn model() -> LanguageModel {
    let path = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{}: missing; run `just models`", path.display());
    LanguageModel::load(path.to_str().unwrap(), &gauge_encoder::device::cpu()).unwrap()
}

/// The FRA dev questions as chat prompts.
fn prompts(lm: &LanguageModel) -> Vec<Vec<u32>> {
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden/fra-dev.jsonl");
    let text = std::fs::read_to_string(&golden).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
    let chat = lm.chat.as_ref().unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let m = vec![Message::new("system", "Answer in one short paragraph."), Message::new("user", r["question"].as_str().unwrap())];
            lm.tokenizer.encode(chat.render(&m, true).unwrap().as_str(), false).unwrap().get_ids().to_vec()
        })
        .collect()
}

fn batch(lm: &LanguageModel, prompts: &[Vec<u32>], opts: &GenerateOptions, size: usize) -> Vec<(Vec<u32>, String)> {
    let items = prompts.iter().map(|p| BatchItem { prompt_ids: p, constraint: None }).collect();
    lm.generate_batch(items, opts, size).into_iter().map(|g| g.map(|g| (g.ids, g.finish_reason)).unwrap()).collect()
}

#[test]
fn greedy_batched_replies_equal_one_at_a_time_on_the_fra_dev_prompts() {
    let lm = model();
    let prompts = prompts(&lm);
    assert_eq!(prompts.len(), 41);
    // Budgets that differ per prompt, so sequences leave the batch at different steps.
    let opts = GenerateOptions { max_new_tokens: 24, ..Default::default() };
    let alone: Vec<(Vec<u32>, String)> = prompts.iter().map(|p| {
        let g = lm.generate(p, &opts).unwrap();
        (g.ids, g.finish_reason)
    }).collect();
    assert!(alone.iter().all(|(ids, _)| !ids.is_empty()));
    for size in [4, 8] {
        let got = batch(&lm, &prompts, &opts, size);
        for (i, (a, b)) in alone.iter().zip(&got).enumerate() {
            assert_eq!(a, b, "question {i}: batch of {size} vs alone");
        }
    }
    // Mixed budgets and stop strings: rows finish at different steps and new prompts join.
    let short = GenerateOptions { max_new_tokens: 7, stop: vec![".".into()], ..Default::default() };
    let alone: Vec<(Vec<u32>, String)> = prompts[..12].iter().map(|p| {
        let g = lm.generate(p, &short).unwrap();
        (g.ids, g.finish_reason)
    }).collect();
    assert_eq!(batch(&lm, &prompts[..12], &short, 5), alone);
}

#[test]
fn seeded_sampling_is_the_same_per_sequence_whatever_the_batch() {
    let lm = model();
    let prompts = prompts(&lm);
    let opts = GenerateOptions { max_new_tokens: 16, temperature: 0.9, top_p: 0.95, seed: 7, ..Default::default() };
    let some = &prompts[..6];
    let one = batch(&lm, some, &opts, 1);
    let three = batch(&lm, some, &opts, 3);
    assert_eq!(one, three);
    // The same prompt in another company: its draws do not change.
    let shuffled: Vec<Vec<u32>> = vec![prompts[9].clone(), some[2].clone(), prompts[30].clone()];
    let again = batch(&lm, &shuffled, &opts, 3);
    assert_eq!(again[1], one[2]);
    // Sampling really samples: another seed changes some reply.
    let other = batch(&lm, some, &GenerateOptions { seed: 8, ..opts.clone() }, 3);
    assert_ne!(other, one);
}

#[test]
fn a_bad_prompt_fails_alone() {
    let lm = model();
    let prompts = prompts(&lm);
    let bad = vec![999_999u32];
    let items = vec![BatchItem { prompt_ids: &prompts[0], constraint: None }, BatchItem { prompt_ids: &bad, constraint: None }, BatchItem { prompt_ids: &[], constraint: None }];
    let out = lm.generate_batch(items, &GenerateOptions { max_new_tokens: 4, ..Default::default() }, 3);
    assert_eq!(out[0].as_ref().unwrap().ids.len(), 4);
    assert!(out[1].as_ref().unwrap_err().to_string().contains("outside the vocabulary"));
    assert!(out[2].as_ref().unwrap_err().to_string().contains("no tokens"));
}
