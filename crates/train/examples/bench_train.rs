//! Training speed of `train-lora`'s step (forward, head, layer-wise recomputation and backward,
//! AdamW) on a GGUF base with LoRA r 16 on all seven projections, sequences of `SEQ` tokens,
//! `BATCH` sequences per step, every position a target; the machine's peak measured the same
//! way as `bench_generate` (the `bench-train` recipe adds llama.cpp's prefill on the same GGUF
//! and length as the reference).
//! Usage: `bench_train MODEL SEQ BATCH STEPS OUT_JSON [--device cpu|cuda] [--check-dir DIR]
//! [--checkpointing auto|layers|none|every_n] [--checkpoint-layers N] [--max-memory-mib N]`
//! (MODEL: a GGUF file or a Hugging Face folder; `--check-dir`: also save the trained adapter
//! as DIR/adapter and the last-position logits of the first sequence's first 64 tokens with
//! base + adapter and with the base alone — the decoder, f32 base, on the CPU — as DIR/logits.json, for
//! `scripts/gpu-check.sh` to compare with PEFT).
//!
//! `bench_train side MODEL SEQ BATCH STEPS [--base auto|f32|nf4] [--checkpointing X]` is one run
//! of the `bench-train` harness (`gauge-bench`): STEPS timed steps after an untimed first one,
//! printed as `{"figures": …}` — tokens/s, the first step's loss (the base's: LoRA B starts at
//! zero), resident memory after the model's load (the baseline), its peak, and the peak above
//! the baseline — against `scripts/gpu_check.py peft-side` on the same folder and token ids.
use std::time::Instant;

use gauge_decoder::ModelFiles;
use gauge_train::generator::model::{LoraShape, Sequence, TrainableLlama};
use gauge_train::optim::{clip_global_norm, AdamWConfig, AdamWState};
use gauge_train::BaseStorage;

fn main() -> anyhow::Result<()> {
    main_with(std::env::args().collect())
}

