//! Llama-family causal language models in Burn, loaded without a conversion step from the two
//! formats users hold — Hugging Face folders (`config.json`, safetensors, `tokenizer.json`,
//! `tokenizer_config.json`) and GGUF files (llama.cpp) — with their tokenizers, chat
//! templates (the model's own Jinja template, rendered by minijinja) and generation.
//!
//! Families: Llama 2/3 (Llama 3 `rope_scaling`), SmolLM2, TinyLlama, Mistral-style, Qwen2
//! (q/k/v biases). GGUF tensor types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K; on
//! the host
//! CPU the quantised ones stay in their blocks (memory = the file's size, as llama.cpp) and
//! decoding runs integer kernels ([`kernels`]); [`LoadOptions::dequantize`] holds f32 instead.
//! On Burn devices (CUDA) every tensor is dequantised to f32 at load.
//!
//! - [`config`]: `config.json` / GGUF `llama.*` metadata.
//! - [`gguf`]: the GGUF reader and ggml dequantisation.
//! - [`checkpoint`]: weights by Hugging Face name from either format.
//! - [`llama`]: the model with its KV cache (host CPU path or Burn).
//! - [`host`]: the host-CPU forward (fused projections, KV cache written in place, batches).
//! - [`kernels`]: integer dot products of quantised weights and activations in two 8-bit levels, per CPU path;
//!   [`repack`]: weight rows interleaved eight at a time for them.
//! - [`quant`]: linear layers over quantised blocks.
//! - [`pool`]: the spinning thread pool a decoding step runs on.
//! - [`prefix`]: prompts that begin alike reuse the keys and values of what they share.
//! - [`tokenizer`]: GGUF tokenizers as `tokenizers` BPE.
//! - [`chat`]: chat templates.
//! - [`constrain`]: replies held to a JSON Schema; [`citation`]: citations held to the tags of
//!   the passages given.
//! - [`generate`]: greedy and seeded sampling with stop conditions.
//! - [`sampling`]: repetition, frequency/presence, n-gram, min-p and DRY controls; the loop stop.
#![deny(missing_docs)]
pub mod adapter;
pub mod chat;
pub mod checkpoint;
pub mod citation;
pub mod config;
pub mod constrain;
pub mod generate;
pub mod gguf;
pub mod host;
pub mod kernels;
pub mod llama;
pub mod pool;
pub mod prefix;
pub mod prompt_k;
pub mod quant;
pub mod repack;
pub mod repack_k;
pub mod sampling;
pub mod tokenizer;

use std::path::{Path, PathBuf};

pub use adapter::{AdapterConfig, LoraAdapter, LoraPair};
pub use chat::{ChatTemplate, Message};
pub use checkpoint::Checkpoint;
pub use config::LlamaConfig;
pub use citation::{CitationConstraint, CitationVocab};
pub use constrain::{JsonConstraint, SchemaCompiler, TokenConstraint};
pub use generate::{GenerateOptions, Generation};
pub use kernels::KernelPath;
pub use llama::{KvCache, Llama};

use gauge_tensor::device::Device;

