//! Model configuration files as published in Hugging Face / sentence-transformers folders.
use std::path::Path;

use serde::Deserialize;

use crate::EncoderError;

/// `config.json` of a BERT-family encoder (the fields gauge reads).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct BertConfig {
    /// `bert` (BERT, MiniLM, BGE, E5, GTE) or `xlm-roberta`/`roberta` (bge-reranker-base,
    /// multilingual E5).
    pub model_type: String,
    /// Declared architectures (informational).
    #[serde(default)]
    pub architectures: Vec<String>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Feed-forward size.
    pub intermediate_size: usize,
    /// Feed-forward activation (`gelu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Position embeddings.
    pub max_position_embeddings: usize,
    /// Token types.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Padding token id.
    #[serde(default)]
    pub pad_token_id: usize,
    /// `absolute` position embeddings only.
    #[serde(default = "default_position")]
    pub position_embedding_type: String,
    /// Labels of a classification head (`BertForSequenceClassification`); their count is the
    /// head's output size.
    #[serde(default)]
    pub id2label: std::collections::BTreeMap<String, String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_position() -> String {
    "absolute".into()
}

/// Architectures this crate implements.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &["bert", "xlm-roberta", "roberta"];

impl BertConfig {
    /// Whether this is a RoBERTa-family encoder (positions offset by the padding index, one
    /// token type).
    pub fn is_roberta(&self) -> bool {
        matches!(self.model_type.as_str(), "xlm-roberta" | "roberta")
    }

    /// First position id: RoBERTa numbers real tokens from `pad_token_id + 1`, BERT from 0.
    pub fn position_offset(&self) -> usize {
        if self.is_roberta() { self.pad_token_id + 1 } else { 0 }
    }

    /// Outputs of a classification head (1 when the folder declares none).
    pub fn num_labels(&self) -> usize {
        self.id2label.len().max(1)
    }

    /// Reads and checks `config.json`.
    pub fn from_file(path: &Path) -> Result<BertConfig, EncoderError> {
        let text = std::fs::read_to_string(path).map_err(|e| EncoderError::file(path, format!("cannot read ({e})")))?;
        let config: BertConfig = serde_json::from_str(&text)
            .map_err(|e| EncoderError::file(path, format!("not a BERT-style config.json ({e})")))?;
        if !SUPPORTED_MODEL_TYPES.contains(&config.model_type.as_str()) {
            return Err(EncoderError::file(
                path,
                format!(
                    "unsupported architecture `{}` (model_type); supported: {}",
                    config.model_type,
                    SUPPORTED_MODEL_TYPES.join(", ")
                ),
            ));
        }
        if !matches!(config.hidden_act.as_str(), "gelu" | "gelu_python") {
            return Err(EncoderError::file(path, format!("unsupported hidden_act `{}`; supported: gelu", config.hidden_act)));
        }
        if config.position_embedding_type != "absolute" {
            return Err(EncoderError::file(
                path,
                format!("unsupported position_embedding_type `{}`; supported: absolute", config.position_embedding_type),
            ));
        }
        if config.num_attention_heads == 0 || !config.hidden_size.is_multiple_of(config.num_attention_heads) {
            return Err(EncoderError::file(path, "hidden_size must be a multiple of num_attention_heads".to_string()));
        }
        Ok(config)
    }

    /// Parameters of the encoder (embeddings and layers, no pooler).
    pub fn parameter_count(&self) -> usize {
        let h = self.hidden_size;
        let i = self.intermediate_size;
        let emb = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h;
        let layer = 4 * (h * h + h) + 2 * (h * i) + i + h + 4 * h;
        emb + self.num_hidden_layers * layer
    }

    /// Parameters used per token in matrix products (what FLOP counts use).
    pub fn matmul_parameter_count(&self) -> usize {
        let h = self.hidden_size;
        self.num_hidden_layers * (4 * h * h + 2 * h * self.intermediate_size)
    }
}

/// How token vectors become one text vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The `[CLS]` token's last hidden state (BGE).
    Cls,
    /// Mean over non-padding tokens (MiniLM, E5, GTE).
    Mean,
}

/// `1_Pooling/config.json` of sentence-transformers.
#[derive(Debug, Clone, Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

/// One entry of `modules.json`.
#[derive(Debug, Clone, Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// What a sentence-transformers folder declares (pooling, normalisation, max length).
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceConfig {
    /// Pooling, if declared.
    pub pooling: Option<Pooling>,
    /// Whether a `Normalize` module follows.
    pub normalize: bool,
    /// `max_seq_length` from `sentence_bert_config.json`.
    pub max_seq_length: Option<usize>,
    /// Whether the folder has `modules.json` at all.
    pub declared: bool,
}

impl SentenceConfig {
    /// Reads `modules.json`, the pooling config and `sentence_bert_config.json` if present.
    pub fn from_dir(dir: &Path) -> Result<SentenceConfig, EncoderError> {
        let mut out = SentenceConfig { pooling: None, normalize: false, max_seq_length: None, declared: false };
        let sbert = dir.join("sentence_bert_config.json");
        if sbert.is_file() {
            let v: serde_json::Value = read_json(&sbert)?;
            out.max_seq_length = v.get("max_seq_length").and_then(|m| m.as_u64()).map(|m| m as usize);
        }
        let modules = dir.join("modules.json");
        if !modules.is_file() {
            return Ok(out);
        }
        out.declared = true;
        let entries: Vec<ModuleEntry> = serde_json::from_value(read_json(&modules)?)
            .map_err(|e| EncoderError::file(&modules, format!("unexpected modules.json ({e})")))?;
        for m in entries {
            if m.kind.ends_with("Pooling") {
                let path = dir.join(&m.path).join("config.json");
                let p: PoolingConfig = serde_json::from_value(read_json(&path)?)
                    .map_err(|e| EncoderError::file(&path, format!("unexpected pooling config ({e})")))?;
                out.pooling = Some(if p.pooling_mode_cls_token {
                    Pooling::Cls
                } else if p.pooling_mode_mean_tokens {
                    Pooling::Mean
                } else {
                    let mode = if p.pooling_mode_max_tokens { "max" } else if p.pooling_mode_mean_sqrt_len_tokens { "mean_sqrt_len" } else { "none" };
                    return Err(EncoderError::file(&path, format!("unsupported pooling mode `{mode}`; supported: cls, mean")));
                });
            } else if m.kind.ends_with("Normalize") {
                out.normalize = true;
            }
        }
        Ok(out)
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value, EncoderError> {
    let text = std::fs::read_to_string(path).map_err(|e| EncoderError::file(path, format!("cannot read ({e})")))?;
    serde_json::from_str(&text).map_err(|e| EncoderError::file(path, format!("invalid JSON ({e})")))
}
