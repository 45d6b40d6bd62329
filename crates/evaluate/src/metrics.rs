//! Per-question metrics over a ranked list of relevance judgements (rank 1 first).

/// 1-based rank of the first relevant result, if any.
pub fn first_relevant_rank(relevant: &[bool]) -> Option<usize> {
    relevant.iter().position(|&r| r).map(|i| i + 1)
}

/// 1 when a relevant result is among the first `k`, else 0.
pub fn hit_at(relevant: &[bool], k: usize) -> f64 {
    if relevant.iter().take(k).any(|&r| r) { 1.0 } else { 0.0 }
}

/// Reciprocal rank of the first relevant result within the first `k` (0 when none).
pub fn reciprocal_rank_at(relevant: &[bool], k: usize) -> f64 {
    match first_relevant_rank(relevant) {
        Some(r) if r <= k => 1.0 / r as f64,
        _ => 0.0,
    }
}

/// Binary nDCG@k whose ideal ordering is the same list's relevances sorted (relevant first);
/// 0 when nothing in the first `k` is relevant. Keyword mode's per-keyword nDCG (a keyword has
/// no gold items to count); gold-item judgements use [`ndcg_items_at`].
pub fn ndcg_at(relevant: &[bool], k: usize) -> f64 {
    let gain = |i: usize| 1.0 / ((i + 2) as f64).log2();
    let top = &relevant[..relevant.len().min(k)];
    let dcg: f64 = top.iter().enumerate().filter(|(_, &r)| r).map(|(i, _)| gain(i)).sum();
    let n_rel = top.iter().filter(|&&r| r).count();
    let idcg: f64 = (0..n_rel).map(gain).sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

/// One entry of the gold-item ranking a passage list implies: the passage (0-based rank) it
/// comes from and the gold item it stands for (`None`: a passage that covers no gold item not
/// already covered, which stands for itself and is not relevant).
pub type ItemEntry = (usize, Option<usize>);

/// The ranking of gold items that the first `k` passages imply (trec_eval's document-level
/// reading of a passage run, "first passage"): in rank order, each passage stands for the gold
/// items it is the first to cover, one rank each in the golden set's order, or for itself
/// when it covers none. `trec/<config>.items.run` is this ranking, so trec_eval's `ndcg_cut_k`
/// and `recall_k` on it equal [`ndcg_items_at`] and [`recall_at`].
pub fn item_ranking(covers: &[Vec<usize>], k: usize) -> Vec<ItemEntry> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, c) in covers.iter().take(k).enumerate() {
        let mut new: Vec<usize> = c.iter().copied().filter(|j| seen.insert(*j)).collect();
        new.sort_unstable();
        if new.is_empty() {
            out.push((i, None));
        }
        out.extend(new.into_iter().map(|j| (i, Some(j))));
    }
    out
}

/// Graded nDCG@k over the implied gold-item ranking ([`item_ranking`]): an entry's gain is its
/// gold item's grade (0 for a passage standing for itself), discounted `1 / log2(rank + 1)`
/// over the first `k` entries; the ideal ranks the gold items with a positive grade by grade.
/// Each gold item appears once, so the value is at most 1 (trec_eval's `ndcg_cut_k`).
pub fn ndcg_items_at(ranking: &[ItemEntry], grades: &[f64], k: usize) -> f64 {
    let discount = |i: usize| 1.0 / ((i + 2) as f64).log2();
    let dcg: f64 = ranking.iter().take(k).enumerate().map(|(i, (_, j))| j.map_or(0.0, |j| grades.get(j).copied().unwrap_or(0.0).max(0.0)) * discount(i)).sum();
    let mut ideal: Vec<f64> = grades.iter().copied().filter(|g| *g > 0.0).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, g)| g * discount(i)).sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

/// Share of `n_gold` gold items among the first `k` entries of the implied gold-item ranking
/// ([`item_ranking`]; trec_eval's `recall_k`).
pub fn recall_at(ranking: &[ItemEntry], n_gold: usize, k: usize) -> f64 {
    if n_gold == 0 {
        return 0.0;
    }
    ranking.iter().take(k).filter(|(_, j)| j.is_some()).count() as f64 / n_gold as f64
}

/// Keyword-mode scores of one question: each keyword is judged on its own (a chunk is
/// relevant to a keyword when it contains it, case-insensitively), then averaged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeywordScores {
    /// Mean over keywords of 1/rank of the first chunk containing it (within `k`).
    pub mrr: f64,
    /// Mean over keywords of binary nDCG@k.
    pub ndcg: f64,
    /// Share of keywords found in the first `k` chunks.
    pub coverage: f64,
}

