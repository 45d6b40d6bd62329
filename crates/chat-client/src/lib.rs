//! A blocking client for OpenAI-compatible chat-completions endpoints.
//!
//! The same code talks to OpenAI, Gemini's OpenAI-compatible endpoint, DeepSeek, OpenRouter,
//! Ollama, vLLM or a llama.cpp server: only the base URL, the model name and the *name* of the
//! environment variable holding the key change. Requests are spaced to a requests-per-minute
//! budget; 429, 5xx, timeouts and dropped connections are retried with exponential backoff and
//! jitter, honouring `Retry-After`. The key is sent in the `Authorization` header only: it is
//! never part of a config, a log line or an error (server text is scrubbed of it too).
#![deny(missing_docs)]
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Endpoint settings (serde, with defaults). Holds the key's variable name, never the key.
/// Sampling and length are per request ([`Sampling`]): they belong to the stage's own
/// `generation` settings, shared with the local decoder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ChatConfig {
    /// Base URL up to `/v1` (the client appends `/chat/completions`).
    pub base_url: String,
    /// Model name as the endpoint knows it.
    pub model: String,
    /// Name of the environment variable holding the API key (unset or empty: no key sent,
    /// as local servers expect). A value that is not a variable name — the key itself, a
    /// common slip — is refused when the config is read, so a key never reaches a manifest.
    #[serde(deserialize_with = "env_var_name")]
    #[schemars(with = "String")]
    pub api_key_env: String,
    /// How replies that must be JSON are asked for (see [`StructuredOutput`]).
    pub structured_output: StructuredOutput,
    /// The model's context in tokens, when the endpoint does not say (its `/v1/models`
    /// metadata, or llama.cpp's `/props`, is asked first).
    pub context_tokens: Option<u32>,
}

/// Checks that `name` can be an environment variable's name and does not look like an API key
/// pasted in its place; the error never repeats the value.
pub fn check_api_key_env(name: &str) -> Result<(), String> {
    let fix = "put the key in an environment variable (export OPENAI_API_KEY=…) and set api_key_env to the variable's name";
    if name.is_empty() {
        return Ok(());
    }
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("api_key_env is not the name of an environment variable (letters, digits and `_`; {} characters given, not shown in case it is a key): {fix}", name.chars().count()));
    }
    // Variable names are words joined by `_`; keys are long runs of mixed letters and digits.
    // Providers' prefixes (OpenAI, Hugging Face, Groq, GitHub, Google), or a run of ≥ 16 mixed
    // lower-case letters and digits between underscores.
    let prefixed = ["sk-", "hf_", "gsk_", "ghp_", "github_pat_", "AIza", "xai-"].iter().any(|p| name.starts_with(p)) && name.len() >= 20;
    let mixed_run = name.split('_').any(|part| part.len() >= 16 && part.chars().any(|c| c.is_ascii_digit()) && part.chars().any(|c| c.is_ascii_lowercase()));
    let key_like = prefixed || mixed_run;
    if key_like {
        return Err(format!("api_key_env looks like an API key rather than a variable name ({} characters, not shown): {fix}", name.len()));
    }
    Ok(())
}

fn env_var_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    check_api_key_env(&name).map_err(serde::de::Error::custom)?;
    Ok(name)
}

/// How a reply that must be JSON is asked for.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// `response_format: {"type": "json_schema", ...}` with the reply's JSON Schema (OpenAI,
    /// vLLM, Ollama and llama.cpp's server accept it; the local ones constrain decoding to
    /// it). When the endpoint rejects the field with a 4xx, the client falls back, once and
    /// for the rest of the run, to the prompt-only contract (and says so in the manifest).
    #[default]
    Auto,
    /// Always send the schema; a rejection is an error.
    JsonSchema,
    /// `response_format: {"type": "json_object"}`: some JSON object, no schema.
    JsonObject,
    /// Nothing in the request: the prompt alone states the contract (plus a repair round).
    Off,
}

/// The JSON Schema a reply must satisfy, named as `response_format.json_schema.name`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseSchema {
    /// Name (letters, digits, `_`, `-`).
    pub name: String,
    /// The schema.
    pub schema: serde_json::Value,
}

