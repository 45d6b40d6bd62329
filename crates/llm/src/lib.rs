//! A blocking client for OpenAI-compatible chat-completions endpoints.
//!
//! The same code talks to OpenAI, Gemini's OpenAI-compatible endpoint, DeepSeek, OpenRouter,
//! Ollama, vLLM or a llama.cpp server: only the base URL, the model name and the *name* of the
//! environment variable holding the key change. Requests are spaced to a requests-per-minute
//! budget; 429, 5xx, timeouts and dropped connections are retried with exponential backoff and
//! jitter, honouring `Retry-After`. The key is sent in the `Authorization` header only: it is
//! never part of a config, a log line or an error (server text is scrubbed of it too).
#![deny(missing_docs)]
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Endpoint settings (serde, with defaults). Holds the key's variable name, never the key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ChatConfig {
    /// Base URL up to `/v1` (the client appends `/chat/completions`).
    pub base_url: String,
    /// Model name as the endpoint knows it.
    pub model: String,
    /// Name of the environment variable holding the API key (unset or empty: no key sent,
    /// as local servers expect).
    pub api_key_env: String,
    /// Sampling temperature.
    pub temperature: f32,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// Ask for a JSON object (`response_format: {"type": "json_object"}`).
    pub json_mode: bool,
}

impl Default for ChatConfig {
    fn default() -> Self {
        ChatConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            temperature: 0.2,
            max_tokens: Some(1500),
            json_mode: true,
        }
    }
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

/// One chat message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Text.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message { role: "system".into(), content: content.into() }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message { role: "user".into(), content: content.into() }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message { role: "assistant".into(), content: content.into() }
    }
}

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

/// Spaces request starts so that at most `rpm` start per minute.
struct RateLimiter {
    interval: Option<Duration>,
    next: Mutex<Instant>,
}

impl RateLimiter {
    fn new(rpm: u32) -> Self {
        RateLimiter { interval: (rpm > 0).then(|| Duration::from_secs_f64(60.0 / rpm as f64)), next: Mutex::new(Instant::now()) }
    }
    fn wait(&self) {
        let Some(interval) = self.interval else { return };
        let start = {
            let mut next = self.next.lock().expect("rate limiter lock");
            let now = Instant::now();
            let start = (*next).max(now);
            *next = start + interval;
            start
        };
        let now = Instant::now();
        if start > now {
            std::thread::sleep(start - now);
        }
    }
}

/// A chat client shared by worker threads.
pub struct ChatClient {
    config: ChatConfig,
    policy: RetryPolicy,
    url: String,
    key: Option<String>,
    agent: ureq::Agent,
    limiter: RateLimiter,
    jitter: Mutex<u64>,
}

#[derive(Deserialize)]
struct CompletionBody {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

enum Attempt {
    Done(ChatReply),
    Retry { status: u16, message: String, wait: Option<Duration> },
    Fail(LlmError),
}

impl ChatClient {
    /// A client; reads the key from the variable `config.api_key_env` names.
    pub fn new(config: ChatConfig, policy: RetryPolicy) -> ChatClient {
        let key = std::env::var(&config.api_key_env).ok().filter(|k| !k.trim().is_empty());
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(policy.timeout)).http_status_as_error(false).build().into();
        let limiter = RateLimiter::new(policy.requests_per_minute);
        ChatClient { config, policy, url, key, agent, limiter, jitter: Mutex::new(0x9E37_79B9_7F4A_7C15) }
    }

