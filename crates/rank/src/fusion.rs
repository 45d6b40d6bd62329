//! Fusion of ranked lists: none, union, reciprocal rank fusion, weighted score fusion.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// One retriever's results, best first: `(chunk_id, score)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedList {
    /// Stage name (`dense`, `bm25`, …).
    pub stage: String,
    /// Chunk ids with scores, best first.
    pub hits: Vec<(String, f32)>,
}

/// A candidate's rank (1-based) and score in one stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageHit {
    /// Stage name.
    pub stage: String,
    /// 1-based rank in that stage.
    pub rank: usize,
    /// Score in that stage.
    pub score: f32,
}

/// A fused candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Chunk id.
    pub chunk_id: String,
    /// Fused score (meaning depends on the fusion; higher is better).
    pub score: f32,
    /// Where it came from, one entry per stage that returned it.
    pub stages: Vec<StageHit>,
}

impl Candidate {
    /// Best (smallest) rank over stages.
    pub fn best_rank(&self) -> usize {
        self.stages.iter().map(|s| s.rank).min().unwrap_or(usize::MAX)
    }
}

/// Score normalisation before weighted fusion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Normalization {
    /// `(s - min) / (max - min)` per list (all equal → 1).
    #[default]
    MinMax,
    /// `(s - mean) / std` per list (std 0 → 0).
    ZScore,
}

/// How ranked lists are combined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fusion {
    /// The first non-empty list as it is.
    None,
    /// All candidates once, ordered by their best rank in any list (ties: list order, then
    /// higher score).
    Union,
    /// Reciprocal rank fusion: `Σ 1 / (k + rank)`.
    Rrf {
        /// The constant `k` (60 in the original paper).
        #[serde(default = "default_rrf_k")]
        k: f32,
    },
    /// `alpha · norm(first list) + (1 - alpha) · norm(second list)`; a candidate missing
    /// from a list gets that list's lowest normalised score.
    Weighted {
        /// Weight of the first list (dense).
        #[serde(default = "default_alpha")]
        alpha: f32,
        /// Normalisation of each list's scores.
        #[serde(default)]
        normalization: Normalization,
    },
}

fn default_rrf_k() -> f32 {
    60.0
}

fn default_alpha() -> f32 {
    0.5
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Rrf { k: 60.0 }
    }
}

impl Fusion {
    /// Checks the constants: RRF `k` finite and ≥ 0 (a negative one inverts the ranking),
    /// `alpha` in [0, 1]; NaN is never a value.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Fusion::Rrf { k } if !(k.is_finite() && *k >= 0.0) => Err(format!("fusion.k = {k}: the RRF constant must be a finite number ≥ 0 (60 is the usual value; a negative one inverts the ranking)")),
            Fusion::Weighted { alpha, .. } if !(0.0..=1.0).contains(alpha) => Err(format!("fusion.alpha = {alpha}: the weight of the dense list must lie in [0, 1]")),
            _ => Ok(()),
        }
    }
}

fn collect(lists: &[RankedList]) -> (Vec<String>, HashMap<String, Vec<StageHit>>) {
    let mut order = Vec::new();
    let mut stages: HashMap<String, Vec<StageHit>> = HashMap::new();
    for list in lists {
        for (i, (id, score)) in list.hits.iter().enumerate() {
            let entry = stages.entry(id.clone()).or_insert_with(|| {
                order.push(id.clone());
                Vec::new()
            });
            // A list that repeats an id keeps its first (best) position.
            if !entry.iter().any(|s| s.stage == list.stage) {
                entry.push(StageHit { stage: list.stage.clone(), rank: i + 1, score: *score });
            }
        }
    }
    (order, stages)
}

