//! Citations in an answer (`[source p. N]`, `[source pp. A-B]`) and whether each points to a
//! passage that was in the context (verified) or not (invented).
use serde::{Deserialize, Serialize};

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

pub use gauge_generator::answer_prompt::page_tag;

/// One citation found in an answer.
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
}
