//! One content-addressed cache for every model call gauge makes outside `answer` (query
//! rewriting, summaries, the judge): the key is the BLAKE3 of the model's identity (its
//! weights' hashes, or the endpoint's URL and model name), the exact messages, the generation
//! options and the response schema; the value is the reply with its token counts and the
//! latency of the call that made it. A rerun of an evaluation is therefore free and
//! reproducible, and a cached reply is the same bytes whatever the endpoint would say today.
//!
//! Layout: `<dir>/<key[0..2]>/<key>.json`, each entry written to a temporary file and renamed,
//! so a crash never leaves half an entry (and two processes writing the same key agree).
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use gauge_chat::GenerateOptions;
use gauge_chat_client::{Message, ResponseSchema};
use serde::{Deserialize, Serialize};

use crate::{Completion, Generator, GeneratorConfig, GeneratorError};

/// A cached call: what was asked and what came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedCall {
    /// The model identity the key was made from.
    pub model: String,
    /// The messages sent.
    pub messages: Vec<Message>,
    /// The reply text.
    pub text: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Why generation ended.
    pub finish_reason: String,
    /// Milliseconds the original call took.
    pub latency_ms: f64,
}

/// A reply from [`CallCache::complete`]: the completion, whether it came from the cache, and
/// the milliseconds the original call took (what a cold run pays).
#[derive(Debug, Clone, PartialEq)]
pub struct CachedReply {
    /// The completion.
    pub completion: Completion,
    /// Served from the cache (no model call).
    pub hit: bool,
    /// Latency of the call that produced it.
    pub original_latency_ms: f64,
}

/// The cache, with hit and miss counters for reports.
#[derive(Debug)]
pub struct CallCache {
    dir: PathBuf,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Serialize)]
struct KeyParts<'a> {
    model: &'a str,
    messages: &'a [Message],
    /// Every setting that changes a reply (the batch size does not; the loop stop resolved).
    generation: GenerateOptions,
    schema: Option<&'a serde_json::Value>,
    /// The page tags a reply's citations are held to (absent when they are free).
    #[serde(skip_serializing_if = "Option::is_none")]
    citation_tags: Option<&'a [String]>,
}

/// The identity of a generator config for cache keys: the local model's file hashes (model
/// and adapter), or an endpoint's base URL and model name.
pub fn model_identity(config: &GeneratorConfig) -> Result<String, GeneratorError> {
    match config {
        GeneratorConfig::Local { .. } => {
            let entries = crate::model_entry(config)?;
            Ok(entries.iter().map(|e| format!("{}={}", e.name, e.hash)).collect::<Vec<_>>().join(";"))
        }
        GeneratorConfig::Api(chat) => Ok(format!("api:{}|{}", chat.base_url, chat.model)),
    }
}

