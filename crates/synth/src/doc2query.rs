//! `--mode doc2query`: questions for passages written by a generator (the local decoder by
//! default, batched; each reply held to a JSON Schema, or one question a line for a model too
//! small to keep to one — see [`ReplyFormat`]), in the style of a few example
//! questions, then filtered by **round-trip consistency** as InPars and Promptagator filter:
//! a question is kept only when the untrained engine retrieves its passage in the top
//! `round_trip_k`. Near-duplicates are dropped after. Every dropped question is written with
//! its reason, so the filter can be audited.
use gauge_core::schema::ChunkRecord;
use gauge_generator::GeneratorConfig;
use serde::{Deserialize, Serialize};

/// Settings of `--mode doc2query` (serde, with defaults).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Doc2QueryConfig {
    /// The model that writes the questions (default: the local SmolLM2, batched).
    pub generator: GeneratorConfig,
    /// Questions asked for per passage.
    pub per_chunk: usize,
    /// Example questions shown in each prompt (from `--from FILE`; none without one).
    pub examples: usize,
    /// A question is kept when its passage is among the engine's top this many.
    pub round_trip_k: usize,
    /// The retrieval the round trip uses (the untrained hybrid engine by default).
    pub retrieval: gauge_engine::RetrievalConfig,
    /// Questions shorter than this many words are dropped.
    pub min_words: usize,
    /// How the generator replies: a JSON object under a schema, or one question a line.
    pub reply: ReplyFormat,
}

/// How the doc2query generator replies.
///
/// Under a JSON Schema a capable model answers `{"questions": [...]}`; SmolLM2-135M, held to
/// the same schema, fills the string with numbers and brackets (85 of 100 FRA passages
/// unparsable, none kept), while asked for a numbered list in plain text it writes questions.
/// `auto` takes `lines` for the local decoder and `json` for an endpoint.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReplyFormat {
    /// `lines` for a local model, `json` for an endpoint.
    #[default]
    Auto,
    /// A JSON object `{"questions": [...]}` held to [`reply_schema`].
    Json,
    /// Plain text, one question a line (list markers dropped; a line must ask: it has a `?`).
    Lines,
}

impl ReplyFormat {
    /// `Json` or `Lines` for this generator.
    pub fn resolve(self, generator: &GeneratorConfig) -> ReplyFormat {
        match (self, generator) {
            (ReplyFormat::Auto, GeneratorConfig::Local { .. }) => ReplyFormat::Lines,
            (ReplyFormat::Auto, GeneratorConfig::Api(_)) => ReplyFormat::Json,
            (f, _) => f,
        }
    }

    /// The instruction the prompt's `{{reply_format}}` becomes.
    pub fn instruction(self) -> &'static str {
        match self {
            ReplyFormat::Lines => "Write them one per line, numbered.",
            _ => "Reply with a JSON object: {\"questions\": [\"...\", \"...\"]}.",
        }
    }
}

/// The questions of a plain-text reply: one a line, list markers and quotes dropped, cut after
/// its first `?`; a line without one is not a question and is skipped.
pub fn parse_lines(reply: &str) -> Vec<String> {
    reply
        .lines()
        .filter_map(|line| {
            let l = line.trim().trim_start_matches(|c: char| c == '-' || c == '*' || c == '•' || c.is_ascii_digit() || c == '.' || c == ')' || c == ':' || c.is_whitespace());
            let l = l.trim_start_matches("Question").trim_start_matches(|c: char| c.is_ascii_digit() || c == ':' || c == '.' || c.is_whitespace());
            let end = l.find('?')?;
            let q = l[..=end].trim().trim_matches(|c: char| c == '"' || c == '“' || c == '”').trim();
            (!q.is_empty()).then(|| q.to_string())
        })
        .collect()
}

impl Default for Doc2QueryConfig {
    fn default() -> Self {
        Doc2QueryConfig {
            generator: GeneratorConfig::default(),
            per_chunk: 3,
            examples: 3,
            round_trip_k: 10,
            retrieval: gauge_engine::RetrievalConfig { k: 10, ..gauge_engine::RetrievalConfig::default() },
            min_words: 4,
            reply: ReplyFormat::Auto,
        }
    }
}

/// The generator's reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Doc2QueryReply {
    /// Questions the passage answers, each one self-contained.
    pub questions: Vec<String>,
}

/// The reply's JSON Schema: exactly `n` questions of 12 to 300 characters (a schema that
/// allowed an empty list would get one from a small model).
pub fn reply_schema(n: usize) -> gauge_chat_client::ResponseSchema {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "description": "Questions the passage answers, each one self-contained.",
                "items": { "type": "string", "minLength": 12, "maxLength": 300 },
                "minItems": n,
                "maxItems": n
            }
        },
        "required": ["questions"],
        "additionalProperties": false
    });
    gauge_chat_client::ResponseSchema { name: "doc2query_reply".into(), schema }
}

