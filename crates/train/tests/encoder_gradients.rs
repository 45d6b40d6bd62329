//! The encoder trainer against `../shared/fixtures/tiny-bert-cross-encoder` (random weights of
//! a real `BertForSequenceClassification`, PyTorch reference logits):
//! - the training forward reproduces the reference logits (and gauge's inference encoder);
//! - finite differences agree with Burn's backward pass for LoRA A and B, the pooler and the
//!   classifier (listwise and BCE reranker losses), and for the embedder's InfoNCE loss, and
//!   for a full-tuning weight and the word embeddings;
//! - an embedder adapter saved as a PEFT folder and merged by `gauge_encoder::Embedder` gives
//!   the trained network's vectors.
use std::path::PathBuf;
use std::sync::Mutex;

/// One autodiff run at a time: two test threads each running a backward pass whose matmuls
/// fan out on the shared rayon pool can deadlock in Burn's graph lock (one holds it while
/// waiting for pool workers that are blocked on it; seen once in CI). `train-lora` runs one
/// training per process, so this is a test-harness hazard only.
static AUTODIFF: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    AUTODIFF.lock().unwrap_or_else(|e| e.into_inner())
}

use gauge_encoder::{Embedder, EmbedderOptions, ModelSource, Pooling};
use gauge_train::retriever::bert::{EncoderParams, EncoderTask, Encoded, TrainableBert, Tuning};
use gauge_train::generator::model::TrainKernels;
use gauge_train::retriever::{step_loss, RerankLoss, RetrieverConfig, StepBatch};

fn fixture() -> PathBuf {
    gauge_test_support::shared_path("fixtures/tiny-bert-cross-encoder")
}

fn reference() -> Vec<(Encoded, f32)> {
    let text = std::fs::read_to_string(fixture().join("reference.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = v["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            let types = v["token_type_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            (Encoded { ids, types }, v["logit"].as_f64().unwrap() as f32)
        })
        .collect()
}

fn lora(r: usize) -> Tuning {
    Tuning::Lora { r, alpha: 2.0 * r as f64, rslora: false, targets: (0..6).collect() }
}

/// Gives every LoRA B small seeded values (a fresh adapter has B = 0, so A gets no gradient).
fn perturb_b(p: &mut EncoderParams) {
    let mut rng = gauge_core::rng::SplitMix64::new(7);
    for (name, v) in p.names.clone().iter().zip(p.values.iter_mut()) {
        if name.ends_with("lora_B.weight") {
            for x in v.iter_mut() {
                *x = ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 0.2 - 0.1) as f32;
            }
        }
    }
}

/// The absolute part of the finite-difference tolerance. The loss is f32 (≈ 0.5–1.5, one ulp
/// ≈ 6e-8–1.2e-7), so a central difference with eps 1e-2 resolves gradients in steps of
/// ≈ 3e-6–6e-6 and its cancellation noise, measured on every coordinate checked here (the
/// test prints each pair), reaches 1.9e-5 on gradients of 1e-5–1e-4 and 6e-5 on the largest
/// (0.07, covered by the 3 % relative part). 5e-5 is ≈ 2.5× the largest noise on a small
/// gradient; the old floor of 1e-3 passed a 50 % error on any gradient below 2e-3.
const ABS_FLOOR: f64 = 5e-5;

/// Central differences on `coords` (parameter name, flat index) against the analytic gradient.
fn check(model: &TrainableBert, params: &EncoderParams, batch: &StepBatch, cfg: &RetrieverConfig, coords: &[(&str, usize)]) {
    let (_, grads) = step_loss(model, params, batch, cfg, true).unwrap();
    let grads = grads.unwrap();
    let trainable = params.trainable_indices();
    for &(name, k) in coords {
        let i = params.index(name).unwrap_or_else(|| panic!("no parameter {name}"));
        let g = trainable.iter().position(|&t| t == i).unwrap_or_else(|| panic!("{name} is not trainable"));
        let analytic = grads[g][k] as f64;
        let eps = 1e-2f32;
        let mut p = params.clone();
        p.values[i][k] += eps;
        let up = step_loss(model, &p, batch, cfg, false).unwrap().0;
        p.values[i][k] -= 2.0 * eps;
        let down = step_loss(model, &p, batch, cfg, false).unwrap().0;
        let numeric = (up - down) / (2.0 * eps as f64);
        eprintln!("{name}[{k}]: finite difference {numeric:.6e}, backward {analytic:.6e}, |Δ| {:.2e}", (numeric - analytic).abs());
        assert!((numeric - analytic).abs() <= ABS_FLOOR + 3e-2 * analytic.abs(), "{name}[{k}]: finite difference {numeric:.6e}, backward {analytic:.6e}");
        assert!(analytic.abs() > 1e-6 || numeric.abs() < 1e-5, "{name}[{k}]: zero backward gradient but finite difference {numeric:.3e}");
    }
}

