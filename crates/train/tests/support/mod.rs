//! What the trainer's reference tests share.
use gauge_train::generator::model::{LoraModule, LoraParams, LoraShape, TrainableLlama};

/// The LoRA fixtures' fixed adapter (r 4, alpha 8 on all seven projections of every layer):
/// `A[i][j] = 0.1 sin(1 + 7i + 3j + 11l + 13p)`, `B[i][j] = 0.02 cos(2 + 5i + 2j + 17l + 19p)`
/// (`../shared/fixtures/README.md`, and `scripts/qwen2_peft_reference.py` for the qwen2 one).
pub fn fixed_params(model: &TrainableLlama, n_layers: usize) -> LoraParams {
    let shape = LoraShape { r: 4, alpha: 8.0, rslora: false, targets: (0..7).collect() };
    let mut modules = Vec::new();
    for l in 0..n_layers {
        for p in 0..7 {
            let (d_in, d_out) = model.projection_dims(p);
            let (lf, pf) = (l as f64, p as f64);
            let a = (0..4 * d_in).map(|k| (0.1 * (1.0 + 7.0 * (k / d_in) as f64 + 3.0 * (k % d_in) as f64 + 11.0 * lf + 13.0 * pf).sin()) as f32).collect();
            let b = (0..d_out * 4).map(|k| (0.02 * (2.0 + 5.0 * (k / 4) as f64 + 2.0 * (k % 4) as f64 + 17.0 * lf + 19.0 * pf).cos()) as f32).collect();
            modules.push(LoraModule { layer: l, proj: p, d_in, d_out, a, b });
        }
    }
    LoraParams { shape, modules }
}
