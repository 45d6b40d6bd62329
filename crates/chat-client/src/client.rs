//! The client: one endpoint, a bounded request rate, retries with backoff and `Retry-After`,
//! structured outputs with their fallback, and the token counts the server reports.
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::*;

/// Spaces request starts so that at most `rpm` start per minute.
pub(crate) struct RateLimiter {
    interval: Option<Duration>,
    next: Mutex<Instant>,
}

impl RateLimiter {
    pub(crate) fn new(rpm: u32) -> Self {
        RateLimiter { interval: (rpm > 0).then(|| Duration::from_secs_f64(60.0 / rpm as f64)), next: Mutex::new(Instant::now()) }
    }
    pub(crate) fn wait(&self) {
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
    /// A short-timeout agent for metadata that may not exist (models, props, tokenize).
    probe_agent: ureq::Agent,
    limiter: RateLimiter,
    jitter: Mutex<u64>,
    /// Why `auto` fell back to the prompt-only contract, once it has.
    fallback: Mutex<Option<String>>,
    /// The model's context, discovered once.
    context: OnceLock<Option<usize>>,
    /// Whether the server counts tokens for us (llama.cpp's `/tokenize`), probed once.
    tokenize: OnceLock<bool>,
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
    #[serde(default)]
    finish_reason: Option<String>,
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
        ChatClient {
            config,
            policy,
            url,
            key,
            agent,
            probe_agent: ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(10))).http_status_as_error(false).build().into(),
            limiter,
            jitter: Mutex::new(0x9E37_79B9_7F4A_7C15),
            fallback: Mutex::new(None),
            context: OnceLock::new(),
            tokenize: OnceLock::new(),
        }
    }

    /// Whether a key was found in the environment.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Error text for messages: the key masked first, then cut to 300 characters (cutting
    /// first could leave part of a key that straddles the cut unmasked).
    pub(crate) fn scrub(&self, text: &str) -> String {
        let masked = self.mask(text);
        let t: String = masked.chars().take(300).collect();
        t.replace('\n', " ")
    }

    /// The text with every occurrence of the key replaced by `[key]`.
    pub(crate) fn mask(&self, text: &str) -> String {
        match &self.key {
            Some(k) if text.contains(k.as_str()) => text.replace(k.as_str(), "[key]"),
            _ => text.to_string(),
        }
    }

    pub(crate) fn backoff(&self, retry: u32) -> Duration {
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
        if status >= 500 && is_context_overflow(&text) {
            // Deterministic: the same request overflows again, so it is not retried.
            let hint = " (the prompt plus max_tokens exceed the model's context: lower max_new_tokens, or set context_tokens so gauge fits the prompt)".to_string();
            return Attempt::Fail(LlmError::Rejected { url: self.url.clone(), status, message: self.scrub(&text), hint });
        }
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
        let Some((content, finish_reason)) = parsed.choices.into_iter().next().and_then(|c| c.message.content.map(|t| (t, c.finish_reason))) else {
            return Attempt::Fail(LlmError::BadResponse { url: self.url.clone(), message: "no choices[0].message.content".into() });
        };
        // A reply that echoes the key is masked before anything caches or writes it.
        Attempt::Done(ChatReply { content: self.mask(&content), usage: parsed.usage.unwrap_or_default(), attempts: 1, finish_reason })
    }

    /// Sends a chat for a free-text reply; retries 408/429/5xx, timeouts and connection
    /// failures with backoff.
    pub fn complete(&self, messages: &[Message], sampling: &Sampling) -> Result<ChatReply, LlmError> {
        self.send(messages, sampling, None)
    }

    /// Sends a chat whose reply must be JSON of `schema`, asked for as the config's
    /// [`StructuredOutput`] says. Under `auto`, a 4xx rejection of the schema field is
    /// answered by sending the same chat without it; when that succeeds the client keeps to
    /// the prompt-only contract for the rest of its life and [`Self::structured_status`]
    /// says why.
    pub fn complete_json(&self, messages: &[Message], sampling: &Sampling, schema: &ResponseSchema) -> Result<ChatReply, LlmError> {
        let format = match self.config.structured_output {
            StructuredOutput::Off => None,
            StructuredOutput::JsonObject => Some(serde_json::json!({ "type": "json_object" })),
            StructuredOutput::JsonSchema => Some(schema.response_format()),
            StructuredOutput::Auto => self.fallback.lock().expect("fallback lock").is_none().then(|| schema.response_format()),
        };
        let auto = self.config.structured_output == StructuredOutput::Auto && format.is_some();
        match self.send(messages, sampling, format) {
            Err(LlmError::Rejected { status, message, .. }) if auto && matches!(status, 400 | 415 | 422 | 501) => {
                let reply = self.send(messages, sampling, None)?;
                let mut fallback = self.fallback.lock().expect("fallback lock");
                if fallback.is_none() {
                    tracing::warn!("{}: the endpoint rejected `response_format: json_schema` (HTTP {status}); keeping to the prompt-only JSON contract for this run", self.url);
                    *fallback = Some(format!("HTTP {status}: {message}"));
                }
                Ok(reply)
            }
            other => other,
        }
    }

    /// The structured-output contract in use so far.
    pub fn structured_status(&self) -> StructuredStatus {
        let fallback_reason = self.fallback.lock().expect("fallback lock").clone();
        let used = match (self.config.structured_output, &fallback_reason) {
            (StructuredOutput::Off, _) | (StructuredOutput::Auto, Some(_)) => "prompt_only",
            (StructuredOutput::JsonObject, _) => "json_object",
            _ => "json_schema",
        };
        StructuredStatus { requested: self.config.structured_output, used: used.into(), fallback_reason }
    }

    fn send(&self, messages: &[Message], sampling: &Sampling, response_format: Option<serde_json::Value>) -> Result<ChatReply, LlmError> {
        let body = request_body(&self.config.model, messages, sampling, response_format);
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

    /// The server root (the base URL without its trailing `/v1`).
    fn root(&self) -> &str {
        let base = self.config.base_url.trim_end_matches('/');
        base.strip_suffix("/v1").unwrap_or(base)
    }

    /// One request, no retries, a short timeout: for metadata that may not exist.
    fn probe(&self, method: &str, url: &str, body: Option<&serde_json::Value>) -> Option<serde_json::Value> {
        let agent = &self.probe_agent;
        let auth = self.key.as_ref().map(|k| format!("Bearer {k}"));
        let mut resp = match (method, body) {
            ("POST", Some(b)) => {
                let mut r = agent.post(url).header("Content-Type", "application/json");
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(b.to_string()).ok()?
            }
            _ => {
                let mut r = agent.get(url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call().ok()?
            }
        };
        if resp.status().as_u16() != 200 {
            return None;
        }
        serde_json::from_str(&resp.body_mut().read_to_string().ok()?).ok()
    }

    /// The model's context in tokens: `context_tokens` from the config, else what the
    /// endpoint says (asked once): the model's entry in `/v1/models` (`max_model_len` from
    /// vLLM, `context_length` from OpenRouter and LM Studio, the served `meta.n_ctx` from
    /// llama.cpp), else llama.cpp's `/props`, else the trained `meta.n_ctx_train`. `None`
    /// when nothing says.
    pub fn context_tokens(&self) -> Option<usize> {
        if let Some(c) = self.config.context_tokens {
            return Some(c as usize);
        }
        *self.context.get_or_init(|| {
            let models = self.probe("GET", &format!("{}/models", self.config.base_url.trim_end_matches('/')), None);
            let entry = models.as_ref().and_then(|m| {
                let data = m["data"].as_array()?;
                data.iter().find(|e| e["id"].as_str() == Some(self.config.model.as_str())).or_else(|| (data.len() == 1).then(|| &data[0])).cloned()
            });
            let from_entry = entry.as_ref().and_then(|e| ["max_model_len", "context_length", "context_window", "max_context_length"].iter().find_map(|k| e[*k].as_u64()));
            let served = entry.as_ref().and_then(|e| e["meta"]["n_ctx"].as_u64());
            let trained = entry.as_ref().and_then(|e| e["meta"]["n_ctx_train"].as_u64());
            let props = || self.probe("GET", &format!("{}/props", self.root()), None).and_then(|p| p["default_generation_settings"]["n_ctx"].as_u64().or_else(|| p["n_ctx"].as_u64()));
            let found = from_entry.or(served).or_else(props).or(trained).map(|n| n as usize);
            tracing::debug!("{}: model context {:?} tokens", self.url, found);
            found
        })
    }

    /// Tokens of `text`: counted by the server when it offers llama.cpp's `/tokenize`, else
    /// [`estimate_tokens`].
    pub fn count_tokens(&self, text: &str) -> usize {
        let url = format!("{}/tokenize", self.root());
        let exact = *self.tokenize.get_or_init(|| self.probe("POST", &url, Some(&serde_json::json!({ "content": "probe" }))).is_some_and(|v| v["tokens"].is_array()));
        if exact {
            if let Some(v) = self.probe("POST", &url, Some(&serde_json::json!({ "content": text }))) {
                if let Some(t) = v["tokens"].as_array() {
                    return t.len();
                }
            }
        }
        estimate_tokens(text)
    }

    /// Tokens of a chat prompt: its messages' tokens plus [`TOKENS_PER_MESSAGE`] each.
    pub fn prompt_tokens(&self, messages: &[Message]) -> usize {
        messages.iter().map(|m| self.count_tokens(&m.content) + TOKENS_PER_MESSAGE).sum()
    }

    /// The configuration.
    pub fn config(&self) -> &ChatConfig {
        &self.config
    }
}
