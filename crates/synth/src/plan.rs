//! Which chunks become questions: seeded, stratified by source, junk skipped; and the
//! inverse-cloze sentence of a chunk.
use std::collections::{BTreeMap, HashMap, HashSet};

use gauge_core::schema::ChunkRecord;
use serde::{Deserialize, Serialize};

/// Question style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// A question a passage answers directly.
    Factual,
    /// A field situation that applies the passage's rule.
    Scenario,
    /// Needs two passages of the same document.
    MultiHop,
    /// Inverse cloze: a salient sentence of the passage is the query (offline mode).
    Ict,
}

impl Style {
    /// Name as in files and rows.
    pub fn name(self) -> &'static str {
        match self {
            Style::Factual => "factual",
            Style::Scenario => "scenario",
            Style::MultiHop => "multi_hop",
            Style::Ict => "ict",
        }
    }

    /// Parses a style name.
    pub fn parse(s: &str) -> Option<Style> {
        match s.trim() {
            "factual" => Some(Style::Factual),
            "scenario" => Some(Style::Scenario),
            "multi_hop" | "multi-hop" => Some(Style::MultiHop),
            "ict" => Some(Style::Ict),
            _ => None,
        }
    }
}

/// One planned sample: its index (stable across resumptions), style and chunk rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedSample {
    /// 0-based sample index.
    pub index: usize,
    /// Style.
    pub style: Style,
    /// Rows in the chunk table: one, or two of the same document for `multi_hop`.
    pub chunks: Vec<usize>,
}

use gauge_core::rng::SplitMix64 as Rng;

/// Whether a chunk can seed a question: long enough and not a table of contents.
pub fn eligible(c: &ChunkRecord, min_chars: usize) -> bool {
    c.text.chars().count() >= min_chars && !gauge_core::text::is_toc(&c.text)
}

/// Plans `n` samples: chunks are shuffled per source (seeded), sources get shares
/// proportional to their eligible chunks (largest remainder), and the plan interleaves
/// sources so any prefix covers them all. Styles rotate through `styles`. A `multi_hop`
/// sample pairs its chunk with another, non-adjacent chunk of the same document; `ict`
/// samples need a usable sentence (`ict_ok`).
pub fn plan(chunks: &[ChunkRecord], n: usize, styles: &[Style], seed: u64, min_chars: usize, ict_ok: &dyn Fn(usize) -> bool) -> Vec<PlannedSample> {
    let mut rng = Rng::new(seed);
    let mut by_source: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, c) in chunks.iter().enumerate() {
        if eligible(c, min_chars) {
            by_source.entry(c.source.as_str()).or_default().push(i);
        }
    }
    let mut by_doc: HashMap<&str, Vec<usize>> = HashMap::new();
    for list in by_source.values() {
        for &i in list {
            by_doc.entry(chunks[i].doc_id.as_str()).or_default().push(i);
        }
    }
    for list in by_source.values_mut() {
        rng.shuffle(list);
    }
    let total: usize = by_source.values().map(Vec::len).sum();
    let n = n.min(total);
    // Largest-remainder shares.
    let mut shares: Vec<(usize, f64, &str)> = by_source.iter().map(|(s, l)| {
        let exact = n as f64 * l.len() as f64 / total.max(1) as f64;
        (exact.floor() as usize, exact - exact.floor(), *s)
    }).collect();
    let mut left = n - shares.iter().map(|s| s.0).sum::<usize>();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].1.total_cmp(&shares[a].1).then(a.cmp(&b)));
    for &i in &order {
        if left == 0 {
            break;
        }
        shares[i].0 += 1;
        left -= 1;
    }
    let share: HashMap<&str, usize> = shares.iter().map(|s| (s.2, s.0)).collect();
    let mut cursors: BTreeMap<&str, usize> = by_source.keys().map(|s| (*s, 0)).collect();
    let mut taken: BTreeMap<&str, usize> = by_source.keys().map(|s| (*s, 0)).collect();
    let mut used: HashSet<usize> = HashSet::new();
    let mut out = Vec::new();
    loop {
        let mut progressed = false;
        for (source, list) in &by_source {
            if taken[source] >= share[source] {
                continue;
            }
            let style = styles[out.len() % styles.len()];
            // Next chunk of this source that fits the style.
            while cursors[source] < list.len() {
                let i = list[cursors[source]];
                *cursors.get_mut(source).unwrap() += 1;
                if used.contains(&i) {
                    continue;
                }
                let chunks_for = match style {
                    Style::Ict if !ict_ok(i) => continue,
                    Style::MultiHop => {
                        let c = &chunks[i];
                        let partners: Vec<usize> = by_doc[c.doc_id.as_str()]
                            .iter()
                            .copied()
                            .filter(|&j| j != i && (chunks[j].chunk_index - c.chunk_index).abs() >= 2)
                            .collect();
                        if partners.is_empty() {
                            continue;
                        }
                        vec![i, partners[rng.below(partners.len())]]
                    }
                    _ => vec![i],
                };
                used.insert(i);
                out.push(PlannedSample { index: out.len(), style, chunks: chunks_for });
                *taken.get_mut(source).unwrap() += 1;
                progressed = true;
                break;
            }
        }
        if !progressed {
            break;
        }
    }
    out
}