#[test]
fn training_forward_matches_the_reference_logits() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let (mut model, params) = TrainableBert::load(&fixture(), EncoderTask::CrossEncoder, lora(4), 0, &device).unwrap();
    assert_eq!(model.kernels(), TrainKernels::Host, "the CPU default is the host kernels");
    let refs = reference();
    let batch: Vec<&Encoded> = refs.iter().map(|(e, _)| e).collect();
    for kernels in [TrainKernels::Host, TrainKernels::Burn] {
        model.set_kernels(kernels).unwrap();
        let logits = model.infer(&params, &batch).unwrap();
        for ((_, want), got) in refs.iter().zip(&logits) {
            assert!((got[0] - want).abs() <= 1e-4, "{kernels:?}: logit {} vs reference {want}", got[0]);
        }
    }
}

/// A teacher's margins `t(p⁺) − t(n)` for two groups of three pairs (0 for each positive).
const MARGINS: [f32; 6] = [0.0, 0.8, 1.5, 0.0, -0.3, 0.4];

#[test]
fn margin_mse_by_hand_and_without_a_teacher() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let (model, params) = TrainableBert::load(&fixture(), EncoderTask::CrossEncoder, lora(2), 3, &device).unwrap();
    let pairs: Vec<Encoded> = reference().iter().take(6).map(|(e, _)| e.clone()).collect();
    let batch: Vec<&Encoded> = pairs.iter().collect();
    let s: Vec<f32> = model.infer(&params, &batch).unwrap().iter().map(|l| l[0]).collect();
    // Σ over the four negatives of ((s₀ − s_j) − m_j)², divided by 2 groups × 2 negatives.
    let want: f64 = [(0, 1), (0, 2), (3, 4), (3, 5)].iter().map(|&(p, j)| (((s[p] - s[j]) - MARGINS[j]) as f64).powi(2)).sum::<f64>() / 4.0;
    let cfg = RetrieverConfig { loss: RerankLoss::MarginMse, ..Default::default() };
    let got = step_loss(&model, &params, &StepBatch::Pairs { pairs: pairs.clone(), group: 3, margins: MARGINS.to_vec() }, &cfg, false).unwrap().0;
    assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    let err = step_loss(&model, &params, &StepBatch::Pairs { pairs, group: 3, margins: Vec::new() }, &cfg, false).unwrap_err().to_string();
    assert!(err.contains("retriever.teacher"), "{err}");
}

