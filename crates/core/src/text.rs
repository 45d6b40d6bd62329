//! Text utilities shared by stages: table-of-contents detection and closest-name suggestions.

/// Whether a text is table-of-contents material: more than half of the non-space characters
/// are dots, or more than half of the non-empty lines hold dot leaders.
pub fn is_toc(text: &str) -> bool {
    let non_space = text.chars().filter(|c| !c.is_whitespace()).count();
    let dots = text.chars().filter(|&c| c == '.' || c == '…').count();
    if non_space > 0 && dots * 2 > non_space {
        return true;
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let leaders = lines.iter().filter(|l| l.contains("....") || l.contains(". . . .") || l.contains("……")).count();
    !lines.is_empty() && leaders * 2 > lines.len()
}

/// Levenshtein distance in characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Up to `n` candidates closest to `name` by edit distance (ties in the given order).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>, n: usize) -> Vec<String> {
    let mut scored: Vec<(usize, usize, &str)> = candidates.into_iter().enumerate().map(|(i, c)| (edit_distance(name, c), i, c)).collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, _, c)| c.to_string()).collect()
}

/// `text` trimmed and cut to at most `max` characters at a word boundary (when one falls in
/// the second half), the cut marked with `…`.
pub fn cut_at_word(text: &str, max: usize) -> String {
    let t = text.trim();
    if t.chars().count() <= max {
        return t.to_string();
    }
    let head: String = t.chars().take(max).collect();
    let at = head.rfind(char::is_whitespace).filter(|&i| i > max / 2).unwrap_or(head.len());
    format!("{}…", head[..at].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toc_and_prose() {
        assert!(is_toc("1. Scope .......... 3\n2. Terms .......... 5\n"));
        assert!(!is_toc("The gate arm must be lowered before the train arrives."));
        assert!(!is_toc(""));
    }

    #[test]
    fn distances_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(closest("manul.pdf", ["other.pdf", "manual.pdf", "x"], 2), vec!["manual.pdf".to_string(), "other.pdf".to_string()]);
    }
}

