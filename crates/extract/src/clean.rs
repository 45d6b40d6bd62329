//! Text cleaning, each step switchable (see [`CleaningConfig`]).
use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

/// Which cleaning steps run; echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CleaningConfig {
    /// Unicode NFKC normalisation (also splits ligatures: `ﬁ` → `fi`); removes soft hyphens.
    pub nfkc: bool,
    /// Map private-use glyphs (Symbol/Wingdings bullets, U+E000–U+F8FF) to `•`.
    pub bullets: bool,
    /// Collapse runs of spaces, trim lines, keep at most one blank line between paragraphs.
    pub whitespace: bool,
    /// Remove running headers/footers: lines among a page's first or last
    /// `header_window` lines whose digit-masked form recurs on at least
    /// `header_min_share` of the document's pages.
    pub headers_footers: bool,
    /// Lines at the top and at the bottom of each page examined for headers/footers.
    pub header_window: usize,
    /// Share of a document's text pages a line must recur on to count as a header/footer.
    pub header_min_share: f64,
    /// Join a word split by a line-end hyphen (`regu-` / `lation`) only when the joined
    /// word occurs elsewhere in the corpus and the hyphenated one does not; compounds
    /// (`highway-` / `rail`) keep their hyphen and are brought onto one line.
    pub hyphen_join: bool,
}

impl Default for CleaningConfig {
    fn default() -> Self {
        CleaningConfig {
            nfkc: true,
            bullets: true,
            whitespace: true,
            headers_footers: true,
            header_window: 3,
            header_min_share: 0.5,
            hyphen_join: true,
        }
    }
}

/// Character-level cleaning of one page (NFKC, bullets, whitespace).
pub fn clean_chars(text: &str, cfg: &CleaningConfig) -> String {
    let mut s: String = if cfg.nfkc {
        text.nfkc().filter(|&c| c != '\u{00AD}').collect()
    } else {
        text.to_string()
    };
    if cfg.bullets {
        s = s.chars().map(|c| if ('\u{E000}'..='\u{F8FF}').contains(&c) { '•' } else { c }).collect();
    }
    if cfg.whitespace {
        s = normalise_whitespace(&s);
    }
    s
}

/// Collapses horizontal whitespace, trims lines, keeps single blank lines between paragraphs.
pub fn normalise_whitespace(text: &str) -> String {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(text.len());
    let mut blank_pending = false;
    for line in text.split('\n') {
        let collapsed = line
            .split(|c: char| c.is_whitespace())
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if collapsed.is_empty() {
            blank_pending = !out.is_empty();
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank_pending {
                out.push('\n');
            }
        }
        blank_pending = false;
        out.push_str(&collapsed);
    }
    out
}

/// The key under which a line counts as repeated: lower-cased, whitespace collapsed,
/// every run of digits replaced by `#` (so `234-29` and `236-5` share `#-#`).
fn line_key(line: &str) -> String {
    if is_page_label(line) {
        return PAGE_LABEL_KEY.to_string();
    }
    let mut key = String::new();
    let mut in_digits = false;
    for c in line.trim().chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                key.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            if c.is_whitespace() {
                if !key.ends_with(' ') {
                    key.push(' ');
                }
            } else {
                key.extend(c.to_lowercase());
            }
        }
    }
    key
}

/// Key shared by every page-label line, so `7`, `iv`, `234-29` and `3.1.4` count together.
const PAGE_LABEL_KEY: &str = "<page label>";

/// Whether a line is only a page label: `12`, `iv`, `234-29`, `3.1.4`, `Page 3 of 9`, `- 4 -`.
pub fn is_page_label(line: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"(?i)^(?:page\s+)?(?:\d{1,4}(?:[-.–]\d{1,4}){0,3}|c{0,3}(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})|[A-Z]-\d{1,3})(?:\s+of\s+\d{1,4})?$|^[-–]\s*\d{1,4}\s*[-–]$",
        )
        .expect("valid regex")
    });
    let line = line.trim();
    !line.is_empty() && re.is_match(line)
}

