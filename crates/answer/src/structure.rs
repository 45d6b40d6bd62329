//! An answer's form held by the decoder: the four phases of the seed's reasoning format
//! (contextual audit, evidence map, synthesis, verification) as one JSON document whose
//! schema the reply cannot leave — without training.
//!
//! The schema ([`four_phase_schema`]) is built per question: its four phase strings, in
//! order, each bounded in length (a token budget per phase, [`StructureConfig::phase_tokens`]),
//! and whose brackets can only be the given passages' tags (the string pattern: no bracket
//! opens but a citable tag), so no citation can be invented. With
//! [`StructureConfig::refusal`], `{"verdict":"refuse"}` is a legal reply: the model's own
//! verdict is the document's first field, and a refusal is its first move. The local decoder
//! holds the reply to the schema by masking tokens (llguidance, the engine behind llama.cpp's
//! and vLLM's `json_schema`); an endpoint is sent it as `response_format` and its reply is
//! read the same way (what does not parse is rendered from the phases it holds, and fails the
//! four-phase check honestly).
//!
//! The reply is rendered back into the template's text ([`render`]): `1. Contextual audit: …`
//! and so on, each phase under its heading, so citation checking and the answer metrics read
//! structured and free answers alike.
use serde::{Deserialize, Serialize};

/// The phases, as the document's keys and the rendered headings, in order.
pub const PHASES: [(&str, &str); 4] = [("contextual_audit", "Contextual audit"), ("evidence_map", "Evidence map"), ("synthesis", "Synthesis"), ("verification", "Verification")];

/// Characters allowed per budgeted token. English prose runs at about four characters per
/// token in the BPE vocabularies gauge loads (Qwen2.5, SmolLM2, Llama); three leaves room
/// for numbers, section marks and tags, which cost more, so a reply within its budgets ends
/// within `max_new_tokens`.
pub const CHARS_PER_TOKEN: usize = 3;

/// Tokens the document's keys, quotes and verdict take (`{"verdict":"answer","contextual_audit":"`…).
pub const KEY_TOKENS: usize = 40;

/// The default shares of the phase budget (audit, evidence map, synthesis, verification).
pub const DEFAULT_SHARES: [f64; 4] = [0.20, 0.30, 0.35, 0.15];

/// The smallest budget a phase may be given.
pub const MIN_PHASE_TOKENS: usize = 8;

/// Which form an answer is held to.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StructureKind {
    /// Free text: whatever the template asks, unconstrained (beside `generation.constrain_citations`).
    #[default]
    Free,
    /// The four phases as a JSON document of their own schema, rendered back under headings.
    FourPhase,
}

/// The form an answer is held to by constrained decoding (`structure` in `answer`'s config and
/// a pipeline's `[answer]`, or one generator row's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StructureConfig {
    /// `free` (the default) or `four_phase`.
    pub kind: StructureKind,
    /// Token budget of each phase, in order (contextual audit, evidence map, synthesis,
    /// verification); each phase's text is held to `CHARS_PER_TOKEN` (3) characters per token.
    /// Empty: 20/30/35/15 % of what `generation.max_new_tokens` leaves after the keys (40 tokens).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phase_tokens: Vec<usize>,
    /// Whether `{"verdict":"refuse"}` is a legal reply: the model's own verdict (rendered as the
    /// refusal sentence). Default true.
    pub refusal: bool,
    /// Where the verdict stands: `first` (before any phase: the default) or `after_audit` (after
    /// the contextual audit, so the model has written about the passages before it decides).
    #[serde(skip_serializing_if = "VerdictPlace::is_first")]
    pub verdict: VerdictPlace,
    /// What a phase's text must be: `sentences` (the default: it opens with a letter, a digit or
    /// a given tag and ends on `.`, `!` or `?`, so no phase is a lone comma and a budget closes a
    /// sentence, not a word) or `any` (any text of at least one character, the first form).
    pub phase_text: PhaseText,
    /// Whether the synthesis must cite at least one given tag (default true: an answer that
    /// cites nothing cannot be checked; with no passage given there is nothing to require).
    pub synthesis_cites: bool,
    /// Whether the prompt ends with a paragraph describing the JSON reply — its keys in order,
    /// and when the verdict is `refuse` (default true: the model is told the form it is held
    /// to; `false` sends the template alone, the first form). The last three are always echoed
    /// with a four-phase form, so replies of the first form and of today's never share a
    /// fingerprint.
    pub describe_format: bool,
}

