//! `config.json` of a Llama-family model (field names as Hugging Face writes them), or the same
//! read from GGUF `llama.*` metadata.
use serde::{Deserialize, Serialize};

use crate::gguf::Gguf;

/// Llama 3's `rope_scaling` (`rope_type = "llama3"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RopeScaling {
    /// `llama3` (others are refused by name).
    #[serde(alias = "type")]
    pub rope_type: String,
    /// Context extension factor.
    #[serde(default = "one")]
    pub factor: f64,
    /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are divided by `factor`.
    #[serde(default = "one")]
    pub low_freq_factor: f64,
    /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
    #[serde(default = "four")]
    pub high_freq_factor: f64,
    /// The context the model was trained with.
    #[serde(default = "eight_k")]
    pub original_max_position_embeddings: usize,
}

fn one() -> f64 {
    1.0
}
fn four() -> f64 {
    4.0
}
fn eight_k() -> usize {
    8192
}

/// One or several token ids (`eos_token_id` may be a list).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum TokenIds {
    /// One id.
    One(u32),
    /// Several ids.
    Many(Vec<u32>),
}

impl TokenIds {
    /// The ids.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(i) => vec![*i],
            TokenIds::Many(v) => v.clone(),
        }
    }
}

/// The architecture of a Llama-family causal LM.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LlamaConfig {
    /// `model_type` (`llama`, `mistral`, `qwen2`).
    #[serde(default = "llama")]
    pub model_type: String,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the gated MLP.
    pub intermediate_size: usize,
    /// Decoder blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); default: the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Width of a head; default: hidden_size / num_attention_heads.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    /// RoPE base.
    #[serde(default = "theta")]
    pub rope_theta: f64,
    /// Llama 3 RoPE frequency scaling.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// The output head is the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry biases (Qwen2; Llama `attention_bias`).
    #[serde(default)]
    pub attention_bias: bool,
    /// Longest context.
    #[serde(default = "ctx")]
    pub max_position_embeddings: usize,
    /// Beginning-of-sequence id.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
}

fn llama() -> String {
    "llama".into()
}
fn eps() -> f64 {
    1e-6
}
fn theta() -> f64 {
    10_000.0
}
fn ctx() -> usize {
    2048
}

