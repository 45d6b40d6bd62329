//! LoRA adapters in PEFT's folder format, so that adapters trained by gauge load in Python
//! (`PeftModel.from_pretrained`) and adapters trained with PEFT load in gauge:
//!
//! - `adapter_config.json`: `peft_type = "LORA"`, `task_type = "CAUSAL_LM"`, `r`, `lora_alpha`,
//!   `lora_dropout`, `target_modules`, `use_rslora`, `bias = "none"`, `base_model_name_or_path`, …
//! - `adapter_model.safetensors`: per adapted module, `base_model.model.<module>.lora_A.weight`
//!   (`[r, in]`) and `…lora_B.weight` (`[out, r]`), f32 (f16/bf16 are read too).
//!
//! A module's output becomes `x Wᵀ + s · (x Aᵀ) Bᵀ` with `s = lora_alpha / r`
//! (`lora_alpha / √r` with rsLoRA); merged, `W' = W + s · B A`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::TensorError;

/// Key prefix PEFT gives the wrapped model's tensors (causal LMs and feature extractors alike).
pub const PEFT_PREFIX: &str = "base_model.model.";

/// `adapter_config.json` (the fields gauge reads and writes; others are kept on load).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AdapterConfig {
    /// Always `LORA`.
    #[serde(default = "lora")]
    pub peft_type: String,
    /// `CAUSAL_LM` for decoders, `FEATURE_EXTRACTION` for encoders.
    #[serde(default)]
    pub task_type: Option<String>,
    /// Rank.
    pub r: usize,
    /// Scale numerator.
    pub lora_alpha: f64,
    /// Dropout on the adapter's input during training.
    #[serde(default)]
    pub lora_dropout: f64,
    /// Adapted projections by name (`q_proj`, …).
    pub target_modules: Vec<String>,
    /// rsLoRA scaling (`alpha / √r`).
    #[serde(default)]
    pub use_rslora: bool,
    /// Trained biases (gauge trains none).
    #[serde(default = "none")]
    pub bias: String,
    /// The base model the adapter was trained on.
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
    /// Whether the layers were written `[in, out]` (GPT-2 style); must be false.
    #[serde(default)]
    pub fan_in_fan_out: bool,
    /// PEFT reads this on load.
    #[serde(default = "yes")]
    pub inference_mode: bool,
    /// Other fields PEFT writes, kept as they are.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

fn lora() -> String {
    "LORA".into()
}
fn none() -> String {
    "none".into()
}
fn yes() -> bool {
    true
}

impl AdapterConfig {
    /// A config for rank `r`, `alpha`, on `targets`, with task type `CAUSAL_LM` (see
    /// [`Self::with_task_type`]).
    pub fn new(r: usize, lora_alpha: f64, lora_dropout: f64, targets: &[String], use_rslora: bool, base: Option<String>) -> AdapterConfig {
        let mut other = BTreeMap::new();
        for (k, v) in [("init_lora_weights", serde_json::json!(true)), ("layers_to_transform", serde_json::Value::Null), ("modules_to_save", serde_json::Value::Null), ("rank_pattern", serde_json::json!({})), ("alpha_pattern", serde_json::json!({})), ("use_dora", serde_json::json!(false)), ("revision", serde_json::Value::Null)] {
            other.insert(k.to_string(), v);
        }
        AdapterConfig { peft_type: lora(), task_type: Some("CAUSAL_LM".into()), r, lora_alpha, lora_dropout, target_modules: targets.to_vec(), use_rslora, bias: none(), base_model_name_or_path: base, fan_in_fan_out: false, inference_mode: true, other }
    }

    /// The same config with another PEFT `task_type` (`FEATURE_EXTRACTION`, `SEQ_CLS`, …).
    pub fn with_task_type(mut self, task_type: &str) -> AdapterConfig {
        self.task_type = Some(task_type.to_string());
        self
    }

    /// The factor on `B A`.
    pub fn scale(&self) -> f64 {
        lora_scale(self.r, self.lora_alpha, self.use_rslora)
    }
}

/// LoRA's factor on `B A`: `alpha / r`, or `alpha / √r` with rsLoRA (PEFT's `use_rslora`).
/// The one definition that training, saving and loading share.
pub fn lora_scale(r: usize, alpha: f64, rslora: bool) -> f64 {
    if rslora {
        alpha / (r as f64).sqrt()
    } else {
        alpha / r as f64
    }
}

/// One adapted module's two matrices, row-major f32.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraPair {
    /// `[r, in]`.
    pub a: Vec<f32>,
    /// `[out, r]`.
    pub b: Vec<f32>,
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
}

impl LoraPair {
    /// Rank.
    pub fn rank(&self) -> usize {
        self.a.len() / self.d_in
    }