fn normalise(scores: &[f32], how: Normalization) -> Vec<f32> {
    if scores.is_empty() {
        return Vec::new();
    }
    match how {
        Normalization::MinMax => {
            let (min, max) = scores.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &s| (a.min(s), b.max(s)));
            scores.iter().map(|&s| if max > min { (s - min) / (max - min) } else { 1.0 }).collect()
        }
        Normalization::ZScore => {
            let n = scores.len() as f32;
            let mean = scores.iter().sum::<f32>() / n;
            let std = (scores.iter().map(|s| (s - mean).powi(2)).sum::<f32>() / n).sqrt();
            scores.iter().map(|&s| if std > 0.0 { (s - mean) / std } else { 0.0 }).collect()
        }
    }
}

/// Fuses ranked lists (in stage order, e.g. dense then BM25) into one candidate list, best
/// first. Ties are broken by best rank, then by chunk id, so results are deterministic.
pub fn fuse(lists: &[RankedList], fusion: &Fusion) -> Vec<Candidate> {
    let (order, mut stages) = collect(lists);
    let stage_index = |name: &str| lists.iter().position(|l| l.stage == name).unwrap_or(usize::MAX);
    let mut out: Vec<Candidate> = match fusion {
        Fusion::None => {
            let Some(first) = lists.iter().find(|l| !l.hits.is_empty()) else { return Vec::new() };
            let mut seen = std::collections::HashSet::new();
            return first
                .hits
                .iter()
                .enumerate()
                .filter(|(_, (id, _))| seen.insert(id.clone()))
                .map(|(i, (id, score))| Candidate {
                    chunk_id: id.clone(),
                    score: *score,
                    stages: vec![StageHit { stage: first.stage.clone(), rank: i + 1, score: *score }],
                })
                .collect();
        }
        Fusion::Union => {
            let mut c: Vec<Candidate> = order
                .iter()
                .map(|id| {
                    let st = stages.remove(id).expect("collected");
                    let best = st.iter().min_by_key(|s| (s.rank, stage_index(&s.stage))).expect("non-empty").clone();
                    Candidate { chunk_id: id.clone(), score: best.score, stages: st }
                })
                .collect();
            c.sort_by(|a, b| {
                let key = |x: &Candidate| {
                    let best = x.stages.iter().min_by_key(|s| (s.rank, stage_index(&s.stage))).expect("non-empty");
                    (best.rank, stage_index(&best.stage))
                };
                key(a).cmp(&key(b)).then(b.score.total_cmp(&a.score)).then(a.chunk_id.cmp(&b.chunk_id))
            });
            return c;
        }
        Fusion::Rrf { k } => order
            .iter()
            .map(|id| {
                let st = stages.remove(id).expect("collected");
                let score = st.iter().map(|s| 1.0 / (k + s.rank as f32)).sum();
                Candidate { chunk_id: id.clone(), score, stages: st }
            })
            .collect(),
        Fusion::Weighted { alpha, normalization } => {
            let normed: Vec<HashMap<&str, f32>> = lists
                .iter()
                .map(|l| {
                    let n = normalise(&l.hits.iter().map(|h| h.1).collect::<Vec<_>>(), *normalization);
                    l.hits.iter().zip(n).map(|((id, _), v)| (id.as_str(), v)).rev().collect()
                })
                .collect();
            let floor: Vec<f32> = normed.iter().map(|m| m.values().copied().fold(f32::INFINITY, f32::min)).collect();
            order
                .iter()
                .map(|id| {
                    let st = stages.remove(id).expect("collected");
                    let part = |i: usize| normed.get(i).map_or(0.0, |m| m.get(id.as_str()).copied().unwrap_or(if floor[i].is_finite() { floor[i] } else { 0.0 }));
                    let score = alpha * part(0) + (1.0 - alpha) * part(1);
                    Candidate { chunk_id: id.clone(), score, stages: st }
                })
                .collect()
        }
    };
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.best_rank().cmp(&b.best_rank())).then(a.chunk_id.cmp(&b.chunk_id)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(stage: &str, ids: &[(&str, f32)]) -> RankedList {
        RankedList { stage: stage.into(), hits: ids.iter().map(|(i, s)| (i.to_string(), *s)).collect() }
    }

    fn ids(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.chunk_id.as_str()).collect()
    }

    fn lists() -> Vec<RankedList> {
        vec![
            list("dense", &[("a", 0.9), ("b", 0.8), ("c", 0.7)]),
            list("bm25", &[("c", 12.0), ("d", 9.0), ("a", 3.0)]),
        ]
    }

    #[test]
    fn rrf_by_hand() {
        // a: 1/61 + 1/63 = 0.032266; c: 1/63 + 1/61 = same; b: 1/62 = 0.016129; d: 1/62.
        // Ties: best rank (a and c both 1; b and d both 2), then id.
        let fused = fuse(&lists(), &Fusion::Rrf { k: 60.0 });
        assert_eq!(ids(&fused), vec!["a", "c", "b", "d"]);
        assert!((fused[0].score - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-7);
        assert!((fused[2].score - 1.0 / 62.0).abs() < 1e-7);
        assert_eq!(fused[0].stages, vec![StageHit { stage: "dense".into(), rank: 1, score: 0.9 }, StageHit { stage: "bm25".into(), rank: 3, score: 3.0 }]);
        // With k = 0 the rank-1 hits dominate: a = 1 + 1/3, c = 1/3 + 1.
        let fused = fuse(&lists(), &Fusion::Rrf { k: 0.0 });
        assert!((fused[0].score - 4.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn union_by_best_rank() {
        // Best ranks: a 1 (dense), c 1 (bm25), b 2 (dense), d 2 (bm25); dense before bm25.
        assert_eq!(ids(&fuse(&lists(), &Fusion::Union)), vec!["a", "c", "b", "d"]);
        let only_bm25 = vec![list("dense", &[]), list("bm25", &[("x", 1.0), ("y", 0.5)])];
        assert_eq!(ids(&fuse(&only_bm25, &Fusion::Union)), vec!["x", "y"]);
    }

    #[test]
    fn none_takes_the_first_non_empty_list() {
        assert_eq!(ids(&fuse(&lists(), &Fusion::None)), vec!["a", "b", "c"]);
        let no_dense = vec![list("dense", &[]), list("bm25", &[("d", 2.0)])];
        assert_eq!(ids(&fuse(&no_dense, &Fusion::None)), vec!["d"]);
    }

    #[test]
    fn weighted_min_max_by_hand() {
        // dense min-max: a 1, b 0.5, c 0; bm25: c 1, d (9-3)/9 = 0.6667, a 0; missing → list min 0.
        // alpha 0.5: a 0.5, b 0.25, c 0.5, d 0.3333 → a, c (tie: best rank 1 both; id), d, b.
        let fused = fuse(&lists(), &Fusion::Weighted { alpha: 0.5, normalization: Normalization::MinMax });
        assert_eq!(ids(&fused), vec!["a", "c", "d", "b"]);
        assert!((fused[2].score - 1.0 / 3.0).abs() < 1e-6);
        // alpha 1: dense only, bm25-only d gets dense floor 0.
        let fused = fuse(&lists(), &Fusion::Weighted { alpha: 1.0, normalization: Normalization::MinMax });
        assert_eq!(ids(&fused)[..2], ["a", "b"]);
    }

    #[test]
    fn weighted_z_score_by_hand() {
        // dense: mean 0.8, std sqrt(0.02/3)=0.08165 → a 1.2247, b 0, c -1.2247.
        // bm25: mean 8, std sqrt((16+1+25)/3)=3.7417 → c 1.0690, d 0.2673, a -1.3363.
        // alpha 0.5: a -0.0558, b 0.5*0 + 0.5*(-1.3363) = -0.6682, c -0.0778, d 0.5*(-1.2247)+0.5*0.2673 = -0.4787.
        let fused = fuse(&lists(), &Fusion::Weighted { alpha: 0.5, normalization: Normalization::ZScore });
        assert_eq!(ids(&fused), vec!["a", "c", "d", "b"]);
        assert!((fused[0].score - (-0.0558)).abs() < 1e-3, "{}", fused[0].score);
    }
}
