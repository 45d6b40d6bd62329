//! The optimisation loop both trainers share (the decoder's adapters and the retrievers):
//! seeded example order per epoch, warm-up + decay schedule, global-norm clipping, PyTorch's
//! AdamW, the loss curve, held-out evaluation every N steps, a progress bar, checkpoints every
//! N steps and resume from the last one, and `--stop-after` for tests of the resume.
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use crate::curve::CurvePoint;
use crate::optim::{clip_global_norm, learning_rate, AdamWState};
use crate::run::{TrainConfig, TrainOptions, TrainSummary};

/// Training progress kept in a checkpoint besides the parameters.
pub struct Progress {
    /// Optimiser steps done.
    pub step: u64,
    /// AdamW's moments.
    pub adam: AdamWState,
    /// The loss curve so far (train points every step, dev points at evaluations).
    pub curve: Vec<CurvePoint>,
    /// Seconds spent in training steps (evaluation excluded), over every session of the run.
    pub seconds: f64,
    /// Tokens trained on, over every session of the run.
    pub tokens: u64,
}

pub(crate) const CHECKPOINT: &str = "checkpoint.safetensors";

/// Writes the trained tensors, the AdamW moments and the progress to `dir/checkpoint.safetensors`
/// (through a temporary file, so a kill leaves the previous checkpoint whole).
pub(crate) fn save_checkpoint(dir: &Path, tensors: &[&[f32]], c: &Progress) -> anyhow::Result<()> {
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut blobs: Vec<(String, Vec<u8>, usize)> = Vec::new();
    for (k, t) in tensors.iter().enumerate() {
        blobs.push((format!("p.{k}"), bytes(t), t.len()));
        blobs.push((format!("m.{k}"), bytes(&c.adam.m[k]), t.len()));
        blobs.push((format!("v.{k}"), bytes(&c.adam.v[k]), t.len()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = blobs.iter().map(|(k, b, n)| (k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![*n], b).expect("sizes match"))).collect();
    let meta = serde_json::json!({"step": c.step, "adam_step": c.adam.step, "curve": c.curve, "seconds": c.seconds, "tokens": c.tokens});
    let data = safetensors::serialize(views, Some(HashMap::from([("state".to_string(), meta.to_string())])))?;
    let tmp = dir.join(format!(".{CHECKPOINT}.tmp"));
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(CHECKPOINT))?;
    Ok(())
}

/// Reads a checkpoint into `tensors` (which must have the saved sizes); `None` when there is none.
pub(crate) fn load_checkpoint(dir: &Path, tensors: &mut [&mut Vec<f32>]) -> anyhow::Result<Option<Progress>> {
    let path = dir.join(CHECKPOINT);
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path)?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)?;
    let meta: serde_json::Value = serde_json::from_str(header.metadata().as_ref().and_then(|m| m.get("state")).ok_or_else(|| anyhow::anyhow!("{}: no training state; delete it to start over", path.display()))?)?;
    let st = safetensors::SafeTensors::deserialize(&bytes)?;
    let read = |k: String| -> anyhow::Result<Vec<f32>> { Ok(st.tensor(&k).map_err(|e| anyhow::anyhow!("{}: {k}: {e}; delete it to start over", path.display()))?.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()) };
    let n = tensors.len();
    let (mut m, mut v) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (k, t) in tensors.iter_mut().enumerate() {
        let p = read(format!("p.{k}"))?;
        anyhow::ensure!(p.len() == t.len(), "{}: tensor {k} has {} values, the model {}; delete it to start over", path.display(), p.len(), t.len());
        **t = p;
        m.push(read(format!("m.{k}"))?);
        v.push(read(format!("v.{k}"))?);
    }
    // Weights without their step would resume a trained adapter at step 0 (its schedule and
    // data order restarted): a checkpoint missing either is refused.
    let count = |k: &str| meta[k].as_u64().ok_or_else(|| anyhow::anyhow!("{}: the training state has no `{k}`; delete it to start over", path.display()));
    let adam = AdamWState { step: count("adam_step")?, m, v };
    Ok(Some(Progress { step: count("step")?, adam, curve: serde_json::from_value(meta["curve"].clone())?, seconds: meta["seconds"].as_f64().unwrap_or(0.0), tokens: meta["tokens"].as_u64().unwrap_or(0) }))
}

