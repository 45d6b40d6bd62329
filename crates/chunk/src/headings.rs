//! Heading detection for the `section` strategy and the `section` column.
//!
//! A heading is a whole line that looks like one of: a Markdown heading (`## Title`),
//! `CHAPTER 11 – Title`, `PART 214`/`Subpart B`, `Appendix A`, a section-symbol heading
//! (`§ 236.405 Title`) or a numbered heading (`11.2.2 Title`, two to five numbers of at
//! most two digits each, so rule numbers like `234.219` and defect codes are not
//! headings). Table-of-contents lines (dot leaders) never are, and neither are:
//! - list entries: a heading followed directly (nothing but blank lines between) by another
//!   of the same or a higher level, or a run of three or more same-level headings at most one
//!   line apart (a table of contents without dot leaders, like Part 236's list of
//!   appendices);
//! - sentence tails such as `Appendix C.` (an `Appendix` line ending with a period) or
//!   `Subpart H.` (keyword, label and a period).
//!
//! In heading paths, a CFR section (`§ 236.5 …`) closes any open heading that names another
//! part (`Appendix A to Part 233 …`): an appendix to Part 233 cannot hold Part 236's sections.
use std::sync::OnceLock;

use regex::Regex;

/// A heading found in a text.
#[derive(Debug, Clone, PartialEq)]
pub struct Heading {
    /// Byte offset of the heading line.
    pub offset: usize,
    /// Nesting level (1 = chapter).
    pub level: usize,
    /// The heading line.
    pub title: String,
}

/// A heading pattern and how its match gives the heading's level.
type HeadingPattern = (Regex, fn(&regex::Captures) -> usize);

fn patterns() -> &'static [HeadingPattern] {
    static P: OnceLock<Vec<HeadingPattern>> = OnceLock::new();
    P.get_or_init(|| {
        let r = |s: &str| Regex::new(s).expect("valid heading regex");
        vec![
            (r(r"^(#{1,6})\s+\S"), (|c: &regex::Captures| c[1].len()) as fn(&regex::Captures) -> usize),
            (r(r"^(?:CHAPTER|Chapter)\s+(?:\d{1,3}|[IVXL]{1,6})\b"), |_| 1),
            (r(r"^(?:APPENDIX|Appendix)\s+[A-Z0-9]{1,3}\b"), |_| 1),
            (r(r"^(?:PART|Part)\s+\d{1,4}\s*$|^(?:PART|Part)\s+\d{1,4}\s*[–—:-]"), |_| 1),
            (r(r"^(?:SUBPART|Subpart)\s+[A-Z]\b"), |_| 2),
            (r(r"^§\s*\d{1,4}\.\d{1,5}\s+[A-Z]"), |_| 3),
            (r(r"^(\d{1,2}(?:\.\d{1,2}){1,4})\.?\s+[A-Z]"), |c: &regex::Captures| c[1].split('.').count() + 1),
        ]
    })
}

fn dot_leader() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"(?:\.\s?){4,}|…{2,}").expect("valid regex"))
}

/// The heading level of a line, if it is a heading.
pub fn heading_level(line: &str) -> Option<usize> {
    let line = line.trim();
    if line.is_empty() || line.chars().count() > 120 || dot_leader().is_match(line) {
        return None;
    }
    if line.ends_with(',') || line.ends_with(';') || line.split_whitespace().count() > 12 {
        return None;
    }
    // Sentence tails: "…described in\nAppendix C." or "…of this Subpart H.".
    let lower = line.to_lowercase();
    if line.ends_with('.') && (lower.starts_with("appendix") || (line.split_whitespace().count() <= 2 && ["subpart", "part", "chapter"].iter().any(|k| lower.starts_with(k)))) {
        return None;
    }
    patterns().iter().find_map(|(re, level)| re.captures(line).map(|c| level(&c)))
}

/// Every heading in a text, in order (list entries dropped, see the module docs).
pub fn find_headings(text: &str) -> Vec<Heading> {
    let mut raw: Vec<(Heading, usize)> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(level) = heading_level(line) {
            raw.push((Heading { offset, level, title: line.trim().to_string() }, offset + line.len()));
        }
        offset += line.len();
    }
    // Non-empty lines between heading i and heading i + 1.
    let gaps: Vec<usize> = raw.windows(2).map(|w| text[w[0].1..w[1].0.offset].lines().filter(|l| !l.trim().is_empty()).count()).collect();
    let mut drop = vec![false; raw.len()];
    for (i, &gap) in gaps.iter().enumerate() {
        if gap == 0 && raw[i + 1].0.level <= raw[i].0.level {
            drop[i] = true;
        }
    }
    let mut start = 0;
    while start < raw.len() {
        let mut end = start;
        while end + 1 < raw.len() && gaps[end] <= 1 && raw[end + 1].0.level == raw[start].0.level {
            end += 1;
        }
        if end - start + 1 >= 3 {
            drop[start..=end].iter_mut().for_each(|d| *d = true);
        }
        start = end + 1;
    }
    raw.into_iter().zip(drop).filter(|(_, d)| !d).map(|((h, _), _)| h).collect()
}

fn part_named(title: &str) -> Option<u32> {
    static R: OnceLock<Regex> = OnceLock::new();
    let r = R.get_or_init(|| Regex::new(r"(?i)\bpart\s+(\d{1,4})\b").expect("valid regex"));
    r.captures(title).and_then(|c| c[1].parse().ok())
}