impl LlamaConfig {
    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of a head.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Checks what the model code assumes.
    pub fn validate(&self) -> Result<(), String> {
        if self.num_attention_heads == 0 || !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return Err(format!("{} query heads do not divide into {} key/value heads", self.num_attention_heads, self.kv_heads()));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!("head_dim {} is odd; RoPE needs pairs", self.head_dim()));
        }
        if let Some(s) = &self.rope_scaling {
            if s.rope_type != "llama3" && s.rope_type != "default" {
                return Err(format!("rope_scaling type `{}` is not supported (llama3, default)", s.rope_type));
            }
        }
        if !["llama", "mistral", "qwen2"].contains(&self.model_type.as_str()) {
            return Err(format!("model_type `{}` is not a Llama-family model gauge runs (llama, mistral, qwen2)", self.model_type));
        }
        Ok(())
    }

    /// The architecture from a Hugging Face `config.json`, as transformers 4 writes it
    /// (`rope_theta`, `rope_scaling`) or as transformers 5 does (both inside
    /// `rope_parameters`: `{"rope_theta": …, "rope_type": "default" | "llama3", "factor": …}`);
    /// read through the same fields either way, top-level fields winning.
    pub fn from_hf_json(mut json: serde_json::Value) -> Result<LlamaConfig, serde_json::Error> {
        if let Some(obj) = json.as_object_mut() {
            if let Some(params) = obj.get("rope_parameters").and_then(|p| p.as_object()).cloned() {
                if let Some(theta) = params.get("rope_theta") {
                    obj.entry("rope_theta").or_insert_with(|| theta.clone());
                }
                let kind = params.get("rope_type").or_else(|| params.get("type")).and_then(|t| t.as_str()).unwrap_or("default");
                if kind != "default" && obj.get("rope_scaling").is_none_or(|v| v.is_null()) {
                    obj.insert("rope_scaling".into(), serde_json::Value::Object(params));
                }
            }
        }
        serde_json::from_value(json)
    }

    /// The RoPE inverse frequencies (with Llama 3 scaling when configured).
    pub fn inv_freq(&self) -> Vec<f64> {
        let d = self.head_dim();
        let base: Vec<f64> = (0..d / 2).map(|i| self.rope_theta.powf(-(2.0 * i as f64) / d as f64)).collect();
        let Some(s) = self.rope_scaling.as_ref().filter(|s| s.rope_type == "llama3") else { return base };
        let old = s.original_max_position_embeddings as f64;
        let (low_wavelen, high_wavelen) = (old / s.low_freq_factor, old / s.high_freq_factor);
        base.into_iter()
            .map(|f| {
                let wavelen = 2.0 * std::f64::consts::PI / f;
                if wavelen < high_wavelen {
                    f
                } else if wavelen > low_wavelen {
                    f / s.factor
                } else {
                    let smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                    (1.0 - smooth) * f / s.factor + smooth * f
                }
            })
            .collect()
    }

    /// The architecture from a GGUF file's `<arch>.*` metadata (llama, mistral and qwen2 files).
    pub fn from_gguf(g: &Gguf) -> Result<LlamaConfig, String> {
        let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("llama").to_string();
        if !["llama", "mistral", "qwen2"].contains(&arch.as_str()) {
            return Err(format!("general.architecture `{arch}` is not a Llama-family model gauge runs (llama, mistral, qwen2)"));
        }
        let num = |key: &str| g.get(&format!("{arch}.{key}")).and_then(|v| v.as_u64()).map(|v| v as usize);
        let need = |key: &str| num(key).ok_or_else(|| format!("GGUF metadata has no `{arch}.{key}`"));
        let hidden = need("embedding_length")?;
        let heads = need("attention.head_count")?;
        let vocab = num("vocab_size").or_else(|| g.get("tokenizer.ggml.tokens").and_then(|t| t.as_array()).map(|a| a.len())).ok_or("GGUF metadata has no vocabulary size")?;
        let float = |key: &str| g.get(&format!("{arch}.{key}")).and_then(|v| v.as_f64());
        let rope_scaling = match g.get(&format!("{arch}.rope.scaling.type")).and_then(|v| v.as_str()) {
            Some("llama3") => Some(RopeScaling {
                rope_type: "llama3".into(),
                factor: float("rope.scaling.factor").unwrap_or(1.0),
                low_freq_factor: float("rope.scaling.low_freq_factor").unwrap_or(1.0),
                high_freq_factor: float("rope.scaling.high_freq_factor").unwrap_or(4.0),
                original_max_position_embeddings: num("rope.scaling.original_context_length").unwrap_or(8192),
            }),
            _ => None,
        };
        let config = LlamaConfig {
            model_type: arch.clone(),
            hidden_size: hidden,
            intermediate_size: need("feed_forward_length")?,
            num_hidden_layers: need("block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: num("attention.head_count_kv"),
            head_dim: num("rope.dimension_count").or(num("attention.key_length")),
            rms_norm_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-5),
            rope_theta: float("rope.freq_base").unwrap_or(10_000.0),
            rope_scaling,
            vocab_size: vocab,
            tie_word_embeddings: !g.tensors.contains_key("output.weight"),
            attention_bias: g.tensors.contains_key("blk.0.attn_q.bias"),
            max_position_embeddings: num("context_length").unwrap_or(2048),
            bos_token_id: g.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).map(|v| v as u32),
            eos_token_id: g.get("tokenizer.ggml.eos_token_id").and_then(|v| v.as_u64()).map(|v| TokenIds::One(v as u32)),
        };
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let mut c: LlamaConfig = serde_json::from_value(serde_json::json!({
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 1,
            "vocab_size": 10, "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        }))
        .unwrap();
        let scaled = c.inv_freq();
        c.rope_scaling = None;
        let plain = c.inv_freq();
        assert_eq!(scaled[0], plain[0]);
        assert!((scaled[31] - plain[31] / 8.0).abs() < 1e-18);
        assert!(c.validate().is_ok());
        c.num_key_value_heads = Some(3);
        assert!(c.validate().unwrap_err().contains("key/value heads"));
    }

    #[test]
    fn transformers_5_rope_parameters_read_like_the_flat_fields() {
        let shape = serde_json::json!({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 10});
        let with = |extra: serde_json::Value| {
            let mut j = shape.clone();
            j.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            LlamaConfig::from_hf_json(j).unwrap()
        };
        // SmolLM2's shape saved by transformers 5: theta only under rope_parameters.
        let v5 = with(serde_json::json!({"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}));
        assert_eq!(v5.rope_theta, 100000.0);
        assert_eq!(v5.rope_scaling, None);
        assert_eq!(v5, with(serde_json::json!({"rope_theta": 100000.0})));
        // Llama 3.2: the scaling factors too.
        let scaling = serde_json::json!({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let mut params = scaling.clone();
        params.as_object_mut().unwrap().insert("rope_theta".into(), 500000.0.into());
        let v5 = with(serde_json::json!({ "rope_parameters": params }));
        assert_eq!(v5, with(serde_json::json!({"rope_theta": 500000.0, "rope_scaling": scaling})));
        assert_eq!(v5.rope_scaling.as_ref().unwrap().factor, 32.0);
        // A kind gauge does not run is refused by name, not read as plain RoPE.
        let yarn = with(serde_json::json!({"rope_parameters": {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0}}));
        assert!(yarn.validate().unwrap_err().contains("yarn"));
        // Without either, the Llama default.
        assert_eq!(with(serde_json::json!({})).rope_theta, 10_000.0);
    }
}