/// The host kernels against Burn's autodiff: the loss and every trainable tensor's gradient
/// (each within 2e-4 of the Burn gradient's norm plus the step's largest; measured ≤ 1e-2 of
/// its own norm on gradients 100× smaller than the largest, ≤ 1e-3 on the rest), for the reranker (listwise and BCE, LoRA
/// with the new head), the embedder with mean and CLS pooling (LoRA) and full tuning (every
/// weight, LayerNorm and embedding table) — sequences of different lengths in one step, so
/// Burn pads and masks while the host runs each at its own length.
#[test]
fn host_kernels_give_burns_loss_and_every_gradient() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let refs = reference();
    let pairs: Vec<Encoded> = refs.iter().take(6).map(|(e, _)| e.clone()).collect();
    let queries: Vec<Encoded> = refs.iter().take(3).map(|(e, _)| Encoded { ids: e.ids[..e.ids.len().min(10)].to_vec(), types: vec![0; e.ids.len().min(10)] }).collect();
    let passages: Vec<Encoded> = refs.iter().skip(1).take(5).map(|(e, _)| Encoded { ids: e.ids.clone(), types: vec![0; e.ids.len()] }).collect();
    assert!(passages.iter().any(|p| p.ids.len() != passages[0].ids.len()), "the fixture's pairs differ in length");
    let contrastive = StepBatch::Contrastive { queries, passages, masked: vec![vec![2], vec![], vec![]] };
    let mean = EncoderTask::Embedder { pooling: Pooling::Mean, normalize: true };
    let cls = EncoderTask::Embedder { pooling: Pooling::Cls, normalize: false };
    let cases: Vec<(&str, EncoderTask, Tuning, StepBatch, RetrieverConfig)> = vec![
        ("reranker listwise", EncoderTask::CrossEncoder, lora(2), StepBatch::Pairs { pairs: pairs.clone(), group: 3, margins: Vec::new() }, RetrieverConfig::default()),
        ("reranker bce", EncoderTask::CrossEncoder, lora(2), StepBatch::Pairs { pairs: pairs.clone(), group: 3, margins: Vec::new() }, RetrieverConfig { loss: RerankLoss::Bce, ..Default::default() }),
        ("reranker margin-mse", EncoderTask::CrossEncoder, lora(2), StepBatch::Pairs { pairs, group: 3, margins: MARGINS.to_vec() }, RetrieverConfig { loss: RerankLoss::MarginMse, ..Default::default() }),
        ("embedder mean lora", mean, lora(2), contrastive.clone(), RetrieverConfig { temperature: 0.1, ..Default::default() }),
        ("embedder cls lora", cls, lora(2), contrastive.clone(), RetrieverConfig { temperature: 0.1, ..Default::default() }),
        ("embedder full", mean, Tuning::Full, contrastive, RetrieverConfig { temperature: 0.1, ..Default::default() }),
    ];
    for (name, task, tuning, batch, cfg) in cases {
        let (mut model, mut params) = TrainableBert::load(&fixture(), task, tuning, 9, &device).unwrap();
        perturb_b(&mut params);
        let (loss_host, grads_host) = step_loss(&model, &params, &batch, &cfg, true).unwrap();
        let eval_host = step_loss(&model, &params, &batch, &cfg, false).unwrap().0;
        model.set_kernels(TrainKernels::Burn).unwrap();
        let (loss_burn, grads_burn) = step_loss(&model, &params, &batch, &cfg, true).unwrap();
        assert!((loss_host - loss_burn).abs() <= 1e-5 * loss_burn.abs().max(1.0), "{name}: host loss {loss_host} vs Burn {loss_burn}");
        assert!((eval_host - loss_burn).abs() <= 1e-5 * loss_burn.abs().max(1.0), "{name}: host evaluation loss {eval_host} vs Burn {loss_burn}");
        let (gh, gb) = (grads_host.unwrap(), grads_burn.unwrap());
        assert_eq!(gh.len(), gb.len());
        // f32 summation-order noise: tensors whose gradient is tiny next to the step's largest
        // (e.g. a key bias, exactly zero in exact arithmetic) are held to that scale.
        let norms: Vec<f64> = gb.iter().map(|b| b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt()).collect();
        let largest = norms.iter().copied().fold(0.0, f64::max);
        let mut nonzero = 0;
        for (((&i, h), b), &norm) in params.trainable_indices().iter().zip(&gh).zip(&gb).zip(&norms) {
            let diff = h.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
            assert!(diff <= 2e-4 * (norm + largest), "{name}: {} gradient differs by {diff:.3e} (Burn's norm {norm:.3e}, largest {largest:.3e})", params.names[i]);
            nonzero += usize::from(norm > 1e-6 * largest);
        }
        assert!(nonzero * 10 >= gh.len() * 9, "{name}: only {nonzero} of {} gradients are non-zero", gh.len());
        eprintln!("{name}: loss {loss_host:.6} (Burn {loss_burn:.6}), {} gradients agree", gh.len());
    }
}

