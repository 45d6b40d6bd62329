//! One way to ask a language model for a reply, used by every gauge stage that calls one
//! (`answer`'s generator, `synth-data`'s teacher, and the judge and query rewriting to come).
//!
//! A [`Generator`] is either the local Burn decoder (a GGUF file or a Hugging Face folder) or
//! an OpenAI-compatible endpoint. Both take the same messages and [`GenerateOptions`], and
//! both honour a [`ResponseSchema`] when the reply must be JSON: the endpoint through
//! `response_format: json_schema` (with the `auto` fallback of [`gauge_chat_client::ChatClient`]),
//! the local decoder by constrained decoding ([`gauge_decoder::constrain`]). Before a prompt
//! is sent, [`Generator::fit`] counts its tokens against the model's context and shortens
//! the context passages instead of letting the server fail.
#![deny(missing_docs)]
pub mod cache;
pub mod likelihood;
pub mod query_likelihood;
pub mod structured;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use gauge_chat::GenerateOptions;
use gauge_decoder::{CitationVocab, DecoderError, LanguageModel, SchemaCompiler, TokenConstraint};
use gauge_chat_client::{ChatClient, ChatConfig, LlmError, Message, ResponseSchema, RetryPolicy, Sampling};
use serde::{Deserialize, Serialize};

/// Tokens kept free between the prompt, the reply budget and the context's end.
pub const CONTEXT_MARGIN: usize = 16;

/// Which model writes the replies.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GeneratorConfig {
    /// The Burn decoder: a GGUF file or a Hugging Face folder (or a name in the models directory).
    Local {
        /// Model file, folder or name.
        #[serde(default = "default_model")]
        model: String,
        /// A LoRA adapter (PEFT folder, e.g. `train-lora`'s `adapter/`): kept beside quantised
        /// blocks, merged into f32 weights.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        adapter: Option<String>,
    },
    /// An OpenAI-compatible endpoint (key from an environment variable only).
    Api(ChatConfig),
}

impl GeneratorConfig {
    /// The model as named: the local file, folder or name, or the endpoint's model.
    pub fn model_name(&self) -> &str {
        match self {
            GeneratorConfig::Local { model, .. } => model,
            GeneratorConfig::Api(c) => &c.model,
        }
    }

    /// One line for reports: ``local `MODEL` `` (`+ adapter `DIR``), or ``API `MODEL` at URL``.
    pub fn describe(&self) -> String {
        match self {
            GeneratorConfig::Local { model, adapter: None } => format!("local `{model}`"),
            GeneratorConfig::Local { model, adapter: Some(a) } => format!("local `{model}` + adapter `{a}`"),
            GeneratorConfig::Api(c) => format!("API `{}` at {}", c.model, c.base_url),
        }
    }
}

/// The local model fetched by `just models`.
pub fn default_model() -> String {
    "SmolLM2-135M-Instruct.Q4_1.gguf".into()
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig::Local { model: default_model(), adapter: None }
    }
}

/// The manifest entry of a local model (its file's hash; for a sharded folder, the index's),
/// so that a stage's fingerprint changes with the weights. `None` for an endpoint.
pub fn model_entry(config: &GeneratorConfig) -> Result<Vec<gauge_core::FileEntry>, GeneratorError> {
    let GeneratorConfig::Local { model, adapter } = config else { return Ok(Vec::new()) };
    let path = gauge_decoder::resolve(model)?;
    let file = if path.is_file() { path.clone() } else { path.join("model.safetensors") };
    let hash = if file.is_file() {
        gauge_core::hash::file_hash(&file).map_err(|e| GeneratorError::ModelFile(e.to_string()))?
    } else {
        gauge_core::hash::bytes_hash(std::fs::read_to_string(path.join("model.safetensors.index.json")).unwrap_or_default().as_bytes())
    };
    let mut entries = vec![gauge_core::FileEntry::hashed("model", path.display(), hash)];
    if let Some(dir) = adapter {
        let weights = Path::new(dir).join("adapter_model.safetensors");
        let hash = gauge_core::hash::file_hash(&weights).map_err(|e| GeneratorError::ModelFile(format!("adapter: {e} (pass a PEFT adapter folder, e.g. the adapter/ of a train-lora artifact)")))?;
        entries.push(gauge_core::FileEntry::hashed("adapter", dir, hash));
    }
    Ok(entries)
}

