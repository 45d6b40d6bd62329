//! The encoder trainer on MPNet bases:
//! - a tiny random MPNet (the tiny BERT fixture's weights under MPNet's names, a seeded
//!   relative-position bias table, positions from `pad + 1`): the training forward (host
//!   kernels and Burn) gives the inference encoder's vectors; host and Burn agree on the loss
//!   and every gradient; finite differences agree with the backward pass (LoRA on `q`/`o`/
//!   `dense`, and full tuning of a position row and `attention.LayerNorm`); the adapter
//!   saved as PEFT (`q`, `k`, `v`, `o`, `dense`) and merged by the embedder gives the trained
//!   vectors; the reranker target and BERT's module names are refused in one line;
//! - all-mpnet-base-v2 itself (`just models all-mpnet-base-v2`): at LoRA B = 0 the training
//!   forward reproduces sentence-transformers' vectors from the encoder's fixture.
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gauge_encoder::{Embedder, EmbedderOptions, ModelSource, Pooling};
use gauge_train::generator::model::TrainKernels;
use gauge_train::retriever::bert::{module_targets, Arch, EncoderParams, EncoderTask, Encoded, TrainableBert, Tuning};
use gauge_train::retriever::{step_loss, RetrieverConfig, StepBatch};

/// One autodiff run at a time (see `encoder_gradients.rs`).
static AUTODIFF: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    AUTODIFF.lock().unwrap_or_else(|e| e.into_inner())
}

fn bert_fixture() -> PathBuf {
    gauge_test_support::shared_path("fixtures/tiny-bert-cross-encoder")
}

const EMBEDDER: EncoderTask = EncoderTask::Embedder { pooling: Pooling::Mean, normalize: true };

/// Seeded uniform values in `[-scale, scale]`.
fn uniform(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = gauge_core::rng::SplitMix64::new(seed);
    (0..n).map(|_| ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32 * scale).collect()
}

/// Writes a 2-layer MPNet (hidden 32, 2 heads) into `dir`: the tiny BERT's weights renamed,
/// no token types, a relative-attention-bias table of values within ±`bias_scale`.
fn tiny_mpnet(dir: &Path, bias_scale: f32) {
    let bert = gauge_tensor::weights::Weights::open(&bert_fixture().join("model.safetensors"), &["", "bert."]).unwrap();
    let (h, i, v, positions) = (32, 64, 30522, 512);
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let mut copy = |from: &str, to: &str, shape: Vec<usize>| {
        let w = bert.get(from, &shape).unwrap();
        out.push((to.to_string(), shape, w.values));
    };
    copy("embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight", vec![v, h]);
    copy("embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight", vec![positions, h]);
    for p in ["weight", "bias"] {
        copy(&format!("embeddings.LayerNorm.{p}"), &format!("embeddings.LayerNorm.{p}"), vec![h]);
    }
    for l in 0..2 {
        let renames = [
            ("attention.self.query", "attention.attn.q", (h, h)),
            ("attention.self.key", "attention.attn.k", (h, h)),
            ("attention.self.value", "attention.attn.v", (h, h)),
            ("attention.output.dense", "attention.attn.o", (h, h)),
            ("intermediate.dense", "intermediate.dense", (i, h)),
            ("output.dense", "output.dense", (h, i)),
        ];
        for (from, to, (o, d)) in renames {
            copy(&format!("encoder.layer.{l}.{from}.weight"), &format!("encoder.layer.{l}.{to}.weight"), vec![o, d]);
            copy(&format!("encoder.layer.{l}.{from}.bias"), &format!("encoder.layer.{l}.{to}.bias"), vec![o]);
        }
        for (from, to) in [("attention.output.LayerNorm", "attention.LayerNorm"), ("output.LayerNorm", "output.LayerNorm")] {
            for p in ["weight", "bias"] {
                copy(&format!("encoder.layer.{l}.{from}.{p}"), &format!("encoder.layer.{l}.{to}.{p}"), vec![h]);
            }
        }
    }
    out.push(("encoder.relative_attention_bias.weight".into(), vec![32, 2], uniform(64, bias_scale, 11)));
    gauge_train::run::write_safetensors(&dir.join("model.safetensors"), &out).unwrap();
    let config = serde_json::json!({"architectures": ["MPNetModel"], "model_type": "mpnet", "vocab_size": v, "hidden_size": h,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": i, "hidden_act": "gelu",
        "max_position_embeddings": positions, "layer_norm_eps": 1e-5, "pad_token_id": 1, "relative_attention_num_buckets": 32});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"] {
        std::fs::copy(bert_fixture().join(f), dir.join(f)).unwrap();
    }
}