/// Errors of model loading and inference.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    /// A model file is missing, unreadable or inconsistent.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model cannot run what was asked.
    #[error("{0}")]
    Model(String),
    /// An adapter or checkpoint file failed to load, or a device is unknown.
    #[error(transparent)]
    Tensor(#[from] gauge_tensor::TensorError),
    /// A generation setting is out of its range.
    #[error(transparent)]
    Options(#[from] gauge_chat::OptionsError),
}

impl DecoderError {
    /// An error about a file.
    pub fn file(path: &Path, message: String) -> Self {
        DecoderError::File { path: path.to_path_buf(), message }
    }
}

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Dequantise GGUF blocks to f32 at load instead of keeping them (4–8x the memory;
    /// decoding then runs f32 dot products instead of the integer kernels). Off by default:
    /// the blocks are what llama.cpp computes with, and decoding is memory-bound.
    pub dequantize: bool,
    /// Keys and values in f16 (half the cache memory, as llama.cpp's default) instead of f32.
    pub kv_f16: bool,
    /// The integer kernels' path (default: the fastest this CPU runs, or `GAUGE_KERNEL`).
    pub kernel: Option<kernels::KernelPath>,
    /// A LoRA adapter (PEFT folder): on the host CPU its pairs stay beside quantised blocks
    /// (`x Wᵀ + (x Aᵀ)(s B)ᵀ`, the blocks 4-bit as QLoRA trained them); f32 weights, and every
    /// weight on Burn devices, take it merged at load (`W + s·B A`).
    pub adapter: Option<PathBuf>,
}

/// A loaded model with its tokenizer, chat template and stop ids.
pub struct LanguageModel {
    /// The network.
    pub model: Llama,
    /// Its tokenizer.
    pub tokenizer: tokenizers::Tokenizer,
    /// Its chat template, when it has one.
    pub chat: Option<ChatTemplate>,
    /// Ids that end generation.
    pub eos_ids: Vec<u32>,
    /// Where it was loaded from.
    pub source: PathBuf,
    /// DRY's sequence breakers resolved against the vocabulary (the last list asked for).
    dry_cache: std::sync::Mutex<Option<(Vec<String>, std::sync::Arc<sampling::Dry>)>>,
    /// Prompts' keys and values kept for the prompts that begin alike ([`prefix`]).
    pub prefix_cache: std::sync::Mutex<prefix::PrefixCache>,
}

/// Finds a model: a GGUF file, a model folder, or a name in the models directory / Hugging
/// Face cache (see [`gauge_core::models`]).
pub fn resolve(spec: &str) -> Result<PathBuf, DecoderError> {
    let p = Path::new(spec);
    if p.is_file() || p.is_dir() {
        return Ok(p.to_path_buf());
    }
    let in_models = gauge_core::models::models_dir().join(spec);
    if in_models.is_file() {
        return Ok(in_models);
    }
    gauge_core::models::resolve_model(spec).map(|m| m.dir).map_err(|e| DecoderError::Model(e.to_string()))
}

/// A model's parts before the network is built: architecture, tokenizer, chat template,
/// stop ids and the weights by Hugging Face name (used by the trainer, which builds its own
/// network over the same checkpoint).
pub struct ModelFiles {
    /// The architecture.
    pub config: LlamaConfig,
    /// The tokenizer.
    pub tokenizer: tokenizers::Tokenizer,
    /// The chat template, when the model has one.
    pub chat: Option<ChatTemplate>,
    /// Ids that end generation.
    pub eos_ids: Vec<u32>,
    /// The weights.
    pub checkpoint: Checkpoint,
    /// Where they were found.
    pub source: PathBuf,
}

impl ModelFiles {
    /// Opens a GGUF file or a Hugging Face folder (or a name, see [`resolve`]).
    pub fn open(spec: &str, keep_quantized: bool) -> Result<ModelFiles, DecoderError> {
        let path = resolve(spec)?;
        if path.is_file() {
            Self::open_gguf(&path, keep_quantized)
        } else {
            Self::open_folder(&path)
        }
    }

    fn open_gguf(path: &Path, keep_quantized: bool) -> Result<ModelFiles, DecoderError> {
        let file = gguf::Gguf::open(path)?;
        let config = LlamaConfig::from_gguf(&file).map_err(|e| DecoderError::file(path, e))?;
        let tokenizer = tokenizer::from_gguf(&file)?;
        let chat = file.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(|t| ChatTemplate::new(t, &file_token(&file, "bos"), &file_token(&file, "eos")));
        // The declared end of sequence first (constrained decoding ends documents with it), then
        // the other end-of-generation tokens llama.cpp stops on (Qwen's `<|endoftext|>`).
        let mut eos_ids = config.eos_token_id.as_ref().map(|e| e.to_vec()).unwrap_or_default();
        for id in tokenizer::end_of_generation_ids(&file) {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
        let permuted_qk = config.model_type != "qwen2";
        let checkpoint = Checkpoint::Gguf { file: Box::new(file), permuted_qk, heads: (config.num_attention_heads, config.kv_heads()), keep_quantized };
        Ok(ModelFiles { config, tokenizer, chat, eos_ids, checkpoint, source: path.to_path_buf() })
    }

    fn open_folder(dir: &Path) -> Result<ModelFiles, DecoderError> {
        let read_json = |name: &str| -> Result<Option<serde_json::Value>, DecoderError> {
            let p = dir.join(name);
            if !p.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&p).map_err(|e| DecoderError::file(&p, format!("cannot read ({e})")))?;
            serde_json::from_str(&text).map(Some).map_err(|e| DecoderError::file(&p, format!("invalid JSON ({e})")))
        };
        let config_json = read_json("config.json")?.ok_or_else(|| DecoderError::file(dir, "no config.json (a Hugging Face model folder has one)".into()))?;
        let config = LlamaConfig::from_hf_json(config_json).map_err(|e| DecoderError::file(&dir.join("config.json"), format!("not a Llama-family config ({e})")))?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| DecoderError::file(&tok_path, format!("cannot load tokenizer ({e})")))?;
        let tc = read_json("tokenizer_config.json")?.unwrap_or_default();
        let token_text = |v: &serde_json::Value| v.as_str().map(str::to_string).or_else(|| v["content"].as_str().map(str::to_string)).unwrap_or_default();
        let chat = tc["chat_template"].as_str().map(|t| ChatTemplate::new(t, &token_text(&tc["bos_token"]), &token_text(&tc["eos_token"])));
        let mut eos_ids = config.eos_token_id.as_ref().map(|e| e.to_vec()).unwrap_or_default();
        if let Some(gc) = read_json("generation_config.json")? {
            if let Ok(ids) = serde_json::from_value::<config::TokenIds>(gc["eos_token_id"].clone()) {
                eos_ids = ids.to_vec();
            }
        }
        let checkpoint = Checkpoint::open_folder(dir)?;
        Ok(ModelFiles { config, tokenizer, chat, eos_ids, checkpoint, source: dir.to_path_buf() })
    }
}