/// Seeded order of epoch `epoch`.
pub(crate) fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    gauge_core::rng::SplitMix64::new(seed ^ 0x5EED_0000 ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)).shuffle(&mut order);
    order
}

/// What one optimiser step computed, before clipping and the update.
pub struct StepOut {
    /// Mean loss of the step (what the curve shows).
    pub loss: f64,
    /// One gradient per trainable tensor, in [`Trainee::params`]'s order.
    pub grads: Vec<Vec<f32>>,
    /// Tokens the step ran through (for tokens/s).
    pub tokens: usize,
    /// What the loss averages over (target tokens, or questions), recorded in the curve.
    pub targets: u64,
}

/// A model under training, as the shared loop sees it.
pub trait Trainee {
    /// Loss and gradients for the training examples `examples` (indices into the training set)
    /// at optimiser step `step` (which seeds dropout).
    fn step(&mut self, examples: &[usize], step: u64) -> anyhow::Result<StepOut>;
    /// Held-out loss and what it averages over; `None` without a held-out set.
    fn eval(&self) -> anyhow::Result<Option<(f64, u64)>>;
    /// The trainable tensors.
    fn params(&self) -> Vec<&[f32]>;
    /// The trainable tensors, to update or to fill from a checkpoint.
    fn params_mut(&mut self) -> Vec<&mut Vec<f32>>;
}

/// What [`optimise`] leaves: the progress (curve, time, tokens), the run's step count and the
/// step this session resumed from (0 for a fresh run).
pub struct Trained {
    /// Progress at the end of the schedule.
    pub progress: Progress,
    /// Optimiser steps of the whole run.
    pub steps: u64,
    /// Step the run resumed from in this session.
    pub resumed_from: u64,
}

impl Trained {
    /// The run's summary over `train_examples` examples.
    pub fn summary(&self, train_examples: usize) -> TrainSummary {
        let dev: Vec<f64> = self.progress.curve.iter().filter(|p| p.split == "dev").map(|p| p.loss).collect();
        TrainSummary {
            steps: self.steps,
            train_examples,
            dev_loss_start: dev.first().copied(),
            dev_loss_end: if dev.len() > 1 { dev.last().copied() } else { None },
            tokens_per_second: self.progress.tokens as f64 / self.progress.seconds.max(1e-9),
            resumed_from_step: self.resumed_from,
        }
    }
}

/// (steps per epoch, steps of the run) over `n_train` examples: epochs × ⌈n / window⌉, capped
/// at `max_steps`.
fn total_steps(n_train: usize, cfg: &TrainConfig) -> (u64, u64) {
    let steps_per_epoch = n_train.div_ceil(cfg.batch_size * cfg.grad_accum) as u64;
    (steps_per_epoch, (steps_per_epoch * cfg.epochs as u64).min(cfg.max_steps.unwrap_or(u64::MAX)))
}

