//! The `train-lora` stage: one stage for every target — chat-format SFT examples + a base
//! model → a PEFT adapter folder for the generator ([`crate::generator::train`]), questions +
//! an index → an adapter or a fully tuned model for the embedder or reranker
//! ([`crate::retriever`]) — with the loss curve (Parquet and PNG) and, on request, merged
//! safetensors.
//!
//! A run is an artifact like every stage: its fingerprint covers the config, the data files'
//! hashes and the base model's hash. Every `checkpoint_every` steps the adapter, the AdamW
//! moments, the step and the curve so far go to `checkpoint.safetensors` in the run's resume
//! directory (written through a temporary file); a rerun after a crash or `kill -9` continues
//! from there and ends with the same adapter as an uninterrupted run (the example order of
//! every epoch and the dropout masks of every step are functions of the seed and the step).
use std::path::{Path, PathBuf};

use gauge_core::artifact::StageRun;
use gauge_core::stage::{Plan, Stage};
use gauge_core::FileEntry;

use crate::generator::data;
use crate::generator::model::target_indices;
pub use crate::run::{TrainConfig, TrainInputs, TrainOptions, TrainSummary, FORMAT_VERSION, STAGE};

/// The stage.
pub struct TrainLora;

/// What the plan found.
pub struct TrainState {
    pub(crate) train_file: PathBuf,
    pub(crate) dev_file: Option<PathBuf>,
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
            let (base, arch) = crate::retriever::resolve_base(&cfg.base)?;
            crate::retriever::check_base(arch, cfg.target, &cfg.base)?;
            crate::retriever::bert::module_targets(&cfg.target_modules, arch)?;
            inputs.push(FileEntry::hashed("base", &cfg.base, gauge_core::hash::file_hash(&base.join("model.safetensors"))?));
            let rc = &cfg.retriever;
            anyhow::ensure!(rc.teacher.is_some() || !(rc.denoise || rc.loss == crate::run::RerankLoss::MarginMse), "retriever.loss = \"margin_mse\" and retriever.denoise need a teacher: set retriever.teacher to a local decoder (e.g. SmolLM2-135M-Instruct.Q4_1.gguf)");
            if let Some(t) = &rc.teacher {
                let identity = gauge_generator::query_likelihood::decoder_identity(t).map_err(|e| anyhow::anyhow!("retriever.teacher `{t}`: {e}"))?;
                inputs.push(FileEntry::hashed("teacher", t, gauge_core::hash::bytes_hash(identity.as_bytes())));
            }
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
        crate::generator::train::train(state, run, cfg, opts)
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