impl CallCache {
    /// A cache rooted at `dir` (created when first written).
    pub fn new(dir: impl Into<PathBuf>) -> CallCache {
        CallCache { dir: dir.into(), hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }

    /// Where it lives.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of a call.
    pub fn key(model: &str, messages: &[Message], opts: &GenerateOptions, schema: Option<&ResponseSchema>) -> String {
        Self::key_with(model, messages, opts, schema, None)
    }

    /// The key of a call whose citations are held to `citation_tags`.
    pub fn key_with(model: &str, messages: &[Message], opts: &GenerateOptions, schema: Option<&ResponseSchema>, citation_tags: Option<&[String]>) -> String {
        let generation = GenerateOptions { batch_size: 0, loop_stop: Some(opts.local_loop_stop()), ..opts.clone() };
        let parts = KeyParts { model, messages, generation, schema: schema.map(|s| &s.schema), citation_tags };
        gauge_core::hash::bytes_hash(serde_json::to_string(&parts).expect("key parts serialise").as_bytes())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(format!("{key}.json"))
    }

    /// The cached call under `key`, if any (an unreadable entry counts as absent).
    pub fn get(&self, key: &str) -> Option<CachedCall> {
        self.get_value(key)
    }

    /// Stores a call under `key` (temporary file, then rename).
    pub fn put(&self, key: &str, call: &CachedCall) -> Result<(), GeneratorError> {
        self.put_value(key, call)
    }

    /// Any cached value under `key` (an unreadable entry counts as absent).
    pub(crate) fn get_value<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        let text = std::fs::read_to_string(self.path(key)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Counts `hits` calls served from the cache and `misses` asked of the model.
    pub(crate) fn count(&self, hits: usize, misses: usize) {
        self.hits.fetch_add(hits as u64, Ordering::Relaxed);
        self.misses.fetch_add(misses as u64, Ordering::Relaxed);
    }

    /// Stores any value under `key` (temporary file, then rename).
    pub(crate) fn put_value<T: Serialize>(&self, key: &str, call: &T) -> Result<(), GeneratorError> {
        let path = self.path(key);
        let io = |e: std::io::Error, p: &Path| GeneratorError::Cache(format!("{}: cannot write the model-call cache ({e})", p.display()));
        let parent = path.parent().expect("sharded path");
        std::fs::create_dir_all(parent).map_err(|e| io(e, parent))?;
        let tmp = parent.join(format!(".{key}.{}.tmp", std::process::id()));
        let written = std::fs::write(&tmp, serde_json::to_string_pretty(call).expect("call serialises")).map_err(|e| io(e, &tmp)).and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| io(e, &path)));
        if written.is_err() {
            // Nothing half-written stays behind (a full disk, a read-only folder).
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        Ok(())
    }

    /// The reply to `messages` from the cache, or from `generator` (then stored). `model` is
    /// the generator's [`model_identity`].
    pub fn complete(&self, generator: &Generator, model: &str, messages: &[Message], opts: &GenerateOptions, schema: Option<&ResponseSchema>) -> Result<CachedReply, GeneratorError> {
        let key = Self::key(model, messages, opts, schema);
        if let Some(c) = self.get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            let completion = Completion { text: c.text, prompt_tokens: c.prompt_tokens, completion_tokens: c.completion_tokens, finish_reason: c.finish_reason, attempts: 0, seconds: 0.0 };
            return Ok(CachedReply { completion, hit: true, original_latency_ms: c.latency_ms });
        }
        let started = Instant::now();
        let completion = generator.complete(messages, opts, schema)?;
        let latency_ms = started.elapsed().as_secs_f64() * 1e3;
        self.misses.fetch_add(1, Ordering::Relaxed);
        let call = CachedCall {
            model: model.to_string(),
            messages: messages.to_vec(),
            text: completion.text.clone(),
            prompt_tokens: completion.prompt_tokens,
            completion_tokens: completion.completion_tokens,
            finish_reason: completion.finish_reason.clone(),
            latency_ms,
        };
        self.put(&key, &call)?;
        Ok(CachedReply { completion, hit: false, original_latency_ms: latency_ms })
    }

    /// Replies to several chats: those in the cache from it, the others from
    /// [`Generator::complete_batch`] (batched on the local decoder), each stored as it would
    /// be by [`Self::complete`] (its latency is its own prefill and decoding). `done` is
    /// called once per chat with the tokens generated for it (0 when served from the cache).
    pub fn complete_batch(&self, generator: &Generator, model: &str, chats: &[Vec<Message>], opts: &GenerateOptions, schema: Option<&ResponseSchema>, done: &dyn Fn(usize)) -> Vec<Result<CachedReply, GeneratorError>> {
        self.complete_batch_constrained(generator, model, chats, opts, schema, None, done)
    }

