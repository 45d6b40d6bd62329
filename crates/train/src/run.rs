//! What both trainers of `train-lora` share — the generator's (`train`) and the retrievers'
//! (`retriever`) — and what the optimisation loop (`steps`) and the merge (`merge`) read: the
//! stage's config, options, inputs and summary, the training-pages record, and the safetensors
//! writer. A module of its own so that neither trainer imports the other's types.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::generator::frozen::BaseStorage;
pub use crate::generator::host::Checkpointing;
use crate::optim::{AdamWConfig, Decay};

/// Stage name (folder under the artifact root).
pub const STAGE: &str = "train-lora";
/// Output format version.
pub const FORMAT_VERSION: u32 = 1;

/// Every setting of a training run (echoed into the manifest and fingerprinted).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// What is trained: `generator` (default), `embedder` or `reranker`.
    #[serde(skip_serializing_if = "Target::is_generator")]
    pub target: Target,
    /// The base: a GGUF file, a Hugging Face folder or a name in the models directory (for
    /// `embedder` / `reranker`: a BERT folder or hub id, e.g. `sentence-transformers/all-MiniLM-L6-v2`).
    pub base: String,
    /// How the frozen base is held: `auto` (GGUF blocks as stored, NF4 for safetensors),
    /// `nf4`, or `f32`.
    pub base_storage: BaseStorage,
    /// A Jinja chat template replacing the model's own (required when it has none).
    pub chat_template: Option<String>,
    /// LoRA rank.
    pub r: usize,
    /// LoRA alpha (scale `alpha / r`).
    pub lora_alpha: f64,
    /// Dropout on the adapters' input.
    pub lora_dropout: f64,
    /// Adapted projections (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`,
    /// `down_proj`, or `all`).
    pub target_modules: Vec<String>,
    /// rsLoRA scaling (`alpha / √r`).
    pub use_rslora: bool,
    /// Peak learning rate.
    pub learning_rate: f64,
    /// AdamW settings.
    pub adamw: AdamWConfig,
    /// Linear warm-up steps.
    pub warmup_steps: u64,
    /// Decay after warm-up: `cosine`, `linear` or `constant`.
    pub decay: Decay,
    /// Passes over the training examples.
    pub epochs: u32,
    /// Stop after this many optimiser steps (`None`: all epochs).
    pub max_steps: Option<u64>,
    /// Sequences run together (each unpadded, in parallel threads on the CPU).
    pub batch_size: usize,
    /// Batches per optimiser step (the loss is token-weighted over the whole window).
    pub grad_accum: usize,
    /// Global gradient-norm clip (0: off).
    pub max_grad_norm: f64,
    /// Longest example in tokens (longer ones are skipped and counted).
    pub max_seq_len: usize,
    /// Train on at most this many examples (a seeded sample).
    pub max_train_examples: Option<usize>,
    /// Seed of initialisation, order and dropout.
    pub seed: u64,
    /// Held-out loss every N steps (and at the start and the end; 0: start and end only).
    pub eval_every: u64,
    /// Held-out examples evaluated (a seeded sample of the dev split).
    pub eval_examples: usize,
    /// Checkpoint every N steps (0: never).
    pub checkpoint_every: u64,
    /// Also write `merged/` (base + adapter as f32 safetensors, with config and tokenizer).
    pub merge: bool,
    /// Settings of the `embedder` and `reranker` targets.
    #[serde(skip_serializing_if = "RetrieverConfig::is_default")]
    pub retriever: RetrieverConfig,
    /// Which activations the generator's step keeps (CPU kernels; the result does not
    /// change): `auto` (the fastest setting whose estimated peak fits `max_memory_mib`),
    /// `layers` (recompute each layer: the least memory), `none` (keep all: the fastest) or
    /// `every_n` (recompute `checkpoint_layers` layers at a time). train-lora prints each
    /// setting's estimate before the run.
    #[serde(skip_serializing_if = "is_auto")]
    pub checkpointing: Checkpointing,
    /// Layers recomputed together with `checkpointing = "every_n"`.
    #[serde(skip_serializing_if = "is_default_checkpoint_layers")]
    pub checkpoint_layers: usize,
    /// The memory budget `checkpointing = "auto"` fits in, MiB (the whole process: base,
    /// adapter, optimiser and the step).
    #[serde(skip_serializing_if = "is_default_max_memory")]
    pub max_memory_mib: usize,
}