/// What a four-phase reply's phase text must be.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PhaseText {
    /// Opens with a letter, a digit or a given tag; ends on `.`, `!` or `?`.
    #[default]
    Sentences,
    /// Any text of at least one character (brackets only as given tags).
    Any,
}

/// Where a four-phase reply's verdict stands.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerdictPlace {
    /// The first field: the model decides before it writes anything.
    #[default]
    First,
    /// After the contextual audit (the seed's order: audit the passages, then decide).
    AfterAudit,
}

impl VerdictPlace {
    /// Whether it is the default (echoed only when not, so earlier artifacts keep their fingerprints).
    pub fn is_first(&self) -> bool {
        *self == VerdictPlace::First
    }
}

impl Default for StructureConfig {
    fn default() -> Self {
        StructureConfig { kind: StructureKind::Free, phase_tokens: Vec::new(), refusal: true, verdict: VerdictPlace::First, phase_text: PhaseText::Sentences, synthesis_cites: true, describe_format: true }
    }
}

impl StructureConfig {
    /// Whether the form is free (nothing held; the config echoes nothing then, so artifacts
    /// from before the setting keep their fingerprints).
    pub fn is_free(&self) -> bool {
        self.kind == StructureKind::Free
    }

    /// The token budget of each phase for a reply of at most `max_new_tokens`, or why there is none.
    pub fn budgets(&self, max_new_tokens: usize) -> Result<[usize; 4], String> {
        let budgets = if self.phase_tokens.is_empty() {
            let room = max_new_tokens.saturating_sub(KEY_TOKENS);
            DEFAULT_SHARES.map(|s| (room as f64 * s).floor() as usize)
        } else {
            <[usize; 4]>::try_from(self.phase_tokens.as_slice()).map_err(|_| format!("structure.phase_tokens has {} entries; give four (contextual audit, evidence map, synthesis, verification) or none", self.phase_tokens.len()))?
        };
        if let Some(i) = budgets.iter().position(|&b| b < MIN_PHASE_TOKENS) {
            return Err(format!(
                "structure: the {} phase gets {} tokens (at least {MIN_PHASE_TOKENS}); {}",
                PHASES[i].1,
                budgets[i],
                if self.phase_tokens.is_empty() { format!("raise generation.max_new_tokens (now {max_new_tokens}; 384 fits four phases)") } else { "raise it in structure.phase_tokens".into() }
            ));
        }
        let total = budgets.iter().fold(KEY_TOKENS, |sum, &b| sum.saturating_add(b));
        if total > max_new_tokens {
            return Err(format!("structure.phase_tokens sum to {total} tokens with the keys' {KEY_TOKENS}, over generation.max_new_tokens = {max_new_tokens}: a reply would be cut before its last phase; lower the budgets or raise max_new_tokens"));
        }
        Ok(budgets)
    }

    /// Checks the settings against the reply's length (one line naming the setting).
    pub fn validate(&self, max_new_tokens: usize) -> Result<(), String> {
        if self.is_free() {
            if !self.phase_tokens.is_empty() {
                return Err("structure.phase_tokens is set but structure.kind is free; set kind = \"four_phase\" or drop phase_tokens".into());
            }
            return Ok(());
        }
        self.budgets(max_new_tokens).map(|_| ())
    }
}

