//! Reading `model.safetensors` into f32 arrays, with names with or without a `bert.` prefix
//! and shapes checked against the config.
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use crate::TensorError;

/// The weights of a checkpoint, decoded on demand.
pub struct Weights {
    bytes: Vec<u8>,
    path: PathBuf,
    prefixes: Vec<String>,
    /// Tensors replaced after loading (a merged LoRA adapter), by their name in the file.
    overrides: std::collections::HashMap<String, Vec<f32>>,
}

/// A decoded weight: row-major f32 values and shape.
pub struct WeightArray {
    /// Values.
    pub values: Vec<f32>,
    /// Shape.
    pub shape: Vec<usize>,
}

impl Weights {
    /// Reads a safetensors file; `prefixes` are tried before each name (e.g. `["", "bert."]`).
    pub fn open(path: &Path, prefixes: &[&str]) -> Result<Weights, TensorError> {
        let bytes = std::fs::read(path).map_err(|e| TensorError::file(path, format!("cannot read ({e})")))?;
        SafeTensors::deserialize(&bytes).map_err(|e| TensorError::file(path, format!("not a safetensors file ({e})")))?;
        Ok(Weights { bytes, path: path.to_path_buf(), prefixes: prefixes.iter().map(|p| p.to_string()).collect(), overrides: Default::default() })
    }

    /// BLAKE3 hash of the file's bytes (already in memory: no second read).
    pub fn hash(&self) -> String {
        gauge_core::hash::bytes_hash(&self.bytes)
    }

    fn tensors(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("checked at open")
    }

    /// Every tensor name in the file.
    pub fn names(&self) -> Vec<String> {
        self.tensors().names().into_iter().map(str::to_string).collect()
    }

    /// Whether a tensor exists under any prefix.
    pub fn contains(&self, name: &str) -> bool {
        self.resolve(name).is_some()
    }

    fn resolve(&self, name: &str) -> Option<String> {
        let st = self.tensors();
        let names = st.names();
        let alias = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta");
        for prefix in &self.prefixes {
            for candidate in [format!("{prefix}{name}"), format!("{prefix}{alias}")] {
                if names.iter().any(|n| **n == candidate) {
                    return Some(candidate);
                }
            }
        }
        None
    }

    /// Reads a tensor as f32, checking its shape.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<WeightArray, TensorError> {
        let full = self.resolve(name).ok_or_else(|| {
            TensorError::file(&self.path, format!("missing tensor `{name}` (tried prefixes {:?})", self.prefixes))
        })?;
        let st = self.tensors();
        let view = st.tensor(&full).expect("resolved name exists");
        if view.shape() == shape {
            if let Some(values) = self.overrides.get(&full) {
                return Ok(WeightArray { values: values.clone(), shape: shape.to_vec() });
            }
        }
        if view.shape() != shape {
            return Err(TensorError::file(
                &self.path,
                format!("tensor `{full}` has shape {:?}, but config.json implies {:?}", view.shape(), shape),
            ));
        }
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => return Err(TensorError::file(&self.path, format!("tensor `{full}` has unsupported dtype {other:?}"))),
        };
        Ok(WeightArray { values, shape: shape.to_vec() })
    }
}

impl Weights {
    /// Merges a LoRA adapter into the weights it adapts (`W + s·B A`, PEFT's merge): every
    /// module of the adapter must name a `[out, in]` weight of this checkpoint
    /// (`encoder.layer.0.attention.self.query` → `….query.weight`, with or without `bert.`).
    pub fn merge_adapter(&mut self, adapter: &crate::adapter::LoraAdapter, adapter_dir: &Path) -> Result<(), TensorError> {
        let scale = adapter.scale();
        for (module, pair) in &adapter.modules {
            let name = format!("{module}.weight");
            let full = self.resolve(&name).ok_or_else(|| {
                TensorError::file(adapter_dir, format!("adapts `{module}`, which {} does not have: the adapter was trained on another base model", self.path.display()))
            })?;
            let mut w = self.get(&full, &[pair.d_out, pair.d_in]).map_err(|e| TensorError::file(adapter_dir, format!("module `{module}` does not fit the base: {e}")))?;
            for (w, d) in w.values.iter_mut().zip(pair.delta(scale)) {
                *w += d;
            }
            self.overrides.insert(full, w.values);
        }
        Ok(())
    }
}

impl WeightArray {
    /// Transposes a 2-D array (PyTorch `[out, in]` → Burn `[in, out]`).
    pub fn transposed(self) -> WeightArray {
        let (r, c) = (self.shape[0], self.shape[1]);
        let mut out = vec![0.0f32; r * c];
        for i in 0..r {
            for j in 0..c {
                out[j * r + i] = self.values[i * c + j];
            }
        }
        WeightArray { values: out, shape: vec![c, r] }
    }
}