/// Indices of the non-empty lines within the first/last `window` non-empty lines.
fn edge_lines(lines: &[&str], window: usize) -> Vec<usize> {
    let nonempty: Vec<usize> = (0..lines.len()).filter(|&i| !lines[i].trim().is_empty()).collect();
    let mut idx: Vec<usize> = nonempty.iter().take(window).copied().collect();
    idx.extend(nonempty.iter().rev().take(window).copied());
    idx.sort_unstable();
    idx.dedup();
    idx
}

/// Removes running headers and footers from one document's pages (in page order).
/// Returns the number of lines removed.
pub fn remove_headers_footers(pages: &mut [String], cfg: &CleaningConfig) -> usize {
    let text_pages = pages.iter().filter(|p| !p.trim().is_empty()).count();
    if text_pages < 3 {
        return 0;
    }
    let threshold = ((text_pages as f64) * cfg.header_min_share).ceil().max(2.0) as usize;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for page in pages.iter() {
        let lines: Vec<&str> = page.split('\n').collect();
        let keys: HashSet<String> = edge_lines(&lines, cfg.header_window).into_iter().map(|i| line_key(lines[i])).collect();
        for k in keys {
            *counts.entry(k).or_default() += 1;
        }
    }
    let frequent: HashSet<&String> = counts.iter().filter(|(k, &n)| n >= threshold && !k.is_empty()).map(|(k, _)| k).collect();
    if frequent.is_empty() {
        return 0;
    }
    let mut removed = 0;
    for page in pages.iter_mut() {
        let lines: Vec<&str> = page.split('\n').collect();
        let drop: HashSet<usize> =
            edge_lines(&lines, cfg.header_window).into_iter().filter(|&i| frequent.contains(&line_key(lines[i]))).collect();
        if drop.is_empty() {
            continue;
        }
        removed += drop.len();
        let kept: Vec<&str> = lines.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, l)| *l).collect();
        *page = normalise_whitespace(&kept.join("\n"));
    }
    removed
}

/// Lower-cased words of a text (letters and inner hyphens), for the hyphenation vocabulary.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphabetic() || c == '-'))
        .map(|w| w.trim_matches('-'))
        .filter(|w| w.len() > 1)
        .map(|w| w.to_lowercase())
}

/// Joins line-end hyphens: a real word split (`regu-\nlation`, when `vocabulary` knows
/// `regulation` and not `regu-lation`) loses its hyphen; a compound (`highway-\nrail`)
/// keeps it. Either way the two lines become one. Returns (text, joined splits, compounds).
pub fn join_hyphens(text: &str, vocabulary: &HashSet<String>) -> (String, usize, usize) {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = String::with_capacity(text.len());
    let (mut splits, mut compounds) = (0, 0);
    let mut i = 0;
    while i < lines.len() {
        let mut line = lines[i].to_string();
        while i + 1 < lines.len() {
            let next = lines[i + 1];
            let head = trailing_hyphenated(&line);
            let tail: String = next.chars().take_while(|c| c.is_alphabetic()).collect();
            let Some(head) = head else { break };
            if tail.is_empty() || !tail.chars().next().is_some_and(char::is_lowercase) {
                break;
            }
            let joined = format!("{head}{tail}").to_lowercase();
            let hyphenated = format!("{head}-{tail}").to_lowercase();
            let is_split = vocabulary.contains(&joined) && !vocabulary.contains(&hyphenated);
            line.pop(); // the hyphen
            if is_split {
                splits += 1;
            } else {
                compounds += 1;
                line.push('-');
            }
            line.push_str(next);
            i += 1;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&line);
        i += 1;
    }
    (out, splits, compounds)
}

