//! Page citations, in one place: the tag a passage carries in a prompt (`[source p. N]`,
//! `[source pp. A-B]`) is the form a citation takes in an answer, so rendering the prompt,
//! finding citations in a reply, checking each against the passages given and scoring it
//! against gold pages all read the same definitions.
//!
//! - [`page_tag`], [`PromptPassage`], [`render_answer_prompt`]: the user turn `answer` sends at
//!   inference and `synth-data --mode sft` writes into training examples, rendered by one
//!   function so the two never drift apart.
//! - [`GivenPassage`], [`check`]: the citations of a reply, each verified (a passage given holds
//!   that source and every cited page) or invented.
//! - [`Citation`], [`read_citations`], [`Citation::cites_gold`]: the row `answers.parquet`
//!   stores (a JSON list per answer) and `evaluate` reads back and scores.
use gauge_core::golden::GoldItem;
use serde::{Deserialize, Serialize};

/// Why citations could not be rendered or read.
#[derive(Debug, thiserror::Error)]
pub enum CiteError {
    /// The answer template does not render.
    #[error("answer template: {0}")]
    Template(String),
    /// A stored citation list is not what [`Citation`] writes.
    #[error("{0}")]
    Stored(String),
}

/// `[source p. N]` or `[source pp. A-B]`: the tag before a passage, and the form a citation takes.
pub fn page_tag(source: &str, first: i32, last: i32) -> String {
    if first == last {
        format!("[{source} p. {first}]")
    } else {
        format!("[{source} pp. {first}-{last}]")
    }
}

/// One passage of the answer prompt.
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
pub fn render_answer_prompt(template: &str, question: &str, passages: &[PromptPassage]) -> Result<String, CiteError> {
    let mut env = minijinja::Environment::new();
    let err = |e: minijinja::Error| CiteError::Template(e.to_string());
    env.add_template("answer", template).map_err(err)?;
    let ps: Vec<serde_json::Value> = passages.iter().map(|p| serde_json::json!({ "tag": p.tag(), "text": p.text, "source": p.source, "page_start": p.page_start, "page_end": p.page_end })).collect();
    env.get_template("answer").and_then(|t| t.render(minijinja::context! { question => question, passages => ps })).map_err(err)
}

/// A passage given to the model: where it comes from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GivenPassage {
    /// Chunk id.
    pub chunk_id: String,
    /// Source file.
    pub source: String,
    /// First page.
    pub page_start: i32,
    /// Last page.
    pub page_end: i32,
}

impl GivenPassage {
    /// The tag the prompt puts before the passage, and the form a citation takes.
    pub fn tag(&self) -> String {
        page_tag(&self.source, self.page_start, self.page_end)
    }
}

/// The tags a reply given `passages` may cite: each passage's own tag and, for a passage
/// spanning pages, each of its pages alone — every one of them verified by [`check`].
pub fn citable_tags(passages: &[GivenPassage]) -> Vec<String> {
    let mut tags = Vec::new();
    for p in passages {
        tags.push(p.tag());
        if p.page_end > p.page_start {
            // A range of at most a few pages; a malformed one is capped.
            tags.extend((p.page_start..=p.page_end.min(p.page_start + 64)).map(|n| page_tag(&p.source, n, n)));
        }
    }
    let mut seen = std::collections::HashSet::new();
    tags.retain(|t| seen.insert(t.clone()));
    tags
}

/// One citation found in an answer (a row of the `citations` list `answers.parquet` stores).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Citation {
    /// The source as written.
    pub source: String,
    /// First page cited.
    pub page_start: i32,
    /// Last page cited.
    pub page_end: i32,
    /// Whether a passage of the context holds that source and every cited page.
    pub verified: bool,
}

impl Citation {
    /// Whether it lands on a gold page (sources compared by file name).
    pub fn cites_gold(&self, gold: &[GoldItem]) -> bool {
        let name = |s: &str| s.rsplit('/').next().unwrap_or(s).to_lowercase();
        gold.iter().any(|g| (name(g.source()) == name(&self.source) || g.matches_source(&self.source)) && g.pages().is_some_and(|(a, b)| self.page_start <= b && a <= self.page_end))
    }
}

fn pattern() -> &'static regex::Regex {
    static P: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    P.get_or_init(|| regex::Regex::new(r"\[([^\[\]]+?)[\s,;]+(?:pp?|pages?)\.?\s*(\d{1,5})(?:\s*[-–]\s*(\d{1,5}))?\s*\]").expect("valid citation regex"))
}

fn same_source(cited: &str, given: &str) -> bool {
    let norm = |s: &str| s.trim().trim_matches(|c| c == '"' || c == '\'' || c == '`').to_lowercase();
    let (c, g) = (norm(cited), norm(given));
    c == g || g.rsplit('/').next() == Some(c.as_str()) || g.trim_end_matches(".pdf") == c.trim_end_matches(".pdf")
}

/// The citations of `answer`, each checked against the passages given.
pub fn check(answer: &str, given: &[GivenPassage]) -> Vec<Citation> {
    pattern()
        .captures_iter(answer)
        .filter_map(|c| {
            let source = c[1].trim().trim_end_matches(',').trim().to_string();
            let first: i32 = c[2].parse().ok()?;
            let last: i32 = c.get(3).map_or(Some(first), |m| m.as_str().parse().ok())?;
            let (first, last) = (first.min(last), first.max(last));
            let verified = given.iter().any(|p| same_source(&source, &p.source) && p.page_start <= first && last <= p.page_end);
            Some(Citation { source, page_start: first, page_end: last, verified })
        })
        .collect()
}

