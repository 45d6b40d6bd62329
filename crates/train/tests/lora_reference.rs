//! The trainer against `../shared/fixtures/tiny-llama/lora-reference.jsonl` (JAX float64,
//! README "LoRA training reference"): PEFT initialisation bounds, the masked loss, every A and
//! B gradient, the loss after one AdamW step, a merged weight, and logits with the adapter
//! (saved as a PEFT folder, loaded by the decoder) — within the stated f32 tolerances.
use std::path::PathBuf;

mod support;

use gauge_decoder::adapter::PROJECTIONS;
use gauge_decoder::generate::argmax;
use gauge_decoder::{LanguageModel, LoadOptions, ModelFiles};
use gauge_train::generator::model::{LoraModule, LoraParams, LoraShape, Sequence, TrainKernels, TrainableLlama};
use gauge_train::optim::{global_norm, AdamWConfig, AdamWState};
use gauge_train::BaseStorage;
use serde_json::Value;

fn fixture() -> PathBuf {
    gauge_test_support::shared_path("fixtures/tiny-llama/lora-reference.jsonl").parent().unwrap().to_path_buf()
}

fn records() -> Vec<Value> {
    std::fs::read_to_string(fixture().join("lora-reference.jsonl")).unwrap().lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn load() -> TrainableLlama {
    let files = ModelFiles::open(fixture().to_str().unwrap(), false).unwrap();
    TrainableLlama::load(files.config, &files.checkpoint, BaseStorage::F32, &gauge_tensor::device::cpu()).unwrap()
}

/// The fixture's fixed A and B values (r 4, alpha 8, all seven projections of both layers).
fn fixed_params(model: &TrainableLlama) -> LoraParams {
    support::fixed_params(model, 2)
}

fn key(m: &LoraModule, which: &str) -> String {
    format!("{}.lora_{which}", m.path())
}

fn sequence(r: &Value) -> Sequence {
    let target: Vec<bool> = r["target_mask"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() == 1).collect();
    Sequence { ids: ids(&r["input_ids"]), target }
}

#[test]
fn init_matches_the_fixture_and_peft_bounds() {
    let model = load();
    let recs = records();
    let cfg = &recs[0];
    // The library's seeded initialiser (PEFT's: A Kaiming-uniform in ±1/√in, B zero) makes
    // the fixture's tensors, in the fixture's order, with the fixture's sizes.
    let shape = LoraShape { r: 4, alpha: 8.0, rslora: false, targets: (0..7).collect() };
    let init = model.init_lora(shape.clone(), 7);
    let order: Vec<String> = init.modules.iter().flat_map(|m| [key(m, "A"), key(m, "B")]).collect();
    let want_order: Vec<String> = cfg["tensor_order"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect();
    assert_eq!(order, want_order);
    assert_eq!(init, model.init_lora(shape.clone(), 7), "the same seed must give the same adapter");
    assert_ne!(init, model.init_lora(shape, 8), "another seed must give another adapter");
    for m in &init.modules {
        assert_eq!((m.a.len(), m.b.len()), (4 * m.d_in, m.d_out * 4), "{}", m.path());
        let bound = 1.0 / (m.d_in as f64).sqrt();
        assert!(m.a.iter().all(|&x| (x as f64).abs() <= bound), "{}: A outside ±1/√in", m.path());
        assert!(m.b.iter().all(|&x| x == 0.0), "{}: B must start at zero", m.path());
        // Uniform in ±bound: mean 0 and variance bound²/3, within 5 standard errors.
        let n = m.a.len() as f64;
        let mean = m.a.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = m.a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        let (want_var, se_mean, se_var) = (bound * bound / 3.0, bound / (3.0 * n).sqrt(), bound * bound * (4.0f64 / 45.0 / n).sqrt());
        assert!(mean.abs() <= 5.0 * se_mean, "{}: mean {mean} of a uniform ±{bound}", m.path());
        assert!((var - want_var).abs() <= 5.0 * se_var, "{}: variance {var} vs {want_var} of a uniform ±{bound}", m.path());
    }
    assert_eq!(init.count(), fixed_params(&model).count());

    // The fixture's A and B, written as a PEFT folder by the library and read back by the
    // decoder's loader: every first-8 and Frobenius norm matches `init_first8` / `init_fro`
    // (the layouts, [r, in] and [out, r], and the checkpoint names survive the round trip).
    let dir = tempfile::tempdir().unwrap();
    fixed_params(&model).to_adapter(0.0, None).save(dir.path()).unwrap();
    let loaded = gauge_decoder::LoraAdapter::load(dir.path()).unwrap();
    assert_eq!(loaded.modules.len(), 14);
    for (path, pair) in &loaded.modules {
        for (which, t) in [("A", &pair.a), ("B", &pair.b)] {
            let name = format!("{path}.lora_{which}");
            let want = floats(&cfg["init_first8"][&name]);
            assert_eq!(want.len(), 8, "{name}: not in the fixture");
            for (g, w) in t[..8].iter().map(|&x| x as f64).zip(&want) {
                assert!((g - w).abs() <= 1e-7, "{name}: {g} vs {w}");
            }
            let fro = t.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            let want_fro = cfg["init_fro"][&name].as_f64().unwrap();
            assert!((fro - want_fro).abs() <= 1e-6 * want_fro.max(1.0), "{name} fro {fro} vs {want_fro}");
        }
    }
}

/// Every way the step can run: the host kernels recomputing each layer (`layers`) or keeping
/// every activation (`none`), and Burn's ops.
fn step_variants() -> Vec<(&'static str, TrainableLlama)> {
    let mut out = Vec::new();
    for (name, kernels, group) in [("host/layers", TrainKernels::Host, 1), ("host/none", TrainKernels::Host, 2), ("burn", TrainKernels::Burn, 1)] {
        let mut model = load();
        model.set_kernels(kernels).unwrap();
        model.set_recompute_group(group);
        out.push((name, model));
    }
    out
}

#[test]
fn loss_gradients_and_one_adamw_step_match_the_reference() {
    for (variant, model) in step_variants() {
        eprintln!("{variant}");
        step_matches_the_reference(&model, variant);
    }
}

fn step_matches_the_reference(model: &TrainableLlama, variant: &str) {
    let recs = records();
    let train: Vec<&Value> = recs.iter().filter(|r| r["type"] == "train").collect();
    assert_eq!(train.len(), 4);
    let singles: Vec<Sequence> = train[..3].iter().map(|r| sequence(r)).collect();
    for r in train {
        let seqs: Vec<Sequence> = match r["examples"].as_array() {
            Some(ex) => ex.iter().map(|i| singles[i.as_u64().unwrap() as usize].clone()).collect(),
            None => vec![sequence(r)],
        };
        let name = &format!("{variant} {}", r["name"].as_str().unwrap());
        let n: usize = seqs.iter().map(Sequence::n_targets).sum();
        assert_eq!(n as u64, r["n_targets"].as_u64().unwrap(), "{name}");
        let mut params = fixed_params(model);
        let mut grads = params.zeros_like();
        let nll = model.accumulate_gradients(&params, &seqs, 1.0 / n as f64, None, &mut grads).unwrap();
        let loss = nll / n as f64;
        let want = r["loss"].as_f64().unwrap();
        assert!((loss - want).abs() <= 1e-5, "{name}: loss {loss} vs {want}");
        let norm = global_norm(&grads);
        let want_norm = r["grad_global_norm"].as_f64().unwrap();
        assert!((norm - want_norm).abs() <= 1e-4 * want_norm, "{name}: grad norm {norm} vs {want_norm}");
        for (k, m) in params.modules.iter().enumerate() {
            for (j, which) in ["A", "B"].iter().enumerate() {
                let g = &grads[2 * k + j];
                let want = &r["grads"][key(m, which)];
                let fro = want["fro"].as_f64().unwrap();
                let got_fro = g.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                assert!((got_fro - fro).abs() <= 1e-4 * fro, "{name} {} {which}: fro {got_fro} vs {fro}", m.path());
                for (i, w) in floats(&want["first8"]).iter().enumerate() {
                    assert!((g[i] as f64 - w).abs() <= 1e-4 * fro, "{name} {} {which}[{i}]: {} vs {w}", m.path(), g[i]);
                }
            }
        }
        if let Some(full) = r.get("grads_full") {
            for (k, which) in [(0, "A"), (1, "B")] {
                let key = format!("model.layers.0.self_attn.q_proj.lora_{which}");
                let want = floats(&full[&key]["values"]);
                assert_eq!(want.len(), grads[k].len(), "{key}");
                let fro = r["grads"][&key]["fro"].as_f64().unwrap();
                for (i, w) in want.iter().enumerate() {
                    assert!((grads[k][i] as f64 - w).abs() <= 1e-4 * fro, "{name} full grad {key}[{i}]");
                }
            }
        }
        // One AdamW step (lr 1e-3, PyTorch semantics), then the loss again.
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
        let lens: Vec<usize> = params.tensors().iter().map(|t| t.len()).collect();
        let mut state = AdamWState::new(&lens);
        state.step(&cfg, 1e-3, &mut params.tensors_mut(), &grads);
        for (k, m) in params.modules.iter().enumerate() {
            for (j, which) in ["A", "B"].iter().enumerate() {
                let t = params.tensors()[2 * k + j];
                for (i, w) in floats(&r["params_after_step_first8"][key(m, which)]).iter().enumerate() {
                    assert!((t[i] as f64 - w).abs() <= 1e-4, "{name} {} {which}[{i}] after step: {} vs {w}", m.path(), t[i]);
                }
            }
        }
        let (after, _) = model.nll(&params, &seqs).unwrap();
        let want_after = r["loss_after_adamw_step"].as_f64().unwrap();
        assert!((after / n as f64 - want_after).abs() <= 1e-5, "{name}: loss after step {} vs {want_after}", after / n as f64);
    }
}

#[test]
fn dropout_steps_agree_across_kernels_and_recomputation_changes_no_bit() {
    let recs = records();
    let seqs: Vec<Sequence> = recs.iter().filter(|r| r["type"] == "train" && r["examples"].is_null()).map(sequence).collect();
    assert!(seqs.len() >= 2);
    let n: usize = seqs.iter().map(Sequence::n_targets).sum();
    let mut results = Vec::new();
    for (variant, model) in step_variants() {
        let params = fixed_params(&model);
        let mut grads = params.zeros_like();
        let nll = model.accumulate_gradients(&params, &seqs, 1.0 / n as f64, Some((0.25, 99)), &mut grads).unwrap();
        results.push((variant, nll, grads));
    }
    let (_, nll_layers, g_layers) = &results[0];
    let (_, nll_none, g_none) = &results[1];
    assert_eq!((nll_layers, g_layers), (nll_none, g_none), "recomputing layers must give the same bits as keeping them");
    let (_, nll_burn, g_burn) = &results[2];
    assert!((nll_layers - nll_burn).abs() <= 1e-5 * n as f64, "host {nll_layers} vs burn {nll_burn}");
    for (k, (h, b)) in g_layers.iter().zip(g_burn).enumerate() {
        let fro = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        let diff = h.iter().zip(b).map(|(&x, &y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
        assert!(diff <= 1e-4 * fro.max(1e-6), "tensor {k}: host and burn gradients differ by {diff} (norm {fro})");
    }
    // Dropout reached the gradients: a different mask seed moves them.
    let (_, model) = step_variants().into_iter().next().unwrap();
    let params = fixed_params(&model);
    let mut other = params.zeros_like();
    model.accumulate_gradients(&params, &seqs, 1.0 / n as f64, Some((0.25, 100)), &mut other).unwrap();
    assert_ne!(&other, g_layers);
}

#[test]
fn merged_weight_and_adapter_logits_match_and_survive_a_save_and_load() {
    let model = load();
    let recs = records();
    let params = fixed_params(&model);
    let adapter = params.to_adapter(0.0, Some("tiny-llama".into()));
    let merged = recs.iter().find(|r| r["type"] == "merged_weight").unwrap();
    let q = adapter.modules.get("model.layers.0.self_attn.q_proj").unwrap();
    let delta = q.delta(adapter.scale());
    let files = ModelFiles::open(fixture().to_str().unwrap(), false).unwrap();
    let w = files.checkpoint.get("model.layers.0.self_attn.q_proj.weight", &[q.d_out, q.d_in]).unwrap();
    for (i, want) in floats(&merged["W_merged_first8"]).iter().enumerate() {
        assert!(((w[i] + delta[i]) as f64 - want).abs() <= 1e-7, "merged [{i}]");
    }
    let dir = tempfile::tempdir().unwrap();
    adapter.save(dir.path()).unwrap();
    let base = LanguageModel::load(fixture().to_str().unwrap(), &gauge_tensor::device::cpu()).unwrap();
    let tuned = LanguageModel::load_with(fixture().to_str().unwrap(), &gauge_tensor::device::cpu(), &LoadOptions { adapter: Some(dir.path().to_path_buf()), ..Default::default() }).unwrap();
    let mut n = 0;
    for r in recs.iter().filter(|r| r["type"] == "adapter_inference") {
        let input = ids(&r["input_ids"]);
        for (lm, key) in [(&base, "last_logits_first16_base"), (&tuned, "last_logits_first16_adapter")] {
            let logits = lm.model.forward(&input, &mut lm.model.new_cache()).unwrap();
            for (i, want) in floats(&r[key]).iter().enumerate() {
                assert!((logits[i] as f64 - want).abs() <= 1e-4, "{key} input {n} [{i}]: {} vs {want}", logits[i]);
            }
        }
        let mut cache = tuned.model.new_cache();
        let mut next = argmax(&tuned.model.forward(&input, &mut cache).unwrap());
        let mut greedy = Vec::new();
        for _ in 0..8 {
            greedy.push(next as u64);
            next = argmax(&tuned.model.forward(&[next], &mut cache).unwrap());
        }
        assert_eq!(greedy, r["greedy_8_adapter"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>(), "greedy input {n}");
        n += 1;
    }
    assert_eq!(n, 5);
    // The adapter's PEFT names and shapes.
    let back = gauge_decoder::LoraAdapter::load(dir.path()).unwrap();
    assert_eq!(back.modules.len(), 14);
    assert_eq!(back.config.target_modules, PROJECTIONS.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let bytes = std::fs::read(dir.path().join("adapter_model.safetensors")).unwrap();
    let st = safetensors_names(&bytes);
    assert!(st.contains(&"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".to_string()), "{st:?}");
}

/// Tensor names in a safetensors header.
fn safetensors_names(bytes: &[u8]) -> Vec<String> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header.keys().filter(|k| *k != "__metadata__").cloned().collect()
}