impl ResponseSchema {
    /// The schema of a Rust type, derived with `schemars` from the same type that parses the
    /// reply (doc comments become `description`s; `deny_unknown_fields` becomes
    /// `additionalProperties: false`).
    pub fn of<T: schemars::JsonSchema>(name: &str) -> ResponseSchema {
        // Nested types are inlined: no `$ref`, which not every server's grammar compiler follows.
        let generator = schemars::generate::SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
        let mut schema = serde_json::to_value(generator.into_root_schema_for::<T>()).expect("schemas serialise");
        if let Some(o) = schema.as_object_mut() {
            o.remove("$schema");
        }
        ResponseSchema { name: name.to_string(), schema }
    }

    /// Whether OpenAI's `strict` mode accepts the schema: every object closed
    /// (`additionalProperties: false`) with all its properties required.
    pub fn is_strict(&self) -> bool {
        fn strict(v: &serde_json::Value) -> bool {
            match v {
                serde_json::Value::Object(o) => {
                    if let Some(props) = o.get("properties").and_then(|p| p.as_object()) {
                        let required: Vec<&str> = o.get("required").and_then(|r| r.as_array()).map(|r| r.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
                        if o.get("additionalProperties") != Some(&serde_json::Value::Bool(false)) || props.keys().any(|k| !required.contains(&k.as_str())) {
                            return false;
                        }
                    }
                    o.values().all(strict)
                }
                serde_json::Value::Array(a) => a.iter().all(strict),
                _ => true,
            }
        }
        strict(&self.schema)
    }

    /// The `response_format` field asking for this schema.
    pub fn response_format(&self) -> serde_json::Value {
        serde_json::json!({ "type": "json_schema", "json_schema": { "name": self.name, "schema": self.schema, "strict": self.is_strict() } })
    }
}

/// What structured-output contract a run actually used (for manifests).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StructuredStatus {
    /// The configured mode.
    pub requested: StructuredOutput,
    /// `json_schema`, `json_object` or `prompt_only`.
    pub used: String,
    /// Why the client fell back to the prompt-only contract (the endpoint's rejection).
    pub fallback_reason: Option<String>,
}

impl Default for ChatConfig {
    fn default() -> Self {
        ChatConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            structured_output: StructuredOutput::Auto,
            context_tokens: None,
        }
    }
}

/// Sampling and length of one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sampling {
    /// Temperature (0: greedy).
    pub temperature: f32,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// Seed, for endpoints that honour one.
    pub seed: Option<u64>,
    /// Nucleus sampling (`top_p`), sent when set.
    pub top_p: Option<f32>,
    /// OpenAI's `frequency_penalty`, sent when set.
    pub frequency_penalty: Option<f32>,
    /// OpenAI's `presence_penalty`, sent when set.
    pub presence_penalty: Option<f32>,
    /// Stop strings (`stop`), sent when any.
    pub stop: Vec<String>,
    /// Fields outside the OpenAI API that llama.cpp's server accepts (`top_k`, `min_p`,
    /// `repeat_penalty`, `repeat_last_n`, `dry_*`; vLLM reads `repetition_penalty`, `top_k`
    /// and `min_p`): added to the request as they are. Leave empty for OpenAI itself, which
    /// refuses unknown fields.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// How hard to try (not part of any fingerprint: it does not change what a good answer is).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubles each retry, with ±50 % jitter.
    pub backoff_base: Duration,
    /// Backoff ceiling (also caps `Retry-After`).
    pub backoff_max: Duration,
    /// Requests per minute across all threads sharing the client (0: unlimited).
    pub requests_per_minute: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            timeout: Duration::from_secs(120),
            max_retries: 6,
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(120),
            requests_per_minute: 60,
        }
    }
}

pub use gauge_chat::Message;

mod client;
pub use client::ChatClient;

/// Token usage as the endpoint reports it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
    }
}

/// A completion.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatReply {
    /// The assistant's text.
    pub content: String,
    /// Tokens used (summed over the attempts that returned a body).
    pub usage: Usage,
    /// HTTP attempts made.
    pub attempts: u32,
    /// The endpoint's `choices[0].finish_reason` (`stop`, `length`, …), when it sent one.
    pub finish_reason: Option<String>,
}