    /// [`Self::complete_batch`] with each reply's citations held to its list of page tags
    /// ([`Generator::complete_batch_constrained`]; the tags are part of the key).
    #[allow(clippy::too_many_arguments)]
    pub fn complete_batch_constrained(&self, generator: &Generator, model: &str, chats: &[Vec<Message>], opts: &GenerateOptions, schema: Option<&ResponseSchema>, citations: Option<&[Vec<String>]>, done: &dyn Fn(usize)) -> Vec<Result<CachedReply, GeneratorError>> {
        let keys: Vec<String> = chats.iter().enumerate().map(|(i, m)| Self::key_with(model, m, opts, schema, citations.and_then(|c| c.get(i)).map(Vec::as_slice))).collect();
        let mut out: Vec<Option<Result<CachedReply, GeneratorError>>> = (0..chats.len()).map(|_| None).collect();
        let mut missing = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match self.get(key) {
                Some(c) => {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    let completion = Completion { text: c.text, prompt_tokens: c.prompt_tokens, completion_tokens: c.completion_tokens, finish_reason: c.finish_reason, attempts: 0, seconds: 0.0 };
                    out[i] = Some(Ok(CachedReply { completion, hit: true, original_latency_ms: c.latency_ms }));
                    done(0);
                }
                None => missing.push(i),
            }
        }
        let asked: Vec<Vec<Message>> = missing.iter().map(|&i| chats[i].clone()).collect();
        let asked_tags: Option<Vec<Vec<String>>> = citations.map(|c| missing.iter().map(|&i| c.get(i).cloned().unwrap_or_default()).collect());
        // Each reply is stored as it finishes, so a run stopped part-way through a long batch
        // resumes with every reply it had.
        let call = |i: usize, completion: &Completion| CachedCall {
            model: model.to_string(),
            messages: chats[i].clone(),
            text: completion.text.clone(),
            prompt_tokens: completion.prompt_tokens,
            completion_tokens: completion.completion_tokens,
            finish_reason: completion.finish_reason.clone(),
            latency_ms: completion.seconds * 1e3,
        };
        let stored: std::sync::Mutex<Vec<Option<Result<(), GeneratorError>>>> = std::sync::Mutex::new((0..missing.len()).map(|_| None).collect());
        let replies = generator.complete_batch_constrained(&asked, opts, schema, asked_tags.as_deref(), &|j, r| {
            if let Ok(c) = r {
                let i = missing[j];
                stored.lock().expect("lock")[j] = Some(self.put(&keys[i], &call(i, c)));
            }
            done(r.as_ref().map_or(0, |c| c.completion_tokens))
        });
        let stored = stored.into_inner().expect("lock");
        for ((&i, reply), put) in missing.iter().zip(replies).zip(stored) {
            out[i] = Some(reply.and_then(|completion| {
                self.misses.fetch_add(1, Ordering::Relaxed);
                // Stored as it came (an endpoint's reply, or a decoder reply the callback missed: now).
                put.unwrap_or_else(|| self.put(&keys[i], &call(i, &completion)))?;
                let latency_ms = completion.seconds * 1e3;
                Ok(CachedReply { completion, hit: false, original_latency_ms: latency_ms })
            }));
        }
        out.into_iter().map(|r| r.expect("every chat answered")).collect()
    }

    /// Calls served from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Calls that went to the model so far.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> GenerateOptions {
        GenerateOptions { max_new_tokens: 16, temperature: 0.0, top_k: 0, top_p: 1.0, seed: 1, stop: vec![], ..Default::default() }
    }

    #[test]
    fn keys_change_with_every_input_and_entries_round_trip() {
        let m = vec![Message::user("expand: gate arms")];
        let k = CallCache::key("model-a", &m, &opts(), None);
        assert_eq!(k, CallCache::key("model-a", &m, &opts(), None));
        assert_ne!(k, CallCache::key("model-b", &m, &opts(), None));
        assert_ne!(k, CallCache::key("model-a", &[Message::user("expand: gate arm")], &opts(), None));
        assert_ne!(k, CallCache::key("model-a", &m, &GenerateOptions { seed: 2, ..opts() }, None));
        assert_ne!(k, CallCache::key("model-a", &m, &GenerateOptions { max_new_tokens: 17, ..opts() }, None));
        assert_ne!(k, CallCache::key("model-a", &m, &GenerateOptions { repetition_penalty: 1.1, ..opts() }, None));
        assert_ne!(k, CallCache::key("model-a", &m, &GenerateOptions { dry_multiplier: 0.8, ..opts() }, None));
        assert_ne!(k, CallCache::key("model-a", &m, &GenerateOptions { loop_stop: Some(gauge_chat::LoopStop::OFF), ..opts() }, None));
        // The batch size and an explicit default loop stop do not change replies.
        assert_eq!(k, CallCache::key("model-a", &m, &GenerateOptions { batch_size: 1, ..opts() }, None));
        assert_eq!(k, CallCache::key("model-a", &m, &GenerateOptions { loop_stop: Some(Default::default()), ..opts() }, None));
        let schema = ResponseSchema { name: "s".into(), schema: serde_json::json!({"type": "object"}) };
        assert_ne!(k, CallCache::key("model-a", &m, &opts(), Some(&schema)));

        let dir = tempfile::tempdir().unwrap();
        let cache = CallCache::new(dir.path().join("calls"));
        assert!(cache.get(&k).is_none());
        let call = CachedCall { model: "model-a".into(), messages: m.clone(), text: "gate arm, crossing gate".into(), prompt_tokens: 5, completion_tokens: 4, finish_reason: "eos".into(), latency_ms: 12.5 };
        cache.put(&k, &call).unwrap();
        assert_eq!(cache.get(&k).unwrap(), call);
        // Nothing but the entry is left behind (no temporary files).
        let shard = dir.path().join("calls").join(&k[..2]);
        let names: Vec<String> = std::fs::read_dir(&shard).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
        assert_eq!(names, vec![format!("{k}.json")]);
        // A corrupt entry is a miss, not an error.
        std::fs::write(shard.join(format!("{k}.json")), "{not json").unwrap();
        assert!(cache.get(&k).is_none());
        // A store whose rename fails (the entry's place is taken by a folder) is an error and
        // leaves no temporary file.
        let k2 = CallCache::key("model-c", &m, &opts(), None);
        let shard2 = dir.path().join("calls").join(&k2[..2]);
        std::fs::create_dir_all(shard2.join(format!("{k2}.json")).join("blocker")).unwrap();
        assert!(cache.put(&k2, &call).is_err());
        let left: Vec<String> = std::fs::read_dir(&shard2).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).filter(|n| n.ends_with(".tmp")).collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
