//! The model-call cache over a batch on the local decoder (SmolLM2-135M, `just models`): each
//! reply is stored as it finishes, a second run is served wholly from the cache with the same
//! texts, `done` reports the tokens generated (0 from the cache), and citation tags are part
//! of the key.
use std::sync::Mutex;

use gauge_chat::GenerateOptions;
use gauge_chat_client::{Message, RetryPolicy};
use gauge_generator::cache::{model_identity, CallCache};
use gauge_generator::{Generator, GeneratorConfig};

#[test]
fn a_batch_is_stored_reply_by_reply_and_served_again_from_the_cache() {
    let config = GeneratorConfig::Local { model: "SmolLM2-135M-Instruct.Q4_1.gguf".into(), adapter: None };
    let generator = Generator::open(&config, "cpu", RetryPolicy::default()).expect("SmolLM2 (run `just models`)");
    let model = model_identity(&config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = CallCache::new(dir.path());
    let chats: Vec<Vec<Message>> = ["Name a colour.", "Name a fruit.", "Name a tree."].iter().map(|q| vec![Message::user(*q)]).collect();
    let opts = GenerateOptions { max_new_tokens: 8, batch_size: 2, ..Default::default() };
    let tokens = Mutex::new(Vec::new());
    // The entries on disk each time a reply is reported: stored as each finishes, not at the end.
    let on_disk = Mutex::new(Vec::new());
    let first = cache.complete_batch(&generator, &model, &chats, &opts, None, &|t| {
        tokens.lock().unwrap().push(t);
        on_disk.lock().unwrap().push(walk(dir.path()));
    });
    assert_eq!(on_disk.into_inner().unwrap(), vec![1, 2, 3]);
    let first: Vec<_> = first.into_iter().map(|r| r.unwrap()).collect();
    assert!(first.iter().all(|r| !r.hit));
    let tokens = tokens.into_inner().unwrap();
    assert_eq!(tokens.len(), 3);
    assert!(tokens.iter().all(|&t| t > 0), "{tokens:?}");
    let entries = walk(dir.path());
    assert_eq!(entries, 3, "one entry per reply");
    assert_eq!((cache.hits(), cache.misses()), (0, 3));

    let again_tokens = Mutex::new(Vec::new());
    let again: Vec<_> = cache.complete_batch(&generator, &model, &chats, &opts, None, &|t| again_tokens.lock().unwrap().push(t)).into_iter().map(|r| r.unwrap()).collect();
    assert!(again.iter().all(|r| r.hit));
    assert_eq!(again.iter().map(|r| &r.completion.text).collect::<Vec<_>>(), first.iter().map(|r| &r.completion.text).collect::<Vec<_>>());
    assert_eq!(again_tokens.into_inner().unwrap(), vec![0, 0, 0]);

    // Held to citation tags: another key, so another call.
    let tags = vec![vec!["[a.pdf p. 1]".to_string()]; 3];
    let cited = cache.complete_batch_constrained(&generator, &model, &chats[..1], &opts, None, Some(&tags[..1]), &|_| {});
    assert!(!cited.into_iter().next().unwrap().unwrap().hit);
    assert_eq!(walk(dir.path()), 4);
    // A tag list per chat, or a one-line refusal.
    let wrong = generator.complete_batch_constrained(&chats, &opts, None, Some(&tags[..1]), &|_, _| {});
    assert!(wrong.iter().all(|r| r.as_ref().is_err_and(|e| e.to_string().contains("1 tag lists for 3 chats"))));
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| if e.path().is_dir() { walk(&e.path()) } else { usize::from(e.path().extension().is_some_and(|x| x == "json")) }).sum()
}