/// Why a completion failed (after retries where retrying made sense).
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum LlmError {
    /// The endpoint kept answering with a retryable status.
    #[error("{url}: HTTP {status} after {attempts} attempts: {message}")]
    Exhausted {
        /// Endpoint.
        url: String,
        /// Last status (0: timeout or connection failure).
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// Last error text (scrubbed of the key).
        message: String,
    },
    /// A status that retrying will not fix (400, 401, 403, 404…).
    #[error("{url}: HTTP {status}: {message}{hint}")]
    Rejected {
        /// Endpoint.
        url: String,
        /// Status.
        status: u16,
        /// Server text (scrubbed of the key).
        message: String,
        /// What to check.
        hint: String,
    },
    /// The body was not a chat completion.
    #[error("{url}: not an OpenAI-style chat completion ({message})")]
    BadResponse {
        /// Endpoint.
        url: String,
        /// What was wrong.
        message: String,
    },
}

impl LlmError {
    /// Short reason for failure records.
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// Tokens a chat template adds around each message (role markers), as counted by
/// [`ChatClient::prompt_tokens`].
pub const TOKENS_PER_MESSAGE: usize = 8;

/// A conservative token count for text when no tokenizer is at hand: one token per 3 bytes
/// (English prose runs at about 4 bytes per token in the tokenizers gauge meets; digits and
/// identifiers such as `§ 174.63` run closer to 1-2).
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(3)
}

/// Shortens `passages` until `count(passages)` is at most `budget`: the longest passage is
/// cut (at a word boundary, marked with ` …`) by about the overflow, and the count is taken
/// again on the whole list. Returns how many cuts were made, or an error when the passages are down to their
/// floor (48 characters each) and the prompt still does not fit.
pub fn fit_passages(passages: &mut [String], budget: usize, count: impl Fn(&[String]) -> usize) -> Result<usize, String> {
    const FLOOR: usize = 48;
    const MARK: &str = " …";
    let mut cuts = 0;
    loop {
        let n = count(passages);
        if n <= budget {
            return Ok(cuts);
        }
        // Only passages that a cut still shortens (longer than the floor plus the marker).
        let longest = passages.iter().map(|p| p.len()).enumerate().filter(|&(_, l)| l > FLOOR + MARK.len()).max_by_key(|&(i, l)| (l, std::cmp::Reverse(i)));
        let Some((i, len)) = longest else {
            return Err(format!("the prompt needs {n} tokens even with every passage cut to {FLOOR} characters; the budget is {budget}"));
        };
        // Cut the overflow at 3 bytes per token plus 5 %, then count again (`count` always
        // sees the whole list: it renders the full prompt).
        let over = n - budget;
        let target = len.saturating_sub(over * 3 + len / 20).max(FLOOR);
        let p = &passages[i];
        let mut end = target.min(p.len());
        while !p.is_char_boundary(end) {
            end -= 1;
        }
        let cut = p[..end].rfind(char::is_whitespace).filter(|&w| w > end / 2).unwrap_or(end);
        passages[i] = format!("{}{MARK}", p[..cut].trim_end());
        cuts += 1;
    }
}

/// The JSON body of a chat-completions request: the OpenAI fields (each optional one only
/// when set), then `sampling.extra`.
pub fn request_body(model: &str, messages: &[Message], sampling: &Sampling, response_format: Option<serde_json::Value>) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": model,
        "messages": messages,
        "temperature": sampling.temperature,
    });
    if let Some(m) = sampling.max_tokens {
        body["max_tokens"] = m.into();
    }
    if let Some(seed) = sampling.seed {
        body["seed"] = seed.into();
    }
    if let Some(p) = sampling.top_p {
        body["top_p"] = p.into();
    }
    if let Some(f) = sampling.frequency_penalty {
        body["frequency_penalty"] = f.into();
    }
    if let Some(p) = sampling.presence_penalty {
        body["presence_penalty"] = p.into();
    }
    if !sampling.stop.is_empty() {
        body["stop"] = sampling.stop.clone().into();
    }
    if let Some(f) = response_format {
        body["response_format"] = f;
    }
    for (k, v) in &sampling.extra {
        body[k] = v.clone();
    }
    body
}