fn section_part(title: &str) -> Option<u32> {
    static R: OnceLock<Regex> = OnceLock::new();
    let r = R.get_or_init(|| Regex::new(r"^§\s*(\d{1,4})\.").expect("valid regex"));
    r.captures(title).and_then(|c| c[1].parse().ok())
}

/// Heading paths: for each heading, the titles of it and its open ancestors, joined by ` › `.
pub fn heading_paths(headings: &[Heading]) -> Vec<String> {
    let mut stack: Vec<&Heading> = Vec::new();
    headings
        .iter()
        .map(|h| {
            while stack.last().is_some_and(|top| top.level >= h.level) {
                stack.pop();
            }
            if let Some(part) = section_part(&h.title) {
                stack.retain(|open| part_named(&open.title).is_none_or(|p| p == part));
            }
            stack.push(h);
            stack.iter().map(|h| h.title.as_str()).collect::<Vec<_>>().join(" › ")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_manuals_heading_styles() {
        assert_eq!(heading_level("CHAPTER 11 – NOTIFICATIONS AND APPROVALS"), Some(1));
        assert_eq!(heading_level("11.2 Approvals"), Some(3));
        assert_eq!(heading_level("11.2.2 COFC/TOFC Approval"), Some(4));
        assert_eq!(heading_level("§ 236.405 Track circuits."), Some(3));
        assert_eq!(heading_level("## Scope"), Some(2));
        assert_eq!(heading_level("Subpart B—Roadway Worker Protection"), Some(2));
        assert_eq!(heading_level("Appendix A"), Some(1));
        assert_eq!(heading_level("Subpart C – Response to Reports of Warning System Malfunction."), Some(2));
        assert_eq!(heading_level("Subpart H."), None);
        assert_eq!(heading_level("Appendix F to Part 236."), None);
    }

    #[test]
    fn rejects_codes_toc_lines_and_prose() {
        assert_eq!(heading_level("234.219.A1 Gate arm light burned out or missing."), None);
        assert_eq!(heading_level("§ 236.1005.A1 Failure of the PTC system to reliably"), None);
        assert_eq!(heading_level("11.2.2 COFC/TOFC Approval ............................ 35"), None);
        assert_eq!(heading_level("174.63 applies to portable tanks"), None);
        assert_eq!(heading_level("The shipper shall notify the Federal Railroad Administration"), None);
        assert_eq!(heading_level("Part 214 general provisions do not apply,"), None);
        assert_eq!(heading_level("Appendix C to this part are either addressed directly, addressed using other safety criteria, or not"), None);
    }

    #[test]
    fn lists_of_headings_and_sentence_tails_are_not_structure() {
        // Part 236's list of appendices (no dot leaders), the last one wrapped on two lines,
        // then the part's sections; later a sentence ending in "Appendix C." and a real appendix.
        let text = "Subpart I – PTC\n• § 236.1001 Purpose and scope.\n\
                    Appendix A to Part 236 – Civil Penalty Schedule\n\
                    Appendix B to Part 236 – Risk Assessment Criteria\n\
                    Appendix F to Part 236 – Minimum Requirements of Third-Party\n\
                    Assessment of PTC System Safety\n\
                    § 236.0 Applicability.\n(a) This part applies to all railroads.\n\
                    as described in\nAppendix C.\nMore text.\n\
                    Appendix B to Part 236—Risk Assessment Criteria\nThe safety-critical...\n";
        let titles: Vec<String> = find_headings(text).into_iter().map(|h| h.title).collect();
        assert_eq!(titles, ["Subpart I – PTC", "§ 236.0 Applicability.", "Appendix B to Part 236—Risk Assessment Criteria"]);
        // Two headings in a row at the same level: the first is an empty entry.
        let titles: Vec<String> = find_headings("CHAPTER 1 – A\nCHAPTER 2 – B\nbody\n").into_iter().map(|h| h.title).collect();
        assert_eq!(titles, ["CHAPTER 2 – B"]);
    }

    #[test]
    fn a_section_of_another_part_closes_an_appendix() {
        let text = "Appendix A to Part 233 – Schedule of Civil Penalties\npenalties\nSubpart A – Rules\nrules\n§ 236.1 Plans.\nbody\n§ 233.5 Accidents.\nbody\n";
        let paths = heading_paths(&find_headings(text));
        assert_eq!(
            paths,
            vec![
                "Appendix A to Part 233 – Schedule of Civil Penalties",
                "Appendix A to Part 233 – Schedule of Civil Penalties › Subpart A – Rules",
                "Subpart A – Rules › § 236.1 Plans.",
                "Subpart A – Rules › § 233.5 Accidents.",
            ]
        );
    }

    #[test]
    fn paths_nest_and_close() {
        let text = "CHAPTER 11 – X\n11.1 A\ntext\n11.2 B\n11.2.1 C\nbody\nCHAPTER 12 – Y\n";
        let hs = find_headings(text);
        assert_eq!(hs.len(), 5);
        assert_eq!(&text[hs[2].offset..hs[2].offset + 6], "11.2 B");
        assert_eq!(
            heading_paths(&hs),
            vec![
                "CHAPTER 11 – X",
                "CHAPTER 11 – X › 11.1 A",
                "CHAPTER 11 – X › 11.2 B",
                "CHAPTER 11 – X › 11.2 B › 11.2.1 C",
                "CHAPTER 12 – Y",
            ]
        );
    }
}