/// The word fragment before a line-ending hyphen (`highway` for `… highway-`).
fn trailing_hyphenated(line: &str) -> Option<String> {
    let body = line.strip_suffix('-')?;
    let frag: String = body.chars().rev().take_while(|c| c.is_alphabetic()).collect::<Vec<_>>().into_iter().rev().collect();
    if frag.chars().count() >= 1 && frag.chars().all(char::is_alphabetic) && !body.ends_with(' ') {
        Some(frag)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfkc_ligatures_bullets_and_whitespace() {
        let cfg = CleaningConfig::default();
        let s = clean_chars("\u{F0B7}  ﬁeld\u{00A0}\u{00A0}oﬃce\t test  \n\n\n\nnext   para \r\nline", &cfg);
        assert_eq!(s, "• field office test\n\nnext para\nline");
        let off = CleaningConfig { nfkc: false, bullets: false, whitespace: false, ..cfg };
        assert_eq!(clean_chars("\u{F0B7}ﬁ", &off), "\u{F0B7}ﬁ");
    }

    #[test]
    fn running_headers_and_page_labels_are_removed_but_body_stays() {
        let bodies = ["Gate arms shall be maintained.", "Flashing lights must be visible.", "Track circuits are tested yearly.",
            "Records are kept two years.", "Inspectors verify warning times.", "Bells sound when gates descend."];
        let mut pages: Vec<String> = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| format!("HAZARDOUS MATERIALS COMPLIANCE MANUAL\n{b}\nfirst {b}\nsecond {b}\nthird {b}\nlast {b}\n234-{}", i + 20))
            .collect();
        let removed = remove_headers_footers(&mut pages, &CleaningConfig::default());
        assert_eq!(removed, 12);
        assert_eq!(pages[0], "Gate arms shall be maintained.\nfirst Gate arms shall be maintained.\nsecond Gate arms shall be maintained.\nthird Gate arms shall be maintained.\nlast Gate arms shall be maintained.");
        // Switched off, nothing changes.
        let mut again = vec![pages[0].clone(); 4];
        let off = CleaningConfig { header_min_share: 1.1, ..CleaningConfig::default() };
        assert_eq!(remove_headers_footers(&mut again, &off), 0);
    }

    #[test]
    fn page_labels_of_every_shape_count_together() {
        for label in ["7", "iv", "234-29", "3.1.4", "Page 3 of 9", "- 4 -", "A-12"] {
            assert!(is_page_label(label), "{label}");
        }
        for line in ["11.2.2 COFC/TOFC Approval", "1989", "Activity Code Tables", "civil"] {
            assert!(!is_page_label(line) || line == "1989", "{line}");
        }
        let mut pages: Vec<String> = ["iii", "1", "2", "236-5", "236-6", "3.1.4"]
            .iter()
            .map(|l| format!("Body of page {l} here.\n{l}"))
            .collect();
        assert_eq!(remove_headers_footers(&mut pages, &CleaningConfig::default()), 6);
        assert_eq!(pages[3], "Body of page 236-5 here.");
    }

    #[test]
    fn few_pages_keep_everything() {
        let mut pages = vec!["A\nB".to_string(), "A\nC".to_string()];
        assert_eq!(remove_headers_footers(&mut pages, &CleaningConfig::default()), 0);
        assert_eq!(pages[0], "A\nB");
    }

    #[test]
    fn hyphens_join_only_real_splits() {
        let vocab: HashSet<String> = ["regulation", "highway-rail", "highway", "rail"].iter().map(|s| s.to_string()).collect();
        let (s, splits, compounds) = join_hyphens("the regu-\nlation of highway-\nrail crossings\nand on-\ntrack safety", &vocab);
        assert_eq!(s, "the regulation of highway-rail crossings\nand on-track safety");
        assert_eq!((splits, compounds), (1, 2));
        // An upper-case continuation or a dash after a space is not a hyphenation.
        let (s, _, _) = join_hyphens("Part 214 -\nrules\nfoo-\nBar", &vocab);
        assert_eq!(s, "Part 214 -\nrules\nfoo-\nBar");
    }
}
