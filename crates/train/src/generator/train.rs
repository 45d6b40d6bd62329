//! Training the generator: LoRA adapters for the Llama-family decoders gauge loads, on a base
//! held in 4 bits, saved as PEFT adapter folders (`--target generator`, the default).
use std::time::Instant;

use gauge_core::artifact::StageRun;
use gauge_decoder::ModelFiles;

use crate::curve;
use crate::generator::data::{self, ReadStats};
use crate::generator::model::{target_indices, LoraParams, LoraShape, Sequence, TrainableLlama};
use crate::run::{peak_rss_mib, sample, Checkpointing, TrainingPages, TRAINING_PAGES};
use crate::run::{TrainConfig, TrainOptions, TrainSummary};
use crate::stage::TrainState;
use crate::steps::{optimise, StepOut, Trainee};
use crate::TrainError;

/// What [`plan_checkpointing`] chose.
pub struct CheckpointPlan {
    /// `layers`, `none` or `every_n (N layers)`.
    pub setting: String,
    /// The estimated peak of the process with it, MiB.
    pub estimate_mib: u64,
}

/// The name of recomputing `group` of `layers` layers at a time.
fn checkpoint_name(group: usize, layers: usize) -> String {
    match group {
        1 => "layers".into(),
        g if g >= layers => "none".into(),
        g => format!("every_n ({g} layers)"),
    }
}

/// Resolves `checkpointing` for the run's longest batch (its `batch_size` longest examples) and
/// sets it on the model; prints each setting's estimated peak first. `auto`: the setting that
/// recomputes the fewest layers (the top group is kept from the forward pass) whose estimate
/// fits `max_memory_mib`; `layers` when none does. (Public for the `bench_train` example.)
pub fn plan_checkpointing(model: &mut TrainableLlama, cfg: &TrainConfig, train: &[Sequence], trainable: usize) -> anyhow::Result<CheckpointPlan> {
    let layers = model.n_layers().max(1);
    let mut lens: Vec<(usize, usize)> = train.iter().map(|s| (s.ids.len(), s.n_targets())).collect();
    lens.sort_unstable_by(|a, b| b.cmp(a));
    lens.truncate(cfg.batch_size);
    let targets: usize = lens.iter().map(|l| l.1).sum();
    let lens: Vec<usize> = lens.iter().map(|l| l.0).collect();
    let shape = LoraShape { r: cfg.r, alpha: cfg.lora_alpha, rslora: cfg.use_rslora, targets: target_indices(&cfg.target_modules)? };
    // The base as held, the adapter with its gradient and AdamW's two moments, the runtime.
    const RUNTIME_BYTES: usize = 48 << 20;
    let fixed = model.base_bytes().0 + 4 * 4 * trainable + RUNTIME_BYTES;
    let estimates: Vec<u64> = (1..=layers).map(|group| ((fixed + model.step_bytes_estimate(&lens, targets, group, &shape, cfg.lora_dropout > 0.0)) >> 20) as u64).collect();
    let mib = |group: usize| estimates[group.clamp(1, layers) - 1];
    if model.kernels() == crate::generator::model::TrainKernels::Burn {
        return Ok(CheckpointPlan { setting: "layers".into(), estimate_mib: mib(1) });
    }
    // Recomputed layers with groups of g: all but the top group's g.
    let recomputed = |g: usize| layers - g.min(layers);
    let group = match cfg.checkpointing {
        Checkpointing::Layers => 1,
        Checkpointing::None => layers,
        Checkpointing::EveryN => {
            anyhow::ensure!(cfg.checkpoint_layers >= 1, "checkpoint_layers must be at least 1");
            cfg.checkpoint_layers.min(layers)
        }
        Checkpointing::Auto => (1..=layers)
            .filter(|&g| mib(g) <= cfg.max_memory_mib as u64)
            .min_by_key(|&g| (recomputed(g), mib(g)))
            .unwrap_or(1),
    };
    model.set_recompute_group(group);
    let setting = checkpoint_name(group, layers);
    let every = if (2..layers).contains(&group) { group } else { cfg.checkpoint_layers.clamp(1, layers) };
    tracing::info!(
        "checkpointing: layers ≈ {} MiB, every_n ({every} layers) ≈ {} MiB, none ≈ {} MiB for {} sequences of ≤ {} tokens; using {setting} ({} of {layers} layers recomputed; max_memory_mib {})",
        mib(1), mib(every), mib(layers), lens.len(), lens.first().copied().unwrap_or(0), recomputed(group), cfg.max_memory_mib
    );
    if mib(group) > cfg.max_memory_mib as u64 {
        tracing::warn!("the estimate for {setting} ({} MiB) is above max_memory_mib = {}", mib(group), cfg.max_memory_mib);
    }
    Ok(CheckpointPlan { setting, estimate_mib: mib(group) })
}

