//! What a reply is asked with, in one place every stage can use without a model or an HTTP
//! client: chat [`Message`]s and [`GenerateOptions`] (sampling, repetition controls, the loop
//! stop, batching). The local decoder (`gauge-decoder`) and the endpoint client
//! (`gauge-chat-client`) both read them; stages that only talk to an endpoint need nothing else.
use serde::{Deserialize, Serialize};

/// One chat message (OpenAI-compatible roles: `system`, `user`, `assistant`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Text.
    pub content: String,
}

impl Message {
    /// A message with any role.
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.into(), content: content.into() }
    }
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

/// A generation setting out of its range: which field, its value, the range it must be in.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("generation: {field} = {value} is out of range ({range})")]
pub struct OptionsError {
    /// The field (`top_p`, `min_p`, …).
    pub field: String,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub range: String,
}

/// How to generate (serde, with defaults: greedy, 256 new tokens).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GenerateOptions {
    /// New tokens at most.
    pub max_new_tokens: usize,
    /// 0: greedy; otherwise logits are divided by it before sampling.
    pub temperature: f32,
    /// Sample among the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Sample among the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Seed of sampling.
    pub seed: u64,
    /// Texts that end generation (not included in the output).
    pub stop: Vec<String>,
    /// Repetition penalty (transformers' `repetition_penalty`, llama.cpp's `repeat_penalty`):
    /// the logit of each token among the last `repeat_last_n` (prompt included) is divided
    /// by it when positive, multiplied when not. 1: off.
    pub repetition_penalty: f32,
    /// Tokens the repetition penalty looks back over (llama.cpp's `repeat_last_n`, 64);
    /// −1: the whole sequence (transformers); 0: none.
    pub repeat_last_n: i32,
    /// OpenAI's `frequency_penalty`: each generated token's logit loses this times its count.
    pub frequency_penalty: f32,
    /// OpenAI's `presence_penalty`: each token generated at least once loses this.
    pub presence_penalty: f32,
    /// transformers' `no_repeat_ngram_size`: no n-gram of the sequence (prompt included)
    /// occurs twice. 0: off.
    pub no_repeat_ngram_size: usize,
    /// llama.cpp's `min_p`: sample among tokens at least this times as likely as the best
    /// (0: off; greedy decoding ignores it).
    pub min_p: f32,
    /// llama.cpp's DRY: a token extending a repeat of `n` > `dry_allowed_length` tokens loses
    /// `dry_multiplier × dry_base^(n − dry_allowed_length)`. 0: off.
    pub dry_multiplier: f32,
    /// DRY's growth per token (llama.cpp 1.75).
    pub dry_base: f32,
    /// DRY: repeats this long or shorter are free (llama.cpp 2).
    pub dry_allowed_length: usize,
    /// DRY: tokens scanned, prompt included (llama.cpp 64); −1: all; 0: off.
    pub dry_penalty_last_n: i32,
    /// DRY: texts that end a repeat (llama.cpp's `["\n", ":", "\"", "*"]`).
    pub dry_sequence_breakers: Vec<String>,
    /// Ends generation (finish reason `loop`) when the reply's last tokens repeat one span
    /// (see [`LoopStop`]); the reply keeps the first copy. Unset: the local decoder's
    /// default ([`LoopStop::default`]); endpoints have none (they return whole replies), so
    /// setting it for one is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_stop: Option<LoopStop>,
    /// Answers only (the layer whose replies cite passages), local decoder only: inside a
    /// bracket, the reply may write only the page tags of the passages it was given (each
    /// passage's tag, or one page of a range), so no citation can be invented. Off by default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub constrain_citations: bool,
    /// Sequences the local decoder decodes in lock-step when a stage has several prompts
    /// (continuous batching; replies are identical at any size). 8 measured fastest per
    /// token on 2 cores (README, "generation speed"); endpoints ignore it.
    pub batch_size: usize,
    /// Write each piece to stderr as it is generated (a run setting: not part of a config).
    #[serde(skip)]
    pub stream: bool,
}