/// Token ids of the fixture's pairs as single sequences (types 0), lengths 20–60: the
/// relative offsets reach the logarithmic buckets.
fn sequences() -> Vec<Encoded> {
    let text = std::fs::read_to_string(bert_fixture().join("reference.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids: Vec<u32> = v["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            Encoded { types: vec![0; ids.len()], ids }
        })
        .collect()
}

fn lora(r: usize) -> Tuning {
    Tuning::Lora { r, alpha: 2.0 * r as f64, rslora: false, targets: (0..6).collect() }
}

fn perturb_b(p: &mut EncoderParams) {
    let mut seed = 7;
    for (name, v) in p.names.clone().iter().zip(p.values.iter_mut()) {
        if name.ends_with("lora_B.weight") {
            *v = uniform(v.len(), 0.1, seed);
            seed += 1;
        }
    }
}

fn contrastive() -> StepBatch {
    let seqs = sequences();
    let queries: Vec<Encoded> = seqs.iter().take(3).map(|e| Encoded { ids: e.ids[..e.ids.len().min(10)].to_vec(), types: vec![0; e.ids.len().min(10)] }).collect();
    let passages: Vec<Encoded> = seqs.iter().skip(1).take(5).cloned().collect();
    StepBatch::Contrastive { queries, passages, masked: vec![vec![2], vec![], vec![]] }
}

#[test]
fn tiny_mpnet_trains_with_the_inference_encoders_forward() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    tiny_mpnet(dir.path(), 1.0);
    let device = gauge_tensor::device::cpu();
    let (mut model, params) = TrainableBert::load(dir.path(), EMBEDDER, lora(2), 0, &device).unwrap();
    assert_eq!(model.arch, Arch::Mpnet);
    assert!(params.index("embeddings.token_type_embeddings.weight").is_none());
    let bias = params.index("encoder.relative_attention_bias.weight").unwrap();
    assert!(!params.trainable[bias], "the relative-position bias table is frozen");

    let source = ModelSource { id: "tiny-mpnet".into(), dir: dir.path().to_path_buf() };
    let embedder = Embedder::load(&source, &EmbedderOptions { pooling: Some(Pooling::Mean), normalize: Some(true), ..Default::default() }, &device).unwrap();
    let seqs = sequences();
    let batch: Vec<&Encoded> = seqs.iter().collect();
    let (want, _) = embedder.embed_ids(&seqs.iter().map(|e| e.ids.clone()).collect::<Vec<_>>(), |_| {});
    for kernels in [TrainKernels::Host, TrainKernels::Burn] {
        model.set_kernels(kernels).unwrap();
        let got = model.infer(&params, &batch).unwrap();
        let worst = got.iter().zip(&want).flat_map(|(g, w)| g.iter().zip(w).map(|(a, b)| (a - b).abs())).fold(0f32, f32::max);
        eprintln!("{kernels:?}: largest difference from the inference encoder {worst:.2e}");
        assert!(worst <= 1e-5, "{kernels:?}: training forward differs from the inference MPNet by {worst}");
    }
    // The bias matters: with a zero table the vectors move (so the check above saw it).
    let flat = tempfile::tempdir().unwrap();
    tiny_mpnet(flat.path(), 0.0);
    let (m, p) = TrainableBert::load(flat.path(), EMBEDDER, lora(2), 0, &device).unwrap();
    let moved = m.infer(&p, &batch).unwrap().iter().zip(&want).flat_map(|(g, w)| g.iter().zip(w).map(|(a, b)| (a - b).abs())).fold(0f32, f32::max);
    assert!(moved > 1e-4, "the relative-position bias did not change the vectors ({moved})");
}

/// Host kernels against Burn's autodiff on MPNet (LoRA and full tuning, sequences of
/// different lengths): the loss and every gradient, held to the BERT test's tolerance.
#[test]
fn tiny_mpnet_host_kernels_give_burns_gradients() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    tiny_mpnet(dir.path(), 1.0);
    let device = gauge_tensor::device::cpu();
    let cfg = RetrieverConfig { temperature: 0.1, ..Default::default() };
    for (name, tuning) in [("lora", lora(2)), ("full", Tuning::Full)] {
        let (mut model, mut params) = TrainableBert::load(dir.path(), EMBEDDER, tuning, 9, &device).unwrap();
        perturb_b(&mut params);
        let (loss_host, gh) = step_loss(&model, &params, &contrastive(), &cfg, true).unwrap();
        model.set_kernels(TrainKernels::Burn).unwrap();
        let (loss_burn, gb) = step_loss(&model, &params, &contrastive(), &cfg, true).unwrap();
        assert!((loss_host - loss_burn).abs() <= 1e-5 * loss_burn.abs().max(1.0), "{name}: host loss {loss_host} vs Burn {loss_burn}");
        let (gh, gb) = (gh.unwrap(), gb.unwrap());
        let norms: Vec<f64> = gb.iter().map(|b| b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt()).collect();
        let largest = norms.iter().copied().fold(0.0, f64::max);
        for (((&i, h), b), &norm) in params.trainable_indices().iter().zip(&gh).zip(&gb).zip(&norms) {
            let diff = h.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
            assert!(diff <= 2e-4 * (norm + largest), "{name}: {} gradient differs by {diff:.3e} (Burn's norm {norm:.3e})", params.names[i]);
        }
        eprintln!("{name}: loss {loss_host:.6} (Burn {loss_burn:.6}), {} gradients agree", gh.len());
    }
}

