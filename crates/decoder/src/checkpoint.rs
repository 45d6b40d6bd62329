//! Where a model's weights come from: a Hugging Face folder (`model.safetensors`, or shards
//! listed in `model.safetensors.index.json`; f32/f16/bf16) or a GGUF file (dequantised as
//! ggml does, llama.cpp's q/k row permutation undone). Tensors are asked for by their Hugging
//! Face names; shapes are checked against the config.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gauge_tensor::weights::Weights;

use crate::gguf::Gguf;
use crate::DecoderError;

/// A model's weights, by Hugging Face tensor name.
pub enum Checkpoint {
    /// safetensors shards, each with the names it holds.
    Safetensors {
        /// Shard files in order.
        shards: Vec<Weights>,
        /// Tensor name → shard index.
        index: BTreeMap<String, usize>,
        /// The folder.
        dir: PathBuf,
    },
    /// A GGUF file.
    Gguf {
        /// The file.
        file: Box<Gguf>,
        /// llama.cpp permuted q/k rows for its adjacent-pair RoPE (llama, mistral files).
        permuted_qk: bool,
        /// Query heads and key/value heads, for the un-permutation.
        heads: (usize, usize),
        /// Keep Q8_0/Q4_0/Q4_1 matrices in their blocks (see [`crate::LoadOptions`]).
        keep_quantized: bool,
    },
}

/// The GGUF name of a Hugging Face tensor name.
pub fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, name) = rest.split_once('.')?;
    let (module, kind) = name.rsplit_once('.')?;
    let g = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{g}.{kind}"))
}

/// Undoes llama.cpp's q/k row permutation of `n` heads of `rows_per_head` rows of `cols`
/// elements each (f32 values, or the bytes of quantised rows):
/// `hf_row[h·d + s·d/2 + i] = gguf_row[h·d + 2i + s]`.
pub fn unpermute_rows<T: Copy + Default>(w: &[T], n: usize, rows_per_head: usize, cols: usize) -> Vec<T> {
    let half = rows_per_head / 2;
    let mut out = vec![T::default(); w.len()];
    for h in 0..n {
        for i in 0..half {
            for s in 0..2 {
                let src = (h * rows_per_head + 2 * i + s) * cols;
                let dst = (h * rows_per_head + s * half + i) * cols;
                out[dst..dst + cols].copy_from_slice(&w[src..src + cols]);
            }
        }
    }
    out
}