/// The regex a phase's text must match: any character but brackets, quotes, backslashes and
/// control characters, or one of `tags` whole. (Quotes and backslashes would need JSON escapes,
/// which a pattern does not see decoded.) With [`PhaseText::Sentences`] the text opens with a
/// letter, a digit or a tag and ends on `.`, `!` or `?`; with `cites` (and tags to cite) it holds
/// at least one tag.
pub fn phase_pattern(tags: &[String], text: PhaseText, cites: bool) -> String {
    let plain = r#"[^\[\]"\\\x00-\x1f]"#;
    let alternatives: Vec<String> = tags.iter().map(|t| regex::escape(t)).collect();
    let tag = alternatives.join("|");
    let item = if tags.is_empty() { plain.to_string() } else { format!("({plain}|{tag})") };
    let cites = cites && !tags.is_empty();
    match text {
        PhaseText::Any if cites => format!("^{item}*({tag}){item}*$"),
        PhaseText::Any => format!("^{item}*$"),
        PhaseText::Sentences => {
            let open = if tags.is_empty() { "[A-Za-z0-9]".to_string() } else { format!("([A-Za-z0-9]|{tag})") };
            if cites {
                // The tag is the opening one, or one inside.
                format!("^(({tag}){item}*|[A-Za-z0-9]{item}*({tag}){item}*)[.!?]$")
            } else {
                format!("^{open}{item}*[.!?]$")
            }
        }
    }
}

/// The paragraph appended to the prompt of a four-phase reply ([`StructureConfig::describe_format`]):
/// the JSON object's keys in the order the schema holds them, when the verdict is `refuse`, and
/// each phase's length in words (its character budget at about six characters a word, so the
/// model can end a sentence before the budget closes the phase).
pub fn format_instructions(structure: &StructureConfig, budgets: [usize; 4]) -> String {
    let phases = |from: usize| PHASES[from..].iter().map(|(k, _)| format!("\"{k}\"")).collect::<Vec<_>>();
    let list = |keys: Vec<String>| match keys.len() {
        0 => String::new(),
        1 => keys[0].clone(),
        n => format!("{} and {}", keys[..n - 1].join(", "), keys[n - 1]),
    };
    let verdict = "\"answer\" when the passages contain the answer, and \"refuse\" only when none of them does (a refusal ends the object)";
    let mut out = String::from("Reply with one JSON object and nothing else. ");
    match (structure.refusal, structure.verdict) {
        (false, _) => out.push_str(&format!("Its keys are {}, in that order, each phase as above", list(phases(0)))),
        (true, VerdictPlace::First) => out.push_str(&format!("Its first key, \"verdict\", is {verdict}; when you answer, {} follow in that order, each phase as above", list(phases(0)))),
        (true, VerdictPlace::AfterAudit) => out.push_str(&format!("Its first key is \"contextual_audit\"; then \"verdict\" is {verdict}; when you answer, {} follow in that order, each phase as above", list(phases(1)))),
    }
    if structure.phase_text == PhaseText::Sentences {
        out.push_str(", in whole sentences");
    }
    let words = budgets.map(|b| (b * CHARS_PER_TOKEN / 6).max(1).to_string());
    out.push_str(&format!(", in at most about {} words respectively.", list(words.to_vec())));
    if structure.synthesis_cites {
        out.push_str(" The synthesis cites at least one tag.");
    }
    out
}