/// Default of [`TrainConfig::checkpoint_layers`].
pub const DEFAULT_CHECKPOINT_LAYERS: usize = 4;
/// Default of [`TrainConfig::max_memory_mib`].
pub const DEFAULT_MAX_MEMORY_MIB: usize = 1024;

fn is_auto(c: &Checkpointing) -> bool {
    *c == Checkpointing::Auto
}
fn is_default_checkpoint_layers(n: &usize) -> bool {
    *n == DEFAULT_CHECKPOINT_LAYERS
}
fn is_default_max_memory(n: &usize) -> bool {
    *n == DEFAULT_MAX_MEMORY_MIB
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            base: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            base_storage: BaseStorage::Auto,
            chat_template: None,
            r: 16,
            lora_alpha: 16.0,
            lora_dropout: 0.0,
            target_modules: vec!["all".into()],
            use_rslora: false,
            learning_rate: 2e-4,
            adamw: AdamWConfig::default(),
            warmup_steps: 5,
            decay: Decay::Cosine,
            epochs: 1,
            max_steps: None,
            batch_size: 2,
            grad_accum: 4,
            max_grad_norm: 1.0,
            max_seq_len: 1024,
            max_train_examples: None,
            seed: 0,
            eval_every: 25,
            eval_examples: 24,
            checkpoint_every: 10,
            merge: false,
            target: Target::Generator,
            retriever: RetrieverConfig::default(),
            checkpointing: Checkpointing::Auto,
            checkpoint_layers: DEFAULT_CHECKPOINT_LAYERS,
            max_memory_mib: DEFAULT_MAX_MEMORY_MIB,
        }
    }
}

/// Run settings that do not change the result.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// `cpu`, `cuda`, `cuda:N`.
    pub device: String,
    /// Stop (as if killed) after this many steps of this invocation; for tests of resumption.
    pub stop_after: Option<u64>,
    /// Copy the adapter folder here after the run (or a cache hit).
    pub copy_to: Option<PathBuf>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions { device: "cpu".into(), stop_after: None, copy_to: None }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrainSummary {
    /// Optimiser steps.
    pub steps: u64,
    /// Training examples used.
    pub train_examples: usize,
    /// Held-out loss before training.
    pub dev_loss_start: Option<f64>,
    /// Held-out loss after training.
    pub dev_loss_end: Option<f64>,
    /// Training tokens per second (forward + backward, all tokens).
    pub tokens_per_second: f64,
    /// Step it resumed from (0: fresh).
    pub resumed_from_step: u64,
}

/// What `train-lora` reads.
#[derive(Debug, Clone, Serialize)]
pub struct TrainInputs {
    /// A `synth-data` artifact directory (or one JSONL file).
    pub data: PathBuf,
    /// The index artifact the questions are about (encoder targets: positives and hard
    /// negatives come from it).
    pub index: Option<PathBuf>,
    /// Golden sets whose gold pages are never trained on (encoder targets): a training
    /// question sharing a page with them is dropped, so they stay fully evaluable.
    pub hold_out: Vec<PathBuf>,
    /// More question sets trained together with `data` (encoder targets): their training rows
    /// join `data`'s, their held-out rows its held-out rows.
    pub also: Vec<PathBuf>,
}

/// What `train-lora` trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A Llama-family decoder on chat SFT examples (PEFT `CAUSAL_LM` adapter).
    #[default]
    Generator,
    /// A BERT sentence embedder, contrastive (PEFT `FEATURE_EXTRACTION` adapter or full model).
    Embedder,
    /// A BERT cross-encoder (`BertForSequenceClassification` folder).
    Reranker,
}

impl Target {
    /// Whether this is the default (kept out of serialised configs, so generator fingerprints
    /// stay as they were).
    pub fn is_generator(&self) -> bool {
        *self == Target::Generator
    }
}

/// LoRA or every weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TuningKind {
    /// LoRA adapters (rank `r`, `lora_alpha`, `target_modules`).
    #[default]
    Lora,
    /// Full fine-tuning.
    Full,
}