#[test]
fn reranker_gradients_match_finite_differences() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let (model, mut params) = TrainableBert::load(&fixture(), EncoderTask::CrossEncoder, lora(2), 3, &device).unwrap();
    perturb_b(&mut params);
    let refs = reference();
    // Two groups of three pairs (positive first).
    let pairs: Vec<Encoded> = refs.iter().take(6).map(|(e, _)| e.clone()).collect();
    assert_eq!(pairs.len(), 6, "the fixture has at least six pairs");
    let batch = StepBatch::Pairs { pairs, group: 3, margins: MARGINS.to_vec() };
    let coords = [
        ("encoder.layer.0.attention.self.query.lora_A.weight", 5),
        ("encoder.layer.0.attention.self.value.lora_B.weight", 3),
        ("encoder.layer.1.intermediate.dense.lora_A.weight", 17),
        ("encoder.layer.1.output.dense.lora_B.weight", 9),
        ("encoder.layer.1.attention.output.dense.lora_A.weight", 30),
        ("pooler.dense.weight", 40),
        ("pooler.dense.bias", 2),
        ("classifier.weight", 7),
        ("classifier.bias", 0),
    ];
    for loss in [RerankLoss::Listwise, RerankLoss::Bce, RerankLoss::MarginMse] {
        let cfg = RetrieverConfig { loss, ..Default::default() };
        check(&model, &params, &batch, &cfg, &coords);
    }
    // The frozen base gets no gradient slot.
    assert!(!params.trainable[params.index("encoder.layer.0.attention.self.query.weight").unwrap()]);
}

#[test]
fn embedder_contrastive_gradients_match_finite_differences_lora_and_full() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let refs = reference();
    let queries: Vec<Encoded> = refs.iter().take(3).map(|(e, _)| Encoded { ids: e.ids[..e.ids.len().min(10)].to_vec(), types: vec![0; e.ids.len().min(10)] }).collect();
    let passages: Vec<Encoded> = refs.iter().skip(1).take(5).map(|(e, _)| Encoded { ids: e.ids.clone(), types: vec![0; e.ids.len()] }).collect();
    // Query 0 must not count passage 2 (say, a positive sharing its page) as a negative.
    let batch = StepBatch::Contrastive { queries, passages, masked: vec![vec![2], vec![], vec![]] };
    let cfg = RetrieverConfig { temperature: 0.1, ..Default::default() };
    let task = EncoderTask::Embedder { pooling: Pooling::Mean, normalize: true };
    let (model, mut params) = TrainableBert::load(&fixture(), task, lora(2), 5, &device).unwrap();
    perturb_b(&mut params);
    check(&model, &params, &batch, &cfg, &[("encoder.layer.0.attention.self.key.lora_A.weight", 11), ("encoder.layer.1.attention.self.query.lora_B.weight", 4), ("encoder.layer.0.output.dense.lora_A.weight", 50)]);
    let (full, params) = TrainableBert::load(&fixture(), task, Tuning::Full, 5, &device).unwrap();
    let word = params.index("embeddings.word_embeddings.weight").unwrap();
    let id = reference()[0].0.ids[3] as usize;
    let h = full.config.hidden_size;
    check(&full, &params, &batch, &cfg, &[("encoder.layer.1.attention.self.value.weight", 12), ("encoder.layer.0.output.LayerNorm.weight", 3), ("embeddings.word_embeddings.weight", id * h + 1)]);
    assert!(params.trainable[word]);
}

#[test]
fn embedder_adapter_round_trip_gives_the_trained_vectors() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let task = EncoderTask::Embedder { pooling: Pooling::Mean, normalize: true };
    let (model, mut params) = TrainableBert::load(&fixture(), task, lora(4), 1, &device).unwrap();
    perturb_b(&mut params);
    let dir = tempfile::tempdir().unwrap();
    let adapter = model.adapter(&params, Some("tiny".into())).unwrap();
    adapter.save(dir.path()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(json["task_type"], "FEATURE_EXTRACTION");
    assert_eq!(json["target_modules"], serde_json::json!(["query", "key", "value", "dense"]));
    let back = gauge_tensor::adapter::LoraAdapter::load(dir.path()).unwrap();
    assert_eq!(back, adapter);
    assert!(back.modules.contains_key("encoder.layer.1.attention.output.dense"));

    let source = ModelSource { id: "tiny".into(), dir: fixture() };
    let options = EmbedderOptions { pooling: Some(Pooling::Mean), normalize: Some(true), adapter: Some(dir.path().to_path_buf()), ..Default::default() };
    let embedder = Embedder::load(&source, &options, &device).unwrap();
    assert!(embedder.info.adapter_hash.is_some());
    let plain = Embedder::load(&source, &EmbedderOptions { pooling: Some(Pooling::Mean), normalize: Some(true), ..Default::default() }, &device).unwrap();
    let texts = ["Crossing gate arms must be fully lowered.", "A leaking tank car may be moved to the nearest repair point."];
    let got = embedder.embed_texts(&texts).unwrap();
    let without = plain.embed_texts(&texts).unwrap();
    let ids = embedder.tokenize(&texts).unwrap();
    let enc: Vec<Encoded> = ids.iter().map(|i| Encoded { ids: i.clone(), types: vec![0; i.len()] }).collect();
    let want = model.infer(&params, &enc.iter().collect::<Vec<_>>()).unwrap();
    for ((g, w), base) in got.iter().zip(&want).zip(&without) {
        let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "merged-adapter vector differs from the trained network's by {worst}");
        let moved = g.iter().zip(base).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved > 1e-3, "the adapter did not change the vector ({moved})");
    }
    // An adapter for another base is refused with the module named.
    let mut wrong = adapter.clone();
    let pair = wrong.modules.remove("encoder.layer.0.attention.self.query").unwrap();
    wrong.modules.insert("encoder.layer.7.attention.self.query".into(), pair);
    let other = tempfile::tempdir().unwrap();
    wrong.save(other.path()).unwrap();
    let err = Embedder::load(&source, &EmbedderOptions { adapter: Some(other.path().to_path_buf()), ..Default::default() }, &device).err().unwrap().to_string();
    assert!(err.contains("encoder.layer.7.attention.self.query") && err.contains("another base"), "{err}");
}