/// The JSON Schema of one four-phase reply citing only `tags`, each phase within its budget;
/// with `structure.refusal`, the verdict where `structure.verdict` puts it (a refusal ends the
/// document there); each phase's text as `structure.phase_text` says, the synthesis citing a tag
/// with `structure.synthesis_cites`.
pub fn four_phase_schema(tags: &[String], budgets: [usize; 4], structure: &StructureConfig) -> serde_json::Value {
    let (refusal, verdict) = (structure.refusal, structure.verdict);
    let pattern = phase_pattern(tags, structure.phase_text, false);
    // A synthesis too short for its shortest tag and a closing mark cannot cite: nothing is
    // required of it then (else the schema would admit no reply at all).
    let synthesis_chars = budgets[2].saturating_mul(CHARS_PER_TOKEN);
    let fits = tags.iter().map(|t| t.chars().count() + 2).min().is_some_and(|n| n <= synthesis_chars);
    let cited = phase_pattern(tags, structure.phase_text, structure.synthesis_cites && fits);
    let phase = |i: usize| {
        let pattern = if PHASES[i].0 == "synthesis" { &cited } else { &pattern };
        serde_json::json!({ "type": "string", "description": PHASES[i].1, "pattern": pattern, "minLength": 1, "maxLength": budgets[i].saturating_mul(CHARS_PER_TOKEN) })
    };
    // The fields before the verdict (none, or the audit), then the verdict, then the rest.
    let before = if refusal && verdict == VerdictPlace::AfterAudit { 1 } else { 0 };
    let object = |properties: serde_json::Map<String, serde_json::Value>| {
        let required: Vec<&str> = properties.keys().map(String::as_str).collect();
        serde_json::json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
    };
    let mut answer = serde_json::Map::new();
    let mut refuse = serde_json::Map::new();
    for (i, (key, _)) in PHASES.iter().enumerate().take(before) {
        answer.insert(key.to_string(), phase(i));
        refuse.insert(key.to_string(), phase(i));
    }
    if refusal {
        answer.insert("verdict".into(), serde_json::json!({ "const": "answer" }));
        refuse.insert("verdict".into(), serde_json::json!({ "const": "refuse" }));
    }
    for (i, (key, _)) in PHASES.iter().enumerate().skip(before) {
        answer.insert(key.to_string(), phase(i));
    }
    if !refusal {
        return object(answer);
    }
    serde_json::json!({ "anyOf": [object(answer), object(refuse)] })
}

/// A reply rendered back into text.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The answer's text: the phases under their headings, or the refusal sentence.
    pub text: String,
    /// The model chose `{"verdict":"refuse"}`.
    pub refused: bool,
    /// Phases found whole, in order (4 for a complete reply).
    pub phases: usize,
}