/// The reranker's loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankLoss {
    /// Softmax over the positive and its negatives, target the positive.
    #[default]
    Listwise,
    /// Binary cross-entropy per pair (positive 1, negatives 0).
    Bce,
    /// Margin-MSE distillation (Hofstätter et al. 2020; GPL): the squared difference between
    /// the reranker's margin `s(q, p⁺) − s(q, n)` and the teacher's (`retriever.teacher`'s
    /// query likelihoods), averaged over the negatives.
    MarginMse,
}

/// Settings of the encoder targets (`[retriever]`; ignored by the generator target).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetrieverConfig {
    /// LoRA or full fine-tuning.
    pub tuning: TuningKind,
    /// InfoNCE temperature (embedder).
    pub temperature: f64,
    /// Hard negatives per question.
    pub hard_negatives: usize,
    /// Hits of each retriever searched for hard negatives.
    pub mine_depth: usize,
    /// Reranker loss.
    pub loss: RerankLoss,
    /// Longest query in tokens (embedder).
    pub max_query_tokens: usize,
    /// Longest passage in tokens (embedder), or query + passage pair (reranker).
    pub max_passage_tokens: usize,
    /// Query prefix (default: the model family's).
    pub query_prefix: Option<String>,
    /// Passage prefix (default: the model family's).
    pub passage_prefix: Option<String>,
    /// Probability that an inverse-cloze question's sentence is cut from its positive.
    pub ict_remove_sentence: f64,
    /// A local decoder whose query likelihood log P(question | passage) scores every
    /// (question, passage) of the examples (a GGUF file, a model folder or a name in the models
    /// directory): the teacher of `loss = "margin_mse"` and of `denoise`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teacher: Option<String>,
    /// Mine twice the hard negatives and drop those the teacher scores at or above the
    /// positive (likely unlabelled positives), keeping `hard_negatives` of the rest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub denoise: bool,
}

impl Default for RetrieverConfig {
    fn default() -> Self {
        RetrieverConfig { tuning: TuningKind::Lora, temperature: 0.05, hard_negatives: 2, mine_depth: 30, loss: RerankLoss::Listwise, max_query_tokens: 64, max_passage_tokens: 256, query_prefix: None, passage_prefix: None, ict_remove_sentence: 0.9, teacher: None, denoise: false }
    }
}

impl RetrieverConfig {
    /// Whether every field is the default (kept out of serialised generator configs).
    pub fn is_default(&self) -> bool {
        *self == RetrieverConfig::default()
    }
}

/// The pages list written beside the weights (`training_pages.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainingPages {
    /// `embedder`, `reranker` or `generator`.
    pub target: String,
    /// The base model as named.
    pub base: String,
    /// Training questions.
    pub questions: usize,
    /// `source#page` of every page that was a positive.
    pub pages: Vec<String>,
    /// The models that wrote the training questions (their rows' `teacher_model`; `ict` for
    /// questions cut from the passage): `evaluate` marks a config using this model when one of
    /// them shares a family with the writer or judge of the questions it is evaluated on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions_by: Vec<String>,
}

/// File name of [`TrainingPages`] in adapter and model folders.
pub const TRAINING_PAGES: &str = "training_pages.json";

/// A seeded sample of at most `n` examples (all of them when `n` is `None` or larger).
pub fn sample<T>(mut examples: Vec<T>, n: Option<usize>, seed: u64) -> Vec<T> {
    if let Some(n) = n.filter(|&n| n < examples.len()) {
        gauge_core::rng::SplitMix64::new(seed ^ 0xDA7A).shuffle(&mut examples);
        examples.truncate(n);
    }
    examples
}

/// Peak resident memory of this process (Linux `VmHWM`), MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Writes f32 tensors `(name, shape, values)` as a safetensors file (`format = pt`, as
/// transformers writes it).
pub fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> anyhow::Result<()> {
    let blobs: Vec<(String, Vec<usize>, Vec<u8>)> = tensors.iter().map(|(n, s, v)| (n.clone(), s.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect())).collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = blobs.iter().map(|(n, s, b)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).expect("sizes match"))).collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path)?;
    Ok(())
}