/// The request fields of `opts` for an OpenAI-compatible endpoint: the OpenAI ones
/// (temperature, top_p, frequency and presence penalties, stop, seed) and, only when set,
/// llama.cpp server's own (`top_k`, `min_p`, `repeat_penalty` with `repeat_last_n` — also
/// sent as vLLM's `repetition_penalty` — and `dry_*`). The n-gram ban and the loop stop have
/// no request field (an endpoint returns whole replies), so setting them is refused.
pub fn api_sampling(opts: &GenerateOptions) -> Result<Sampling, GeneratorError> {
    opts.validate()?;
    if opts.no_repeat_ngram_size > 0 {
        return Err(GeneratorError::Unsupported("generation.no_repeat_ngram_size is applied by the local decoder only (OpenAI-compatible servers have no such field); use dry_multiplier or frequency_penalty with an endpoint".into()));
    }
    if opts.constrain_citations {
        return Err(GeneratorError::Unsupported("generation.constrain_citations masks the local decoder's tokens (an endpoint's cannot be); set it to false with an endpoint".into()));
    }
    if opts.loop_stop.is_some_and(|l| l.enabled()) {
        return Err(GeneratorError::Unsupported("generation.loop_stop is applied by the local decoder only (an endpoint returns whole replies); remove it, or use dry_multiplier or frequency_penalty with an endpoint".into()));
    }
    let set = |v: f32, neutral: f32| (v != neutral).then_some(v);
    let mut extra = serde_json::Map::new();
    if opts.top_k > 0 {
        extra.insert("top_k".into(), opts.top_k.into());
    }
    if opts.min_p > 0.0 {
        extra.insert("min_p".into(), opts.min_p.into());
    }
    if opts.repetition_penalty != 1.0 {
        extra.insert("repeat_penalty".into(), opts.repetition_penalty.into());
        extra.insert("repeat_last_n".into(), opts.repeat_last_n.into());
        extra.insert("repetition_penalty".into(), opts.repetition_penalty.into());
    }
    if opts.dry().enabled() {
        extra.insert("dry_multiplier".into(), opts.dry_multiplier.into());
        extra.insert("dry_base".into(), opts.dry_base.into());
        extra.insert("dry_allowed_length".into(), opts.dry_allowed_length.into());
        extra.insert("dry_penalty_last_n".into(), opts.dry_penalty_last_n.into());
        extra.insert("dry_sequence_breakers".into(), opts.dry_sequence_breakers.clone().into());
    }
    Ok(Sampling {
        temperature: opts.temperature,
        max_tokens: Some(opts.max_new_tokens as u32),
        seed: Some(opts.seed),
        top_p: set(opts.top_p, 1.0),
        frequency_penalty: set(opts.frequency_penalty, 0.0),
        presence_penalty: set(opts.presence_penalty, 0.0),
        stop: opts.stop.clone(),
        extra,
    })
}

