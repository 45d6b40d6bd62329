//! The `train-lora` stage: chat-format SFT examples + a base model → a PEFT adapter folder,
//! the loss curve (Parquet and PNG) and, on request, merged safetensors.
//!
//! A run is an artifact like every stage: its fingerprint covers the config, the data files'
//! hashes and the base model's hash. Every `checkpoint_every` steps the adapter, the AdamW
//! moments, the step and the curve so far go to `checkpoint.safetensors` in the run's resume
//! directory (written through a temporary file); a rerun after a crash or `kill -9` continues
//! from there and ends with the same adapter as an uninterrupted run (the example order of
//! every epoch and the dropout masks of every step are functions of the seed and the step).
use std::path::{Path, PathBuf};
use std::time::Instant;

use gauge_core::artifact::StageRun;
use gauge_core::stage::{Plan, Stage};
use gauge_core::FileEntry;
use gauge_decoder::ModelFiles;

use crate::curve;
use crate::data::{self, ReadStats};
use crate::model::{target_indices, LoraParams, LoraShape, Sequence, TrainableLlama};
use crate::steps::{optimise, StepOut, Trainee};
use crate::run::{peak_rss_mib, sample, Checkpointing, TrainingPages, TRAINING_PAGES};
pub use crate::run::{TrainConfig, TrainInputs, TrainOptions, TrainSummary, FORMAT_VERSION, STAGE};
use crate::LoraError;

/// The stage.
pub struct TrainLora;

/// What the plan found.
pub struct TrainState {
    train_file: PathBuf,
    dev_file: Option<PathBuf>,
}

fn base_entry(spec: &str) -> anyhow::Result<FileEntry> {
    let path = gauge_decoder::resolve(spec)?;
    let file = if path.is_file() { path.clone() } else { path.join("model.safetensors") };
    let hash = if file.is_file() {
        gauge_core::hash::file_hash(&file)?
    } else {
        let index = path.join("model.safetensors.index.json");
        gauge_core::hash::bytes_hash(std::fs::read_to_string(&index).map_err(|e| anyhow::anyhow!("{}: cannot read ({e}); a model folder holds model.safetensors or its index", index.display()))?.as_bytes())
    };
    // The base as the config names it (a models-directory name stays a name, not this machine's path).
    Ok(FileEntry::hashed("base", spec, hash))
}

fn data_entry(path: &Path, name: &str) -> anyhow::Result<FileEntry> {
    Ok(FileEntry::file(name, path)?)
}

impl Stage for TrainLora {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = FORMAT_VERSION;
    type Config = TrainConfig;
    /// A `synth-data` artifact directory or a JSONL file, and for the encoder targets an index.
    type Inputs = TrainInputs;
    type Options = TrainOptions;
    type State = TrainState;
    type Summary = TrainSummary;

