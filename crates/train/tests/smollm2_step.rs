//! The host kernels' step on SmolLM2-135M-Instruct (Q4_1, 30 layers; `just models`): every
//! recomputation setting — each layer, groups counted from the top with a remainder at the
//! bottom, every activation kept — gives the same bits, and Burn's ops the same gradients
//! within f32 rounding.
use gauge_decoder::ModelFiles;
use gauge_train::generator::model::{LoraShape, Sequence, TrainKernels, TrainableLlama};
use gauge_train::optim::global_norm;
use gauge_train::BaseStorage;

#[test]
fn recomputation_settings_give_the_same_bits_and_burn_agrees() {
    let path = gauge_core::models::models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{}: missing; run `just models`", path.display());
    let files = ModelFiles::open(path.to_str().unwrap(), false).unwrap();
    let mut model = TrainableLlama::load(files.config.clone(), &files.checkpoint, BaseStorage::Auto, &gauge_tensor::device::cpu()).unwrap();
    assert_eq!(model.n_layers(), 30);
    let shape = LoraShape { r: 8, alpha: 16.0, rslora: false, targets: (0..7).collect() };
    let mut params = model.init_lora(shape, 3);
    // B away from zero, so every adapter tensor has a gradient and moves the output.
    for (i, m) in params.modules.iter_mut().enumerate() {
        m.b.iter_mut().enumerate().for_each(|(j, b)| *b = 0.01 * ((i * 31 + j) as f32 * 0.37).sin());
    }
    let seqs: Vec<Sequence> = (0..2)
        .map(|s| {
            let ids: Vec<u32> = (0..20 + 7 * s).map(|i| (1 + (i * 7919 + s * 104_729) % 49_000) as u32).collect();
            let n = ids.len();
            Sequence { target: (0..n - 1).map(|t| t >= n / 2).collect(), ids }
        })
        .collect();
    let n: usize = seqs.iter().map(Sequence::n_targets).sum();
    let step = |model: &TrainableLlama| {
        let mut grads = params.zeros_like();
        let nll = model.accumulate_gradients(&params, &seqs, 1.0 / n as f64, Some((0.1, 5)), &mut grads).unwrap();
        (nll, grads)
    };
    assert_eq!(model.kernels(), TrainKernels::Host);
    model.set_recompute_group(1);
    let (nll, grads) = step(&model);
    assert!(nll.is_finite() && nll > 0.0);
    assert!(grads.iter().all(|g| g.iter().any(|&x| x != 0.0)), "every adapter tensor gets a gradient");
    for group in [4, 7, 29, 30] {
        model.set_recompute_group(group);
        assert_eq!(step(&model), (nll, grads.clone()), "recomputing {group} layers at a time changed the step");
    }
    model.set_kernels(TrainKernels::Burn).unwrap();
    let (nll_burn, grads_burn) = step(&model);
    assert!((nll - nll_burn).abs() <= 1e-4 * nll.abs(), "host NLL {nll} vs Burn {nll_burn}");
    let diff: Vec<Vec<f32>> = grads.iter().zip(&grads_burn).map(|(a, b)| a.iter().zip(b).map(|(x, y)| x - y).collect()).collect();
    let (d, norm) = (global_norm(&diff), global_norm(&grads_burn));
    assert!(d <= 1e-3 * norm, "host and Burn gradients differ by {d} (norm {norm})");
}