/// The default of [`GenerateOptions::batch_size`].
pub const DEFAULT_BATCH_SIZE: usize = 8;

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 256,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 42,
            stop: Vec::new(),
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            no_repeat_ngram_size: 0,
            min_p: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            loop_stop: None,
            constrain_citations: false,
            batch_size: DEFAULT_BATCH_SIZE,
            stream: false,
        }
    }
}

impl GenerateOptions {
    /// Refuses settings no engine accepts (one line naming the field and its range).
    pub fn validate(&self) -> Result<(), OptionsError> {
        let bad = |field: &str, value: String, range: &str| Err(OptionsError { field: field.into(), value, range: range.into() });
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad("temperature", self.temperature.to_string(), "0 for greedy, or above");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p.to_string(), "above 0, at most 1");
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad("repetition_penalty", self.repetition_penalty.to_string(), "above 0; 1 is off");
        }
        for (field, v) in [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(field, v.to_string(), "-2 to 2, as the OpenAI API");
            }
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p.to_string(), "0 to 1");
        }
        if !(self.dry_multiplier >= 0.0 && self.dry_multiplier.is_finite()) {
            return bad("dry_multiplier", self.dry_multiplier.to_string(), "0 (off) or above");
        }
        if self.dry_multiplier > 0.0 && !(self.dry_base >= 1.0 && self.dry_base.is_finite()) {
            return bad("dry_base", self.dry_base.to_string(), "1 or above");
        }
        for (field, v) in [("repeat_last_n", self.repeat_last_n), ("dry_penalty_last_n", self.dry_penalty_last_n)] {
            if v < -1 {
                return bad(field, v.to_string(), "-1 for the whole sequence, 0 for none, or a token count");
            }
        }
        // Lengths that allocate: a context is at most a few hundred thousand tokens.
        if self.max_new_tokens > 1 << 20 {
            return bad("max_new_tokens", self.max_new_tokens.to_string(), "at most 1048576");
        }
        if !(1..=4096).contains(&self.batch_size) {
            return bad("batch_size", self.batch_size.to_string(), "1 to 4096");
        }
        Ok(())
    }

    /// The repetition controls that differ from the defaults, for reports
    /// (`repetition_penalty 1.3, loop_stop off`), or `default controls`.
    pub fn describe_controls(&self) -> String {
        let d = GenerateOptions::default();
        let mut out = Vec::new();
        if self.temperature != d.temperature {
            out.push(format!("temperature {}", self.temperature));
        }
        if self.repetition_penalty != d.repetition_penalty || self.repeat_last_n != d.repeat_last_n {
            out.push(format!("repetition_penalty {} over {}", self.repetition_penalty, if self.repeat_last_n < 0 { "all".to_string() } else { self.repeat_last_n.to_string() }));
        }
        for (name, v, dv) in [("frequency_penalty", self.frequency_penalty, d.frequency_penalty), ("presence_penalty", self.presence_penalty, d.presence_penalty), ("min_p", self.min_p, d.min_p)] {
            if v != dv {
                out.push(format!("{name} {v}"));
            }
        }
        if self.no_repeat_ngram_size != d.no_repeat_ngram_size {
            out.push(format!("no_repeat_ngram_size {}", self.no_repeat_ngram_size));
        }
        if self.dry().enabled() {
            out.push(format!("DRY {} × {}^(n − {}) over {}", self.dry_multiplier, self.dry_base, self.dry_allowed_length, self.dry_penalty_last_n));
        }
        match self.loop_stop {
            Some(l) if !l.enabled() => out.push("loop_stop off".into()),
            Some(l) if l != LoopStop::default() => out.push(format!("loop_stop {} copies ≥ {} tokens", l.repeats, l.min_tokens)),
            _ => {}
        }
        if self.constrain_citations {
            out.push("citations constrained to the given tags".into());
        }
        if out.is_empty() {
            "default controls".into()
        } else {
            out.join(", ")
        }
    }

    /// The DRY settings.
    pub fn dry(&self) -> DrySettings {
        DrySettings { multiplier: self.dry_multiplier, base: self.dry_base, allowed_length: self.dry_allowed_length, penalty_last_n: self.dry_penalty_last_n }
    }

    /// The loop stop in force on the local decoder.
    pub fn local_loop_stop(&self) -> LoopStop {
        self.loop_stop.unwrap_or_default()
    }
}