/// The prompt for one passage: the template with `{{examples}}` (one example question a
/// line), `{{n}}`, `{{source}}`, `{{pages}}`, `{{passage}}` and `{{reply_format}}` (the
/// format's instruction) filled in.
pub fn prompt(template: &str, chunk: &ChunkRecord, examples: &[String], n: usize, format: ReplyFormat) -> String {
    let pages = if chunk.page_start == chunk.page_end { chunk.page_start.to_string() } else { format!("{}-{}", chunk.page_start, chunk.page_end) };
    let examples = if examples.is_empty() { "(none)".to_string() } else { examples.iter().map(|e| format!("- {e}")).collect::<Vec<_>>().join("\n") };
    template.replace("{{examples}}", &examples).replace("{{n}}", &n.to_string()).replace("{{source}}", &chunk.source).replace("{{pages}}", &pages).replace("{{reply_format}}", format.instruction()).replace("{{passage}}", &chunk.text)
}

/// A question as written, cleaned (whitespace collapsed, a list marker dropped), or why it
/// is dropped.
pub fn clean(question: &str, min_words: usize) -> Result<String, &'static str> {
    let q = question.split_whitespace().collect::<Vec<_>>().join(" ");
    let q = q.trim_start_matches(|c: char| c == '-' || c == '*' || c.is_ascii_digit() || c == '.' || c == ')').trim().to_string();
    if q.split_whitespace().count() < min_words {
        return Err("too_short");
    }
    if !q.chars().any(char::is_alphabetic) {
        return Err("no_words");
    }
    Ok(q)
}

/// Share of a question's word trigrams found in one example question from which it counts as a
/// copy of that example.
pub const COPIED_EXAMPLE_OVERLAP: f64 = 0.5;

/// Whether `question` copies one of the example questions shown in its prompt (at least
/// [`COPIED_EXAMPLE_OVERLAP`] of its word trigrams are that example's): a model shown examples
/// may repeat one instead of asking about its passage (Qwen2.5-1.5B did, 24 of 24 questions in
/// an 8-passage trial).
pub fn copies_an_example(question: &str, examples: &[String]) -> bool {
    examples.iter().any(|e| crate::split::trigram_share(question, e) >= COPIED_EXAMPLE_OVERLAP)
}

/// Round-trip consistency: whether `chunk_id` is among the first `k` of `retrieved` (the
/// engine's chunk ids for the question, best first).
pub fn round_trip(chunk_id: &str, retrieved: &[String], k: usize) -> bool {
    retrieved.iter().take(k).any(|c| c == chunk_id)
}

/// Example questions for the prompts: `n` of the file's `question` fields (JSONL: a golden
/// set, a teacher set or SFT rows), a seeded choice.
pub fn read_examples(path: &std::path::Path, n: usize, seed: u64) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read the example questions ({e})", path.display()))?;
    let mut all = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{}:{}: not JSON ({e})", path.display(), i + 1))?;
        let q = v["question"].as_str().ok_or_else(|| anyhow::anyhow!("{}:{}: no `question` field", path.display(), i + 1))?;
        all.push(q.to_string());
    }
    gauge_core::rng::SplitMix64::new(seed).shuffle(&mut all);
    all.truncate(n);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_cleaned_and_short_ones_dropped() {
        assert_eq!(clean("  1. When must  gate arms be lowered? ", 4), Ok("When must gate arms be lowered?".into()));
        assert_eq!(clean("- What is a crossbuck sign?", 4), Ok("What is a crossbuck sign?".into()));
        assert_eq!(clean("Why?", 4), Err("too_short"));
    }

    #[test]
    fn plain_text_replies_give_one_question_a_line() {
        let reply = "1. What is the purpose of a shunt wire?\n2) How must fouling wires be maintained? They must be kept.\n\nHere are some notes\n- \"Who inspects PTC systems?\"\nQuestion 4: When is a watchman required?";
        assert_eq!(parse_lines(reply), vec!["What is the purpose of a shunt wire?", "How must fouling wires be maintained?", "Who inspects PTC systems?", "When is a watchman required?"]);
        assert!(parse_lines("{\"questions\":[\", 2, 3").is_empty(), "no question mark, no question");
    }

    #[test]
    fn auto_takes_lines_locally_and_json_for_an_endpoint() {
        let local = GeneratorConfig::default();
        assert_eq!(ReplyFormat::Auto.resolve(&local), ReplyFormat::Lines);
        assert_eq!(ReplyFormat::Json.resolve(&local), ReplyFormat::Json);
        let api: GeneratorConfig = serde_json::from_value(serde_json::json!({ "kind": "api", "base_url": "http://127.0.0.1:1/v1", "model": "m" })).unwrap();
        assert_eq!(ReplyFormat::Auto.resolve(&api), ReplyFormat::Json);
    }

    #[test]
    fn a_question_that_repeats_an_example_is_a_copy() {
        let examples = vec!["A crossing has a recurring problem with vehicles queuing onto the tracks. Which regulatory sign treatment should be used?".to_string()];
        assert!(copies_an_example("A crossing has a recurring problem with vehicles queuing onto the tracks. Which sign should be used?", &examples));
        assert!(!copies_an_example("What is the minimum flash rate of crossing light units under § 234.225?", &examples));
        assert!(!copies_an_example("Anything at all?", &[]));
    }

    #[test]
    fn the_round_trip_keeps_a_question_only_when_its_passage_is_retrieved() {
        let got = vec!["c3".to_string(), "c1".to_string(), "c9".to_string()];
        assert!(round_trip("c1", &got, 2));
        assert!(!round_trip("c9", &got, 2), "ranked third: out of the top 2");
        assert!(!round_trip("c5", &got, 10), "not retrieved at all");
    }
}
