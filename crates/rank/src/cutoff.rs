//! The score cutoff that refuses instead of passing noise on.
use serde::Serialize;

use crate::fusion::Candidate;

/// Why nothing is returned: the best score is under the cutoff.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("refused: best score {best:?} is under the cutoff {threshold}")]
pub struct Refusal {
    /// The best final score, if there was any candidate.
    pub best: Option<f32>,
    /// The cutoff.
    pub threshold: f32,
}

/// Returns the candidates when the best final score reaches `threshold`, else a refusal,
/// so that a caller never sends noise to an LLM. `None` disables the cutoff.
pub fn apply_cutoff(candidates: Vec<Candidate>, threshold: Option<f32>) -> Result<Vec<Candidate>, Refusal> {
    let Some(threshold) = threshold else { return Ok(candidates) };
    let best = candidates.iter().map(|c| c.score).fold(None, |m: Option<f32>, s| Some(m.map_or(s, |m| m.max(s))));
    match best {
        Some(b) if b >= threshold => Ok(candidates),
        _ => Err(Refusal { best, threshold }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: &str, score: f32) -> Candidate {
        Candidate { chunk_id: id.into(), score, stages: Vec::new() }
    }

    #[test]
    fn cutoff_refuses_noise() {
        let c = vec![cand("x", 0.31), cand("y", 0.2)];
        assert_eq!(apply_cutoff(c.clone(), Some(0.3)).unwrap().len(), 2);
        let refusal = apply_cutoff(c.clone(), Some(0.5)).unwrap_err();
        assert_eq!(refusal, Refusal { best: Some(0.31), threshold: 0.5 });
        assert!(refusal.to_string().contains("under the cutoff 0.5"));
        assert_eq!(apply_cutoff(Vec::new(), Some(0.1)).unwrap_err().best, None);
        assert_eq!(apply_cutoff(c, None).unwrap().len(), 2);
    }
}
