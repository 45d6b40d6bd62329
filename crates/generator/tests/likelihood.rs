//! Reply likelihoods on the local decoder (SmolLM2-135M, `just models`): the batched,
//! teacher-forced scores equal those of a fresh full forward per reply token (no cache, no
//! batch), replies of different lengths batch together, pairs sharing a prompt score exactly
//! as they do alone, and the cache serves a second call.
use gauge_chat_client::{Message, RetryPolicy};
use gauge_generator::cache::{model_identity, CallCache};
use gauge_generator::likelihood::log_softmax_at;
use gauge_generator::{Generator, GeneratorConfig};

#[test]
fn batched_scores_match_a_fresh_forward_per_token_and_are_cached() {
    let config = GeneratorConfig::Local { model: "SmolLM2-135M-Instruct.Q4_1.gguf".into(), adapter: None };
    let generator = Generator::open(&config, "cpu", RetryPolicy::default()).expect("SmolLM2 (run `just models`)");
    let items: Vec<(Vec<Message>, String)> = vec![
        (vec![Message::user("Passage: Flashing lights warn road users of an approaching train.\n\nPlease write a question based on this passage.")], "What do flashing lights warn of?".into()),
        (vec![Message::user("Name a colour.")], "Blue".into()),
        (vec![Message::user("Passage: Placards identify hazardous materials on rail cars.\n\nPlease write a question based on this passage.")], "What do placards on rail cars identify?".into()),
    ];
    let scores = generator.reply_likelihoods(&items).unwrap();
    let lm = generator.local_model().unwrap();
    for ((messages, reply), got) in items.iter().zip(&scores) {
        let prompt = lm.chat.as_ref().unwrap().render(messages, true).unwrap();
        let prompt = lm.tokenizer.encode(prompt.as_str(), false).unwrap().get_ids().to_vec();
        let reply = lm.tokenizer.encode(reply.as_str(), false).unwrap().get_ids().to_vec();
        let mut want = 0.0;
        for t in 0..reply.len() {
            let ids: Vec<u32> = prompt.iter().chain(&reply[..t]).copied().collect();
            let logits = lm.model.forward(&ids, &mut lm.model.new_cache()).unwrap();
            want += log_softmax_at(&logits, reply[t]);
        }
        assert_eq!(got.tokens, reply.len());
        // The prompt path and the one-token path round activations alike to within this.
        assert!((got.log_prob - want).abs() < 0.02 * reply.len() as f64, "{} vs {want}", got.log_prob);
        assert!(got.log_prob < 0.0);
    }

    let dir = tempfile::tempdir().unwrap();
    let cache = CallCache::new(dir.path());
    let model = model_identity(&config).unwrap();
    let first = cache.likelihoods(&generator, &model, &items[..2]).unwrap();
    assert_eq!(first, scores[..2]);
    assert_eq!((cache.hits(), cache.misses()), (0, 2));
    // Two from the cache, one asked.
    let again = cache.likelihoods(&generator, &model, &items).unwrap();
    assert_eq!(again, scores);
    assert_eq!((cache.hits(), cache.misses()), (2, 3));
}

#[test]
fn pairs_sharing_a_prompt_score_exactly_as_alone_in_the_callers_order() {
    let config = GeneratorConfig::Local { model: "SmolLM2-135M-Instruct.Q4_1.gguf".into(), adapter: None };
    let generator = Generator::open(&config, "cpu", RetryPolicy::default()).expect("SmolLM2 (run `just models`)");
    let passage = |p: &str| vec![Message::user(format!("Passage: {p}\n\nPlease write a question based on this passage."))];
    let (a, b) = (passage("Flashing lights warn road users of an approaching train."), passage("Placards identify hazardous materials on rail cars."));
    // 20 pairs, two prompts interleaved: the shared ones span more than one batch of 16.
    let replies = ["What do flashing lights warn of?", "What do placards identify?", "Who is warned?", "What approaches?", "Why?"];
    let items: Vec<(Vec<Message>, String)> = (0..20).map(|i| (if i % 3 == 0 { b.clone() } else { a.clone() }, format!("{} ({i})", replies[i % replies.len()]))).collect();
    let together = generator.reply_likelihoods(&items).unwrap();
    for (item, got) in items.iter().zip(&together) {
        let alone = generator.reply_likelihoods(std::slice::from_ref(item)).unwrap();
        assert_eq!(*got, alone[0], "{:?}", item.1);
    }
    // Different replies to one prompt get different scores (the copies are not shared state).
    assert_ne!(together[1].log_prob, together[2].log_prob);
}
