//! The answer prompt: the user turn `answer` sends at inference and `synth-data --mode sft`
//! writes into training examples, rendered by one function so the two never drift apart.
use crate::GeneratorError;

/// `[source p. N]` or `[source pp. A-B]`: the tag before a passage, and the form a citation takes.
pub fn page_tag(source: &str, first: i32, last: i32) -> String {
    if first == last {
        format!("[{source} p. {first}]")
    } else {
        format!("[{source} pp. {first}-{last}]")
    }
}

/// One passage of the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptPassage {
    /// Source file.
    pub source: String,
    /// First page.
    pub page_start: i32,
    /// Last page.
    pub page_end: i32,
    /// Text.
    pub text: String,
}

impl PromptPassage {
    /// Its tag.
    pub fn tag(&self) -> String {
        page_tag(&self.source, self.page_start, self.page_end)
    }
}

/// Renders an answer template (`pipelines/prompts/answer_<name>.md`, Jinja) with `question`
/// and `passages` (each with `tag`, `text`, `source`, `page_start`, `page_end`).
pub fn render_answer_prompt(template: &str, question: &str, passages: &[PromptPassage]) -> Result<String, GeneratorError> {
    let mut env = minijinja::Environment::new();
    let err = |e: minijinja::Error| GeneratorError::Template(format!("answer template: {e}"));
    env.add_template("answer", template).map_err(err)?;
    let ps: Vec<serde_json::Value> = passages.iter().map(|p| serde_json::json!({ "tag": p.tag(), "text": p.text, "source": p.source, "page_start": p.page_start, "page_end": p.page_end })).collect();
    env.get_template("answer").and_then(|t| t.render(minijinja::context! { question => question, passages => ps })).map_err(err)
}