    fn plan(cfg: &TrainConfig, inputs_in: &TrainInputs, _: &TrainOptions) -> anyhow::Result<Plan<TrainState>> {
        anyhow::ensure!(cfg.r > 0, "r must be at least 1");
        let input = &inputs_in.data;
        if !cfg.target.is_generator() {
            anyhow::ensure!(cfg.lora_dropout == 0.0, "lora_dropout is not supported for the encoder targets (their training is deterministic); set it to 0");
            crate::bert::module_targets(&cfg.target_modules)?;
            let index = inputs_in.index.as_ref().ok_or_else(|| anyhow::anyhow!("--target {} needs --index DIR: the index artifact of the chunks the questions came from (positives and hard negatives are drawn from it)", serde_json::to_value(cfg.target).unwrap_or_default().as_str().unwrap_or("")))?;
            let (train_file, dev_file) = crate::retriever::input_files(input)?;
            let mut inputs = vec![data_entry(&train_file, "train")?];
            if let Some(d) = &dev_file {
                inputs.push(data_entry(d, "dev")?);
            }
            let (_, entry) = gauge_core::artifact::input_file(index, "manifest.json", "index")?;
            inputs.push(entry.named("index"));
            for (k, a) in inputs_in.also.iter().enumerate() {
                let (t, d) = crate::retriever::input_files(a)?;
                inputs.push(data_entry(&t, &format!("also:{k}:train"))?);
                if let Some(d) = &d {
                    inputs.push(data_entry(d, &format!("also:{k}:dev"))?);
                }
            }
            for (k, h) in inputs_in.hold_out.iter().enumerate() {
                gauge_core::golden::load_golden(h)?;
                inputs.push(FileEntry::file(format!("hold_out:{k}"), h)?);
            }
            let base = crate::retriever::resolve_base(&cfg.base)?;
            inputs.push(FileEntry::hashed("base", &cfg.base, gauge_core::hash::file_hash(&base.join("model.safetensors"))?));
            return Ok(Plan::new(inputs, TrainState { train_file, dev_file }).seed(cfg.seed));
        }
        anyhow::ensure!(cfg.retriever.is_default(), "[retriever] settings are for --target embedder or reranker");
        anyhow::ensure!(inputs_in.also.is_empty(), "--also mixes question sets for --target embedder or reranker; for the generator, write one SFT set");
        anyhow::ensure!(cfg.batch_size > 0 && cfg.grad_accum > 0, "batch_size and grad_accum must be at least 1");
        anyhow::ensure!((0.0..1.0).contains(&cfg.lora_dropout), "lora_dropout is a probability below 1, got {}", cfg.lora_dropout);
        anyhow::ensure!(cfg.learning_rate > 0.0 && cfg.epochs > 0, "learning_rate and epochs must be positive");
        anyhow::ensure!(cfg.max_seq_len >= 2, "max_seq_len must be at least 2");
        target_indices(&cfg.target_modules)?;
        let (train_file, dev_file) = data::input_files(input)?;
        let mut inputs = vec![data_entry(&train_file, "train")?];
        if let Some(d) = &dev_file {
            inputs.push(data_entry(d, "dev")?);
        }
        inputs.push(base_entry(&cfg.base)?);
        Ok(Plan::new(inputs, TrainState { train_file, dev_file }).seed(cfg.seed))
    }

    fn build(state: TrainState, run: &mut StageRun, cfg: &TrainConfig, inputs: &TrainInputs, opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
        if let Some(index) = inputs.index.as_ref().filter(|_| !cfg.target.is_generator()) {
            return crate::retriever::train_encoder(inputs, index, run, cfg, opts);
        }
        train(state, run, cfg, opts)
    }

    fn summary_line(s: &TrainSummary) -> String {
        let dev = match (s.dev_loss_start, s.dev_loss_end) {
            (Some(a), Some(b)) => format!(", held-out loss {a:.3} → {b:.3}"),
            _ => String::new(),
        };
        let resumed = if s.resumed_from_step > 0 { format!(" (resumed at step {})", s.resumed_from_step) } else { String::new() };
        format!("{} steps on {} examples{dev}, {:.0} tokens/s{resumed}", s.steps, s.train_examples, s.tokens_per_second)
    }
}

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
    if model.kernels() == crate::model::TrainKernels::Burn {
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
fn eval_loss(model: &TrainableLlama, params: &LoraParams, dev: &[Sequence], batch: usize) -> Result<Option<(f64, u64)>, LoraError> {
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

fn train(state: TrainState, run: &mut StageRun, cfg: &TrainConfig, opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
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
        let record = TrainingPages { target: "generator".into(), base: cfg.base.clone(), questions: train.len(), pages };
        std::fs::write(run.path("adapter").join(TRAINING_PAGES), serde_json::to_string_pretty(&record)?)?;
        run.add_output(&format!("adapter/{}", TRAINING_PAGES), None)?;
    }
    curve::write_outputs(run, &progress.curve, &format!("train-lora: r {} alpha {} on {} examples, {} steps", cfg.r, cfg.lora_alpha, train.len(), total))?;
    if cfg.merge {
        crate::merge::write_merged(&cfg.base, &adapter, &template, &run.path("merged"))?;
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