    /// `scale · B A`, `[out, in]` row-major (f64 accumulation).
    pub fn delta(&self, scale: f64) -> Vec<f32> {
        let r = self.rank();
        let mut out = vec![0f32; self.d_out * self.d_in];
        for o in 0..self.d_out {
            let row = &mut out[o * self.d_in..(o + 1) * self.d_in];
            let mut acc = vec![0f64; self.d_in];
            for k in 0..r {
                let bk = self.b[o * r + k] as f64;
                if bk == 0.0 {
                    continue;
                }
                for (acc, &a) in acc.iter_mut().zip(&self.a[k * self.d_in..(k + 1) * self.d_in]) {
                    *acc += bk * a as f64;
                }
            }
            for (r, a) in row.iter_mut().zip(acc) {
                *r = (a * scale) as f32;
            }
        }
        out
    }
}

/// A LoRA adapter: its config and the matrices of every adapted module (by module path,
/// `model.layers.0.self_attn.q_proj`, `encoder.layer.0.attention.self.query`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraAdapter {
    /// `adapter_config.json`.
    pub config: AdapterConfig,
    /// Module path → A and B.
    pub modules: BTreeMap<String, LoraPair>,
}

fn read_floats(view: &safetensors::tensor::TensorView<'_>, path: &Path, key: &str) -> Result<Vec<f32>, TensorError> {
    use safetensors::Dtype;
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        other => return Err(TensorError::file(path, format!("tensor `{key}` has dtype {other:?}; adapters are f32, f16 or bf16"))),
    })
}

/// BLAKE3 over an adapter folder's `adapter_config.json` and `adapter_model.safetensors`
/// (what fingerprints name when a stage uses an adapter).
pub fn folder_hash(dir: &Path) -> Result<String, TensorError> {
    let mut bytes = Vec::new();
    for name in ["adapter_config.json", "adapter_model.safetensors"] {
        let p = dir.join(name);
        let b = std::fs::read(&p).map_err(|e| TensorError::file(&p, format!("cannot read ({e}); an adapter folder holds adapter_config.json and adapter_model.safetensors")))?;
        bytes.extend(gauge_core::hash::bytes_hash(&b).into_bytes());
    }
    Ok(gauge_core::hash::bytes_hash(&bytes))
}

impl LoraAdapter {
    /// The factor on `B A`.
    pub fn scale(&self) -> f64 {
        self.config.scale()
    }

    /// Trainable parameters.
    pub fn parameters(&self) -> usize {
        self.modules.values().map(|p| p.a.len() + p.b.len()).sum()
    }

    /// `scale · B A` of a module, when it is adapted.
    pub fn delta(&self, module: &str) -> Option<Vec<f32>> {
        self.modules.get(module).map(|p| p.delta(self.scale()))
    }

    /// Reads a PEFT adapter folder.
    pub fn load(dir: &Path) -> Result<LoraAdapter, TensorError> {
        let cfg_path = dir.join("adapter_config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| TensorError::file(&cfg_path, format!("cannot read ({e}); an adapter folder holds adapter_config.json and adapter_model.safetensors")))?;
        let config: AdapterConfig = serde_json::from_str(&text).map_err(|e| TensorError::file(&cfg_path, format!("not a PEFT adapter config ({e})")))?;
        if config.peft_type != "LORA" {
            return Err(TensorError::file(&cfg_path, format!("peft_type is {}; gauge loads LORA adapters", config.peft_type)));
        }
        if config.r == 0 {
            return Err(TensorError::file(&cfg_path, "r is 0; a LoRA adapter has rank 1 or more (is the config complete?)".into()));
        }
        if config.fan_in_fan_out || config.other.get("use_dora").and_then(|v| v.as_bool()).unwrap_or(false) {
            return Err(TensorError::file(&cfg_path, "fan_in_fan_out and DoRA adapters are not supported".into()));
        }
        let st_path = dir.join("adapter_model.safetensors");
        let bytes = std::fs::read(&st_path).map_err(|e| TensorError::file(&st_path, format!("cannot read ({e})")))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| TensorError::file(&st_path, format!("not safetensors ({e})")))?;
        // Module → (A, B), each as values and shape.
        type Half = Option<(Vec<f32>, Vec<usize>)>;
        let mut halves: BTreeMap<String, (Half, Half)> = BTreeMap::new();
        for (key, view) in st.tensors() {
            let name = key.strip_prefix(PEFT_PREFIX).unwrap_or(&key);
            let (module, which) = if let Some(m) = name.strip_suffix(".lora_A.weight").or_else(|| name.strip_suffix(".lora_A.default.weight")) {
                (m, 0)
            } else if let Some(m) = name.strip_suffix(".lora_B.weight").or_else(|| name.strip_suffix(".lora_B.default.weight")) {
                (m, 1)
            } else {
                return Err(TensorError::file(&st_path, format!("tensor `{key}` is not a LoRA A or B weight")));
            };
            let values = read_floats(&view, &st_path, &key)?;
            let entry = halves.entry(module.to_string()).or_default();
            let slot = (values, view.shape().to_vec());
            if which == 0 {
                entry.0 = Some(slot);
            } else {
                entry.1 = Some(slot);
            }
        }
        let mut modules = BTreeMap::new();
        for (module, (a, b)) in halves {
            let (Some((a, sa)), Some((b, sb))) = (a, b) else {
                return Err(TensorError::file(&st_path, format!("module `{module}` lacks its lora_A or lora_B weight")));
            };
            if sa.len() != 2 || sb.len() != 2 || sa[0] != config.r || sb[1] != config.r {
                return Err(TensorError::file(&st_path, format!("module `{module}`: A {sa:?} and B {sb:?} do not have rank r = {}", config.r)));
            }
            modules.insert(module, LoraPair { a, b, d_in: sa[1], d_out: sb[0] });
        }
        if modules.is_empty() {
            return Err(TensorError::file(&st_path, "holds no LoRA weights".into()));
        }
        Ok(LoraAdapter { config, modules })
    }