impl LanguageModel {
    /// Loads a GGUF file or a Hugging Face folder onto `device` (default options).
    pub fn load(spec: &str, device: &Device) -> Result<LanguageModel, DecoderError> {
        Self::load_with(spec, device, &LoadOptions::default())
    }

    /// Loads a GGUF file or a Hugging Face folder onto `device`, with an adapter when one is
    /// given (see [`LoadOptions::adapter`]).
    pub fn load_with(spec: &str, device: &Device, options: &LoadOptions) -> Result<LanguageModel, DecoderError> {
        let files = ModelFiles::open(spec, !options.dequantize)?;
        let adapter = options.adapter.as_deref().map(LoraAdapter::load).transpose()?;
        if let Some(a) = &adapter {
            let c = &files.config;
            for module in a.modules.keys() {
                let known = (0..c.num_hidden_layers).any(|l| adapter::PROJECTIONS.iter().any(|p| adapter::module_path(l, p) == *module));
                if !known {
                    return Err(DecoderError::Model(format!("adapter module `{module}` is not a projection of {} (was it trained on another base?)", files.source.display())));
                }
            }
        }
        let mut model = Llama::load_adapted(files.config, &files.checkpoint, adapter.as_ref(), device)?;
        if let Some(k) = options.kernel {
            model.set_kernel_path(k)?;
        }
        model.set_kv_f16(options.kv_f16);
        Ok(LanguageModel { model, tokenizer: files.tokenizer, chat: files.chat, eos_ids: files.eos_ids, source: files.source, dry_cache: Default::default(), prefix_cache: Default::default() })
    }
}

fn file_token(g: &gguf::Gguf, which: &str) -> String {
    let id = g.get(&format!("tokenizer.ggml.{which}_token_id")).and_then(|v| v.as_u64());
    let tokens = g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array());
    match (id, tokens) {
        (Some(i), Some(t)) => t.get(i as usize).and_then(|v| v.as_str()).unwrap_or_default().to_string(),
        _ => String::new(),
    }
}
