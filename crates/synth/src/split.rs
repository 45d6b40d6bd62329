//! Near-duplicate removal and page-grouped train/dev/test splits.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::plan::words;
use crate::SynthRow;

fn shingles(text: &str) -> BTreeSet<String> {
    let w = words(text);
    if w.len() < 3 {
        return std::iter::once(w.join(" ")).collect();
    }
    w.windows(3).map(|t| t.join(" ")).collect()
}

/// Drops rows whose question repeats an earlier one: the same normalised text, or word-trigram
/// Jaccard similarity ≥ `threshold`. Keeps the first, in order.
pub fn drop_near_duplicates(rows: Vec<SynthRow>, threshold: f64) -> Vec<SynthRow> {
    let mut kept: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut out = Vec::new();
    for r in rows {
        let norm = words(&r.golden.question).join(" ");
        let sh = shingles(&r.golden.question);
        let dup = kept.iter().any(|(n, s)| {
            *n == norm || {
                let inter = s.intersection(&sh).count() as f64;
                let union = (s.len() + sh.len()) as f64 - inter;
                union > 0.0 && inter / union >= threshold
            }
        });
        if !dup {
            kept.push((norm, sh));
            out.push(r);
        }
    }
    out
}

/// The words of `text`: runs of letters and digits, lowercased (punctuation and spacing aside).
pub fn alnum_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// The share of `text`'s word trigrams ([`alnum_words`]) found in `within` (0 when `text` has
/// fewer than three words): how much of a quote is its source's, or of a question an example's.
pub fn trigram_share(text: &str, within: &str) -> f64 {
    let (t, w) = (alnum_words(text), alnum_words(within));
    let grams: std::collections::HashSet<&[String]> = w.windows(3).collect();
    let total = t.windows(3).count();
    if total == 0 {
        return 0.0;
    }
    t.windows(3).filter(|g| grams.contains(g)).count() as f64 / total as f64
}

const NAMES: [&str; 3] = ["train", "dev", "test"];

fn find(parent: &mut [usize], x: usize) -> usize {
    let mut r = x;
    while parent[r] != r {
        r = parent[r];
    }
    let mut y = x;
    while parent[y] != r {
        let next = parent[y];
        parent[y] = r;
        y = next;
    }
    r
}

/// Assigns `train`/`dev`/`test` (or `train`/`test` for two weights) so that no source page
/// feeds two splits: rows sharing a page (multi-hop rows join theirs) form one group, groups
/// are ordered by a seeded hash and each goes to the split furthest below its target share.
/// Returns the row count per split.
pub fn assign_splits(rows: &mut [SynthRow], weights: &[u32], seed: u64) -> BTreeMap<String, usize> {
    let names: Vec<&str> = if weights.len() == 2 { vec!["train", "test"] } else { NAMES.to_vec() };
    // Union rows through the pages they touch.
    let mut parent: Vec<usize> = (0..rows.len()).collect();
    let mut owner: HashMap<(String, i32), usize> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        for g in &r.golden.gold {
            let Some((first, last)) = g.pages() else { continue };
            for p in first..=last {
                match owner.get(&(g.source().to_string(), p)) {
                    Some(&j) => {
                        let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                        parent[a] = b;
                    }
                    None => {
                        owner.insert((g.source().to_string(), p), i);
                    }
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..rows.len() {
        let root = find(&mut parent, i);
        groups.entry(root).or_default().push(i);
    }
    let mut ordered: Vec<(String, Vec<usize>)> = groups
        .into_values()
        .map(|members| {
            let key = members.iter().map(|&i| rows[i].golden.qid.as_str()).min().unwrap_or_default().to_string();
            (gauge_core::hash::bytes_hash(format!("{seed}:{key}").as_bytes()), members)
        })
        .collect();
    ordered.sort();
    let total_w: f64 = weights.iter().map(|&w| w as f64).sum();
    let mut counts = vec![0usize; names.len()];
    for (_, members) in ordered {
        let assigned: usize = counts.iter().sum();
        // The split with the largest deficit against its target after this group.
        let pick = (0..names.len())
            .filter(|&s| weights[s] > 0)
            .max_by(|&a, &b| {
                let deficit = |s: usize| weights[s] as f64 / total_w * (assigned + members.len()) as f64 - counts[s] as f64;
                deficit(a).total_cmp(&deficit(b)).then(b.cmp(&a))
            })
            .expect("some weight is positive");
        counts[pick] += members.len();
        for i in members {
            rows[i].split = Some(names[pick].to_string());
        }
    }
    names.iter().zip(counts).map(|(n, c)| (n.to_string(), c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gauge_core::golden::{GoldItem, GoldenQuestion};

    fn row(i: usize, q: &str, pages: &[(i32, i32)]) -> SynthRow {
        SynthRow {
            golden: GoldenQuestion::new(format!("q{i}"), q.into(), pages.iter().map(|&(a, b)| GoldItem::Span { source: "a.pdf".into(), char_start: 0, char_end: 1, page_start: Some(a), page_end: Some(b), grade: None }).collect()).in_category("ict"),
            thinking: None,
            phases: None,
            teacher_model: "ict".into(),
            prompt_sha256: None,
            chunk_id: format!("c{i}"),
            split: None,
        }
    }

    #[test]
    fn near_duplicates_go() {
        let rows = vec![
            row(0, "What must the inspector verify at each highway-rail crossing gate?", &[(1, 1)]),
            row(1, "what must the inspector verify at each highway rail crossing gate", &[(2, 2)]),
            row(2, "What must the inspector verify at each highway-rail crossing gate arm?", &[(3, 3)]),
            row(3, "How long are inspection records of a tank car kept?", &[(4, 4)]),
        ];
        let kept: Vec<String> = drop_near_duplicates(rows, 0.7).into_iter().map(|r| r.golden.qid).collect();
        assert_eq!(kept, ["q0", "q3"]);
    }

    #[test]
    fn splits_never_share_a_page_and_follow_the_weights() {
        let mut rows: Vec<SynthRow> = (0..200).map(|i| row(i, "q", &[((i / 2) as i32, (i / 2) as i32)])).collect();
        // A multi-hop row joining pages 5 and 50.
        rows.push(row(200, "q", &[(5, 5), (50, 50)]));
        let counts = assign_splits(&mut rows, &[70, 15, 15], 3);
        let mut page_split: HashMap<i32, String> = HashMap::new();
        for r in &rows {
            for g in &r.golden.gold {
                let (first, last) = g.pages().unwrap();
                for p in first..=last {
                    let s = r.split.clone().unwrap();
                    assert_eq!(page_split.entry(p).or_insert(s.clone()), &s, "page {p} in two splits");
                }
            }
        }
        assert_eq!(counts.values().sum::<usize>(), 201);
        assert!((counts["train"] as f64 - 140.7).abs() <= 4.0 && (counts["dev"] as f64 - 30.15).abs() <= 4.0, "{counts:?}");
        let mut again = rows.clone();
        assert_eq!(assign_splits(&mut again, &[70, 15, 15], 3), counts);
        assert_eq!(again, rows);
    }
}