/// Word tokens (lower-case, alphanumeric) of a text.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Sentences of a text with their character offsets: split at `.`/`?`/`!` followed by
/// whitespace and at blank lines.
pub fn sentences(text: &str) -> Vec<(usize, usize, String)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let end_here = (matches!(chars[i], '.' | '?' | '!') && chars.get(i + 1).is_none_or(|c| c.is_whitespace()))
            || (chars[i] == '\n' && chars.get(i + 1) == Some(&'\n'));
        if end_here || i + 1 == chars.len() {
            let s: String = chars[start..=i].iter().collect();
            let trimmed = s.trim();
            if !trimmed.is_empty() {
                let lead = s.chars().take_while(|c| c.is_whitespace()).count();
                out.push((start + lead, start + lead + trimmed.chars().count(), trimmed.replace('\n', " ")));
            }
            start = i + 1;
        }
        i += 1;
    }
    out
}

/// Whether a sentence can be an inverse-cloze query: 8 to 60 words, ends like a sentence,
/// mostly words, not a heading or a dot-leader line.
pub fn ict_candidate(s: &str) -> bool {
    let tokens: Vec<&str> = s.split_whitespace().collect();
    let wordy = tokens.iter().filter(|t| t.chars().filter(|c| c.is_alphabetic()).count() * 2 > t.chars().count()).count();
    (8..=60).contains(&tokens.len())
        && s.ends_with(['.', '?', '!'])
        && wordy * 10 >= tokens.len() * 7
        && s.chars().any(|c| c.is_lowercase())
        && !s.contains("....")
        && !s.contains(". . .")
}

/// Document frequencies of words over chunks (for salience).
pub fn document_frequencies(chunks: &[ChunkRecord]) -> HashMap<String, usize> {
    let mut df: HashMap<String, usize> = HashMap::new();
    for c in chunks {
        let distinct: HashSet<String> = words(&c.text).into_iter().collect();
        for w in distinct {
            *df.entry(w).or_default() += 1;
        }
    }
    df
}

/// The most salient candidate sentence of a chunk (highest summed IDF of its distinct words
/// over the square root of its length; first wins ties): `(char_start, char_end, text)`
/// relative to the chunk text.
pub fn salient_sentence(text: &str, df: &HashMap<String, usize>, n_docs: usize) -> Option<(usize, usize, String)> {
    salient_sentences(text, df, n_docs, 1).into_iter().next()
}