/// The example's body on an argument list (program name first): also the `train` subcommand of
/// `gauge-gpu-check`, the GPU bundle's one binary.
pub fn main_with(args: Vec<String>) -> anyhow::Result<()> {
    if args.get(1).map(String::as_str) == Some("side") {
        return side(&args[2..]);
    }
    let usage = "usage: bench_train MODEL SEQ BATCH STEPS OUT_JSON [--device cpu|cuda] [--check-dir DIR] [--checkpointing auto|layers|none|every_n] [--checkpoint-layers N] [--max-memory-mib N]";
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let device_name = flag("--device").unwrap_or_else(|| "cpu".into());
    let device = gauge_tensor::device::parse(&device_name)?;
    let check_dir = flag("--check-dir").map(std::path::PathBuf::from);
    let model_path = args.get(1).expect(usage);
    let seq: usize = args.get(2).expect(usage).parse()?;
    let batch: usize = args.get(3).expect(usage).parse()?;
    let steps: usize = args.get(4).expect(usage).parse()?;
    let out = args.get(5).expect(usage);
    let files = ModelFiles::open(model_path, false)?;
    let c = files.config.clone();
    let mut model = TrainableLlama::load(c.clone(), &files.checkpoint, BaseStorage::Auto, &device)?;
    drop(files);
    let shape = LoraShape { r: 16, alpha: 16.0, rslora: false, targets: (0..7).collect() };
    let mut params = model.init_lora(shape, 0);
    // Token ids spread over the vocabulary (content does not change the arithmetic).
    let seqs: Vec<Sequence> = (0..batch).map(|b| Sequence { ids: (0..seq).map(|i| ((i * 7919 + b * 104_729) % (c.vocab_size - 1)) as u32 + 1).collect(), target: vec![true; seq - 1] }).collect();
    // Which activations the step keeps, chosen as train-lora chooses (`--checkpointing`,
    // `--max-memory-mib`; defaults: train-lora's).
    let mut tc = gauge_train::TrainConfig { batch_size: batch, ..Default::default() };
    if let Some(v) = flag("--checkpointing") {
        tc.checkpointing = serde_json::from_value(serde_json::Value::String(v))?;
    }
    if let Some(v) = flag("--checkpoint-layers") {
        tc.checkpoint_layers = v.parse()?;
    }
    if let Some(v) = flag("--max-memory-mib") {
        tc.max_memory_mib = v.parse()?;
    }
    let plan = gauge_train::generator::train::plan_checkpointing(&mut model, &tc, &seqs, params.count())?;
    let n_targets: usize = seqs.iter().map(Sequence::n_targets).sum();
    let lens: Vec<usize> = params.tensors().iter().map(|t| t.len()).collect();
    let mut adam = AdamWState::new(&lens);
    let cfg = AdamWConfig::default();
    let mut times = Vec::new();
    for step in 0..steps + 1 {
        let t = Instant::now();
        let mut grads = params.zeros_like();
        model.accumulate_gradients(&params, &seqs, 1.0 / n_targets as f64, None, &mut grads)?;
        clip_global_norm(&mut grads, 1.0);
        adam.step(&cfg, 1e-3, &mut params.tensors_mut(), &grads);
        if step > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
        eprintln!("step {step}: {:.2} s", t.elapsed().as_secs_f64());
    }
    let secs = times.iter().sum::<f64>() / times.len() as f64;
    let tokens_per_s = (seq * batch) as f64 / secs;
    // FLOPs per trained token. Projections: P multiply-adds per token; attention: QKᵀ and AV,
    // 2·T·(heads·head_dim) multiply-adds per token on average over a causal sequence of T (half
    // the T² pairs, two products); head: V·h per target. "Useful" = forward + backward through
    // the activations (2 + 2 FLOPs per multiply-add; the frozen base needs no weight gradients),
    // plus the LoRA weight gradients; "executed" adds the recomputed forward.
    let proj: f64 = (0..7).map(|p| { let (i, o) = model.projection_dims(p); (i * o) as f64 }).sum::<f64>() * c.num_hidden_layers as f64;
    let attn = 2.0 * (seq as f64 / 2.0) * (c.num_attention_heads * c.head_dim()) as f64 * c.num_hidden_layers as f64;
    let head = (c.vocab_size * c.hidden_size) as f64;
    let lora: f64 = (0..7).map(|p| { let (i, o) = model.projection_dims(p); (16 * (i + o)) as f64 }).sum::<f64>() * c.num_hidden_layers as f64;
    let fwd = 2.0 * (proj + attn + lora) + 2.0 * head;
    let useful = 2.0 * fwd + 2.0 * lora;
    // Executed: the recomputed layers' forward again; on the host kernels also each head's
    // scores `q kᵀ` rebuilt in the backward pass (half of `attn`) and the head in one pass.
    let host = model.kernels() == gauge_train::generator::model::TrainKernels::Host;
    let layers = c.num_hidden_layers as f64;
    let recomputed = if host { (model.n_layers() - model.recompute_group().min(model.n_layers())) as f64 } else { layers };
    let executed = useful + 2.0 * (proj + attn + lora) * recomputed / layers + if host { attn } else { 2.0 * head };
    let (peak, peak_how) = gauge_core::machine::peak_f32_flops();
    let (base_bytes, kinds) = model.base_bytes();
    let rss = gauge_train::run::peak_rss_mib();
    let trainable = params.count() as f64;
    if let Some(dir) = &check_dir {
        let adapter_dir = dir.join("adapter");
        params.to_adapter(0.0, Some(model_path.clone())).save(&adapter_dir)?;
        let ids: Vec<u32> = seqs[0].ids.iter().take(64).copied().collect();
        let last_logits = |adapter: Option<std::path::PathBuf>| -> anyhow::Result<Vec<f32>> {
            let lm = gauge_decoder::LanguageModel::load_with(model_path, &gauge_tensor::device::cpu(), &gauge_decoder::LoadOptions { adapter, ..Default::default() })?;
            Ok(lm.model.forward(&ids, &mut lm.model.new_cache())?)
        };
        let tuned = last_logits(Some(adapter_dir))?;
        let base = last_logits(None)?;
        std::fs::write(dir.join("logits.json"), serde_json::to_string(&serde_json::json!({"input_ids": ids, "last_logits": tuned, "base_last_logits": base}))?)?;
    }
    let result = serde_json::json!({
        "model": model_path, "device": device_name, "sequence_tokens": seq, "sequences_per_step": batch, "steps_timed": times.len(),
        "threads": rayon::current_num_threads(), "lora": {"r": 16, "alpha": 16, "targets": "all seven projections", "trainable_parameters": trainable},
        "kernels": format!("{:?}", model.kernels()).to_lowercase(), "checkpointing": plan.setting, "recompute_group": model.recompute_group(),
        "seconds_per_step": secs, "tokens_per_s": tokens_per_s,
        "flops_per_token_useful": useful, "flops_per_token_executed": executed,
        "useful_flops_per_s": tokens_per_s * useful, "share_of_peak_useful": tokens_per_s * useful / peak, "share_of_peak_executed": tokens_per_s * executed / peak,
        "machine": {"peak_f32_flops": peak, "peak_how": peak_how},
        "memory": {"peak_rss_mib": rss, "peak_estimate_mib": plan.estimate_mib, "max_memory_mib": tc.max_memory_mib, "base_bytes_held": base_bytes, "base_storage": kinds, "largest_layer_f32_bytes": model.layer_f32_bytes(),
                   "adapter_and_adamw_bytes": trainable * 16.0},
    });
    std::fs::write(out, serde_json::to_string_pretty(&result)? + "\n")?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    Ok(())
}