/// Why a reply could not be had.
#[derive(Debug, thiserror::Error)]
pub enum GeneratorError {
    /// The endpoint failed (after its retries).
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The local model failed.
    #[error(transparent)]
    Decoder(#[from] DecoderError),
    /// A generation setting is out of range.
    #[error(transparent)]
    Options(#[from] gauge_chat::OptionsError),
    /// A setting the chosen backend cannot apply (an endpoint has no n-gram ban or loop stop).
    #[error("{0}")]
    Unsupported(String),
    /// The model or adapter file cannot be read or hashed.
    #[error("{0}")]
    ModelFile(String),
    /// The device named cannot be used.
    #[error("{0}")]
    Device(String),
    /// The model cannot chat (no chat template) or its tokenizer failed.
    #[error("{0}")]
    Tokenizer(String),
    /// The JSON schema of a constrained reply cannot be compiled for this tokenizer.
    #[error("{0}")]
    Schema(String),
    /// The prompt does not fit the model's context.
    #[error("{0}")]
    Context(String),
    /// The model-call cache cannot be written.
    #[error("{0}")]
    Cache(String),
}

/// A reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The text (a JSON document when a schema was given and honoured).
    pub text: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// `eos`, `stop`, `length` (local) or `api`.
    pub finish_reason: String,
    /// HTTP attempts (0 for the local model).
    pub attempts: u32,
    /// Seconds this reply took: the call (endpoint), or its prefill plus its decoding (local;
    /// in a batch, the decoding overlaps its neighbours').
    pub seconds: f64,
}

/// A prompt's token ids and the constraint its reply is held to, if any.
type Prepared = (Vec<u32>, Option<Box<dyn TokenConstraint>>);

enum Backend {
    Local { lm: Box<LanguageModel>, compiler: OnceLock<Result<SchemaCompiler, String>>, citations: OnceLock<Result<Arc<CitationVocab>, String>>, busy: Mutex<()> },
    Api(Box<ChatClient>),
}

/// A model that answers chats.
pub struct Generator {
    backend: Backend,
    name: String,
}

impl Generator {
    /// Loads the local model onto `device`, or prepares the endpoint client.
    pub fn open(config: &GeneratorConfig, device: &str, retry: RetryPolicy) -> Result<Generator, GeneratorError> {
        Ok(match config {
            GeneratorConfig::Local { model, adapter } => {
                let device = gauge_tensor::device::parse(device).map_err(|e| GeneratorError::Device(e.to_string()))?;
                let options = gauge_decoder::LoadOptions { adapter: adapter.as_ref().map(std::path::PathBuf::from), ..Default::default() };
                let lm = LanguageModel::load_with(model, &device, &options)?;
                if lm.chat.is_none() {
                    return Err(GeneratorError::Tokenizer(format!("{}: the model has no chat template; use an instruction-tuned model", lm.source.display())));
                }
                Generator { backend: Backend::Local { lm: Box::new(lm), compiler: OnceLock::new(), citations: OnceLock::new(), busy: Mutex::new(()) }, name: match adapter { Some(a) => format!("{model} + {a}"), None => model.clone() } }
            }
            GeneratorConfig::Api(chat) => Generator { backend: Backend::Api(Box::new(ChatClient::new(chat.clone(), retry))), name: chat.model.clone() },
        })
    }

    /// The model's name as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether replies come from the local decoder (one at a time).
    pub fn is_local(&self) -> bool {
        matches!(self.backend, Backend::Local { .. })
    }

    /// The local model, when it is one.
    pub fn local_model(&self) -> Option<&LanguageModel> {
        match &self.backend {
            Backend::Local { lm, .. } => Some(lm),
            Backend::Api(_) => None,
        }
    }

    fn local_prompt(lm: &LanguageModel, messages: &[Message]) -> Result<Vec<u32>, GeneratorError> {
        let chat = lm.chat.as_ref().expect("checked at open");
        let msgs: Vec<Message> = messages.iter().map(|m| Message::new(&m.role, m.content.trim())).collect();
        let prompt = chat.render(&msgs, true)?;
        Ok(lm.tokenizer.encode(prompt.as_str(), false).map_err(|e| GeneratorError::Tokenizer(format!("tokenize: {e}")))?.get_ids().to_vec())
    }

