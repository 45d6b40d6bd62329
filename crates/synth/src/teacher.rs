//! Prompts (template files under `pipelines/prompts/`) and the teacher's strict JSON reply.
use std::collections::BTreeMap;
use std::path::Path;

use gauge_core::schema::ChunkRecord;
use serde::{Deserialize, Serialize};

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

/// The reply the teacher must send. Its JSON Schema (derived from this type: doc comments
/// become descriptions, the length bounds below become `minLength`/`maxLength`) is sent as
/// `response_format` and drives the local decoder's constraint. The four phases are fields of
/// their own, so a schema-constrained teacher cannot skip or reorder one, and the bounds let
/// every constrained reply close within the token budget.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeacherReply {
    /// One self-contained question a practitioner could ask, answered by the passage(s).
    #[schemars(length(min = 25, max = 200))]
    pub question: String,
    /// The reasoning, in four phases.
    #[serde(alias = "thinking")]
    pub reasoning: FourPhases,
    /// The answer, grounded in the passage(s).
    #[schemars(length(min = 1, max = 600))]
    pub answer: String,
}

/// The four-phase reasoning of the seed studies.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FourPhases {
    /// Contextual Audit: what the passage is about, its scope and conditions.
    #[schemars(length(min = 1, max = 400))]
    pub contextual_audit: String,
    /// Evidence Mapping: the sentences that answer the question, quoted or closely paraphrased.
    #[schemars(length(min = 1, max = 400))]
    pub evidence_mapping: String,
    /// Synthesis: how the evidence combines into the answer.
    #[schemars(length(min = 1, max = 400))]
    pub synthesis: String,
    /// Verification: the answer checked against the passage; nothing outside it assumed.
    #[schemars(length(min = 1, max = 400))]
    pub verification: String,
}

impl FourPhases {
    /// The reasoning as text, each phase under its name (the `thinking` column).
    pub fn text(&self) -> String {
        let phases = [&self.contextual_audit, &self.evidence_mapping, &self.synthesis, &self.verification];
        PHASES.iter().zip(phases).map(|(name, body)| format!("{name}: {}", body.trim())).collect::<Vec<_>>().join("\n")
    }
}

/// The JSON Schema of [`TeacherReply`] as a `response_format`.
pub fn reply_schema() -> gauge_chat_client::ResponseSchema {
    gauge_chat_client::ResponseSchema::of::<TeacherReply>("teacher_reply")
}

/// Parses and checks a reply: strict JSON (after unwrapping a fenced block), a question of at
/// least 5 words, an answer, and every phase written.
pub fn parse_reply(content: &str) -> Result<TeacherReply, String> {
    let payload = gauge_chat_client::json_payload(content);
    let r: TeacherReply = serde_json::from_str(payload).map_err(|e| format!("reply is not the JSON object asked for: {e}"))?;
    if r.question.split_whitespace().count() < 5 {
        return Err("`question` must be a full question (5 words or more)".into());
    }
    if r.answer.trim().is_empty() {
        return Err("`answer` is empty".into());
    }
    let ph = &r.reasoning;
    for (name, body) in PHASES.iter().zip([&ph.contextual_audit, &ph.evidence_mapping, &ph.synthesis, &ph.verification]) {
        if body.trim().is_empty() {
            return Err(format!("the `{name}` phase of `reasoning` is empty"));
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"question": "What must the inspector verify at the crossing?", "reasoning": {"contextual_audit": "Crossing inspections.", "evidence_mapping": "The gate arm sentence.", "synthesis": "It must be lowered.", "verification": "Stated in the passage."}, "answer": "That the gate arm is lowered."}"#;

    #[test]
    fn the_schema_has_the_four_phases_and_the_length_bounds() {
        let s = reply_schema();
        assert!(s.is_strict());
        let text = s.schema.to_string();
        for f in ["contextual_audit", "evidence_mapping", "synthesis", "verification"] {
            assert!(text.contains(&format!("\"{f}\"")), "{f} missing from {text}");
        }
        assert_eq!(s.schema["properties"]["question"]["maxLength"], 200);
    }

    #[test]
    fn strict_replies() {
        assert_eq!(parse_reply(GOOD).unwrap().answer, "That the gate arm is lowered.");
        assert!(parse_reply(&format!("```json\n{GOOD}\n```")).is_ok());
        assert!(parse_reply(&GOOD.replace("\"answer\"", "\"extra\": 1, \"answer\"")).unwrap_err().contains("unknown field"));
        assert!(parse_reply(&GOOD.replace("\"synthesis\"", "\"summary\"")).unwrap_err().contains("unknown field `summary`"));
        assert!(parse_reply(&GOOD.replace("It must be lowered.", " ")).unwrap_err().contains("Synthesis"));
        let text = parse_reply(GOOD).unwrap().reasoning.text();
        assert!(text.starts_with("Contextual Audit: Crossing inspections.\nEvidence Mapping:") && text.ends_with("Verification: Stated in the passage."), "{text}");
        assert!(parse_reply(&GOOD.replace("What must the inspector verify at the crossing?", "Why?")).unwrap_err().contains("5 words"));
        assert!(parse_reply("{\"question\": \"x\"").is_err());
    }
}