/// Mean held-out NLL per target token, in batches.
fn eval_loss(model: &TrainableLlama, params: &LoraParams, dev: &[Sequence], batch: usize) -> Result<Option<(f64, u64)>, TrainError> {
    if dev.is_empty() {
        return Ok(None);
    }
    let (mut total, mut n) = (0.0, 0usize);
    for chunk in dev.chunks(batch.max(1)) {
        let (s, k) = model.nll(params, chunk)?;
        total += s;
        n += k;
    }
    Ok((n > 0).then(|| (total / n as f64, n as u64)))
}

/// The decoder with its adapter, as the shared loop trains it.
struct DecoderTrainee<'a> {
    model: &'a TrainableLlama,
    params: LoraParams,
    train: &'a [Sequence],
    dev: &'a [Sequence],
    cfg: &'a TrainConfig,
}

impl Trainee for DecoderTrainee<'_> {
    fn step(&mut self, examples: &[usize], step: u64) -> anyhow::Result<StepOut> {
        let seqs: Vec<Sequence> = examples.iter().map(|&i| self.train[i].clone()).collect();
        let n_targets: usize = seqs.iter().map(Sequence::n_targets).sum();
        let tokens: usize = seqs.iter().map(|s| s.ids.len()).sum();
        let mut grads = self.params.zeros_like();
        let mut nll = 0.0;
        if n_targets > 0 {
            let dropout = (self.cfg.lora_dropout > 0.0).then_some((self.cfg.lora_dropout, self.cfg.seed ^ step.wrapping_mul(0x2545_F491_4F6C_DD1D)));
            for micro in seqs.chunks(self.cfg.batch_size) {
                nll += self.model.accumulate_gradients(&self.params, micro, 1.0 / n_targets as f64, dropout, &mut grads)?;
            }
        }
        let loss = if n_targets > 0 { nll / n_targets as f64 } else { f64::NAN };
        Ok(StepOut { loss, grads, tokens, targets: n_targets as u64 })
    }

    fn eval(&self) -> anyhow::Result<Option<(f64, u64)>> {
        Ok(eval_loss(self.model, &self.params, self.dev, self.cfg.batch_size)?)
    }

    fn params(&self) -> Vec<&[f32]> {
        self.params.tensors()
    }

    fn params_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.params.tensors_mut()
    }
}

