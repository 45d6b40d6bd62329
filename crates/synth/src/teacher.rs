//! Prompts (template files under `pipelines/prompts/`) and the teacher's strict JSON reply.
use std::collections::BTreeMap;
use std::path::Path;

use gauge_core::schema::ChunkRecord;
use serde::Deserialize;

use crate::plan::Style;

/// The reasoning phases a reply must walk through, in order.
pub const PHASES: [&str; 4] = ["Contextual Audit", "Evidence Mapping", "Synthesis", "Verification"];

/// Template files, by name (`system`, `factual`, `scenario`, `multi_hop`, `repair`).
#[derive(Debug, Clone)]
pub struct Prompts {
    templates: BTreeMap<String, String>,
}

const NAMES: [&str; 5] = ["system", "factual", "scenario", "multi_hop", "repair"];

impl Prompts {
    /// Loads `<dir>/{system,factual,scenario,multi_hop,repair}.md`.
    pub fn load(dir: &Path) -> Result<Prompts, String> {
        let mut templates = BTreeMap::new();
        for n in NAMES {
            let p = dir.join(format!("{n}.md"));
            let t = std::fs::read_to_string(&p).map_err(|e| format!("{}: cannot read prompt template ({e}); pass --prompts DIR holding {}", p.display(), NAMES.map(|n| format!("{n}.md")).join(", ")))?;
            templates.insert(n.to_string(), t);
        }
        Ok(Prompts { templates })
    }

    /// BLAKE3 of every template (for the fingerprint and manifest).
    pub fn hashes(&self) -> BTreeMap<String, String> {
        self.templates.iter().map(|(k, v)| (k.clone(), gauge_core::hash::bytes_hash(v.as_bytes()))).collect()
    }

    /// The system prompt.
    pub fn system(&self) -> &str {
        &self.templates["system"]
    }

    /// The user prompt for a sample.
    pub fn user(&self, style: Style, chunks: &[&ChunkRecord]) -> String {
        let t = &self.templates[style.name()];
        let mut out = t.clone();
        for (i, c) in chunks.iter().enumerate() {
            let suffix = if i == 0 { "" } else { "_b" };
            let pages = if c.page_start == c.page_end { format!("{}", c.page_start) } else { format!("{}-{}", c.page_start, c.page_end) };
            for (k, v) in [("title", c.title.as_str()), ("section", c.section.as_str()), ("source", c.source.as_str()), ("pages", pages.as_str()), ("passage", c.text.as_str())] {
                out = out.replace(&format!("{{{{{k}{suffix}}}}}"), v);
            }
        }
        out
    }

    /// The follow-up asking to fix a reply that failed to parse.
    pub fn repair(&self, error: &str) -> String {
        self.templates["repair"].replace("{{error}}", error)
    }
}

/// The reply the teacher must send. Its JSON Schema (derived from this type, doc comments
/// included) is sent as `response_format` and drives the local decoder's constraint.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeacherReply {
    /// One self-contained question a reader of the passage could ask (5 words or more).
    pub question: String,
    /// The reasoning, walking through Contextual Audit, Evidence Mapping, Synthesis and
    /// Verification in that order.
    #[serde(alias = "thinking")]
    pub reasoning: String,
    /// The answer, citing the passage as [source p.N].
    pub answer: String,
}

/// The JSON Schema of [`TeacherReply`] as a `response_format`.
pub fn reply_schema() -> gauge_llm::ResponseSchema {
    gauge_llm::ResponseSchema::of::<TeacherReply>("teacher_reply")
}

/// Parses and checks a reply: strict JSON (after unwrapping a fenced block), a question of at
/// least 5 words, an answer, and reasoning naming the four phases in order.
pub fn parse_reply(content: &str) -> Result<TeacherReply, String> {
    let payload = gauge_llm::json_payload(content);
    let r: TeacherReply = serde_json::from_str(payload).map_err(|e| format!("reply is not the JSON object asked for: {e}"))?;
    if r.question.split_whitespace().count() < 5 {
        return Err("`question` must be a full question (5 words or more)".into());
    }
    if r.answer.trim().is_empty() {
        return Err("`answer` is empty".into());
    }
    let lower = r.reasoning.to_lowercase();
    let mut at = 0;
    for phase in PHASES {
        match lower[at..].find(&phase.to_lowercase()) {
            Some(p) => at += p + phase.len(),
            None => return Err(format!("`reasoning` must walk through {} in that order; `{phase}` is missing or out of order", PHASES.join(", "))),
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"question": "What must the inspector verify at the crossing?", "reasoning": "Contextual Audit: ... Evidence Mapping: ... Synthesis: ... Verification: ...", "answer": "That the gate arm is lowered."}"#;

    #[test]
    fn strict_replies() {
        assert_eq!(parse_reply(GOOD).unwrap().answer, "That the gate arm is lowered.");
        assert!(parse_reply(&format!("```json\n{GOOD}\n```")).is_ok());
        assert!(parse_reply(&GOOD.replace("\"answer\"", "\"extra\": 1, \"answer\"")).unwrap_err().contains("unknown field"));
        assert!(parse_reply(&GOOD.replace("Synthesis", "Summary")).unwrap_err().contains("Synthesis"));
        assert!(parse_reply(&GOOD.replace("What must the inspector verify at the crossing?", "Why?")).unwrap_err().contains("5 words"));
        assert!(parse_reply("{\"question\": \"x\"").is_err());
    }
}