/// Central differences against the host backward pass (the default kernels).
#[test]
fn tiny_mpnet_gradients_match_finite_differences() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    tiny_mpnet(dir.path(), 1.0);
    let device = gauge_tensor::device::cpu();
    let cfg = RetrieverConfig { temperature: 0.1, ..Default::default() };
    let batch = contrastive();
    let check = |model: &TrainableBert, params: &EncoderParams, coords: &[(&str, usize)], eps: f32| {
        let (_, grads) = step_loss(model, params, &batch, &cfg, true).unwrap();
        let grads = grads.unwrap();
        let trainable = params.trainable_indices();
        for &(name, k) in coords {
            let i = params.index(name).unwrap_or_else(|| panic!("no parameter {name}"));
            let analytic = grads[trainable.iter().position(|&t| t == i).unwrap()][k] as f64;
            let mut p = params.clone();
            p.values[i][k] += eps;
            let up = step_loss(model, &p, &batch, &cfg, false).unwrap().0;
            p.values[i][k] -= 2.0 * eps;
            let down = step_loss(model, &p, &batch, &cfg, false).unwrap().0;
            let numeric = (up - down) / (2.0 * eps as f64);
            eprintln!("{name}[{k}]: finite difference {numeric:.6e}, backward {analytic:.6e}");
            // The BERT test's tolerance (see `ABS_FLOOR` in encoder_gradients.rs).
            assert!((numeric - analytic).abs() <= 5e-5 + 3e-2 * analytic.abs(), "{name}[{k}]: finite difference {numeric:.6e}, backward {analytic:.6e}");
            assert!(analytic.abs() > 1e-6, "{name}[{k}]: zero gradient");
        }
    };
    let (model, mut params) = TrainableBert::load(dir.path(), EMBEDDER, lora(2), 5, &device).unwrap();
    perturb_b(&mut params);
    check(&model, &params, &[("encoder.layer.0.attention.attn.q.lora_A.weight", 11), ("encoder.layer.1.attention.attn.o.lora_B.weight", 4), ("encoder.layer.0.output.dense.lora_A.weight", 50)], 1e-2);
    let (full, params) = TrainableBert::load(dir.path(), EMBEDDER, Tuning::Full, 5, &device).unwrap();
    // Position pad + 1 + 3 = 5 is every sequence's fourth token.
    let h = full.config.hidden_size;
    check(&full, &params, &[("encoder.layer.1.attention.LayerNorm.weight", 3), ("encoder.layer.0.attention.attn.k.weight", 7)], 1e-2);
    // A position row every sequence reads, under a temperature-0.1 loss: curved enough that a
    // step of 1e-2 is 7 % off the slope (measured: 1e-2 → −6.82e-2, 2e-3 → −6.41e-2,
    // 5e-4 → −6.37e-2 against the backward's −6.38e-2); 1e-3 is within 0.5 %.
    check(&full, &params, &[("embeddings.position_embeddings.weight", 5 * h + 2)], 1e-3);
}

