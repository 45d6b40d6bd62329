//! The trainer and the decoder on the qwen2 architecture against transformers + PEFT: a tiny
//! random Qwen2 of the 1.5B model's shape family (q/k/v biases, grouped-query attention 6:1,
//! tied embeddings, RoPE theta 1e6) with the LoRA fixtures' fixed adapter, the reference
//! computed in float64 by `scripts/qwen2_peft_reference.py` (config, tokenizer and reference
//! committed in `tests/fixtures/tiny-qwen2/`, the weights made here by the script's generator;
//! `just check-peft` regenerates the reference and checks it is unchanged).
//! Tolerances are the Llama fixture's (`../shared/fixtures/README.md`): loss 1e-5, every gradient
//! value 1e-4 of its tensor's norm, the global norm 1e-4 relative, logits 1e-4.
use std::path::PathBuf;

mod support;

use gauge_decoder::{LanguageModel, LoadOptions, ModelFiles};
use gauge_train::generator::model::{Sequence, TrainKernels, TrainableLlama};
use gauge_train::optim::global_norm;
use gauge_train::BaseStorage;
use serde_json::Value;

fn committed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2")
}

/// The model folder: the committed config, tokenizer and reference, and the weights made by the
/// reference script's generator (not stored in the repository): tensor k of the sorted names
/// takes SplitMix64(1000 + k)'s values x = 2·(next >> 40)/2²⁴ − 1, as 1 + x/4 (norms), x/2
/// (biases) or x/8 (matrices) — exact in f32, so the same bytes as the script's.
fn fixture() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        for f in ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "reference.json"] {
            std::fs::copy(committed().join(f), dir.path().join(f)).unwrap();
        }
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(committed().join("config.json")).unwrap()).unwrap();
        let n = |k: &str| cfg[k].as_u64().unwrap() as usize;
        let (h, ff, vocab, layers) = (n("hidden_size"), n("intermediate_size"), n("vocab_size"), n("num_hidden_layers"));
        let hd = h / n("num_attention_heads");
        let (q, kv) = (h, n("num_key_value_heads") * hd);
        let mut shapes: Vec<(String, Vec<usize>)> = vec![("model.embed_tokens.weight".into(), vec![vocab, h]), ("model.norm.weight".into(), vec![h])];
        for l in 0..layers {
            let p = format!("model.layers.{l}");
            for (name, shape) in [
                ("input_layernorm.weight", vec![h]),
                ("post_attention_layernorm.weight", vec![h]),
                ("self_attn.q_proj.weight", vec![q, h]),
                ("self_attn.q_proj.bias", vec![q]),
                ("self_attn.k_proj.weight", vec![kv, h]),
                ("self_attn.k_proj.bias", vec![kv]),
                ("self_attn.v_proj.weight", vec![kv, h]),
                ("self_attn.v_proj.bias", vec![kv]),
                ("self_attn.o_proj.weight", vec![h, q]),
                ("mlp.gate_proj.weight", vec![ff, h]),
                ("mlp.up_proj.weight", vec![ff, h]),
                ("mlp.down_proj.weight", vec![h, ff]),
            ] {
                shapes.push((format!("{p}.{name}"), shape));
            }
        }
        shapes.sort();
        let tensors: Vec<(String, Vec<usize>, Vec<f32>)> = shapes
            .into_iter()
            .enumerate()
            .map(|(k, (name, shape))| {
                let mut rng = gauge_core::rng::SplitMix64::new(1000 + k as u64);
                let values = (0..shape.iter().product::<usize>())
                    .map(|_| {
                        let x = 2.0 * ((rng.next_u64() >> 40) as f64 / 16_777_216.0) - 1.0;
                        (if name.ends_with("norm.weight") { 1.0 + x / 4.0 } else if name.ends_with(".bias") { x / 2.0 } else { x / 8.0 }) as f32
                    })
                    .collect();
                (name, shape, values)
            })
            .collect();
        gauge_train::run::write_safetensors(&dir.path().join("model.safetensors"), &tensors).unwrap();
        dir
    })
    .path()
    .to_path_buf()
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn load(kernels: TrainKernels, group: usize) -> TrainableLlama {
    let files = ModelFiles::open(fixture().to_str().unwrap(), false).unwrap();
    assert_eq!(files.config.model_type, "qwen2");
    assert!(files.checkpoint.has("model.layers.0.self_attn.q_proj.bias"), "the fixture must hold q/k/v biases");
    assert_eq!(files.config.num_attention_heads / files.config.kv_heads(), 6, "GQA 6:1 as Qwen2.5-1.5B");
    let mut model = TrainableLlama::load(files.config, &files.checkpoint, BaseStorage::F32, &gauge_tensor::device::cpu()).unwrap();
    model.set_kernels(kernels).unwrap();
    model.set_recompute_group(group);
    model
}