/// Trains `model` over `n_train` examples to the end of the schedule, resuming from the
/// checkpoint in `ckpt_dir` when there is one.
pub fn optimise(model: &mut impl Trainee, n_train: usize, cfg: &TrainConfig, opts: &TrainOptions, ckpt_dir: &Path) -> anyhow::Result<Trained> {
    let window = cfg.batch_size * cfg.grad_accum;
    let (steps_per_epoch, total) = total_steps(n_train, cfg);
    let mut progress = match load_checkpoint(ckpt_dir, &mut model.params_mut())? {
        Some(p) => {
            tracing::info!("resuming from step {} of {total} ({})", p.step, ckpt_dir.join(CHECKPOINT).display());
            p
        }
        None => {
            let lens: Vec<usize> = model.params().iter().map(|t| t.len()).collect();
            Progress { step: 0, adam: AdamWState::new(&lens), curve: Vec::new(), seconds: 0.0, tokens: 0 }
        }
    };
    let resumed_from = progress.step;
    if progress.step == 0 {
        if let Some((loss, n)) = model.eval()? {
            progress.curve.push(CurvePoint { step: 0, epoch: 0.0, split: "dev".into(), loss, learning_rate: 0.0, grad_norm: 0.0, target_tokens: n, tokens_per_second: 0.0 });
            tracing::info!("held-out loss before training: {loss:.4}");
        }
    }
    let pb = gauge_core::progress::bar(total, "steps");
    pb.set_style(indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps {msg} (eta {eta})").unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    pb.set_position(progress.step);
    let (mut order_epoch, mut order, mut ran_here) = (u64::MAX, Vec::new(), 0u64);
    while progress.step < total {
        if opts.stop_after.is_some_and(|n| ran_here >= n) {
            pb.abandon();
            anyhow::bail!("stopped after {ran_here} steps as asked (--stop-after); rerun to resume from step {}", progress.step);
        }
        let step = progress.step;
        let epoch = step / steps_per_epoch;
        if epoch != order_epoch {
            order = epoch_order(n_train, cfg.seed, epoch);
            order_epoch = epoch;
        }
        let k = (step % steps_per_epoch) as usize;
        let examples = &order[k * window..((k + 1) * window).min(n_train)];
        let started = Instant::now();
        let StepOut { loss, mut grads, tokens, targets } = model.step(examples, step)?;
        let grad_norm = clip_global_norm(&mut grads, cfg.max_grad_norm);
        let lr = learning_rate(cfg.learning_rate, step, total, cfg.warmup_steps, cfg.decay);
        progress.adam.step(&cfg.adamw, lr, &mut model.params_mut(), &grads);
        let secs = started.elapsed().as_secs_f64();
        progress.seconds += secs;
        progress.tokens += tokens as u64;
        progress.step += 1;
        ran_here += 1;
        let tps = tokens as f64 / secs.max(1e-9);
        let epoch_f = progress.step as f64 / steps_per_epoch as f64;
        progress.curve.push(CurvePoint { step: progress.step, epoch: epoch_f, split: "train".into(), loss, learning_rate: lr, grad_norm, target_tokens: targets, tokens_per_second: tps });
        pb.set_message(format!("loss {loss:.3}, {tps:.0} tok/s"));
        if pb.is_hidden() {
            tracing::info!("step {}/{total}: loss {loss:.4}, lr {lr:.2e}, grad norm {grad_norm:.3}, {tps:.0} tokens/s", progress.step);
        }
        pb.set_position(progress.step);
        let last = progress.step == total;
        if last || (cfg.eval_every > 0 && progress.step % cfg.eval_every == 0) {
            if let Some((dl, n)) = model.eval()? {
                progress.curve.push(CurvePoint { step: progress.step, epoch: epoch_f, split: "dev".into(), loss: dl, learning_rate: lr, grad_norm: 0.0, target_tokens: n, tokens_per_second: 0.0 });
                tracing::info!("step {}/{total}: held-out loss {dl:.4}", progress.step);
            }
        }
        if !last && cfg.checkpoint_every > 0 && progress.step % cfg.checkpoint_every == 0 {
            save_checkpoint(ckpt_dir, &model.params(), &progress)?;
        }
    }
    pb.finish_and_clear();
    Ok(Trained { progress, steps: total, resumed_from })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_without_its_step_is_refused_not_resumed_at_zero() {
        let dir = tempfile::tempdir().unwrap();
        let weights = vec![0.5f32; 4];
        let progress = Progress { step: 7, adam: AdamWState { step: 7, m: vec![vec![0.1; 4]], v: vec![vec![0.2; 4]] }, curve: Vec::new(), seconds: 1.0, tokens: 10 };
        save_checkpoint(dir.path(), &[&weights], &progress).unwrap();
        let mut back = vec![0.0f32; 4];
        let got = load_checkpoint(dir.path(), &mut [&mut back]).unwrap().unwrap();
        assert_eq!((got.step, got.adam.step, &back), (7, 7, &weights));
        // The same file with `step` taken out of its state.
        let path = dir.path().join(CHECKPOINT);
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let mut state: serde_json::Value = serde_json::from_str(&header.metadata().as_ref().unwrap()["state"]).unwrap();
        state.as_object_mut().unwrap().remove("step");
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = st.tensors().into_iter().collect();
        let data = safetensors::serialize(views, Some(HashMap::from([("state".to_string(), state.to_string())]))).unwrap();
        std::fs::write(&path, data).unwrap();
        let e = load_checkpoint(dir.path(), &mut [&mut back]).err().expect("refused").to_string();
        assert!(e.contains("no `step`") && e.contains("delete it"), "{e}");
    }
}