/// Whether a server error says the request overflowed the model's context (llama.cpp:
/// "Context size has been exceeded"; others: "maximum context length").
pub fn is_context_overflow(text: &str) -> bool {
    let t = text.to_lowercase();
    t.contains("context") && (t.contains("exceed") || t.contains("maximum context length") || t.contains("too long"))
}

/// The JSON object inside a reply: the text itself, or the first fenced ```json block, or
/// the span from the first `{` to the last `}`.
pub fn json_payload(content: &str) -> &str {
    let t = content.trim();
    if let Some(start) = t.find("```") {
        let after = &t[start + 3..];
        let after = after.strip_prefix("json").unwrap_or(after);
        if let Some(end) = after.find("```") {
            return after[..end].trim();
        }
    }
    match (t.find('{'), t.rfind('}')) {
        (Some(a), Some(b)) if b > a => &t[a..=b],
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::RateLimiter;
    use std::time::Instant;

    #[test]
    fn json_payload_unwraps_fences_and_chatter() {
        assert_eq!(json_payload("{\"a\":1}"), "{\"a\":1}");
        assert_eq!(json_payload("Sure!\n```json\n{\"a\":1}\n```\nDone."), "{\"a\":1}");
        assert_eq!(json_payload("Here: {\"a\":{\"b\":2}} hope it helps"), "{\"a\":{\"b\":2}}");
        assert_eq!(json_payload("no json"), "no json");
    }

    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Reply {
        /// The question.
        question: String,
        tags: Vec<String>,
        score: Option<u32>,
    }

    #[test]
    fn response_schemas_come_from_the_rust_type() {
        let s = ResponseSchema::of::<Reply>("reply");
        assert_eq!(s.schema["type"], "object");
        assert_eq!(s.schema["additionalProperties"], false);
        assert_eq!(s.schema["properties"]["question"]["description"], "The question.");
        assert_eq!(s.schema["properties"]["tags"]["items"]["type"], "string");
        assert!(s.schema.get("$schema").is_none());
        // `score` is optional, so OpenAI's strict mode would refuse the schema.
        assert!(!s.is_strict());
        let f = s.response_format();
        assert_eq!(f["type"], "json_schema");
        assert_eq!(f["json_schema"]["name"], "reply");
        assert_eq!(f["json_schema"]["strict"], false);
        #[derive(schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Closed {
            a: String,
        }
        assert!(ResponseSchema::of::<Closed>("closed").is_strict());
    }

    #[test]
    fn passages_are_cut_longest_first_at_word_boundaries() {
        let words = |n: usize| (0..n).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
        let mut ps = vec![words(200), words(20), words(100)];
        let count = |ps: &[String]| ps.iter().map(|p| estimate_tokens(p)).sum::<usize>() + 50;
        let before = count(&ps);
        let cuts = fit_passages(&mut ps, 400, count).unwrap();
        assert!(cuts >= 1 && count(&ps) <= 400, "{} → {}", before, count(&ps));
        assert!(ps[0].ends_with(" …") && ps[0].split_whitespace().rev().nth(1).unwrap().starts_with("word"), "{}", ps[0]);
        assert_eq!(ps[1], words(20), "the short passage is untouched");
        assert_eq!(fit_passages(&mut ps, 10_000, count), Ok(0));
        assert!(fit_passages(&mut ps, 40, count).unwrap_err().contains("budget is 40"));
    }

    #[test]
    fn request_bodies_carry_only_the_fields_set() {
        let m = [Message::user("hi")];
        let plain = request_body("m", &m, &Sampling { temperature: 0.0, max_tokens: Some(8), seed: Some(1), ..Default::default() }, None);
        let mut keys: Vec<&str> = plain.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec!["max_tokens", "messages", "model", "seed", "temperature"]);
        let mut extra = serde_json::Map::new();
        extra.insert("repeat_penalty".into(), 1.1.into());
        let s = Sampling { frequency_penalty: Some(0.5), presence_penalty: Some(0.25), top_p: Some(0.9), stop: vec!["END".into()], extra, ..Default::default() };
        let b = request_body("m", &m, &s, Some(serde_json::json!({"type": "json_object"})));
        assert_eq!(b["frequency_penalty"], 0.5);
        assert_eq!(b["presence_penalty"], 0.25);
        assert_eq!(b["top_p"].as_f64().unwrap() as f32, 0.9);
        assert_eq!(b["stop"], serde_json::json!(["END"]));
        assert_eq!(b["repeat_penalty"], 1.1);
        assert_eq!(b["response_format"]["type"], "json_object");
    }

    #[test]
    fn context_overflows_are_recognised() {
        assert!(is_context_overflow(r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#));
        assert!(is_context_overflow("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"));
        assert!(!is_context_overflow(r#"{"error":{"message":"boom"}}"#));
        assert!(!is_context_overflow("CUDA out of memory"));
    }

    #[test]
    fn backoff_doubles_with_jitter_and_a_ceiling() {
        let policy = RetryPolicy { backoff_base: Duration::from_millis(100), backoff_max: Duration::from_millis(1000), ..RetryPolicy::default() };
        let c = ChatClient::new(ChatConfig { api_key_env: "GAUGE_LLM_TEST_UNSET".into(), ..ChatConfig::default() }, policy);
        for retry in 0..6 {
            let d = c.backoff(retry).as_secs_f64();
            let base = 0.1 * 2f64.powi(retry as i32);
            assert!(d >= (base * 0.5).min(1.0) - 1e-9 && d <= (base * 1.5).min(1.0) + 1e-9, "retry {retry}: {d}");
        }
        assert!(!c.has_key());
    }

    #[test]
    fn the_key_is_masked_before_text_is_cut_and_in_replies() {
        let key = "sk-test-0123456789abcdefghijklmnopqrstuvwxyz";
        std::env::set_var("GAUGE_LLM_TEST_MASK_KEY", key);
        let c = ChatClient::new(ChatConfig { api_key_env: "GAUGE_LLM_TEST_MASK_KEY".into(), ..ChatConfig::default() }, RetryPolicy::default());
        // The key straddles the 300-character cut: no part of it may survive.
        let text = format!("{}{key} and more", "x".repeat(290));
        let scrubbed = c.scrub(&text);
        assert!(!scrubbed.contains("sk-test") && !scrubbed.contains("0123"), "{scrubbed}");
        assert!(scrubbed.ends_with("[key] and "), "cut at 300 characters after masking: {scrubbed}");
        assert_eq!(c.mask(&format!("echo: {key}!")), "echo: [key]!");
    }

    #[test]
    fn api_key_env_must_be_a_variable_name() {
        for ok in ["", "OPENAI_API_KEY", "GAUGE_NO_SUCH_KEY", "_x1", "MY_PROVIDER_TOKEN_2"] {
            assert!(check_api_key_env(ok).is_ok(), "{ok}");
        }
        let key = "sk-proj-AbCdEf0123456789GhIjKl";
        for bad in [key, "abcdef0123456789abcdef0123456789", "1ABC", "my key", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "gsk_aB3dE5gH7jK9mN1pQ3sT5vW7"] {
            let e = check_api_key_env(bad).unwrap_err();
            assert!(!e.contains(bad), "the error repeats the value: {e}");
        }
        // Refused where the config is read, so it never reaches a manifest.
        let e = serde_json::from_value::<ChatConfig>(serde_json::json!({ "api_key_env": key })).unwrap_err().to_string();
        assert!(e.contains("api_key_env") && !e.contains(key), "{e}");
    }

    #[test]
    fn rate_limiter_spaces_requests() {
        let l = RateLimiter::new(600); // one per 100 ms
        let t = Instant::now();
        for _ in 0..4 {
            l.wait();
        }
        let e = t.elapsed().as_secs_f64();
        assert!(e >= 0.29, "4 requests at 600/min start over ≥ 0.3 s, took {e}");
    }
}