impl Checkpoint {
    /// The safetensors weights of a Hugging Face folder.
    pub fn open_folder(dir: &Path) -> Result<Checkpoint, DecoderError> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if single.is_file() {
            vec![single]
        } else if index_path.is_file() {
            let text = std::fs::read_to_string(&index_path).map_err(|e| DecoderError::file(&index_path, format!("cannot read ({e})")))?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| DecoderError::file(&index_path, format!("invalid JSON ({e})")))?;
            let map = v["weight_map"].as_object().ok_or_else(|| DecoderError::file(&index_path, "no `weight_map`".into()))?;
            let mut names: Vec<&str> = map.values().filter_map(|f| f.as_str()).collect();
            names.sort();
            names.dedup();
            names.into_iter().map(|n| dir.join(n)).collect()
        } else {
            return Err(DecoderError::file(dir, "no model.safetensors or model.safetensors.index.json".into()));
        };
        let mut shards = Vec::new();
        let mut index = BTreeMap::new();
        for (i, f) in files.iter().enumerate() {
            let w = Weights::open(f, &[""]).map_err(|e| DecoderError::Model(e.to_string()))?;
            for name in w.names() {
                index.insert(name, i);
            }
            shards.push(w);
        }
        Ok(Checkpoint::Safetensors { shards, index, dir: dir.to_path_buf() })
    }

    /// Whether a tensor exists.
    pub fn has(&self, hf: &str) -> bool {
        match self {
            Checkpoint::Safetensors { index, .. } => index.contains_key(hf),
            Checkpoint::Gguf { file, .. } => gguf_name(hf).is_some_and(|g| file.tensors.contains_key(&g)),
        }
    }

    /// A `[out, in]` matrix in its quantised GGUF blocks, when the file holds it in a type
    /// gauge computes with directly (Q8_0, Q4_0, Q4_1); q/k rows un-permuted like [`Self::get`].
    /// `None` unless the checkpoint was opened to keep quantised blocks.
    pub fn quantized(&self, hf: &str, d_out: usize, d_in: usize) -> Option<crate::quant::QuantMatrix> {
        let Checkpoint::Gguf { keep_quantized: true, .. } = self else { return None };
        let (ty, bytes) = self.raw_blocks(hf, d_out, d_in)?;
        crate::quant::QuantMatrix::supports(ty).then(|| crate::quant::QuantMatrix::new(ty, bytes, d_out, d_in))
    }

    /// A `[out, in]` matrix's raw ggml blocks, for any quantised GGUF type (Q8_0, Q4_0, Q4_1,
    /// Q4_K, Q6_K), q/k rows un-permuted like [`Self::get`], whether or not the checkpoint was
    /// opened to keep blocks; `None` for float tensors and safetensors. Dequantise with
    /// [`crate::gguf::dequantize`] (rows are whole blocks, so a row's bytes are
    /// `len / d_out`).
    pub fn raw_blocks(&self, hf: &str, d_out: usize, d_in: usize) -> Option<(crate::gguf::GgmlType, Vec<u8>)> {
        use crate::gguf::GgmlType;
        let Checkpoint::Gguf { file, permuted_qk, heads, .. } = self else { return None };
        let name = gguf_name(hf)?;
        let (info, raw) = file.raw(&name)?;
        if matches!(info.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16) || info.dims != [d_in, d_out] || !d_in.is_multiple_of(info.ty.block().0) {
            return None;
        }
        let is_q = name.ends_with("attn_q.weight");
        let is_k = name.ends_with("attn_k.weight");
        let bytes = if *permuted_qk && (is_q || is_k) {
            let n = if is_q { heads.0 } else { heads.1 };
            unpermute_rows(raw, n, d_out / n, raw.len() / d_out)
        } else {
            raw.to_vec()
        };
        Some((info.ty, bytes))
    }

    /// A tensor as row-major f32 of `shape` (Hugging Face layout: `[out, in]` for matrices).
    pub fn get(&self, hf: &str, shape: &[usize]) -> Result<Vec<f32>, DecoderError> {
        match self {
            Checkpoint::Safetensors { shards, index, dir } => {
                let &i = index.get(hf).ok_or_else(|| DecoderError::file(dir, format!("missing tensor `{hf}`")))?;
                Ok(shards[i].get(hf, shape).map_err(|e| DecoderError::Model(e.to_string()))?.values)
            }
            Checkpoint::Gguf { file, permuted_qk, heads, .. } => {
                let name = gguf_name(hf).ok_or_else(|| DecoderError::file(&file.path, format!("no GGUF name for `{hf}`")))?;
                let info = file.tensors.get(&name).ok_or_else(|| DecoderError::file(&file.path, format!("missing tensor `{name}` ({hf})")))?;
                let mut want: Vec<usize> = shape.to_vec();
                want.reverse();
                if info.dims != want {
                    return Err(DecoderError::file(&file.path, format!("tensor `{name}` has dims {:?}, the config implies {want:?}", info.dims)));
                }
                let values = file.dequantize(&name)?;
                let is_q = name.ends_with("attn_q.weight") || name.ends_with("attn_q.bias");
                let is_k = name.ends_with("attn_k.weight") || name.ends_with("attn_k.bias");
                if *permuted_qk && (is_q || is_k) {
                    let n = if is_q { heads.0 } else { heads.1 };
                    let rows = shape[0];
                    let cols = if shape.len() > 1 { shape[1] } else { 1 };
                    return Ok(unpermute_rows(&values, n, rows / n, cols));
                }
                Ok(values)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_the_qk_permutation() {
        assert_eq!(gguf_name("model.layers.7.self_attn.k_proj.weight").as_deref(), Some("blk.7.attn_k.weight"));
        assert_eq!(gguf_name("model.layers.0.mlp.down_proj.weight").as_deref(), Some("blk.0.ffn_down.weight"));
        assert_eq!(gguf_name("model.embed_tokens.weight").as_deref(), Some("token_embd.weight"));
        assert_eq!(gguf_name("model.layers.0.rotary.inv_freq"), None);
        // One head of 4 rows, 1 column: HF rows [a0 a1 | b0 b1] are stored as [a0 b0 a1 b1].
        let gguf = [10.0, 20.0, 11.0, 21.0];
        assert_eq!(unpermute_rows(&gguf, 1, 4, 1), vec![10.0, 11.0, 20.0, 21.0]);
    }
}
