//! The LLM judge of answer rows (`[judge]` in a pipeline): a model grades each answer on
//! faithfulness, accuracy (regulatory correctness), completeness, relevance and citation
//! quality, 1–5, with a one-line reason. The rubric is a prompt file (the built-in one is
//! `pipelines/prompts/judge.md`); the reply must be the JSON object of [`JudgeReply`]
//! (a schema the endpoint's `response_format` or the local decoder's constrained decoding
//! enforces), parsed strictly, with one repair round (the `synth-data` one). A grade that
//! cannot be had — the call fails after its retries, or the reply is still invalid after the
//! repair — is recorded as missing with the reason, never as a score. Every call goes through
//! the shared model-call cache, so a re-evaluation asks the judge nothing.
use std::sync::Arc;

use gauge_generator::cache::{model_identity, CallCache};
use gauge_generator::structured::{complete_with_repair, repair_conversation};
use gauge_generator::{Generator, GeneratorConfig};
use gauge_chat_client::{Message, ResponseSchema, RetryPolicy};
use serde::{Deserialize, Serialize};

/// The `[judge]` section of a pipeline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct JudgeSection {
    /// The judge model (local decoder or an OpenAI-compatible endpoint).
    pub model: GeneratorConfig,
    /// A rubric template file replacing the built-in one (rendered with `question`,
    /// `reference`, `passages` (`label`, `text`) and `answer`); relative to the pipeline file.
    pub template: Option<String>,
    /// A repair message template file (rendered with `error`).
    pub repair_template: Option<String>,
    /// Tokens the judge may write (the reply is about 40 tokens of JSON plus the reason, at
    /// most 200 characters; a reply cut by this budget is invalid and its grade missing).
    pub max_new_tokens: usize,
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
    /// Sampling seed.
    pub seed: u64,
    /// Characters of each passage shown to the judge (cut at a word boundary).
    pub max_passage_chars: usize,
    /// The faithfulness score from which an answer counts as "faithful" in the agreement table.
    pub faithful_at: u8,
}

impl Default for JudgeSection {
    fn default() -> Self {
        JudgeSection {
            model: GeneratorConfig::default(),
            template: None,
            repair_template: None,
            max_new_tokens: 256,
            temperature: 0.0,
            seed: 0,
            max_passage_chars: 1200,
            faithful_at: 4,
        }
    }
}

/// The built-in rubric (`pipelines/prompts/judge.md`).
pub const BUILTIN_RUBRIC: &str = include_str!("../../../pipelines/prompts/judge.md");
/// The built-in repair message (`pipelines/prompts/judge_repair.md`).
pub const BUILTIN_REPAIR: &str = include_str!("../../../pipelines/prompts/judge_repair.md");

/// The criteria: field name and table label.
pub const CRITERIA: [(&str, &str); 5] = [
    ("faithfulness", "Judge: faithfulness (1–5)"),
    ("accuracy", "Judge: accuracy (1–5)"),
    ("completeness", "Judge: completeness (1–5)"),
    ("relevance", "Judge: relevance (1–5)"),
    ("citation_quality", "Judge: citation quality (1–5)"),
];

/// The judge's reply: five grades and a reason (its JSON Schema is the response format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeReply {
    /// Every statement is supported by the passages (1–5).
    #[schemars(range(min = 1, max = 5))]
    pub faithfulness: u8,
    /// Correct for the question, with the passages' rules, numbers and terms (1–5).
    #[schemars(range(min = 1, max = 5))]
    pub accuracy: u8,
    /// Covers what the question asks that the passages hold (1–5).
    #[schemars(range(min = 1, max = 5))]
    pub completeness: u8,
    /// Addresses the question asked (1–5).
    #[schemars(range(min = 1, max = 5))]
    pub relevance: u8,
    /// Citations present and pointing to supporting passages (1–5).
    #[schemars(range(min = 1, max = 5))]
    pub citation_quality: u8,
    /// One or two sentences on why (at most 200 characters, so that the whole reply fits the
    /// default budget of new tokens).
    #[schemars(length(min = 1, max = 200))]
    pub reason: String,
}

impl JudgeReply {
    /// The five grades in [`CRITERIA`] order.
    pub fn scores(&self) -> [u8; 5] {
        [self.faithfulness, self.accuracy, self.completeness, self.relevance, self.citation_quality]
    }
}