pub(crate) fn train(state: TrainState, run: &mut StageRun, cfg: &TrainConfig, opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
    let device = gauge_tensor::device::parse(&opts.device)?;
    let files = ModelFiles::open(&cfg.base, false)?;
    let template = match (&cfg.chat_template, &files.chat) {
        (Some(src), _) => gauge_decoder::ChatTemplate::new(src, "", ""),
        (None, Some(t)) => t.clone(),
        (None, None) => anyhow::bail!("{}: the model has no chat template; set `chat_template` (a Jinja template) in the config", files.source.display()),
    };
    let (train_examples, train_stats) = data::read_chat_jsonl(&state.train_file, &files.tokenizer, &template, cfg.max_seq_len)?;
    let train_examples = sample(train_examples, cfg.max_train_examples, cfg.seed);
    anyhow::ensure!(!train_examples.is_empty(), "{}: no training example fits in max_seq_len = {} tokens ({} longer)", state.train_file.display(), cfg.max_seq_len, train_stats.too_long);
    let (dev_examples, dev_stats) = match &state.dev_file {
        Some(d) => data::read_chat_jsonl(d, &files.tokenizer, &template, cfg.max_seq_len)?,
        None => (Vec::new(), ReadStats::default()),
    };
    let dev: Vec<Sequence> = sample(dev_examples, Some(cfg.eval_examples), cfg.seed).into_iter().map(|e| e.sequence).collect();
    let train: Vec<Sequence> = train_examples.into_iter().map(|e| e.sequence).collect();

    let shape = LoraShape { r: cfg.r, alpha: cfg.lora_alpha, rslora: cfg.use_rslora, targets: target_indices(&cfg.target_modules)? };
    let loaded = Instant::now();
    let mut model = TrainableLlama::load(files.config.clone(), &files.checkpoint, cfg.base_storage, &device)?;
    drop(files.checkpoint);
    tracing::info!("base loaded in {:.1} s", loaded.elapsed().as_secs_f64());
    let fresh = model.init_lora(shape, cfg.seed);
    let plan = plan_checkpointing(&mut model, cfg, &train, fresh.count())?;

    let ckpt_dir = run.checkpoint_dir()?.to_path_buf();
    let mut trainee = DecoderTrainee { model: &model, params: fresh, train: &train, dev: &dev, cfg };
    let trained = optimise(&mut trainee, train.len(), cfg, opts, &ckpt_dir)?;
    let (params, progress, total) = (trainee.params, &trained.progress, trained.steps);

    // Outputs.
    let adapter = params.to_adapter(cfg.lora_dropout, Some(cfg.base.clone()));
    adapter.save(&run.path("adapter"))?;
    run.add_output("adapter/adapter_config.json", None)?;
    run.add_output("adapter/adapter_model.safetensors", None)?;
    // The pages the examples were made from, so `evaluate` (`exclude_trained_pages`) can keep
    // to questions whose gold pages the adapter never trained on.
    let pages = data::example_pages(&state.train_file)?;
    if !pages.is_empty() {
        let record = TrainingPages { target: "generator".into(), base: cfg.base.clone(), questions: train.len(), pages, questions_by: Vec::new() };
        std::fs::write(run.path("adapter").join(TRAINING_PAGES), serde_json::to_string_pretty(&record)?)?;
        run.add_output(&format!("adapter/{}", TRAINING_PAGES), None)?;
    }
    curve::write_outputs(run, &progress.curve, &format!("train-lora: r {} alpha {} on {} examples, {} steps", cfg.r, cfg.lora_alpha, train.len(), total))?;
    if cfg.merge {
        crate::generator::merge::write_merged(&cfg.base, &adapter, &template, &run.path("merged"))?;
        run.add_output("merged/model.safetensors", None)?;
    }
    let (base_bytes, kinds) = model.base_bytes();
    let summary = trained.summary(train.len());
    run.set_stats(&summary);
    run.set_stat("trainable_parameters", params.count() as u64);
    run.set_stat("base_bytes_held", base_bytes as u64);
    run.set_stat("base_storage", kinds.join(","));
    run.set_stat("largest_layer_f32_bytes", model.layer_f32_bytes() as u64);
    run.set_stat("kernels", format!("{:?}", model.kernels()).to_lowercase());
    run.set_stat("checkpointing", plan.setting.clone());
    run.set_stat("recompute_group", model.recompute_group() as u64);
    run.set_stat("peak_memory_estimate_mib", plan.estimate_mib);
    run.set_stat("train_examples_too_long", train_stats.too_long as u64);
    run.set_stat("dev_examples", dev.len() as u64);
    run.set_stat("dev_examples_too_long", dev_stats.too_long as u64);
    run.set_stat("training_seconds", progress.seconds);
    run.set_stat("training_tokens", progress.tokens);
    if let Some(p) = peak_rss_mib() {
        run.set_stat("peak_rss_mib", p);
    }
    Ok(summary)
}