    /// A reply to `messages`; with `schema`, a JSON document of that schema (guaranteed by
    /// constrained decoding locally; by the endpoint when it honours `response_format`).
    pub fn complete(&self, messages: &[Message], opts: &GenerateOptions, schema: Option<&ResponseSchema>) -> Result<Completion, GeneratorError> {
        match &self.backend {
            Backend::Local { lm, compiler, busy, .. } => {
                let ids = Self::local_prompt(lm, messages)?;
                let mut constraint = match schema {
                    Some(s) => {
                        let compiler = compiler.get_or_init(|| SchemaCompiler::new(&lm.tokenizer, &lm.eos_ids).map_err(|e| e.to_string())).as_ref().map_err(|e| GeneratorError::Schema(e.clone()))?;
                        Some(compiler.constraint(&s.schema)?)
                    }
                    None => None,
                };
                let _one_at_a_time = busy.lock().expect("generator lock");
                let g = lm.generate_with(&ids, opts, constraint.as_mut().map(|c| c as &mut dyn TokenConstraint))?;
                Ok(Self::local_completion(&g))
            }
            Backend::Api(client) => {
                let started = std::time::Instant::now();
                let sampling = api_sampling(opts)?;
                let reply = match schema {
                    Some(s) => client.complete_json(messages, &sampling, s)?,
                    None => client.complete(messages, &sampling)?,
                };
                Ok(Completion {
                    text: reply.content.trim().to_string(),
                    prompt_tokens: reply.usage.prompt_tokens as usize,
                    completion_tokens: reply.usage.completion_tokens as usize,
                    // The endpoint's reason (`length` when it ran out of tokens), else "api".
                    finish_reason: reply.finish_reason.unwrap_or_else(|| "api".into()),
                    attempts: reply.attempts,
                    seconds: started.elapsed().as_secs_f64(),
                })
            }
        }
    }

    fn local_completion(g: &gauge_decoder::Generation) -> Completion {
        Completion { text: g.text.trim().to_string(), prompt_tokens: g.prompt_tokens, completion_tokens: g.ids.len(), finish_reason: g.finish_reason.clone(), attempts: 0, seconds: g.prefill_seconds + g.decode_seconds }
    }

    /// Replies to several chats, in their order: the local decoder decodes
    /// `opts.batch_size` of them in lock-step (continuous batching; each reply is the one
    /// [`Self::complete`] gives alone); an endpoint is called once per chat. `done` is called
    /// as each reply finishes (progress bars).
    pub fn complete_batch(&self, chats: &[Vec<Message>], opts: &GenerateOptions, schema: Option<&ResponseSchema>, done: &dyn Fn()) -> Vec<Result<Completion, GeneratorError>> {
        self.complete_batch_each(chats, opts, schema, &|_, _| done())
    }

    /// [`Self::complete_batch`], calling `each(index, reply)` as each chat's reply finishes (in
    /// the order they finish), so a caller can journal it before the batch ends. A local
    /// decoder error reaches `each` as its message (the returned vector keeps the error itself).
    pub fn complete_batch_each(&self, chats: &[Vec<Message>], opts: &GenerateOptions, schema: Option<&ResponseSchema>, each: &dyn Fn(usize, &Result<Completion, GeneratorError>)) -> Vec<Result<Completion, GeneratorError>> {
        self.complete_batch_constrained(chats, opts, schema, None, each)
    }