/// Renders a four-phase reply (a JSON document of [`four_phase_schema`]) as the template's
/// text: each phase on its own paragraph under `N. Heading:`. A reply cut short (its token
/// limit, or an endpoint that ignored the schema) keeps the phases it holds, the last one as far
/// as it got; what holds no phase is kept as written.
pub fn render(reply: &str, refusal_sentence: &str) -> Rendered {
    let written = reply.trim();
    // An endpoint may fence its JSON as Markdown.
    let reply = written.strip_prefix("```json").or_else(|| written.strip_prefix("```")).map_or(written, |r| r.trim_end().trim_end_matches("```").trim());
    let refusal = || Rendered { text: refusal_sentence.to_string(), refused: true, phases: 0 };
    if let Ok(serde_json::Value::Object(doc)) = serde_json::from_str::<serde_json::Value>(reply) {
        if doc.get("verdict").and_then(|v| v.as_str()) == Some("refuse") {
            return refusal();
        }
        let found: Vec<(usize, String)> = PHASES.iter().enumerate().filter_map(|(i, (key, _))| doc.get(*key).and_then(|v| v.as_str()).map(|s| (i, s.to_string()))).collect();
        if found.is_empty() {
            return Rendered { text: written.to_string(), refused: false, phases: 0 };
        }
        return Rendered { phases: found.len(), text: join(&found), refused: false };
    }
    // Cut short: the verdict, then each key's string as far as it goes.
    let key_at = |key: &str| regex::Regex::new(&format!(r#""{key}"\s*:\s*""#)).expect("a valid pattern").find(reply).map(|m| m.end());
    if let Some(at) = key_at("verdict") {
        if reply[at..].starts_with("refuse") {
            return refusal();
        }
    }
    let mut found = Vec::new();
    for (i, (key, _)) in PHASES.iter().enumerate() {
        let Some(at) = key_at(key) else { continue };
        let (value, whole) = json_string_prefix(&reply[at..]);
        if whole || !value.is_empty() {
            found.push((i, value, whole));
        }
    }
    if found.is_empty() {
        return Rendered { text: written.to_string(), refused: false, phases: 0 };
    }
    let whole = found.iter().filter(|(_, _, w)| *w).count();
    Rendered { text: join(&found.into_iter().map(|(i, v, _)| (i, v)).collect::<Vec<_>>()), refused: false, phases: whole }
}

fn join(found: &[(usize, String)]) -> String {
    found.iter().map(|(i, text)| format!("{}. {}: {}", i + 1, PHASES[*i].1, text.trim())).collect::<Vec<_>>().join("\n\n")
}

/// The decoded text of a JSON string's body (after its opening quote), and whether its closing
/// quote came.
fn json_string_prefix(body: &str) -> (String, bool) {
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return (out, true),
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => out.push('\u{8}'),
                Some('f') => out.push('\u{c}'),
                Some('r') => out.push('\r'),
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    if let Some(c) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        out.push(c);
                    }
                }
                Some(other) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    (out, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_budgets_fit_the_reply_and_bad_ones_are_named() {
        let s = StructureConfig { kind: StructureKind::FourPhase, ..Default::default() };
        let b = s.budgets(384).unwrap();
        assert_eq!(b, [68, 103, 120, 51]);
        assert!(b.iter().sum::<usize>() + KEY_TOKENS <= 384);
        let e = s.budgets(60).unwrap_err();
        assert!(e.contains("max_new_tokens") && e.contains("Contextual audit"), "{e}");
        let three = StructureConfig { phase_tokens: vec![10, 10, 10], ..s.clone() };
        assert!(three.budgets(384).unwrap_err().contains("3 entries"));
        let over = StructureConfig { phase_tokens: vec![100, 100, 100, 100], ..s.clone() };
        assert!(over.budgets(384).unwrap_err().contains("over generation.max_new_tokens = 384"));
        assert_eq!(StructureConfig { phase_tokens: vec![50, 50, 50, 50], ..s }.budgets(384).unwrap(), [50; 4]);
        let free = StructureConfig { phase_tokens: vec![50, 50, 50, 50], ..Default::default() };
        assert!(free.validate(384).unwrap_err().contains("kind is free"));
        assert!(StructureConfig::default().validate(1).is_ok());
    }

    #[test]
    fn the_pattern_admits_the_given_tags_only() {
        let tags = vec!["[a.pdf p. 3]".to_string(), "[b (2).pdf pp. 4-5]".to_string()];
        let re = regex::Regex::new(&phase_pattern(&tags, PhaseText::Any, false)).unwrap();
        assert!(re.is_match("Gates close [a.pdf p. 3] and lights flash [b (2).pdf pp. 4-5]."));
        assert!(re.is_match(""));
        assert!(!re.is_match("Gates close [a.pdf p. 4]."), "a tag not given");
        assert!(!re.is_match("a stray [ bracket"));
        assert!(!re.is_match("a \"quote\""));
        let none = regex::Regex::new(&phase_pattern(&[], PhaseText::Any, false)).unwrap();
        assert!(none.is_match("text") && !none.is_match("[a.pdf p. 3]"));
    }

    #[test]
    fn sentence_phases_open_on_a_word_and_close_a_sentence_and_the_synthesis_cites() {
        let tags = vec!["[a.pdf p. 3]".to_string(), "[b.pdf p. 4]".to_string()];
        let re = |text, cites| regex::Regex::new(&phase_pattern(&tags, text, cites)).unwrap();
        let sentences = re(PhaseText::Sentences, false);
        assert!(sentences.is_match("Gates close [a.pdf p. 3]."));
        assert!(sentences.is_match("[b.pdf p. 4] says gates close!"));
        assert!(sentences.is_match("Passage 2 bears on it?"));
        for bad in [",", "", " Gates close.", "Gates close", "Gates close [a.pdf p. 3]", "- a list.", "Gates close [c.pdf p. 9]."] {
            assert!(!sentences.is_match(bad), "{bad:?}");
        }
        let cited = re(PhaseText::Sentences, true);
        assert!(cited.is_match("Gates close [a.pdf p. 3]."));
        assert!(cited.is_match("[b.pdf p. 4] gates close."));
        assert!(!cited.is_match("Gates close."), "no tag");
        let any_cited = re(PhaseText::Any, true);
        assert!(any_cited.is_match(", [a.pdf p. 3]") && !any_cited.is_match("Gates close."));
        // No tag to cite: nothing is required, and the sentence form still holds.
        let untagged = regex::Regex::new(&phase_pattern(&[], PhaseText::Sentences, true)).unwrap();
        assert!(untagged.is_match("Nothing given.") && !untagged.is_match("[a.pdf p. 3]."));
    }

    #[test]
    fn the_prompt_describes_the_keys_in_the_schemas_order() {
        let four = StructureConfig { kind: StructureKind::FourPhase, ..Default::default() };
        let first = format_instructions(&four, [68, 103, 120, 51]);
        assert!(first.starts_with("Reply with one JSON object"), "{first}");
        assert!(first.contains("at most about 34, 51, 60 and 25 words"), "{first}");
        let order = ["\"verdict\"", "\"refuse\"", "\"contextual_audit\"", "\"evidence_map\"", "\"synthesis\"", "\"verification\"", "whole sentences", "cites at least one tag"];
        let at: Vec<usize> = order.iter().map(|k| first.find(k).unwrap_or_else(|| panic!("{k} in {first}"))).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{first}");
        let after = format_instructions(&StructureConfig { verdict: VerdictPlace::AfterAudit, ..four.clone() }, [68, 103, 120, 51]);
        assert!(after.find("\"contextual_audit\"").unwrap() < after.find("\"verdict\"").unwrap(), "{after}");
        let plain = format_instructions(&StructureConfig { refusal: false, phase_text: PhaseText::Any, synthesis_cites: false, ..four }, [68, 103, 120, 51]);
        assert!(!plain.contains("verdict") && !plain.contains("sentences") && !plain.contains("cites"), "{plain}");
        // Every key the schema holds is named.
        let schema = four_phase_schema(&["[a.pdf p. 3]".into()], [10, 20, 30, 40], &StructureConfig { kind: StructureKind::FourPhase, ..Default::default() });
        for key in schema["anyOf"][0]["properties"].as_object().unwrap().keys() {
            assert!(first.contains(&format!("\"{key}\"")), "{key}");
        }
        assert!(schema["anyOf"][0]["properties"]["synthesis"]["pattern"] != schema["anyOf"][0]["properties"]["evidence_map"]["pattern"]);
        // The form is echoed whole, so an artifact of the first form is never reused for this one.
        let echo = serde_json::to_value(StructureConfig { kind: StructureKind::FourPhase, ..Default::default() }).unwrap();
        assert_eq!((echo["phase_text"].as_str(), echo["synthesis_cites"].as_bool(), echo["describe_format"].as_bool()), (Some("sentences"), Some(true), Some(true)));
        // A synthesis budget shorter than any tag requires none (the schema stays satisfiable).
        let tiny = four_phase_schema(&["[a-very-long-source-name.pdf p. 3]".into()], [10, 10, 10, 10], &StructureConfig { kind: StructureKind::FourPhase, ..Default::default() });
        assert_eq!(tiny["anyOf"][0]["properties"]["synthesis"]["pattern"], tiny["anyOf"][0]["properties"]["evidence_map"]["pattern"]);
    }

    #[test]
    fn the_schema_orders_the_phases_and_offers_a_refusal() {
        let four = StructureConfig { kind: StructureKind::FourPhase, ..Default::default() };
        let s = four_phase_schema(&["[a.pdf p. 3]".into()], [10, 20, 30, 40], &four);
        let answer = &s["anyOf"][0];
        let keys: Vec<&String> = answer["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["verdict", "contextual_audit", "evidence_map", "synthesis", "verification"]);
        assert_eq!(answer["properties"]["synthesis"]["maxLength"], 90);
        assert_eq!(s["anyOf"][1]["properties"]["verdict"]["const"], "refuse");
        let plain = four_phase_schema(&[], [10, 20, 30, 40], &StructureConfig { refusal: false, verdict: VerdictPlace::AfterAudit, ..four.clone() });
        assert!(plain.get("anyOf").is_none() && plain["properties"].get("verdict").is_none());
        // After the audit: both alternatives open with it; the refusal ends there.
        let after = four_phase_schema(&[], [10, 20, 30, 40], &StructureConfig { verdict: VerdictPlace::AfterAudit, ..four });
        let keys = |v: &serde_json::Value| v["properties"].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&after["anyOf"][0]), ["contextual_audit", "verdict", "evidence_map", "synthesis", "verification"]);
        assert_eq!(keys(&after["anyOf"][1]), ["contextual_audit", "verdict"]);
        assert_eq!(after["anyOf"][1]["required"], serde_json::json!(["contextual_audit", "verdict"]));
        assert!(render(r#"{"contextual_audit":"Nothing on point.","verdict":"refuse"}"#, "No.").refused);
    }

    #[test]
    fn replies_render_under_headings_and_cut_ones_keep_what_they_hold() {
        let whole = r#"{"verdict":"answer","contextual_audit":"Passage 1 bears.","evidence_map":"Gates [a.pdf p. 3]","synthesis":"They close.\nFast.","verification":"All tags given."}"#;
        let r = render(whole, "No.");
        assert_eq!(r.phases, 4);
        assert!(!r.refused);
        assert_eq!(r.text, "1. Contextual audit: Passage 1 bears.\n\n2. Evidence map: Gates [a.pdf p. 3]\n\n3. Synthesis: They close.\nFast.\n\n4. Verification: All tags given.");
        assert!(gauge_cite_phases_in_order(&r.text));
        let refused = render(r#"{"verdict":"refuse"}"#, "The documents do not say.");
        assert_eq!((refused.text.as_str(), refused.refused, refused.phases), ("The documents do not say.", true, 0));
        let cut = render(r#"{"verdict":"answer","contextual_audit":"Enough.","evidence_map":"Gates \"down\" [a.pdf"#, "No.");
        assert_eq!(cut.phases, 1);
        assert_eq!(cut.text, "1. Contextual audit: Enough.\n\n2. Evidence map: Gates \"down\" [a.pdf");
        let prose = render("Just prose.", "No.");
        assert_eq!((prose.text.as_str(), prose.phases), ("Just prose.", 0));
        // An endpoint's spaced, fenced JSON; a cut refusal; a JSON object holding no phase.
        let spaced = render("```json\n{\"verdict\": \"answer\", \"contextual_audit\": \"A.\", \"evidence_map\": \"B\n", "No.");
        assert_eq!((spaced.text.as_str(), spaced.phases), ("1. Contextual audit: A.\n\n2. Evidence map: B", 1));
        assert!(render(r#"{"verdict": "refuse"#, "No.").refused);
        let other = render(r#"{"answer": "Gates close."}"#, "No.");
        assert_eq!((other.text.as_str(), other.phases), (r#"{"answer": "Gates close."}"#, 0));
    }

    /// The evaluator's check (crates/evaluate: the phase names in order, case-insensitive).
    fn gauge_cite_phases_in_order(text: &str) -> bool {
        let lower = text.to_lowercase();
        let mut from = 0;
        for (_, p) in PHASES {
            match lower[from..].find(&p.to_lowercase()) {
                Some(i) => from += i + p.len(),
                None => return false,
            }
        }
        true
    }
}