    /// Writes the folder (`adapter_config.json`, `adapter_model.safetensors`), replacing
    /// files only once both are written.
    pub fn save(&self, dir: &Path) -> Result<(), TensorError> {
        std::fs::create_dir_all(dir).map_err(|e| TensorError::file(dir, format!("cannot create ({e})")))?;
        let mut tensors: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
        for (module, p) in &self.modules {
            let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            tensors.push((format!("{PEFT_PREFIX}{module}.lora_A.weight"), bytes(&p.a), vec![p.rank(), p.d_in]));
            tensors.push((format!("{PEFT_PREFIX}{module}.lora_B.weight"), bytes(&p.b), vec![p.d_out, p.rank()]));
        }
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
            .iter()
            .map(|(k, b, s)| (k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).expect("tensor sizes match shapes")))
            .collect();
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        let st_bytes = safetensors::serialize(views, Some(meta)).map_err(|e| TensorError::file(dir, format!("cannot serialise the adapter ({e})")))?;
        let cfg = serde_json::to_string_pretty(&self.config).expect("config serialises");
        let write = |name: &str, data: &[u8]| -> Result<PathBuf, TensorError> {
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, data).map_err(|e| TensorError::file(&tmp, format!("cannot write ({e})")))?;
            Ok(tmp)
        };
        let t1 = write("adapter_model.safetensors", &st_bytes)?;
        let t2 = write("adapter_config.json", cfg.as_bytes())?;
        for (tmp, name) in [(t1, "adapter_model.safetensors"), (t2, "adapter_config.json")] {
            std::fs::rename(&tmp, dir.join(name)).map_err(|e| TensorError::file(&dir.join(name), format!("cannot write ({e})")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_then_load_is_identity_and_delta_is_scaled_ba() {
        let dir = tempfile::tempdir().unwrap();
        let mut modules = BTreeMap::new();
        modules.insert("model.layers.0.self_attn.q_proj".to_string(), LoraPair { a: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], b: vec![0.5, -1.0, 2.0, 0.0], d_in: 3, d_out: 2 });
        let cfg = AdapterConfig::new(2, 4.0, 0.0, &["q_proj".into()], false, Some("base".into()));
        let ad = LoraAdapter { config: cfg, modules };
        ad.save(dir.path()).unwrap();
        let back = LoraAdapter::load(dir.path()).unwrap();
        assert_eq!(back, ad);
        // scale 2; row 0 of B A = 0.5·[1 2 3] − 1·[4 5 6] = [−3.5 −4 −4.5].
        assert_eq!(&back.delta("model.layers.0.self_attn.q_proj").unwrap()[..3], &[-7.0, -8.0, -9.0]);
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("adapter_config.json")).unwrap()).unwrap();
        assert_eq!(json["task_type"], "CAUSAL_LM");
        assert_eq!(json["peft_type"], "LORA");
        // rsLoRA scales by alpha / √r instead of alpha / r.
        let rs = AdapterConfig::new(16, 16.0, 0.0, &["q_proj".into()], true, None);
        assert_eq!((rs.scale(), AdapterConfig { use_rslora: false, ..rs.clone() }.scale()), (4.0, 1.0));
    }

    #[test]
    fn a_folder_without_weights_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("adapter_config.json"), r#"{"r":4,"lora_alpha":8,"target_modules":["q_proj"]}"#).unwrap();
        let err = LoraAdapter::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("adapter_model.safetensors"), "{err}");
        // Rank 0 (its scale would be alpha / 0): refused at the config, naming it.
        std::fs::write(dir.path().join("adapter_config.json"), r#"{"r":0,"lora_alpha":8,"target_modules":["q_proj"]}"#).unwrap();
        let err = LoraAdapter::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("adapter_config.json") && err.contains("r is 0"), "{err}");
    }
}
