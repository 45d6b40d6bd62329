//! The MPNet encoder, as in Hugging Face `MPNetModel` (all-mpnet-base-v2): BERT's post-norm
//! layers with the attention weights named `attention.attn.{q,k,v,o}`, no token types,
//! RoBERTa-style position ids (numbered from `pad_token_id + 1`, padding tokens at
//! `pad_token_id`), and a T5-style relative-position bias (`encoder.relative_attention_bias`,
//! 32 buckets, shared by every layer) added to the attention scores.
use std::path::Path;

use burn::tensor::module::embedding;
use burn::tensor::{Bool, Int};
use serde::Deserialize;

use crate::bert::{encode_layers, load_norm, tensor2, AttentionNames, EncoderLayer, Norm, RelativeBias};
use crate::device::{Device, Tensor};
use crate::weights::Weights;
use crate::EncoderError;

/// `config.json` of an MPNet encoder (the fields gauge reads).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MpnetConfig {
    /// `mpnet`.
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
    /// Position embeddings (positions run from `pad_token_id + 1`).
    pub max_position_embeddings: usize,
    /// LayerNorm epsilon (all-mpnet-base-v2 declares 1e-5; `MPNetConfig`'s default is 1e-12).
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Padding token id (also the position embeddings' padding index).
    #[serde(default = "default_pad")]
    pub pad_token_id: usize,
    /// Relative-position buckets (`MPNetEncoder` computes its bias with 32, whatever this says).
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_eps() -> f64 {
    1e-12
}
fn default_pad() -> usize {
    1
}
fn default_buckets() -> usize {
    RELATIVE_BUCKETS
}

/// Buckets of the relative-position bias (`MPNetEncoder.compute_position_bias`'s default).
pub const RELATIVE_BUCKETS: usize = 32;
/// Offsets beyond which buckets saturate (`relative_position_bucket`'s `max_distance`).
pub const RELATIVE_MAX_DISTANCE: usize = 128;

impl MpnetConfig {
    /// Reads and checks `config.json`.
    pub fn from_file(path: &Path) -> Result<MpnetConfig, EncoderError> {
        let text = std::fs::read_to_string(path).map_err(|e| EncoderError::file(path, format!("cannot read ({e})")))?;
        let config: MpnetConfig =
            serde_json::from_str(&text).map_err(|e| EncoderError::file(path, format!("not an MPNet config.json ({e})")))?;
        if config.model_type != "mpnet" {
            return Err(EncoderError::file(path, format!("model_type `{}` is not `mpnet`", config.model_type)));
        }
        if !matches!(config.hidden_act.as_str(), "gelu" | "gelu_python") {
            return Err(EncoderError::file(path, format!("unsupported hidden_act `{}`; supported: gelu", config.hidden_act)));
        }
        if config.num_attention_heads == 0 || !config.hidden_size.is_multiple_of(config.num_attention_heads) {
            return Err(EncoderError::file(path, "hidden_size must be a multiple of num_attention_heads".to_string()));
        }
        if config.relative_attention_num_buckets != RELATIVE_BUCKETS {
            return Err(EncoderError::file(
                path,
                format!(
                    "relative_attention_num_buckets {} is not supported: MPNet computes its position bias with {RELATIVE_BUCKETS} buckets",
                    config.relative_attention_num_buckets
                ),
            ));
        }
        if config.max_position_embeddings <= config.pad_token_id + 1 {
            return Err(EncoderError::file(path, "max_position_embeddings must exceed pad_token_id + 1".to_string()));
        }
        Ok(config)
    }

    /// Longest input in tokens: positions `pad + 1 ..= max_position_embeddings − 1`.
    pub fn max_tokens(&self) -> usize {
        self.max_position_embeddings - self.pad_token_id - 1
    }

    /// Parameters used per token in matrix products (what FLOP counts use).
    pub fn matmul_parameter_count(&self) -> usize {
        let h = self.hidden_size;
        self.num_hidden_layers * (4 * h * h + 2 * h * self.intermediate_size)
    }
}

/// MPNet's attention names.
const MPNET_ATTENTION: AttentionNames = AttentionNames {
    qkv: ["attention.attn.q", "attention.attn.k", "attention.attn.v"],
    out: "attention.attn.o",
    norm: "attention.LayerNorm",
};

/// `MPNetAttention.relative_position_bucket` for `relative = key − query`: offsets
/// −7 … 7 get buckets of their own (keys after the query in the upper half), larger ones
/// share logarithmic buckets up to `max_distance`. Computed in f32 as PyTorch does.
pub fn relative_position_bucket(relative: i64, num_buckets: usize, max_distance: usize) -> usize {
    let half = num_buckets / 2;
    let n = -relative;
    let mut bucket = if n < 0 { half } else { 0 };
    let n = n.unsigned_abs() as usize;
    let max_exact = half / 2;
    if n < max_exact {
        bucket += n;
    } else {
        let scaled = ((n as f32 / max_exact as f32).ln() / (max_distance as f32 / max_exact as f32).ln() * (half - max_exact) as f32) as usize;
        bucket += (max_exact + scaled).min(half - 1);
    }
    bucket
}

/// Position ids of one padded row, as `create_position_ids_from_input_ids`: a token that is
/// not `pad` gets `pad` + the number of non-`pad` tokens up to it; a `pad` token gets `pad`.
pub fn position_ids(ids: &[i64], pad: i64) -> Vec<i64> {
    let mut seen = 0;
    ids.iter()
        .map(|&id| {
            if id == pad {
                pad
            } else {
                seen += 1;
                pad + seen
            }
        })
        .collect()
}

/// The MPNet encoder: embeddings, the relative-position bias and the layers.
#[derive(Debug, Clone)]
pub struct MpnetEncoder {
    /// Configuration.
    pub config: MpnetConfig,
    word: Tensor<2>,
    position: Tensor<2>,
    emb_norm: Norm,
    bias: RelativeBias,
    /// Layers.
    pub layers: Vec<EncoderLayer>,
}

impl MpnetEncoder {
    /// Loads weights (`mpnet.`-prefixed or not) and checks every shape against the config.
    pub fn load(config: &MpnetConfig, weights: &Weights, device: &Device) -> Result<MpnetEncoder, EncoderError> {
        let h = config.hidden_size;
        let heads = config.num_attention_heads;
        let sizes = (h, config.intermediate_size, config.layer_norm_eps);
        let layers = (0..config.num_hidden_layers)
            .map(|l| EncoderLayer::load(weights, &format!("encoder.layer.{l}"), &MPNET_ATTENTION, sizes, device))
            .collect::<Result<Vec<_>, _>>()?;
        // `nn.Embedding(buckets, heads)`: row = bucket, column = head.
        let table = weights.get("encoder.relative_attention_bias.weight", &[config.relative_attention_num_buckets, heads])?.values;
        let bias = RelativeBias::new(heads, config.max_tokens(), |r, head| {
            table[relative_position_bucket(r, RELATIVE_BUCKETS, RELATIVE_MAX_DISTANCE) * heads + head]
        });
        Ok(MpnetEncoder {
            config: config.clone(),
            word: tensor2(weights.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?, device),
            position: tensor2(weights.get("embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?, device),
            emb_norm: load_norm(weights, "embeddings.LayerNorm", h, config.layer_norm_eps, device)?,
            bias,
            layers,
        })
    }

    /// Last hidden states `[B, L, H]` for token ids `[B, L]`, their position ids (see
    /// [`position_ids`]) and a padding mask `[B, L]` (true = padding, at the end of each row);
    /// `lengths` are the real lengths, at most [`MpnetConfig::max_tokens`].
    pub fn forward(&self, ids: Tensor<2, Int>, positions: Tensor<2, Int>, padding: Tensor<2, Bool>, lengths: &[usize]) -> Tensor<3> {
        let x = embedding(self.word.clone(), ids) + embedding(self.position.clone(), positions);
        encode_layers(&self.layers, self.emb_norm.forward(x), padding, lengths, self.config.num_attention_heads, Some(&self.bias))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets of `relative_position_bucket(key − query)` as PyTorch computes them (checked
    /// against `MPNetAttention` for every offset up to ±600).
    #[test]
    fn buckets_match_pytorchs_table() {
        let bucket = |r: i64| relative_position_bucket(r, RELATIVE_BUCKETS, RELATIVE_MAX_DISTANCE);
        let table: &[(std::ops::RangeInclusive<i64>, usize)] = &[
            (0..=0, 0),
            (-11..=-8, 8),
            (-15..=-12, 9),
            (-22..=-16, 10),
            (-31..=-23, 11),
            (-45..=-32, 12),
            (-63..=-46, 13),
            (-90..=-64, 14),
            (-600..=-91, 15),
            (8..=11, 24),
            (12..=15, 25),
            (16..=22, 26),
            (23..=31, 27),
            (32..=45, 28),
            (46..=63, 29),
            (64..=90, 30),
            (91..=600, 31),
        ];
        for (range, want) in table {
            for r in range.clone() {
                assert_eq!(bucket(r), *want, "offset {r}");
            }
        }
        for r in 1..=7 {
            assert_eq!(bucket(-r), r as usize);
            assert_eq!(bucket(r), 16 + r as usize);
        }
    }

    #[test]
    fn position_ids_skip_pad_tokens_as_transformers_does() {
        assert_eq!(position_ids(&[0, 7672, 1, 2], 1), vec![2, 3, 1, 4]);
        assert_eq!(position_ids(&[0, 5, 2, 1, 1], 1), vec![2, 3, 4, 1, 1]);
    }

    #[test]
    fn configs_outside_what_mpnet_computes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let base = serde_json::json!({"model_type": "mpnet", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 20});
        std::fs::write(&path, base.to_string()).unwrap();
        let config = MpnetConfig::from_file(&path).unwrap();
        assert_eq!((config.pad_token_id, config.max_tokens(), config.layer_norm_eps), (1, 18, 1e-12));
        for (key, value, message) in [
            ("relative_attention_num_buckets", serde_json::json!(64), "32 buckets"),
            ("hidden_act", serde_json::json!("relu"), "hidden_act `relu`"),
            ("num_attention_heads", serde_json::json!(3), "multiple of num_attention_heads"),
        ] {
            let mut bad = base.clone();
            bad[key] = value;
            std::fs::write(&path, bad.to_string()).unwrap();
            let err = MpnetConfig::from_file(&path).unwrap_err().to_string();
            assert!(err.contains("config.json") && err.contains(message), "{key}: {err}");
        }
    }
}