/// Parses a reply strictly: the JSON object (a fenced block is unwrapped), no other keys,
/// every grade an integer from 1 to 5, a non-empty reason.
pub fn parse_judge_reply(text: &str) -> Result<JudgeReply, String> {
    let payload = gauge_chat_client::json_payload(text);
    let r: JudgeReply = serde_json::from_str(payload).map_err(|e| format!("the reply is not the JSON object asked for ({e})"))?;
    for ((name, _), v) in CRITERIA.iter().zip(r.scores()) {
        if !(1..=5).contains(&v) {
            return Err(format!("`{name}` is {v}; every grade must be an integer from 1 to 5"));
        }
    }
    if r.reason.trim().is_empty() {
        return Err("`reason` is empty".into());
    }
    Ok(r)
}

/// One graded answer: the grades, or why there are none.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The grades (None: missing).
    pub reply: Option<JudgeReply>,
    /// Why the grades are missing.
    pub error: Option<String>,
    /// Model calls made for it (0 when all came from the cache).
    pub model_calls: usize,
}

/// The judge: a model, its identity, the templates and the shared cache.
pub struct Judge {
    generator: Generator,
    identity: String,
    cache: Arc<CallCache>,
    rubric: String,
    repair: String,
    section: JudgeSection,
}

/// A passage as the judge sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JudgedPassage {
    /// `source p. N`.
    pub label: String,
    /// Its text.
    pub text: String,
}

fn read_template(path: &Option<String>, builtin: &str, base: &std::path::Path) -> anyhow::Result<String> {
    match path {
        Some(p) => {
            let file = base.join(p);
            std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("{}: cannot read the judge template ({e})", file.display()))
        }
        None => Ok(builtin.to_string()),
    }
}

fn render(template: &str, ctx: minijinja::Value) -> anyhow::Result<String> {
    let mut env = minijinja::Environment::new();
    env.add_template("t", template).map_err(|e| anyhow::anyhow!("judge template: {e}"))?;
    env.get_template("t").and_then(|t| t.render(ctx)).map_err(|e| anyhow::anyhow!("judge template: {e}"))
}

impl JudgeSection {
    /// What the grades depend on besides the answers: the model's identity and both
    /// templates' hashes (a fingerprint input). Templates are relative to `base`.
    pub fn identity(&self, base: &std::path::Path) -> anyhow::Result<String> {
        let rubric = read_template(&self.template, BUILTIN_RUBRIC, base)?;
        let repair = read_template(&self.repair_template, BUILTIN_REPAIR, base)?;
        Ok(format!("{}|rubric={}|repair={}", model_identity(&self.model)?, gauge_core::hash::bytes_hash(rubric.as_bytes()), gauge_core::hash::bytes_hash(repair.as_bytes())))
    }
}

impl Judge {
    /// Opens the judge model on `device`; templates are read relative to `base` (the pipeline's folder).
    pub fn open(section: &JudgeSection, cache: Arc<CallCache>, device: &str, base: &std::path::Path) -> anyhow::Result<Judge> {
        let rubric = read_template(&section.template, BUILTIN_RUBRIC, base)?;
        let repair = read_template(&section.repair_template, BUILTIN_REPAIR, base)?;
        let identity = model_identity(&section.model)?;
        let generator = Generator::open(&section.model, device, RetryPolicy::default())?;
        Ok(Judge { generator, identity, cache, rubric, repair, section: section.clone() })
    }

    /// The rubric prompt for one answer.
    pub fn prompt(&self, question: &str, reference: Option<&str>, passages: &[JudgedPassage], answer: &str) -> anyhow::Result<String> {
        let cut: Vec<JudgedPassage> = passages.iter().map(|p| JudgedPassage { label: p.label.clone(), text: gauge_core::text::cut_at_word(&p.text, self.section.max_passage_chars) }).collect();
        render(&self.rubric, minijinja::context! { question => question, reference => reference, passages => cut, answer => answer })
    }

    /// Grades one answer. Never fails: a grade that cannot be had is a [`Verdict`] with the reason.
    pub fn grade(&self, question: &str, reference: Option<&str>, passages: &[JudgedPassage], answer: &str) -> Verdict {
        self.grade_all(&[Graded { question, reference, passages, answer }], &|_| {}).remove(0)
    }