/// The `k` most salient candidate sentences of a chunk, best first (the score of
/// [`salient_sentence`]; scores within 1e-12 keep the text's order).
pub fn salient_sentences(text: &str, df: &HashMap<String, usize>, n_docs: usize, k: usize) -> Vec<(usize, usize, String)> {
    let mut scored: Vec<(f64, (usize, usize, String))> = Vec::new();
    for s in sentences(text) {
        if !ict_candidate(&s.2) {
            continue;
        }
        let ws = words(&s.2);
        let distinct: HashSet<&String> = ws.iter().filter(|w| w.chars().count() >= 3).collect();
        let idf: f64 = distinct.iter().map(|w| ((n_docs as f64 + 1.0) / (*df.get(w.as_str()).unwrap_or(&0) as f64 + 1.0)).ln()).sum();
        scored.push((idf / (ws.len() as f64).sqrt(), s));
    }
    // Insertion by score: a later sentence goes ahead only when clearly better (first wins ties).
    let mut ranked: Vec<(f64, (usize, usize, String))> = Vec::with_capacity(scored.len());
    for item in scored {
        let at = ranked.iter().position(|(b, _)| item.0 > *b + 1e-12).unwrap_or(ranked.len());
        ranked.insert(at, item);
    }
    ranked.into_iter().take(k).map(|(_, s)| s).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A leaf chunk `c{i}` of `source` on page i + 1 (shared by the crate's tests).
    pub(crate) fn chunk(i: usize, source: &str, text: &str) -> ChunkRecord {
        ChunkRecord { title: "T".into(), chunk_index: i as i32, ..ChunkRecord::leaf(format!("c{i}"), source, i as i32 + 1, text) }
    }

    const LONG: &str = "The inspector shall verify that each crossing gate arm is fully lowered before the train reaches the crossing. Records are kept for two years.";

    #[test]
    fn salient_sentences_rank_best_first_and_the_first_is_the_salient_one() {
        let text = "The gate arm shall be inspected by the signal maintainer every month at minimum. \
                    The records of every gate arm inspection are kept on file for two years. \
                    Heading. The flashing light units are cleaned and aligned during each quarterly test cycle.";
        let chunks: Vec<ChunkRecord> = [text, "The gate arm and the records are kept.", "every month for two years"].iter().enumerate().map(|(i, t)| chunk(i, "a.pdf", t)).collect();
        let df = document_frequencies(&chunks);
        let three = salient_sentences(text, &df, 3, 5);
        assert_eq!(three.len(), 3, "the heading is no candidate: {three:?}");
        assert_eq!(salient_sentence(text, &df, 3).unwrap(), three[0]);
        assert_eq!(salient_sentences(text, &df, 3, 2), three[..2].to_vec());
        assert!(three.iter().all(|(a, b, s)| text.chars().skip(*a).take(b - a).collect::<String>() == *s));
        // Distinct sentences, ranked by the salience score.
        let score = |s: &str| {
            let ws = words(s);
            let distinct: HashSet<&String> = ws.iter().filter(|w| w.chars().count() >= 3).collect();
            distinct.iter().map(|w| (4.0f64 / (*df.get(w.as_str()).unwrap_or(&0) as f64 + 1.0)).ln()).sum::<f64>() / (ws.len() as f64).sqrt()
        };
        assert!(three.windows(2).all(|w| score(&w[0].2) >= score(&w[1].2) && w[0].0 != w[1].0), "{three:?}");
    }

    #[test]
    fn plans_are_seeded_stratified_and_skip_junk() {
        let mut chunks: Vec<ChunkRecord> = (0..30).map(|i| chunk(i, if i < 20 { "a.pdf" } else { "b.pdf" }, LONG)).collect();
        chunks[3].text = "Contents ........ 4\nScope ........ 5\n".into();
        chunks[4].text = "short".into();
        let p = plan(&chunks, 10, &[Style::Factual], 7, 50, &|_| true);
        assert_eq!(p, plan(&chunks, 10, &[Style::Factual], 7, 50, &|_| true));
        assert_ne!(p, plan(&chunks, 10, &[Style::Factual], 8, 50, &|_| true));
        let from_a = p.iter().filter(|s| chunks[s.chunks[0]].source == "a.pdf").count();
        // 18 eligible in a, 10 in b → shares 6.4 / 3.6 → 6 and 4.
        assert_eq!((p.len(), from_a), (10, 6));
        assert!(p.iter().all(|s| s.chunks[0] != 3 && s.chunks[0] != 4));
        // Sources interleave from the start.
        assert_ne!(chunks[p[0].chunks[0]].source, chunks[p[1].chunks[0]].source);
        // More samples than eligible chunks: capped.
        assert_eq!(plan(&chunks, 100, &[Style::Factual], 7, 50, &|_| true).len(), 28);
    }

    #[test]
    fn multi_hop_pairs_two_distant_chunks_of_one_document() {
        let chunks: Vec<ChunkRecord> = (0..6).map(|i| chunk(i, "a.pdf", LONG)).collect();
        let p = plan(&chunks, 4, &[Style::MultiHop, Style::Factual], 1, 10, &|_| true);
        for s in p.iter().filter(|s| s.style == Style::MultiHop) {
            assert_eq!(s.chunks.len(), 2);
            let (a, b) = (&chunks[s.chunks[0]], &chunks[s.chunks[1]]);
            assert!(a.doc_id == b.doc_id && (a.chunk_index - b.chunk_index).abs() >= 2);
        }
        assert!(p.iter().any(|s| s.style == Style::MultiHop));
    }

    #[test]
    fn ict_takes_a_salient_full_sentence() {
        let text = "SECTION 4 GATES\n\nGeneral.\n\nThe inspector shall verify that each crossing gate arm is fully lowered before the train reaches the crossing. This is a short one. Records of the crossing gate arm inspection are kept.";
        let chunks = vec![chunk(0, "a", text), chunk(1, "b", "Records are kept. The train is long and the crossing is near the station today.")];
        let df = document_frequencies(&chunks);
        let (s, e, sent) = salient_sentence(text, &df, 2).unwrap();
        assert!(sent.starts_with("The inspector shall verify"), "{sent}");
        assert_eq!(text.chars().skip(s).take(e - s).collect::<String>(), sent);
        assert!(!ict_candidate("SECTION 4 GATES AND LIGHTS AT THE CROSSING OF THE LINE"));
        assert!(!ict_candidate("Too short to ask."));
        assert!(salient_sentence("Heading only\n\nAnother heading", &df, 2).is_none());
    }
}
