//! Spherical k-means: k-means on L2-normalised vectors with cosine similarity, seeded
//! k-means++ initialisation, deterministic for a seed on every machine.
//!
//! The clustering RAPTOR needs is coarse (groups of related passages to summarise), so a
//! simple, documented method is used instead of RAPTOR's UMAP + Gaussian mixture: every
//! vector belongs to exactly one cluster, the number of clusters is chosen from the wanted
//! cluster size, and an empty cluster is re-seeded with the point farthest from its centroid.
use gauge_core::rng::SplitMix64;

/// A clustering.
#[derive(Debug, Clone, PartialEq)]
pub struct Clusters {
    /// Cluster of each vector.
    pub assignment: Vec<usize>,
    /// Unit-length centroids, `k × dim` row-major.
    pub centroids: Vec<f32>,
    /// Number of clusters.
    pub k: usize,
    /// Iterations run (stops early when no assignment changes).
    pub iterations: usize,
}

impl Clusters {
    /// The members of each cluster, in input order.
    pub fn members(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.k];
        for (i, &c) in self.assignment.iter().enumerate() {
            out[c].push(i);
        }
        out
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let n = dot(v, v).sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// Clusters `n = vectors.len() / dim` vectors into `k` groups (`k` is clamped to `1..=n`).
/// Vectors are normalised first; similarity is the cosine.
pub fn spherical_kmeans(vectors: &[f32], dim: usize, k: usize, max_iterations: usize, seed: u64) -> Clusters {
    assert!(dim > 0 && vectors.len().is_multiple_of(dim), "vectors must be n × dim");
    let n = vectors.len() / dim;
    assert!(n > 0, "nothing to cluster");
    let k = k.clamp(1, n);
    let mut x = vectors.to_vec();
    x.chunks_mut(dim).for_each(normalize);
    let row = |i: usize| &x[i * dim..(i + 1) * dim];

    // k-means++: the first centre uniformly, each next one with probability ∝ (1 − cos)².
    let mut rng = SplitMix64::new(seed);
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(row(rng.below(n)));
    let mut nearest: Vec<f32> = (0..n).map(|i| 1.0 - dot(row(i), &centroids[..dim])).collect();
    while centroids.len() < k * dim {
        let weights: Vec<f64> = nearest.iter().map(|&d| (d.max(0.0) as f64).powi(2)).collect();
        let total: f64 = weights.iter().sum();
        let pick = if total <= 0.0 {
            rng.below(n)
        } else {
            let target = (rng.next_u64() as f64 / u64::MAX as f64) * total;
            let mut acc = 0.0;
            weights.iter().position(|w| {
                acc += w;
                acc >= target
            }).unwrap_or(n - 1)
        };
        let c = centroids.len() / dim;
        centroids.extend_from_slice(row(pick));
        for (i, d) in nearest.iter_mut().enumerate() {
            *d = d.min(1.0 - dot(row(i), &centroids[c * dim..(c + 1) * dim]));
        }
    }

    let mut assignment = vec![usize::MAX; n];
    let mut iterations = 0;
    for _ in 0..max_iterations.max(1) {
        iterations += 1;
        let mut changed = false;
        for (i, a) in assignment.iter_mut().enumerate() {
            let best = (0..k)
                .map(|c| (c, dot(row(i), &centroids[c * dim..(c + 1) * dim])))
                .fold((0, f32::NEG_INFINITY), |b, (c, s)| if s > b.1 { (c, s) } else { b })
                .0;
            if *a != best {
                *a = best;
                changed = true;
            }
        }
        // New centroids: normalised member means; an empty cluster takes the point least
        // similar to its own centroid.
        let mut sums = vec![0f32; k * dim];
        let mut counts = vec![0usize; k];
        for (i, &c) in assignment.iter().enumerate() {
            counts[c] += 1;
            sums[c * dim..(c + 1) * dim].iter_mut().zip(row(i)).for_each(|(s, v)| *s += v);
        }
        for c in 0..k {
            if counts[c] == 0 {
                let far = (0..n)
                    .filter(|&i| counts[assignment[i]] > 1)
                    .map(|i| (i, dot(row(i), &centroids[assignment[i] * dim..(assignment[i] + 1) * dim])))
                    .fold((usize::MAX, f32::INFINITY), |b, (i, s)| if s < b.1 { (i, s) } else { b })
                    .0;
                if far != usize::MAX {
                    counts[assignment[far]] -= 1;
                    let old = assignment[far];
                    sums[old * dim..(old + 1) * dim].iter_mut().zip(row(far)).for_each(|(s, v)| *s -= v);
                    assignment[far] = c;
                    counts[c] = 1;
                    sums[c * dim..(c + 1) * dim].copy_from_slice(row(far));
                    changed = true;
                }
            }
        }
        for (c, s) in sums.chunks_mut(dim).enumerate() {
            if counts[c] > 0 {
                normalize(s);
                centroids[c * dim..(c + 1) * dim].copy_from_slice(s);
            }
        }
        if !changed {
            break;
        }
    }
    Clusters { assignment, centroids, k, iterations }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points around three directions in 3-d, with scale noise (cosine ignores length).
    fn three_groups() -> (Vec<f32>, Vec<usize>) {
        let dirs = [[1.0, 0.1, 0.0], [0.0, 1.0, 0.1], [0.1, 0.0, 1.0]];
        let mut rng = SplitMix64::new(7);
        let (mut v, mut truth) = (Vec::new(), Vec::new());
        for i in 0..30 {
            let g = i % 3;
            let scale = 0.5 + (rng.below(100) as f32) / 50.0;
            for d in dirs[g] {
                v.push(d * scale + (rng.below(100) as f32 - 50.0) / 1000.0);
            }
            truth.push(g);
        }
        (v, truth)
    }

    #[test]
    fn finds_separated_directions_and_is_deterministic() {
        let (v, truth) = three_groups();
        let c = spherical_kmeans(&v, 3, 3, 50, 1);
        // Same truth group ⇔ same cluster.
        for i in 0..truth.len() {
            for j in 0..truth.len() {
                assert_eq!(truth[i] == truth[j], c.assignment[i] == c.assignment[j], "points {i} and {j}");
            }
        }
        assert_eq!(c, spherical_kmeans(&v, 3, 3, 50, 1));
        for centroid in c.centroids.chunks(3) {
            assert!((dot(centroid, centroid) - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn no_cluster_is_empty_and_k_is_clamped() {
        let (v, _) = three_groups();
        for k in [1, 5, 12, 30, 100] {
            let c = spherical_kmeans(&v, 3, k, 20, 3);
            assert_eq!(c.k, k.min(30));
            assert!(c.members().iter().all(|m| !m.is_empty()), "k = {k}");
        }
        let one = spherical_kmeans(&[0.0, 2.0], 2, 4, 5, 0);
        assert_eq!((one.k, one.assignment.clone()), (1, vec![0]));
    }
}