/// An example's sequence: every position from `first_target − 1` on predicts a target.
fn sequence(ids: Vec<u32>, first_target: usize) -> Sequence {
    let target = (0..ids.len() - 1).map(|t| t + 1 >= first_target).collect();
    Sequence { ids, target }
}

#[test]
fn loss_and_every_gradient_match_peft_on_every_kernel_path() {
    let r = reference();
    let train = r["train"].as_array().unwrap();
    let singles: Vec<Sequence> = train.iter().filter(|t| t["examples"].is_null()).map(|t| sequence(ids(&t["input_ids"]), t["first_target"].as_u64().unwrap() as usize)).collect();
    assert_eq!(singles.len(), 3);
    for (variant, kernels, group) in [("host/layers", TrainKernels::Host, 1), ("host/none", TrainKernels::Host, 2), ("burn", TrainKernels::Burn, 1)] {
        let model = load(kernels, group);
        let params = support::fixed_params(&model, 2);
        let order: Vec<String> = params.modules.iter().flat_map(|m| [format!("{}.lora_A", m.path()), format!("{}.lora_B", m.path())]).collect();
        let want_order: Vec<String> = r["tensor_order"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect();
        assert_eq!(order, want_order);
        for t in train {
            let name = format!("{variant} {}", t["name"].as_str().unwrap());
            let seqs: Vec<Sequence> = match t["examples"].as_array() {
                Some(ex) => ex.iter().map(|i| singles[i.as_u64().unwrap() as usize].clone()).collect(),
                None => vec![sequence(ids(&t["input_ids"]), t["first_target"].as_u64().unwrap() as usize)],
            };
            let n: usize = seqs.iter().map(Sequence::n_targets).sum();
            assert_eq!(n as u64, t["n_targets"].as_u64().unwrap(), "{name}");
            let mut grads = params.zeros_like();
            let nll = model.accumulate_gradients(&params, &seqs, 1.0 / n as f64, None, &mut grads).unwrap();
            let (loss, want) = (nll / n as f64, t["loss"].as_f64().unwrap());
            assert!((loss - want).abs() <= 1e-5, "{name}: loss {loss} vs PEFT {want}");
            let (norm, want_norm) = (global_norm(&grads), t["grad_global_norm"].as_f64().unwrap());
            assert!((norm - want_norm).abs() <= 1e-4 * want_norm, "{name}: gradient norm {norm} vs PEFT {want_norm}");
            for (key, g) in order.iter().zip(&grads) {
                let want = floats(&t["grads"][key]);
                assert_eq!(want.len(), g.len(), "{name} {key}");
                let fro = want.iter().map(|x| x * x).sum::<f64>().sqrt();
                for (i, (got, w)) in g.iter().zip(&want).enumerate() {
                    assert!((*got as f64 - w).abs() <= 1e-4 * fro, "{name} {key}[{i}]: {got} vs PEFT {w} (norm {fro})");
                }
            }
        }
    }
}

#[test]
fn the_decoder_with_the_saved_adapter_gives_peft_logits() {
    let r = reference();
    let model = load(TrainKernels::Host, 1);
    let dir = tempfile::tempdir().unwrap();
    support::fixed_params(&model, 2).to_adapter(0.0, Some("tiny-qwen2".into())).save(dir.path()).unwrap();
    let path = fixture();
    let path = path.to_str().unwrap();
    let device = gauge_tensor::device::cpu();
    let base = LanguageModel::load(path, &device).unwrap();
    let tuned = LanguageModel::load_with(path, &device, &LoadOptions { adapter: Some(dir.path().to_path_buf()), ..Default::default() }).unwrap();
    let mut moved = 0f64;
    for (k, rec) in r["inference"].as_array().unwrap().iter().enumerate() {
        let input = ids(&rec["input_ids"]);
        for (lm, key) in [(&base, "last_logits_base"), (&tuned, "last_logits_adapter")] {
            let logits = lm.model.forward(&input, &mut lm.model.new_cache()).unwrap();
            let want = floats(&rec[key]);
            assert_eq!(logits.len(), want.len());
            for (i, (got, w)) in logits.iter().zip(&want).enumerate() {
                assert!((*got as f64 - w).abs() <= 1e-4, "{key} input {k} [{i}]: {got} vs {w}");
            }
        }
        let (b, a) = (floats(&rec["last_logits_base"]), floats(&rec["last_logits_adapter"]));
        moved = moved.max(b.iter().zip(&a).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max));
    }
    // The adapter moves the logits far beyond the tolerance, so the check can see it.
    assert!(moved > 100.0 * 1e-4, "the fixture's adapter moves logits by only {moved}");
}
