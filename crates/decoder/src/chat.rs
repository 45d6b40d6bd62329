//! Chat templates: the model's own Jinja template (`chat_template` in `tokenizer_config.json`
//! or `tokenizer.chat_template` in GGUF), rendered with minijinja as Hugging Face renders it.
use crate::DecoderError;

pub use gauge_chat::Message;

/// A model's chat template.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// A template with the special tokens it may refer to.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> ChatTemplate {
        ChatTemplate { source: source.into(), bos_token: bos_token.into(), eos_token: eos_token.into() }
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages`, ending with the assistant's turn opened when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, DecoderError> {
        let mut env = minijinja::Environment::new();
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> { Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg)) });
        // Templates written for Python's Jinja call string methods (`.strip()`, `.startswith()`).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_template("chat", &self.source).map_err(|e| DecoderError::Model(format!("chat template does not parse: {e}")))?;
        let tmpl = env.get_template("chat").expect("added above");
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| DecoderError::Model(format!("chat template failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_with_a_default_system_turn() {
        let t = ChatTemplate::new(
            "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
            "",
            "<|im_end|>",
        );
        let s = t.render(&[Message::new("user", "Hi")], true).unwrap();
        assert_eq!(s, "<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        let bad = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", "", "");
        assert!(bad.render(&[], true).unwrap_err().to_string().contains("roles must alternate"));
    }
}
