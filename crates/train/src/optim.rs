//! The optimiser side of training, written out so that its semantics are exactly PyTorch's:
//! `torch.optim.AdamW` (decoupled weight decay applied first, bias-corrected moments, `eps`
//! added *after* the square root and the bias correction), `clip_grad_norm_` over all
//! tensors, and the learning-rate schedules of `transformers` (linear warm-up, then cosine or
//! linear decay to zero).
use serde::{Deserialize, Serialize};

/// AdamW settings (every field explicit: Burn's own defaults differ from PyTorch's).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdamWConfig {
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε, added to `√v̂`.
    pub eps: f64,
    /// Decoupled weight decay (PyTorch's AdamW default is 0.01; QLoRA recipes use 0).
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }
}

/// Moments of every tensor and the step count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AdamWState {
    /// Steps taken.
    pub step: u64,
    /// First moments.
    pub m: Vec<Vec<f32>>,
    /// Second moments.
    pub v: Vec<Vec<f32>>,
}

impl AdamWState {
    /// Zero state for tensors of these lengths.
    pub fn new(lens: &[usize]) -> AdamWState {
        AdamWState { step: 0, m: lens.iter().map(|&n| vec![0.0; n]).collect(), v: lens.iter().map(|&n| vec![0.0; n]).collect() }
    }

    /// One AdamW step with learning rate `lr` on `params` given `grads` (PyTorch semantics).
    pub fn step(&mut self, cfg: &AdamWConfig, lr: f64, params: &mut [&mut Vec<f32>], grads: &[Vec<f32>]) {
        self.step += 1;
        let t = self.step as i32;
        let bc1 = 1.0 - cfg.beta1.powi(t);
        let bc2 = 1.0 - cfg.beta2.powi(t);
        let step_size = lr / bc1;
        let bc2_sqrt = bc2.sqrt();
        for (k, p) in params.iter_mut().enumerate() {
            let (m, v, g) = (&mut self.m[k], &mut self.v[k], &grads[k]);
            for i in 0..p.len() {
                let gi = g[i] as f64;
                let mut pi = p[i] as f64;
                pi *= 1.0 - lr * cfg.weight_decay;
                let mi = cfg.beta1 * m[i] as f64 + (1.0 - cfg.beta1) * gi;
                let vi = cfg.beta2 * v[i] as f64 + (1.0 - cfg.beta2) * gi * gi;
                m[i] = mi as f32;
                v[i] = vi as f32;
                let denom = vi.sqrt() / bc2_sqrt + cfg.eps;
                pi -= step_size * mi / denom;
                p[i] = pi as f32;
            }
        }
    }
}

/// The L2 norm over all gradients.
pub fn global_norm(grads: &[Vec<f32>]) -> f64 {
    grads.iter().flat_map(|g| g.iter()).map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt()
}

/// Scales gradients so that their global norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`: factor `max_norm / (norm + 1e-6)`, only when below 1); returns the norm
/// before clipping.
pub fn clip_global_norm(grads: &mut [Vec<f32>], max_norm: f64) -> f64 {
    let norm = global_norm(grads);
    if max_norm > 0.0 {
        let coef = max_norm / (norm + 1e-6);
        if coef < 1.0 {
            grads.iter_mut().flat_map(|g| g.iter_mut()).for_each(|x| *x = (*x as f64 * coef) as f32);
        }
    }
    norm
}

/// Decay after the warm-up.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Decay {
    /// Half a cosine from the peak to zero.
    #[default]
    Cosine,
    /// A straight line to zero.
    Linear,
    /// Stay at the peak.
    Constant,
}

/// The learning rate of optimiser step `step` (0-based) of `total`: `(step + 1) / warmup` of
/// the peak during warm-up, then the decay over the remaining steps (`transformers`'
/// schedules, except that the first step already moves).
pub fn learning_rate(peak: f64, step: u64, total: u64, warmup: u64, decay: Decay) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let progress = ((step - warmup) as f64 / span).min(1.0);
    match decay {
        Decay::Cosine => peak * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
        Decay::Linear => peak * (1.0 - progress),
        Decay::Constant => peak,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_adamw_step_moves_by_lr_times_sign_and_eps_sits_outside_the_root() {
        let cfg = AdamWConfig::default();
        let mut p = vec![1.0f32, 1.0, 1.0];
        let g = vec![vec![0.5f32, -2.0, 7.5e-8]];
        let mut st = AdamWState::new(&[3]);
        st.step(&cfg, 1e-3, &mut [&mut p], &g);
        assert!((p[0] - (1.0 - 1e-3)).abs() < 1e-7);
        assert!((p[1] - (1.0 + 1e-3)).abs() < 1e-7);
        // |g| near eps: the step is lr·g/(|g| + eps) ≈ 0.88·lr.
        let moved = (1.0 - p[2] as f64) / 1e-3;
        assert!((moved - 7.5e-8 / (7.5e-8 + 1e-8)).abs() < 1e-3, "{moved}");
    }

    #[test]
    fn weight_decay_is_decoupled() {
        let cfg = AdamWConfig { weight_decay: 0.1, ..Default::default() };
        let mut p = vec![2.0f32];
        let mut st = AdamWState::new(&[1]);
        st.step(&cfg, 0.01, &mut [&mut p], &[vec![0.0]]);
        assert!((p[0] - 2.0 * (1.0 - 0.001)).abs() < 1e-6);
    }

    #[test]
    fn clipping_and_schedules() {
        let mut g = vec![vec![3.0f32], vec![4.0]];
        assert_eq!(clip_global_norm(&mut g, 1.0), 5.0);
        assert!((global_norm(&g) - 1.0).abs() < 1e-5);
        let mut small = vec![vec![0.3f32]];
        clip_global_norm(&mut small, 1.0);
        assert_eq!(small[0][0], 0.3);
        assert_eq!(learning_rate(1.0, 0, 10, 2, Decay::Cosine), 0.5);
        assert_eq!(learning_rate(1.0, 1, 10, 2, Decay::Cosine), 1.0);
        assert!((learning_rate(1.0, 2, 10, 2, Decay::Cosine) - 1.0).abs() < 1e-12);
        assert!((learning_rate(1.0, 6, 10, 2, Decay::Cosine) - 0.5).abs() < 1e-12);
        assert!((learning_rate(1.0, 6, 10, 2, Decay::Linear) - 0.5).abs() < 1e-12);
        assert_eq!(learning_rate(1.0, 9, 10, 0, Decay::Constant), 1.0);
    }
}