    /// Whether a key was found in the environment.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn scrub(&self, text: &str) -> String {
        let mut t: String = text.chars().take(300).collect();
        if let Some(k) = &self.key {
            t = t.replace(k.as_str(), "[key]");
        }
        t.replace('\n', " ")
    }

    fn backoff(&self, retry: u32) -> Duration {
        let base = self.policy.backoff_base.as_secs_f64() * 2f64.powi(retry as i32);
        let mut state = self.jitter.lock().expect("jitter lock");
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let unit = (*state >> 11) as f64 / (1u64 << 53) as f64;
        let d = (base * (0.5 + unit)).min(self.policy.backoff_max.as_secs_f64());
        Duration::from_secs_f64(d)
    }

    fn attempt(&self, body: &serde_json::Value) -> Attempt {
        self.limiter.wait();
        let mut req = self.agent.post(&self.url).header("Content-Type", "application/json");
        if let Some(k) = &self.key {
            req = req.header("Authorization", &format!("Bearer {k}"));
        }
        let mut resp = match req.send(body.to_string()) {
            Ok(r) => r,
            Err(ureq::Error::Timeout(_)) => return Attempt::Retry { status: 0, message: format!("no answer within {:?}", self.policy.timeout), wait: None },
            Err(e) => return Attempt::Retry { status: 0, message: self.scrub(&e.to_string()), wait: None },
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|s| Duration::from_secs_f64(s.max(0.0)).min(self.policy.backoff_max));
        let text = match resp.body_mut().read_to_string() {
            Ok(t) => t,
            Err(ureq::Error::Timeout(_)) => return Attempt::Retry { status: 0, message: format!("body not complete within {:?}", self.policy.timeout), wait: None },
            Err(e) => return Attempt::Retry { status: 0, message: self.scrub(&e.to_string()), wait: None },
        };
        if status == 429 || status == 408 || status >= 500 {
            return Attempt::Retry { status, message: self.scrub(&text), wait: retry_after };
        }
        if !(200..300).contains(&status) {
            let hint = match status {
                401 | 403 => format!(" (check the key in ${})", self.config.api_key_env),
                404 => format!(" (check the base URL `{}` and the model `{}`)", self.config.base_url, self.config.model),
                _ => String::new(),
            };
            return Attempt::Fail(LlmError::Rejected { url: self.url.clone(), status, message: self.scrub(&text), hint });
        }
        let parsed: CompletionBody = match serde_json::from_str(&text) {
            Ok(p) => p,
            Err(e) => return Attempt::Fail(LlmError::BadResponse { url: self.url.clone(), message: format!("{e}: {}", self.scrub(&text)) }),
        };
        let Some(content) = parsed.choices.into_iter().next().and_then(|c| c.message.content) else {
            return Attempt::Fail(LlmError::BadResponse { url: self.url.clone(), message: "no choices[0].message.content".into() });
        };
        Attempt::Done(ChatReply { content, usage: parsed.usage.unwrap_or_default(), attempts: 1 })
    }

    /// Sends a chat; retries 408/429/5xx, timeouts and connection failures with backoff.
    pub fn complete(&self, messages: &[Message]) -> Result<ChatReply, LlmError> {
        let mut body = serde_json::json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
        });
        if let Some(m) = self.config.max_tokens {
            body["max_tokens"] = m.into();
        }
        if self.config.json_mode {
            body["response_format"] = serde_json::json!({ "type": "json_object" });
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.attempt(&body) {
                Attempt::Done(mut r) => {
                    r.attempts = attempts;
                    return Ok(r);
                }
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry { status, message, wait } => {
                    if attempts > self.policy.max_retries {
                        return Err(LlmError::Exhausted { url: self.url.clone(), status, attempts, message });
                    }
                    let wait = wait.unwrap_or_else(|| self.backoff(attempts - 1));
                    tracing::debug!("HTTP {status} from {}; retry {attempts} in {:.2} s", self.url, wait.as_secs_f64());
                    std::thread::sleep(wait);
                }
            }
        }
    }
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

    #[test]
    fn json_payload_unwraps_fences_and_chatter() {
        assert_eq!(json_payload("{\"a\":1}"), "{\"a\":1}");
        assert_eq!(json_payload("Sure!\n```json\n{\"a\":1}\n```\nDone."), "{\"a\":1}");
        assert_eq!(json_payload("Here: {\"a\":{\"b\":2}} hope it helps"), "{\"a\":{\"b\":2}}");
        assert_eq!(json_payload("no json"), "no json");
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