    /// Grades several answers: the first round of every prompt goes to the model at once (the
    /// local decoder batches them), then each reply is parsed and, when invalid, repaired on
    /// its own. `done` is called once per answer, with the tokens its first reply generated (0
    /// from the cache), as that reply comes. Grades, cache keys and call counts are those
    /// of [`Self::grade`] one by one.
    pub fn grade_all(&self, items: &[Graded<'_>], done: &(dyn Fn(usize) + Sync)) -> Vec<Verdict> {
        let schema = ResponseSchema::of::<JudgeReply>("judge_reply");
        let opts = gauge_chat::GenerateOptions {
            max_new_tokens: self.section.max_new_tokens,
            temperature: self.section.temperature,
            top_k: 0,
            top_p: 1.0,
            seed: self.section.seed,
            stop: Vec::new(),
            ..Default::default()
        };
        let prompts: Vec<anyhow::Result<Vec<Message>>> = items.iter().map(|g| self.prompt(g.question, g.reference, g.passages, g.answer).map(|p| vec![Message::user(p)])).collect();
        let chats: Vec<Vec<Message>> = prompts.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
        let mut firsts = self.cache.complete_batch(&self.generator, &self.identity, &chats, &opts, Some(&schema), done).into_iter();
        prompts
            .into_iter()
            .map(|p| {
                let messages = match p {
                    Ok(m) => m,
                    Err(e) => {
                        done(0);
                        return Verdict { reply: None, error: Some(e.to_string()), model_calls: 0 };
                    }
                };
                let mut first = firsts.next();
                let mut calls = 0;
                let out = complete_with_repair(
                    messages.clone(),
                    |m| {
                        let r = match first.take() {
                            Some(r) => r?,
                            None => self.cache.complete(&self.generator, &self.identity, m, &opts, Some(&schema))?,
                        };
                        calls += usize::from(!r.hit);
                        Ok(r.completion)
                    },
                    parse_judge_reply,
                    |reply, error| Ok(repair_conversation(&messages, reply, render(&self.repair, minijinja::context! { error => error }).map_err(|e| e.to_string())?)),
                );
                match out.result {
                    Ok(r) => Verdict { reply: Some(r), error: None, model_calls: calls },
                    Err(e) => Verdict { reply: None, error: Some(e), model_calls: calls },
                }
            })
            .collect()
    }
}

/// One answer to grade.
#[derive(Debug, Clone, Copy)]
pub struct Graded<'a> {
    /// The question.
    pub question: &'a str,
    /// Its reference answer, when the golden set has one.
    pub reference: Option<&'a str>,
    /// The passages the answer was given.
    pub passages: &'a [JudgedPassage],
    /// The answer.
    pub answer: &'a str,
}

/// How the judge's faithfulness agrees with the deterministic citation check, for one answer
/// row: answers graded and missing, "faithful" ones (faithfulness ≥ `faithful_at`) and how
/// many of them carry an invented citation, and "unfaithful" ones whose citations all verify.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// Answers graded.
    pub graded: usize,
    /// Answers whose grade is missing.
    pub missing: usize,
    /// Graded faithful.
    pub faithful: usize,
    /// Graded faithful, yet with at least one invented citation.
    pub faithful_with_invented: usize,
    /// Graded below faithful.
    pub unfaithful: usize,
    /// Graded below faithful, with citations that all verify (at least one).
    pub unfaithful_all_verified: usize,
    /// Answers where both agree: faithful and no invented citation, or not faithful and an
    /// invented citation (answers without citations do not count).
    pub agree: usize,
    /// Answers with at least one citation among the graded.
    pub with_citations: usize,
}

/// The agreement of one row's grades with its citations: `(faithfulness, n_verified, n_invented)` per graded answer.
pub fn agreement(graded: &[(Option<u8>, usize, usize)], faithful_at: u8) -> Agreement {
    let mut a = Agreement::default();
    for &(f, verified, invented) in graded {
        let Some(f) = f else {
            a.missing += 1;
            continue;
        };
        a.graded += 1;
        let faithful = f >= faithful_at;
        if faithful {
            a.faithful += 1;
            a.faithful_with_invented += usize::from(invented > 0);
        } else {
            a.unfaithful += 1;
            a.unfaithful_all_verified += usize::from(invented == 0 && verified > 0);
        }
        if verified + invented > 0 {
            a.with_citations += 1;
            a.agree += usize::from(faithful == (invented == 0));
        }
    }
    a
}