    /// [`Self::complete_batch_each`]; with `citations` (one list of page tags per chat, local
    /// decoder only), every bracket a reply writes must be one of its chat's tags
    /// ([`gauge_decoder::citation`]): a reply cannot cite a passage it was not given.
    pub fn complete_batch_constrained(&self, chats: &[Vec<Message>], opts: &GenerateOptions, schema: Option<&ResponseSchema>, citations: Option<&[Vec<String>]>, each: &dyn Fn(usize, &Result<Completion, GeneratorError>)) -> Vec<Result<Completion, GeneratorError>> {
        if let Some(tags) = citations {
            if tags.len() != chats.len() || schema.is_some() {
                let r = || Err(GeneratorError::Schema(format!("citation constraints: {} tag lists for {} chats{}", tags.len(), chats.len(), if schema.is_some() { ", with a schema (one constraint per reply)" } else { "" })));
                return (0..chats.len()).map(|i| { let e = r(); each(i, &e); e }).collect();
            }
        }
        match &self.backend {
            Backend::Local { lm, compiler, citations: vocab, busy } => {
                let mut out: Vec<Option<Result<Completion, GeneratorError>>> = (0..chats.len()).map(|_| None).collect();
                let mut prompts = Vec::new();
                for (i, m) in chats.iter().enumerate() {
                    let prepared = Self::local_prompt(lm, m).and_then(|ids| {
                        let constraint: Option<Box<dyn TokenConstraint>> = match (schema, citations) {
                            (Some(s), _) => {
                                let compiler = compiler.get_or_init(|| SchemaCompiler::new(&lm.tokenizer, &lm.eos_ids).map_err(|e| e.to_string())).as_ref().map_err(|e| GeneratorError::Schema(e.clone()))?;
                                Some(Box::new(compiler.constraint(&s.schema)?))
                            }
                            (None, Some(tags)) => {
                                let vocab = vocab.get_or_init(|| CitationVocab::new(&lm.tokenizer).map(Arc::new).map_err(|e| e.to_string())).as_ref().map_err(|e| GeneratorError::Schema(e.clone()))?;
                                Some(Box::new(vocab.constraint(&tags[i])))
                            }
                            (None, None) => None,
                        };
                        Ok((ids, constraint))
                    });
                    match prepared {
                        Ok(p) => prompts.push((i, p)),
                        Err(e) => {
                            let r = Err(e);
                            each(i, &r);
                            out[i] = Some(r);
                        }
                    }
                }
                let index: Vec<usize> = prompts.iter().map(|(i, _)| *i).collect();
                let mut held: Vec<Prepared> = prompts.into_iter().map(|(_, p)| p).collect();
                let items = held.iter_mut().map(|(ids, c)| gauge_decoder::generate::BatchItem { prompt_ids: ids, constraint: c.as_deref_mut() }).collect();
                let _one_batch_at_a_time = busy.lock().expect("generator lock");
                let results = lm.generate_batch_observed(items, opts, opts.batch_size, &|j, r| {
                    let reply = r.as_ref().map(Self::local_completion).map_err(|e| GeneratorError::Decoder(gauge_decoder::DecoderError::Model(e.to_string())));
                    each(index[j], &reply);
                });
                for (i, r) in index.into_iter().zip(results) {
                    out[i] = Some(r.map(|g| Self::local_completion(&g)).map_err(GeneratorError::from));
                }
                out.into_iter().map(|r| r.expect("every chat answered")).collect()
            }
            Backend::Api(_) if citations.is_some() => (0..chats.len())
                .map(|i| {
                    let r = Err(GeneratorError::Schema(format!("{}: citation constraints need the local decoder (an endpoint's tokens cannot be masked); set constrain_citations = false", self.name)));
                    each(i, &r);
                    r
                })
                .collect(),
            Backend::Api(_) => chats
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let r = self.complete(m, opts, schema);
                    each(i, &r);
                    r
                })
                .collect(),
        }
    }

    /// The model's context in tokens (the local model's `max_position_embeddings`; for an
    /// endpoint, see [`ChatClient::context_tokens`]).
    pub fn context_tokens(&self) -> Option<usize> {
        match &self.backend {
            Backend::Local { lm, .. } => Some(lm.model.config.max_position_embeddings),
            Backend::Api(c) => c.context_tokens(),
        }
    }

    /// Tokens of the prompt `messages` make: exact for the local model (its chat template
    /// and tokenizer), counted by the server or estimated for an endpoint.
    pub fn prompt_tokens(&self, messages: &[Message]) -> Result<usize, GeneratorError> {
        match &self.backend {
            Backend::Local { lm, .. } => Ok(Self::local_prompt(lm, messages)?.len()),
            Backend::Api(c) => Ok(c.prompt_tokens(messages)),
        }
    }

    /// Shortens `passages` until the prompt `render(passages)` leaves `reply_tokens` (plus
    /// [`CONTEXT_MARGIN`]) free in the model's context; returns how many cuts were made
    /// (0 when it fits, or when the context is unknown).
    pub fn fit(&self, passages: &mut [String], reply_tokens: usize, render: impl Fn(&[String]) -> Vec<Message>) -> Result<usize, GeneratorError> {
        let Some(context) = self.context_tokens() else { return Ok(0) };
        let budget = context.checked_sub(reply_tokens + CONTEXT_MARGIN).ok_or_else(|| GeneratorError::Context(format!("the reply budget of {reply_tokens} tokens does not fit the model's context of {context}; lower max_new_tokens")))?;
        let failed = std::cell::RefCell::new(None);
        let count = |ps: &[String]| match self.prompt_tokens(&render(ps)) {
            Ok(n) => n,
            Err(e) => {
                failed.borrow_mut().get_or_insert(e);
                0
            }
        };
        let cuts = gauge_chat_client::fit_passages(passages, budget, count).map_err(|e| GeneratorError::Context(format!("{e} (context {context} tokens, {reply_tokens} kept for the reply)")))?;
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        if cuts > 0 {
            tracing::debug!("{}: {cuts} passage cut(s) to fit a context of {context} tokens", self.name);
        }
        Ok(cuts)
    }

    /// How JSON replies were obtained, for manifests: constrained decoding (local), or the
    /// endpoint's [`gauge_chat_client::StructuredStatus`].
    pub fn structured_status(&self) -> serde_json::Value {
        match &self.backend {
            Backend::Local { .. } => serde_json::json!({ "used": "constrained_decoding" }),
            Backend::Api(c) => serde_json::to_value(c.structured_status()).expect("status serialises"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_requests_carry_the_sampling_controls_they_accept() {
        let plain = api_sampling(&GenerateOptions::default()).unwrap();
        assert!(plain.extra.is_empty() && plain.frequency_penalty.is_none() && plain.top_p.is_none());
        let opts = GenerateOptions { repetition_penalty: 1.2, frequency_penalty: 0.3, presence_penalty: 0.1, min_p: 0.05, top_k: 40, dry_multiplier: 0.8, ..Default::default() };
        let s = api_sampling(&opts).unwrap();
        assert_eq!((s.frequency_penalty, s.presence_penalty), (Some(0.3), Some(0.1)));
        let f = |k: &str| s.extra[k].as_f64().unwrap() as f32;
        assert_eq!((f("repeat_penalty"), f("repetition_penalty"), f("repeat_last_n")), (1.2, 1.2, 64.0));
        assert_eq!((f("min_p"), f("top_k"), f("dry_multiplier"), f("dry_base"), f("dry_allowed_length")), (0.05, 40.0, 0.8, 1.75, 2.0));
        assert_eq!(s.extra["dry_sequence_breakers"], serde_json::json!(["\n", ":", "\"", "*"]));
        // What an endpoint cannot do is refused, by field name.
        let e = api_sampling(&GenerateOptions { no_repeat_ngram_size: 3, ..Default::default() }).unwrap_err().to_string();
        assert!(e.contains("no_repeat_ngram_size"), "{e}");
        let e = api_sampling(&GenerateOptions { loop_stop: Some(gauge_chat::LoopStop::default()), ..Default::default() }).unwrap_err().to_string();
        assert!(e.contains("loop_stop"), "{e}");
        assert!(api_sampling(&GenerateOptions { loop_stop: Some(gauge_chat::LoopStop::OFF), ..Default::default() }).is_ok());
        assert!(api_sampling(&GenerateOptions { min_p: 2.0, ..Default::default() }).unwrap_err().to_string().contains("min_p"));
    }
}
