//! Batched decoding (`LanguageModel::generate_batch`) against one-at-a-time decoding on
//! SmolLM2-135M-Instruct (Q4_1 blocks kept): greedy replies to the 41 FRA dev questions are
//! identical at batch sizes 4 and 8 (sequences finishing at different steps, so prompts join
//! mid-batch); seeded sampling gives each sequence the same draws whatever its neighbours; a
//! bad prompt fails alone. Needs `just models` and `../shared`.

use gauge_decoder::generate::BatchItem;
use gauge_decoder::{GenerateOptions, LanguageModel, Message};

mod common;

fn model() -> LanguageModel {
    common::smollm2()
}

/// The FRA dev questions as chat prompts.
fn prompts(lm: &LanguageModel) -> Vec<Vec<u32>> {
    common::fra_prompts(lm, "Answer in one short paragraph.")
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

#[test]
fn repetition_controls_batch_like_one_at_a_time_and_hold_their_rules() {
    use gauge_decoder::sampling::LoopStop;
    let lm = model();
    let prompts = prompts(&lm);
    let some = &prompts[..8];
    let opts = GenerateOptions { max_new_tokens: 40, repetition_penalty: 1.3, frequency_penalty: 0.2, presence_penalty: 0.1, no_repeat_ngram_size: 3, dry_multiplier: 0.8, loop_stop: Some(LoopStop::OFF), ..Default::default() };
    let one = batch(&lm, some, &opts, 1);
    assert_eq!(one, batch(&lm, some, &opts, 4), "the controls are per sequence: batch 4 equals alone");
    let plain = batch(&lm, some, &GenerateOptions { max_new_tokens: 40, loop_stop: Some(LoopStop::OFF), ..Default::default() }, 4);
    assert_ne!(one, plain, "the controls change greedy replies");
    // transformers' rule: no 3-gram of prompt + reply occurs twice.
    for (p, (ids, _)) in some.iter().zip(&one) {
        let seq: Vec<u32> = p.iter().chain(ids.iter().filter(|i| !lm.eos_ids.contains(i))).copied().collect();
        for end in p.len() + 1..seq.len() {
            let last = &seq[end - 2..=end];
            assert!(!seq[..end].windows(3).any(|w| w == last), "3-gram {last:?} repeated");
        }
    }
}

#[test]
fn the_loop_stop_ends_a_looping_reply_and_keeps_its_first_copy() {
    use gauge_decoder::sampling::LoopStop;
    let lm = model();
    // The dev questions, and three replies begun as a repetition (a small model copies what
    // its context repeats: the loop the stop is for).
    let chat = lm.chat.as_ref().unwrap();
    let mut prompts = prompts(&lm);
    for line in ["Inspect every gate arm light monthly.", "Record the repair in the crossing log.", "Flagging is required until the warning system works."] {
        let m = vec![Message::new("user", "What must the maintainer do?")];
        let started = format!("{}{line}\n{line}\n", chat.render(&m, true).unwrap());
        prompts.push(lm.tokenizer.encode(started.as_str(), false).unwrap().get_ids().to_vec());
    }
    let off = GenerateOptions { max_new_tokens: 128, loop_stop: Some(LoopStop::OFF), ..Default::default() };
    let on = GenerateOptions { max_new_tokens: 128, ..Default::default() };
    let items = || prompts.iter().map(|p| BatchItem { prompt_ids: p, constraint: None }).collect::<Vec<_>>();
    let free = lm.generate_batch(items(), &off, 8);
    let stopped = lm.generate_batch(items(), &on, 8);
    let mut loops = 0;
    for (f, s) in free.into_iter().zip(stopped) {
        let (f, s) = (f.unwrap(), s.unwrap());
        if s.finish_reason == "loop" {
            loops += 1;
            assert!(s.ids.len() < f.ids.len() || f.finish_reason == "length", "a loop stop saves tokens");
            assert_eq!(s.ids[..], f.ids[..s.ids.len()], "the same tokens up to the stop");
            assert!(f.text.starts_with(&s.text) && s.text.len() < f.text.len(), "the reply keeps its first copy: {:?} / {:?}", s.text, f.text);
        } else {
            assert_eq!((s.ids, s.text), (f.ids, f.text), "a reply without a loop is untouched");
        }
    }
    eprintln!("{loops} of {} replies ended in a loop", prompts.len());
    assert!(loops > 0, "greedy SmolLM2 loops on replies begun as a repetition within 128 tokens");
}