#[test]
fn tiny_mpnet_adapter_round_trip_gives_the_trained_vectors() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    tiny_mpnet(dir.path(), 1.0);
    let device = gauge_tensor::device::cpu();
    let (model, mut params) = TrainableBert::load(dir.path(), EMBEDDER, lora(4), 1, &device).unwrap();
    perturb_b(&mut params);
    let out = tempfile::tempdir().unwrap();
    let adapter = model.adapter(&params, Some("tiny-mpnet".into())).unwrap();
    adapter.save(out.path()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(json["target_modules"], serde_json::json!(["q", "k", "v", "o", "dense"]));
    assert!(adapter.modules.contains_key("encoder.layer.1.attention.attn.o") && adapter.modules.contains_key("encoder.layer.0.intermediate.dense"));
    let source = ModelSource { id: "tiny-mpnet".into(), dir: dir.path().to_path_buf() };
    let options = EmbedderOptions { pooling: Some(Pooling::Mean), normalize: Some(true), adapter: Some(out.path().to_path_buf()), ..Default::default() };
    let embedder = Embedder::load(&source, &options, &device).unwrap();
    let seqs = sequences();
    let (got, _) = embedder.embed_ids(&seqs.iter().map(|e| e.ids.clone()).collect::<Vec<_>>(), |_| {});
    let want = model.infer(&params, &seqs.iter().collect::<Vec<_>>()).unwrap();
    let base = TrainableBert::load(dir.path(), EMBEDDER, lora(4), 1, &device).unwrap();
    let without = base.0.infer(&base.1, &seqs.iter().collect::<Vec<_>>()).unwrap();
    for ((g, w), b) in got.iter().zip(&want).zip(&without) {
        let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "merged-adapter vector differs from the trained network's by {worst}");
        let moved = g.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved > 1e-3, "the adapter did not change the vector ({moved})");
    }
}

#[test]
fn mpnet_refuses_the_reranker_target_and_berts_module_names() {
    let dir = tempfile::tempdir().unwrap();
    tiny_mpnet(dir.path(), 1.0);
    let device = gauge_tensor::device::cpu();
    let err = TrainableBert::load(dir.path(), EncoderTask::CrossEncoder, lora(2), 0, &device).err().unwrap().to_string();
    assert!(err.contains("MPNet") && err.contains("--target embedder") && err.contains(&dir.path().display().to_string()), "{err}");
    let err = module_targets(&["query".into()], Arch::Mpnet).unwrap_err().to_string();
    assert!(err.contains("`query`") && err.contains("q, k, v, o, dense"), "{err}");
    assert_eq!(module_targets(&["o".into(), "dense".into()], Arch::Mpnet).unwrap(), vec![3, 4, 5]);
    assert_eq!(module_targets(&["dense".into()], Arch::Bert).unwrap(), vec![3, 4, 5]);
    let err = module_targets(&["q".into()], Arch::Bert).unwrap_err().to_string();
    assert!(err.contains("query, key, value, dense"), "{err}");
}

/// all-mpnet-base-v2 at LoRA B = 0 against sentence-transformers' vectors (the encoder
/// crate's fixture): short and long texts, non-ASCII, a literal `<pad>` (position 1).
#[test]
fn all_mpnet_base_v2_training_forward_matches_sentence_transformers() {
    let _serial = one_at_a_time();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("models/all-mpnet-base-v2");
    assert!(dir.join("model.safetensors").is_file(), "{}: missing; run `just models all-mpnet-base-v2`", dir.display());
    let fixture = std::fs::read_to_string(root.join("crates/encoder/tests/fixtures/mpnet-reference.jsonl")).unwrap();
    let cases: Vec<(String, Encoded, Vec<f32>)> = fixture
        .lines()
        .skip(1)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids: Vec<u32> = v["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            let hex = v["sentence_embedding_f32le"].as_str().unwrap().as_bytes();
            let bytes: Vec<u8> = hex.chunks_exact(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect();
            let vector = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            (v["text"].as_str().unwrap().to_string(), Encoded { types: vec![0; ids.len()], ids }, vector)
        })
        .collect();
    // Every text of up to 100 tokens (the `<pad>` one included) and one of 384 (offsets past
    // the buckets' 128).
    let mut picked: Vec<&(String, Encoded, Vec<f32>)> = cases.iter().filter(|c| c.1.ids.len() <= 100).collect();
    picked.extend(cases.iter().find(|c| c.1.ids.len() == 384));
    assert!(picked.iter().any(|c| c.1.ids.len() == 384) && picked.iter().any(|c| c.1.ids.contains(&1)) && picked.len() >= 40, "the picked cases cover long offsets and a literal <pad>");
    let device = gauge_tensor::device::cpu();
    let (model, params) = TrainableBert::load(&dir, EMBEDDER, lora(16), 0, &device).unwrap();
    let batch: Vec<&Encoded> = picked.iter().map(|c| &c.1).collect();
    let got = model.infer(&params, &batch).unwrap();
    let mut worst = 0f32;
    for (c, v) in picked.iter().zip(&got) {
        let abs = v.iter().zip(&c.2).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(gauge_test_support::cosine(v, &c.2) >= 0.99999 && abs <= 1e-5, "{:?}: max |Δ| {abs} against sentence-transformers", c.0);
        worst = worst.max(abs);
    }
    eprintln!("{} texts: largest difference from sentence-transformers {worst:.2e}", picked.len());
}
