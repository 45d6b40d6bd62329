//! Query rewriting by a language model, before retrieval (`retrieval.rewrite`):
//!
//! - `expand`: the model adds synonyms, formal terms and spelled-out abbreviations; both
//!   retrievers search the query followed by them.
//! - `multi_query`: the model writes `n` paraphrases; every retriever searches the question
//!   and each paraphrase, and all the lists are fused (the config's fusion, RRF by default).
//! - `hyde`: the model writes a hypothetical manual passage answering the question; the dense
//!   retriever embeds that passage, BM25 keeps the question.
//!
//! The prompts are templates (`pipelines/prompts/rewrite_<kind>.md` are the defaults, built in;
//! `template` names another file), rendered with `query` and `n`. Every model call goes through
//! the [`CallCache`]: a rerun asks the model nothing, and the latency a cold run would pay is
//! kept with each entry. Reranking and identifier promotion always read the original question.
use std::sync::Arc;

use gauge_generator::cache::{model_identity, CallCache};
use gauge_generator::{Generator, GeneratorConfig};
use gauge_chat_client::{Message, RetryPolicy};
use serde::{Deserialize, Serialize};

/// Which rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewriteKind {
    /// Add terms to the query.
    Expand,
    /// Paraphrases, retrieved separately and fused.
    MultiQuery,
    /// A hypothetical passage for the dense retriever.
    Hyde,
}

/// `retrieval.rewrite`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RewriteConfig {
    /// Which rewrite.
    pub kind: RewriteKind,
    /// Paraphrases (multi-query).
    pub n: usize,
    /// The model (local decoder or an OpenAI-compatible endpoint).
    pub model: GeneratorConfig,
    /// A template file replacing the built-in prompt (rendered with `query` and `n`).
    pub template: Option<String>,
    /// Tokens the model may write.
    pub max_new_tokens: usize,
    /// Sampling seed (replies are greedy unless `temperature` > 0).
    pub seed: u64,
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
}

impl Default for RewriteConfig {
    fn default() -> Self {
        RewriteConfig { kind: RewriteKind::Expand, n: 3, model: GeneratorConfig::default(), template: None, max_new_tokens: 96, seed: 0, temperature: 0.0 }
    }
}

/// The built-in template of a kind (the files in `pipelines/prompts/`).
pub fn builtin_template(kind: RewriteKind) -> &'static str {
    match kind {
        RewriteKind::Expand => include_str!("../../../pipelines/prompts/rewrite_expand.md"),
        RewriteKind::MultiQuery => include_str!("../../../pipelines/prompts/rewrite_multi_query.md"),
        RewriteKind::Hyde => include_str!("../../../pipelines/prompts/rewrite_hyde.md"),
    }
}

impl RewriteConfig {
    /// The template text (the named file, or the built-in one).
    pub fn template_text(&self) -> anyhow::Result<String> {
        match &self.template {
            Some(path) => std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{path}: cannot read the rewrite template ({e})")),
            None => Ok(builtin_template(self.kind).to_string()),
        }
    }

    /// What the rewrites depend on besides the query: the model's identity and the
    /// template's hash (for evaluation fingerprints).
    pub fn identity(&self) -> anyhow::Result<String> {
        Ok(format!("{}|template={}", model_identity(&self.model)?, gauge_core::hash::bytes_hash(self.template_text()?.as_bytes())))
    }
}

/// The texts each retriever searches: `(bm25, dense)` per query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rewrite {
    /// One `(BM25 text, dense text)` per search; the first is always derived from the question.
    pub queries: Vec<(String, String)>,
    /// Model calls made (0 when every reply came from the cache).
    pub model_calls: usize,
    /// Replies served from the cache.
    pub cache_hits: usize,
    /// Milliseconds the replies took when they were made (what a cold run pays).
    pub model_ms: f64,
}

/// A rewriter: one model, its identity and the shared cache.
pub struct LlmRewriter {
    generator: Generator,
    identity: String,
    cache: Arc<CallCache>,
}

/// Strips list markers (`1.`, `2)`, `-`, `*`, `•`) and quotes from a line.
fn clean_line(line: &str) -> String {
    let t = line.trim();
    let t = t.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start_matches(['.', ')', ':']);
    let t = t.trim_start_matches(['-', '*', '•']).trim();
    let t = t.strip_prefix("Query:").or_else(|| t.strip_prefix("Question:")).unwrap_or(t).trim();
    t.trim_matches(['"', '\'', '`']).trim().to_string()
}