/// The metric names of the grades (`answer/<name>` in `metrics.parquet`), in [`CRITERIA`] order.
pub const METRIC_NAMES: [&str; 5] = ["judge_faithfulness", "judge_accuracy", "judge_completeness", "judge_relevance", "judge_citation_quality"];

/// The judge section of `ablation.md`: the model, and per answer row how its faithfulness
/// grades agree with the citation check.
pub fn agreement_markdown(section: &JudgeSection, rows: &[(String, Agreement)], calls: (u64, u64)) -> String {
    let model = section.model.describe();
    let mut s = format!(
        "\n### Judge\n\nJudge: {model}, rubric `{}`, JSON reply (schema-constrained) with one repair round; {} model calls, {} from the cache. A grade the judge could not give (failed call, invalid reply after the repair) is missing, not a score. Agreement with the citation check: an answer graded **faithful** (faithfulness ≥ {}) that still carries an invented citation, and one graded below that whose citations all verify, are the two ways they disagree.\n\n| Row | Graded | Missing | Faithful | … with an invented citation | Not faithful | … with all citations verified | Agree (answers with citations) |\n|---|---|---|---|---|---|---|---|\n",
        section.template.as_deref().unwrap_or("prompts/judge.md (built in)"),
        calls.0 + calls.1,
        calls.1,
        section.faithful_at
    );
    let pct = |a: usize, b: usize| if b == 0 { "–".to_string() } else { format!("{a} ({:.0} %)", 100.0 * a as f64 / b as f64) };
    for (name, a) in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            name.replace('|', "\\|"),
            a.graded,
            a.missing,
            a.faithful,
            pct(a.faithful_with_invented, a.faithful),
            a.unfaithful,
            pct(a.unfaithful_all_verified, a.unfaithful),
            pct(a.agree, a.with_citations)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_parsed_strictly() {
        let good = r#"{"faithfulness": 5, "accuracy": 4, "completeness": 3, "relevance": 5, "citation_quality": 2, "reason": "Supported, one citation wrong."}"#;
        assert_eq!(parse_judge_reply(good).unwrap().scores(), [5, 4, 3, 5, 2]);
        assert_eq!(parse_judge_reply(&format!("Here:\n```json\n{good}\n```")).unwrap().accuracy, 4);
        assert!(parse_judge_reply(&good.replace("\"accuracy\": 4", "\"accuracy\": 7")).unwrap_err().contains("`accuracy` is 7"));
        assert!(parse_judge_reply(&good.replace("\"accuracy\": 4", "\"accuracy\": 4.5")).is_err());
        assert!(parse_judge_reply(&good.replace("Supported, one citation wrong.", " ")).unwrap_err().contains("reason"));
        assert!(parse_judge_reply(&good.replace("}", ", \"extra\": 1}")).is_err());
        assert!(parse_judge_reply("great answer, 5/5").is_err());
        let schema = ResponseSchema::of::<JudgeReply>("judge_reply").schema;
        assert_eq!(schema["properties"]["faithfulness"]["maximum"], 5, "{schema:#}");
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn agreement_by_hand() {
        // (faithfulness, verified, invented)
        let rows = [(Some(5), 2, 0), (Some(4), 1, 1), (Some(2), 0, 1), (Some(1), 2, 0), (None, 1, 0), (Some(5), 0, 0)];
        let a = agreement(&rows, 4);
        assert_eq!(
            a,
            Agreement { graded: 5, missing: 1, faithful: 3, faithful_with_invented: 1, unfaithful: 2, unfaithful_all_verified: 1, agree: 2, with_citations: 4 }
        );
    }

    #[test]
    fn the_rubric_renders_every_field() {
        let ctx = minijinja::context! { question => "Q?", reference => "R.", passages => vec![JudgedPassage { label: "a.pdf p. 3".into(), text: "T".into() }], answer => "A [a.pdf p. 3]" };
        let p = render(BUILTIN_RUBRIC, ctx).unwrap();
        for s in ["Question: Q?", "[a.pdf p. 3]\nT", "A [a.pdf p. 3]", "reference answer", "citation_quality"] {
            assert!(p.contains(s), "{s}: {p}");
        }
        assert!(render(BUILTIN_REPAIR, minijinja::context! { error => "bad" }).unwrap().contains("could not be used: bad"));
        assert_eq!(gauge_core::text::cut_at_word("alpha beta gamma", 12), "alpha beta…");
    }
}