/// Keyword-mode metrics for retrieved chunk texts (best first); no keywords or no
/// retrieved chunks give zeros.
pub fn keyword_scores(keywords: &[String], texts: &[&str], k: usize) -> KeywordScores {
    if keywords.is_empty() {
        return KeywordScores { mrr: 0.0, ndcg: 0.0, coverage: 0.0 };
    }
    let lowered: Vec<String> = texts.iter().take(k).map(|t| t.to_lowercase()).collect();
    let (mut mrr, mut ndcg, mut found) = (0.0, 0.0, 0.0);
    for kw in keywords {
        let kw = kw.to_lowercase();
        let rel: Vec<bool> = lowered.iter().map(|t| t.contains(&kw)).collect();
        mrr += reciprocal_rank_at(&rel, k);
        ndcg += ndcg_at(&rel, k);
        found += hit_at(&rel, k);
    }
    let n = keywords.len() as f64;
    KeywordScores { mrr: mrr / n, ndcg: ndcg / n, coverage: found / n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_ndcg_counts_each_gold_item_once_and_its_grade() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let d = |r: usize| 1.0 / ((r + 1) as f64).log2();
        let ndcg = |covers: &[Vec<usize>], grades: &[f64], k: usize| ndcg_items_at(&item_ranking(covers, k), grades, k);
        // One gold item found at rank 3: 1/log2(4) = 0.5; found again at rank 4: no gain.
        assert!(close(ndcg(&[vec![], vec![], vec![0], vec![0]], &[1.0], 10), 0.5));
        // Two items graded 2 and 1, found in reverse order at ranks 1 and 2.
        let got = ndcg(&[vec![1], vec![0]], &[2.0, 1.0], 10);
        assert!(close(got, (1.0 * d(1) + 2.0 * d(2)) / (2.0 * d(1) + 1.0 * d(2))), "{got}");
        // A missing item lowers it (the ideal holds every positive item), a zero grade does not.
        assert!(close(ndcg(&[vec![0]], &[1.0, 1.0], 10), 1.0 / (1.0 + d(2))));
        assert!(close(ndcg(&[vec![0]], &[1.0, 0.0], 10), 1.0));
        // One passage covering both gold items stands for both, at ranks 1 and 2: the ideal.
        assert!(close(ndcg(&[vec![0, 1]], &[1.0, 1.0], 10), 1.0));
        // ... and pushes what follows down one rank: the item after it counts at rank 3.
        assert!(close(ndcg(&[vec![1, 0], vec![2]], &[1.0, 1.0, 1.0], 10), 1.0));
        assert!(close(ndcg(&[vec![0, 1], vec![], vec![2]], &[1.0, 1.0, 1.0], 10), (1.0 + d(2) + d(4)) / (1.0 + d(2) + d(3))));
        // Cut at k, and nothing judged gives 0.
        assert!(close(ndcg(&[vec![], vec![0]], &[1.0], 1), 0.0));
        assert!(close(ndcg(&[], &[], 10), 0.0));
    }

    #[test]
    fn the_implied_ranking_stands_each_passage_for_its_new_items_or_itself() {
        let r = item_ranking(&[vec![], vec![2, 0], vec![0], vec![1], vec![3]], 4);
        assert_eq!(r, vec![(0, None), (1, Some(0)), (1, Some(2)), (2, None), (3, Some(1))]);
    }

    const T: bool = true;
    const F: bool = false;

    #[test]
    fn rank_metrics_by_hand() {
        let r = [F, F, T, F, T];
        assert_eq!(first_relevant_rank(&r), Some(3));
        assert_eq!((hit_at(&r, 1), hit_at(&r, 3)), (0.0, 1.0));
        assert!((reciprocal_rank_at(&r, 10) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(reciprocal_rank_at(&r, 2), 0.0);
        // DCG = 1/log2(4) + 1/log2(6) = 0.5 + 0.386853; IDCG = 1 + 1/log2(3) = 1.630930.
        assert!((ndcg_at(&r, 10) - (0.5 + 0.386_852_807_234_541_6) / 1.630_929_753_571_457).abs() < 1e-12);
        assert_eq!(ndcg_at(&[F, F], 10), 0.0);
        assert_eq!(ndcg_at(&[], 10), 0.0);
    }

    #[test]
    fn perfect_and_reversed_rankings() {
        // Perfect: the one relevant result first → 1 everywhere.
        let perfect = [T, F, F, F, F, F, F, F, F, F];
        for k in [1, 3, 5, 10] {
            assert_eq!(hit_at(&perfect, k), 1.0);
        }
        assert_eq!(reciprocal_rank_at(&perfect, 10), 1.0);
        assert_eq!(ndcg_at(&perfect, 10), 1.0);
        // Reversed: it comes last of ten → Hit@10 only, RR 1/10, nDCG 1/log2(11) / 1.
        let reversed: Vec<bool> = perfect.iter().rev().copied().collect();
        assert_eq!((hit_at(&reversed, 5), hit_at(&reversed, 10)), (0.0, 1.0));
        assert!((reciprocal_rank_at(&reversed, 10) - 0.1).abs() < 1e-12);
        assert!((ndcg_at(&reversed, 10) - 1.0 / 11f64.log2()).abs() < 1e-12);
    }

    /// Property: over many random lists, the ideal ordering (relevant first) scores 1 on every
    /// metric, and the reversed ideal ordering (relevant last) scores what the closed forms give.
    #[test]
    fn perfect_and_reversed_orderings_of_random_lists() {
        let mut rng = crate::stats::SplitMix64::new(2026);
        for _ in 0..2000 {
            let n = 1 + rng.below(10);
            let r = 1 + rng.below(n);
            let perfect: Vec<bool> = (0..n).map(|i| i < r).collect();
            assert_eq!(first_relevant_rank(&perfect), Some(1));
            for k in [1, 3, 5, 10] {
                assert_eq!(hit_at(&perfect, k), 1.0);
            }
            assert_eq!(reciprocal_rank_at(&perfect, 10), 1.0);
            assert!((ndcg_at(&perfect, 10) - 1.0).abs() < 1e-12);
            // Reversed: the r relevant results sit at ranks n-r+1 … n.
            let reversed: Vec<bool> = perfect.iter().rev().copied().collect();
            let first = n - r + 1;
            assert_eq!(first_relevant_rank(&reversed), Some(first));
            for k in [1, 3, 5, 10] {
                assert_eq!(hit_at(&reversed, k), if first <= k { 1.0 } else { 0.0 }, "n={n} r={r} k={k}");
            }
            assert!((reciprocal_rank_at(&reversed, 10) - 1.0 / first as f64).abs() < 1e-12);
            let dcg: f64 = (first..=n).map(|rank| 1.0 / ((rank + 1) as f64).log2()).sum();
            let idcg: f64 = (1..=r).map(|rank| 1.0 / ((rank + 1) as f64).log2()).sum();
            assert!((ndcg_at(&reversed, 10) - dcg / idcg).abs() < 1e-12, "n={n} r={r}");
        }
    }

    #[test]
    fn recall_counts_distinct_gold_items() {
        let covers = vec![vec![0], vec![], vec![0], vec![1]];
        let r = item_ranking(&covers, 10);
        assert_eq!(recall_at(&r, 2, 3), 0.5);
        assert_eq!(recall_at(&r, 2, 4), 1.0);
        assert_eq!(recall_at(&r, 0, 4), 0.0);
        // A passage covering two items fills two of the k ranks.
        assert_eq!(recall_at(&item_ranking(&[vec![0, 1], vec![2]], 10), 3, 2), 2.0 / 3.0);
    }

    #[test]
    fn keyword_mode_edge_cases() {
        let texts = ["Gate arm LIGHTS", "flashing lights and gate arms", "bells"];
        let kws = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // "gate": ranks 1 and 2 → RR 1, nDCG 1; "bells": rank 3 only → RR 1/3, and nDCG
        // (1/log2 4) / (ideal: the same list sorted, 1/log2 2) = 0.5.
        let s = keyword_scores(&kws(&["gate", "bells"]), &texts, 10);
        assert!((s.mrr - (1.0 + 1.0 / 3.0) / 2.0).abs() < 1e-12);
        assert!((s.ndcg - 0.75).abs() < 1e-12);
        assert_eq!(s.coverage, 1.0);
        // A keyword absent everywhere counts as 0 for all three.
        let s = keyword_scores(&kws(&["gate", "pantograph"]), &texts, 10);
        assert_eq!((s.mrr, s.coverage), (0.5, 0.5));
        // A repeated keyword counts twice.
        let s = keyword_scores(&kws(&["bells", "bells", "gate"]), &texts, 10);
        assert!((s.mrr - (1.0 / 3.0 + 1.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12);
        // Empty retrieval and empty keywords give zeros.
        assert_eq!(keyword_scores(&kws(&["gate"]), &[], 10), KeywordScores { mrr: 0.0, ndcg: 0.0, coverage: 0.0 });
        assert_eq!(keyword_scores(&[], &texts, 10).coverage, 0.0);
    }
}