#[test]
fn saved_cross_encoder_and_full_embedder_give_the_trained_outputs() {
    let _serial = one_at_a_time();
    let device = gauge_tensor::device::cpu();
    let refs = reference();
    let pairs: Vec<&Encoded> = refs.iter().map(|(e, _)| e).collect();
    // A reranker with LoRA moved away from zero and a changed head, saved as a model folder.
    let (model, mut params) = TrainableBert::load(&fixture(), EncoderTask::CrossEncoder, lora(4), 2, &device).unwrap();
    perturb_b(&mut params);
    let c = params.index("classifier.weight").unwrap();
    params.values[c].iter_mut().enumerate().for_each(|(i, w)| *w += 0.05 * (i as f32).sin());
    let want = model.infer(&params, &pairs).unwrap();
    let dir = tempfile::tempdir().unwrap();
    gauge_train::retriever::save_model(&model, &params, &fixture(), dir.path()).unwrap();
    let ce = gauge_encoder::CrossEncoder::load(&ModelSource { id: "saved".into(), dir: dir.path().to_path_buf() }, &gauge_encoder::CrossEncoderOptions::default(), &device).unwrap();
    let got = ce.logits(&refs.iter().map(|(e, _)| gauge_encoder::PairEncoding { ids: e.ids.clone(), types: e.types.clone() }).collect::<Vec<_>>());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w[0]).abs() < 1e-4, "saved cross-encoder logit {g} vs trained {}", w[0]);
    }
    assert!(got.iter().zip(&refs).any(|(g, (_, r))| (g - r).abs() > 1e-3), "the saved model did not change");
    // A fully tuned embedder saved as a model folder embeds like the trained network.
    let task = EncoderTask::Embedder { pooling: Pooling::Mean, normalize: true };
    let (full, mut fp) = TrainableBert::load(&fixture(), task, Tuning::Full, 2, &device).unwrap();
    let w = fp.index("encoder.layer.0.attention.self.query.weight").unwrap();
    fp.values[w].iter_mut().enumerate().for_each(|(i, x)| *x += 0.02 * (i as f32).cos());
    let dir = tempfile::tempdir().unwrap();
    gauge_train::retriever::save_model(&full, &fp, &fixture(), dir.path()).unwrap();
    let embedder = Embedder::load(&ModelSource { id: "saved".into(), dir: dir.path().to_path_buf() }, &EmbedderOptions { pooling: Some(Pooling::Mean), normalize: Some(true), ..Default::default() }, &device).unwrap();
    let texts = ["Crossing gate arms must be fully lowered."];
    let ids = embedder.tokenize(&texts).unwrap();
    let enc = Encoded { ids: ids[0].clone(), types: vec![0; ids[0].len()] };
    let want = full.infer(&fp, &[&enc]).unwrap();
    let got = embedder.embed_texts(&texts).unwrap();
    let worst = got[0].iter().zip(&want[0]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-5, "saved full embedder differs by {worst}");
}