/// Resident memory now, MiB (/proc/self/statm).
fn current_rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// One harness run (see the module docs).
fn side(args: &[String]) -> anyhow::Result<()> {
    let usage = "usage: bench_train side MODEL SEQ BATCH STEPS [--base auto|f32|nf4] [--checkpointing X]";
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let arg = |i: usize| args.get(i).ok_or_else(|| anyhow::anyhow!(usage));
    let (model_path, seq, batch, steps): (&String, usize, usize, usize) = (arg(0)?, arg(1)?.parse()?, arg(2)?.parse()?, arg(3)?.parse()?);
    let storage = match flag("--base").as_deref() {
        None | Some("auto") => BaseStorage::Auto,
        Some("f32") => BaseStorage::F32,
        Some("nf4") => BaseStorage::Nf4,
        Some(other) => anyhow::bail!("--base {other}: auto, f32 or nf4"),
    };
    let device = gauge_tensor::device::cpu();
    let files = ModelFiles::open(model_path, false)?;
    let c = files.config.clone();
    let mut model = TrainableLlama::load(c.clone(), &files.checkpoint, storage, &device)?;
    drop(files);
    let mut params = model.init_lora(LoraShape { r: 16, alpha: 16.0, rslora: false, targets: (0..7).collect() }, 0);
    let seqs: Vec<Sequence> = (0..batch).map(|b| Sequence { ids: (0..seq).map(|i| ((i * 7919 + b * 104_729) % (c.vocab_size - 1)) as u32 + 1).collect(), target: vec![true; seq - 1] }).collect();
    let mut tc = gauge_train::TrainConfig { batch_size: batch, ..Default::default() };
    if let Some(v) = flag("--checkpointing") {
        tc.checkpointing = serde_json::from_value(serde_json::Value::String(v))?;
    }
    let plan = gauge_train::generator::train::plan_checkpointing(&mut model, &tc, &seqs, params.count())?;
    let n_targets: usize = seqs.iter().map(Sequence::n_targets).sum();
    let lens: Vec<usize> = params.tensors().iter().map(|t| t.len()).collect();
    let mut adam = AdamWState::new(&lens);
    let cfg = AdamWConfig::default();
    let baseline = current_rss_mib();
    let (mut times, mut first) = (Vec::new(), f64::NAN);
    for step in 0..steps + 1 {
        let t = Instant::now();
        let mut grads = params.zeros_like();
        let loss = model.accumulate_gradients(&params, &seqs, 1.0 / n_targets as f64, None, &mut grads)?;
        clip_global_norm(&mut grads, 1.0);
        adam.step(&cfg, 1e-3, &mut params.tensors_mut(), &grads);
        if step == 0 {
            first = loss / n_targets as f64;
        } else {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    let secs = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let peak = gauge_train::run::peak_rss_mib().unwrap_or(f64::NAN);
    let figures: std::collections::BTreeMap<String, f64> = [
        ("tokens_per_s", (seq * batch) as f64 / secs),
        ("seconds_per_step", secs),
        ("first_step_loss", first),
        ("baseline_rss_mib", baseline),
        ("peak_rss_mib", peak),
        ("above_baseline_mib", peak - baseline),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let (base_bytes, kinds) = model.base_bytes();
    gauge_bench::side::emit(&figures, serde_json::json!({
        "kernels": format!("{:?}", model.kernels()).to_lowercase(), "checkpointing": plan.setting, "base_storage": kinds, "base_bytes_held": base_bytes,
        "threads": rayon::current_num_threads(), "trainable_parameters": params.count(),
    }));
    Ok(())
}