/// Reads a stored `citations` list (a JSON list of [`Citation`]); what is not one is an error
/// that says what it is.
pub fn read_citations(json: &str) -> Result<Vec<Citation>, CiteError> {
    let list: Vec<serde_json::Value> = serde_json::from_str(json).map_err(|e| CiteError::Stored(format!("`citations` is not a JSON list ({e})")))?;
    list.iter()
        .map(|v| match (v["source"].as_str(), v["page_start"].as_i64(), v["page_end"].as_i64(), v["verified"].as_bool()) {
            (Some(s), Some(a), Some(b), Some(ok)) => Ok(Citation { source: s.to_string(), page_start: a as i32, page_end: b as i32, verified: ok }),
            _ => Err(CiteError::Stored(format!("citation {v} is not {{source, page_start, page_end, verified}}"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given() -> Vec<GivenPassage> {
        vec![
            GivenPassage { chunk_id: "a".into(), source: "FRA-HRGC.pdf".into(), page_start: 12, page_end: 13 },
            GivenPassage { chunk_id: "b".into(), source: "manuals/Track.pdf".into(), page_start: 4, page_end: 4 },
        ]
    }

    #[test]
    fn every_citable_tag_verifies_and_no_other_page_does() {
        let given = given();
        let tags = citable_tags(&given);
        assert!(!tags.is_empty());
        for t in &tags {
            let c = check(t, &given);
            assert!(c.len() == 1 && c[0].verified, "{t} parses and verifies");
        }
        // One tag per passage plus each page of a range, no duplicates.
        let ranges: usize = given.iter().map(|p| if p.page_end > p.page_start { (p.page_end - p.page_start + 1) as usize } else { 0 }).sum();
        assert_eq!(tags.len(), given.len() + ranges);
        let outside = page_tag(&given[0].source, given[0].page_end + 1, given[0].page_end + 1);
        assert!(!tags.contains(&outside) && !check(&outside, &given)[0].verified);
    }

    #[test]
    fn verified_and_invented_citations() {
        let answer = "Gates must be down [FRA-HRGC.pdf p. 12] and lights flash [FRA-HRGC.pdf pp. 12-13]. \
                      Section 9 says otherwise [FRA-HRGC.pdf p. 40]; see also [Track.pdf p.4], [Other.pdf p. 4] and [note].";
        let c = check(answer, &given());
        let got: Vec<(&str, i32, i32, bool)> = c.iter().map(|c| (c.source.as_str(), c.page_start, c.page_end, c.verified)).collect();
        assert_eq!(
            got,
            vec![("FRA-HRGC.pdf", 12, 12, true), ("FRA-HRGC.pdf", 12, 13, true), ("FRA-HRGC.pdf", 40, 40, false), ("Track.pdf", 4, 4, true), ("Other.pdf", 4, 4, false)]
        );
        assert!(check("no citations here", &given()).is_empty());
        // A range reaching outside the passage is not verified.
        assert!(!check("[FRA-HRGC.pdf pp. 12-14]", &given())[0].verified);
        assert_eq!(given()[0].tag(), "[FRA-HRGC.pdf pp. 12-13]");
        assert!(check(&given()[1].tag(), &given())[0].verified);
    }

    #[test]
    fn the_prompt_tags_what_a_citation_parses() {
        let template = "Q: {{ question }}\n{% for p in passages %}{{ p.tag }} {{ p.text }}\n{% endfor %}";
        let ps = [PromptPassage { source: "m.pdf".into(), page_start: 3, page_end: 4, text: "Gates.".into() }];
        let prompt = render_answer_prompt(template, "why?", &ps).unwrap();
        assert_eq!(prompt, "Q: why?\n[m.pdf pp. 3-4] Gates.\n");
        let given = [GivenPassage { chunk_id: "c".into(), source: "m.pdf".into(), page_start: 3, page_end: 4 }];
        assert!(check(&prompt, &given).iter().all(|c| c.verified));
        assert!(render_answer_prompt("{% for %}", "q", &ps).unwrap_err().to_string().starts_with("answer template:"));
    }

    #[test]
    fn stored_citations_round_trip_and_bad_ones_are_named() {
        let c = check("[m.pdf p. 3]", &[]);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(read_citations(&json).unwrap(), c);
        assert!(read_citations("[a.pdf p3]").unwrap_err().to_string().contains("not a JSON list"));
        assert!(read_citations(r#"[{"source":"a.pdf"}]"#).unwrap_err().to_string().contains("is not {source, page_start, page_end, verified}"));
    }

    #[test]
    fn a_citation_on_a_gold_page_counts_by_file_name() {
        let gold = [GoldItem::Page { source: "manuals/m.pdf".into(), page: 3, grade: None }];
        let cite = |s: &str, a, b| Citation { source: s.into(), page_start: a, page_end: b, verified: true };
        assert!(cite("m.pdf", 3, 3).cites_gold(&gold));
        assert!(cite("M.PDF", 2, 4).cites_gold(&gold), "a range over the gold page");
        assert!(!cite("m.pdf", 4, 5).cites_gold(&gold));
        assert!(!cite("other.pdf", 3, 3).cites_gold(&gold));
    }
}
