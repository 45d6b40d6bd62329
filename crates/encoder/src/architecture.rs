//! The encoder architectures a sentence embedder loads, chosen by `config.json`'s
//! `model_type`: BERT-family ([`crate::bert`]) or MPNet ([`crate::mpnet`]).
use std::path::Path;

use burn::tensor::{Bool, Int, TensorData};

use crate::bert::BertEncoder;
use crate::config::{BertConfig, SUPPORTED_MODEL_TYPES};
use crate::device::{Device, Tensor};
use crate::mpnet::{position_ids, MpnetConfig, MpnetEncoder};
use crate::weights::Weights;
use crate::EncoderError;

/// `config.json` of any encoder an embedder loads.
#[derive(Debug, Clone, PartialEq)]
pub enum EncoderConfig {
    /// BERT, RoBERTa, XLM-RoBERTa.
    Bert(BertConfig),
    /// MPNet.
    Mpnet(MpnetConfig),
}

impl EncoderConfig {
    /// Reads `config.json` and checks it against the architecture its `model_type` names.
    pub fn from_file(path: &Path) -> Result<EncoderConfig, EncoderError> {
        let text = std::fs::read_to_string(path).map_err(|e| EncoderError::file(path, format!("cannot read ({e})")))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| EncoderError::file(path, format!("not a model config.json ({e})")))?;
        match value.get("model_type").and_then(|m| m.as_str()) {
            Some("mpnet") => Ok(EncoderConfig::Mpnet(MpnetConfig::from_file(path)?)),
            Some(kind) if !SUPPORTED_MODEL_TYPES.contains(&kind) => Err(EncoderError::file(
                path,
                format!("unsupported architecture `{kind}` (model_type); supported: {}, mpnet", SUPPORTED_MODEL_TYPES.join(", ")),
            )),
            _ => Ok(EncoderConfig::Bert(BertConfig::from_file(path)?)),
        }
    }

    /// Hidden size (the embedding dimension).
    pub fn hidden_size(&self) -> usize {
        match self {
            EncoderConfig::Bert(c) => c.hidden_size,
            EncoderConfig::Mpnet(c) => c.hidden_size,
        }
    }

    /// Encoder layers.
    pub fn num_hidden_layers(&self) -> usize {
        match self {
            EncoderConfig::Bert(c) => c.num_hidden_layers,
            EncoderConfig::Mpnet(c) => c.num_hidden_layers,
        }
    }

    /// Parameters used per token in matrix products (what FLOP counts use).
    pub fn matmul_parameter_count(&self) -> usize {
        match self {
            EncoderConfig::Bert(c) => c.matmul_parameter_count(),
            EncoderConfig::Mpnet(c) => c.matmul_parameter_count(),
        }
    }

    /// Longest input in tokens the position embeddings allow.
    pub fn max_tokens(&self) -> usize {
        match self {
            EncoderConfig::Bert(c) => c.max_position_embeddings - c.position_offset(),
            EncoderConfig::Mpnet(c) => c.max_tokens(),
        }
    }

    /// The id that pads a batch's shorter rows.
    pub fn pad_token_id(&self) -> usize {
        match self {
            EncoderConfig::Bert(c) => c.pad_token_id,
            EncoderConfig::Mpnet(c) => c.pad_token_id,
        }
    }
}

/// A loaded encoder of either architecture.
#[derive(Debug, Clone)]
pub enum Encoder {
    /// BERT, RoBERTa, XLM-RoBERTa.
    Bert(BertEncoder),
    /// MPNet.
    Mpnet(MpnetEncoder),
}

impl Encoder {
    /// Loads the weights the config describes.
    pub fn load(config: &EncoderConfig, weights: &Weights, device: &Device) -> Result<Encoder, EncoderError> {
        Ok(match config {
            EncoderConfig::Bert(c) => Encoder::Bert(BertEncoder::load(c, weights, device)?),
            EncoderConfig::Mpnet(c) => Encoder::Mpnet(MpnetEncoder::load(c, weights, device)?),
        })
    }

    /// Last hidden states `[B, L, H]` of a batch of token id lists (single texts: token type 0),
    /// padded at the end with the model's pad id, and the padding mask (true = padding).
    ///
    /// # Panics
    /// When a list is longer than [`EncoderConfig::max_tokens`] (the embedder truncates first).
    pub fn forward_batch(&self, batch: &[&Vec<u32>], device: &Device) -> (Tensor<3>, Tensor<2, Bool>, usize) {
        let b = batch.len();
        let l = batch.iter().map(|t| t.len()).max().unwrap_or(1).max(1);
        let max = self.config().max_tokens();
        assert!(l <= max, "a sequence of {l} tokens is longer than the model's {max} positions");
        let pad_id = match self {
            Encoder::Bert(e) => e.config.pad_token_id,
            Encoder::Mpnet(e) => e.config.pad_token_id,
        } as i64;
        let mut ids = vec![pad_id; b * l];
        let mut pad = vec![true; b * l];
        for (r, t) in batch.iter().enumerate() {
            for (c, &id) in t.iter().enumerate() {
                ids[r * l + c] = id as i64;
                pad[r * l + c] = false;
            }
        }
        let lengths: Vec<usize> = batch.iter().map(|t| t.len()).collect();
        let padding = Tensor::<2, Bool>::from_data(TensorData::new(pad, [b, l]), device);
        let hidden = match self {
            Encoder::Bert(encoder) => {
                let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, l]), device);
                encoder.forward(ids, Tensor::<2, Int>::zeros([b, l], device), padding.clone(), &lengths)
            }
            Encoder::Mpnet(encoder) => {
                let positions: Vec<i64> = ids.chunks_exact(l).flat_map(|row| position_ids(row, pad_id)).collect();
                let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, l]), device);
                let positions = Tensor::<2, Int>::from_data(TensorData::new(positions, [b, l]), device);
                encoder.forward(ids, positions, padding.clone(), &lengths)
            }
        };
        (hidden, padding, l)
    }

    /// The configuration (a copy).
    pub fn config(&self) -> EncoderConfig {
        match self {
            Encoder::Bert(e) => EncoderConfig::Bert(e.config.clone()),
            Encoder::Mpnet(e) => EncoderConfig::Mpnet(e.config.clone()),
        }
    }
}