/// DRY's settings (llama.cpp's `dry_*` sampling parameters).
#[derive(Debug, Clone, PartialEq)]
pub struct DrySettings {
    /// Penalty scale (0: off).
    pub multiplier: f32,
    /// Growth of the penalty with each token past the allowed length (below 1: off).
    pub base: f32,
    /// Repeats this long or shorter are not penalised.
    pub allowed_length: usize,
    /// Tokens scanned for repeats (prompt included): 0 off, −1 all.
    pub penalty_last_n: i32,
}

impl DrySettings {
    /// Whether these settings penalise anything (llama.cpp: multiplier ≠ 0, base ≥ 1, a window).
    pub fn enabled(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n != 0
    }
}

/// When a generation counts as looping: its last tokens are `repeats` or more copies of one
/// span in a row, covering at least `min_tokens` tokens. The reply keeps the first copy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LoopStop {
    /// Copies in a row that end generation (below 2: off).
    pub repeats: usize,
    /// Tokens the copies must cover together (short repeats such as `| --- | --- |` go on).
    pub min_tokens: usize,
}

impl Default for LoopStop {
    /// The local decoder's default: three copies covering 32 tokens or more.
    fn default() -> Self {
        LoopStop { repeats: 3, min_tokens: 32 }
    }
}

impl LoopStop {
    /// Off.
    pub const OFF: LoopStop = LoopStop { repeats: 0, min_tokens: 0 };

    /// Whether it can stop anything.
    pub fn enabled(&self) -> bool {
        self.repeats >= 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_settings_are_refused_by_name() {
        let err = |o: GenerateOptions| o.validate().unwrap_err().to_string();
        assert!(GenerateOptions::default().validate().is_ok());
        assert!(err(GenerateOptions { repetition_penalty: 0.0, ..Default::default() }).contains("repetition_penalty"));
        assert!(err(GenerateOptions { frequency_penalty: 2.5, ..Default::default() }).contains("frequency_penalty"));
        assert!(err(GenerateOptions { min_p: 1.5, ..Default::default() }).contains("min_p"));
        assert!(err(GenerateOptions { dry_multiplier: 0.8, dry_base: 0.5, ..Default::default() }).contains("dry_base"));
        assert!(err(GenerateOptions { repeat_last_n: -2, ..Default::default() }).contains("repeat_last_n"));
        assert!(err(GenerateOptions { top_p: 0.0, ..Default::default() }).contains("top_p"));
        // Unknown fields are refused by the config reader.
        assert!(serde_json::from_str::<GenerateOptions>(r#"{"repetition_penalty": 1.1, "repeat_penalty": 1.1}"#).is_err());
        let o: GenerateOptions = serde_json::from_str(r#"{"dry_multiplier": 0.8, "loop_stop": {"repeats": 0}}"#).unwrap();
        assert_eq!(o.dry_multiplier, 0.8);
        assert!(!o.local_loop_stop().enabled());
    }

    #[test]
    fn messages_read_and_write_the_openai_shape() {
        let m = Message::user("hi");
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"role":"user","content":"hi"}"#);
        assert_eq!(Message::new("system", "x"), Message::system("x"));
        assert!(serde_json::from_str::<Message>(r#"{"role":"user"}"#).is_err());
    }
}