/// The searches a reply makes for a question (pure: tested without a model).
pub fn parse_rewrite(kind: RewriteKind, query: &str, reply: &str, n: usize) -> Vec<(String, String)> {
    let q = query.trim().to_string();
    match kind {
        RewriteKind::Expand => {
            let terms = reply.lines().map(clean_line).find(|l| !l.is_empty()).unwrap_or_default();
            let expanded = if terms.is_empty() { q.clone() } else { format!("{q} {terms}") };
            vec![(expanded.clone(), expanded)]
        }
        RewriteKind::MultiQuery => {
            let mut out = vec![(q.clone(), q.clone())];
            for line in reply.lines().map(clean_line) {
                if out.len() > n {
                    break;
                }
                if line.len() >= 8 && !out.iter().any(|(a, _)| a.eq_ignore_ascii_case(&line)) {
                    out.push((line.clone(), line));
                }
            }
            out
        }
        RewriteKind::Hyde => {
            let passage = reply.trim();
            vec![(q.clone(), if passage.is_empty() { q.clone() } else { passage.to_string() })]
        }
    }
}

impl LlmRewriter {
    /// Opens the model of `cfg` on `device`, sharing `cache`.
    pub fn open(cfg: &RewriteConfig, cache: Arc<CallCache>, device: &str) -> anyhow::Result<LlmRewriter> {
        let identity = model_identity(&cfg.model)?;
        let generator = Generator::open(&cfg.model, device, RetryPolicy::default())?;
        Ok(LlmRewriter { generator, identity, cache })
    }

    /// The searches for `query`.
    pub fn rewrite(&self, query: &str, cfg: &RewriteConfig) -> anyhow::Result<Rewrite> {
        let mut env = minijinja::Environment::new();
        let template = cfg.template_text()?;
        env.add_template("rewrite", &template).map_err(|e| anyhow::anyhow!("rewrite template: {e}"))?;
        let prompt = env.get_template("rewrite").and_then(|t| t.render(minijinja::context! { query => query.trim(), n => cfg.n })).map_err(|e| anyhow::anyhow!("rewrite template: {e}"))?;
        let messages = vec![Message::user(prompt)];
        let opts = gauge_chat::GenerateOptions { max_new_tokens: cfg.max_new_tokens, temperature: cfg.temperature, top_k: 0, top_p: 1.0, seed: cfg.seed, stop: Vec::new(), ..Default::default() };
        let reply = self.cache.complete(&self.generator, &self.identity, &messages, &opts, None)?;
        Ok(Rewrite {
            queries: parse_rewrite(cfg.kind, query, &reply.completion.text, cfg.n),
            model_calls: usize::from(!reply.hit),
            cache_hits: usize::from(reply.hit),
            model_ms: reply.original_latency_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_searches() {
        let q = "When must gate arms be lowered?";
        assert_eq!(parse_rewrite(RewriteKind::Expand, q, "\n1. crossing gate, warning system, 234.223\nmore", 3), vec![(format!("{q} crossing gate, warning system, 234.223"), format!("{q} crossing gate, warning system, 234.223"))]);
        assert_eq!(parse_rewrite(RewriteKind::Expand, q, "  ", 3)[0].0, q);
        let multi = parse_rewrite(RewriteKind::MultiQuery, q, "1. When are crossing gates lowered?\n- when must gate arms be lowered?\n\n* What is the gate descent time?\nok\n3) Who lowers the gate arms at a crossing?\nExtra question beyond n?", 3);
        let texts: Vec<&str> = multi.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(texts, vec![q, "When are crossing gates lowered?", "What is the gate descent time?", "Who lowers the gate arms at a crossing?"]);
        assert_eq!(parse_rewrite(RewriteKind::Hyde, q, "Gate arms shall be lowered before the train arrives.", 3), vec![(q.to_string(), "Gate arms shall be lowered before the train arrives.".to_string())]);
        assert_eq!(parse_rewrite(RewriteKind::Hyde, q, "", 3)[0].1, q);
    }

    #[test]
    fn builtin_templates_render_the_query() {
        for kind in [RewriteKind::Expand, RewriteKind::MultiQuery, RewriteKind::Hyde] {
            let t = builtin_template(kind);
            assert!(t.contains("{{ query }}"), "{kind:?}");
        }
        assert!(builtin_template(RewriteKind::MultiQuery).contains("{{ n }}"));
        let cfg = RewriteConfig { template: Some("/no/such/template.md".into()), ..Default::default() };
        assert!(cfg.template_text().unwrap_err().to_string().contains("/no/such/template.md"));
    }
}
