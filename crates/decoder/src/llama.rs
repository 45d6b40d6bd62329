//! The Llama architecture in Burn (weight names mirrored from the Hugging Face checkpoint):
//! RMSNorm, rotary position embeddings (rotate-half layout, Llama 3 scaling), grouped-query
//! causal attention with a KV cache, SiLU-gated MLP, tied or untied output head; q/k/v biases
//! when the checkpoint has them (Qwen2).
use gauge_encoder::bert::Dense;
use gauge_encoder::burn::tensor::activation::{silu, softmax};
use gauge_encoder::burn::tensor::TensorData;
use gauge_encoder::device::{is_host_cpu, Device, Tensor};

use crate::adapter::LoraAdapter;
use crate::checkpoint::Checkpoint;
use crate::quant::QuantMatrix;
use crate::config::LlamaConfig;
use crate::DecoderError;

/// Row-major `[rows, cols]` → `[cols, rows]`.
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; w.len()];
    const B: usize = 32;
    for r0 in (0..rows).step_by(B) {
        for c0 in (0..cols).step_by(B) {
            for r in r0..(r0 + B).min(rows) {
                for c in c0..(c0 + B).min(cols) {
                    out[c * rows + r] = w[r * cols + c];
                }
            }
        }
    }
    out
}

/// Rotary position embedding in the rotate-half layout: `x·cos + rotate_half(x)·sin`, with
/// `x` `[heads, t, head_dim]` and tables broadcastable to it.
pub fn rope(x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<3> {
    let [n, t, hd] = x.dims();
    let first = x.clone().slice([0..n, 0..t, 0..hd / 2]);
    let second = x.clone().slice([0..n, 0..t, hd / 2..hd]);
    let rotated = Tensor::cat(vec![second.neg(), first], 2);
    x * cos.clone() + rotated * sin.clone()
}

/// A linear layer: f32 (Burn, or gemm on the host), or quantised blocks on the host CPU.
#[allow(clippy::large_enum_variant)] // a few hundred per model, built once
enum Linear {
    Dense(Dense),
    Quant { weight: QuantMatrix, bias: Option<Vec<f32>> },
}

impl Linear {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        match self {
            Linear::Dense(d) => d.forward(x),
            Linear::Quant { weight, bias } => {
                let [rows, _] = x.dims();
                let device = x.device();
                let data = x.into_data().convert::<f32>();
                let mut out = weight.matmul(data.as_slice::<f32>().expect("f32 after convert"), rows);
                if let Some(b) = bias {
                    for row in out.chunks_exact_mut(b.len()) {
                        row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                    }
                }
                Tensor::from_data(TensorData::new(out, [rows, weight.d_out()]), &device)
            }
        }
    }
}

/// A linear layer from a checkpoint's `[out, in]` weight (and bias, when present); GGUF
/// blocks stay quantised on the host CPU.
fn linear(ck: &Checkpoint, name: &str, d_in: usize, d_out: usize, adapter: Option<&LoraAdapter>, device: &Device) -> Result<Linear, DecoderError> {
    let bias_name = format!("{name}.bias");
    let bias = if ck.has(&bias_name) { Some(ck.get(&bias_name, &[d_out])?) } else { None };
    let delta = match adapter.and_then(|a| a.modules.get(name).map(|p| (a, p))) {
        Some((_, p)) if (p.d_in, p.d_out) != (d_in, d_out) => {
            return Err(DecoderError::Model(format!("adapter module `{name}` is [{}, {}], the model's is [{d_out}, {d_in}] (trained on another base?)", p.d_out, p.d_in)));
        }
        Some((a, p)) => Some(p.delta(a.scale())),
        None => None,
    };
    if is_host_cpu(device) && delta.is_none() {
        if let Some(weight) = ck.quantized(&format!("{name}.weight"), d_out, d_in) {
            return Ok(Linear::Quant { weight, bias });
        }
    }
    let mut w = ck.get(&format!("{name}.weight"), &[d_out, d_in])?;
    if let Some(d) = delta {
        w.iter_mut().zip(d).for_each(|(w, d)| *w += d);
    }
    Ok(Linear::Dense(Dense::new(transpose(&w, d_out, d_in), bias.unwrap_or_else(|| vec![0.0; d_out]), d_in, d_out, device)))
}

/// The token embedding table: f32 rows, or quantised blocks dequantised a row at a time.
enum Embedding {
    F32(Vec<f32>),
    Quant(QuantMatrix),
}

struct Block {
    input_layernorm: Tensor<1>,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    post_attention_layernorm: Tensor<1>,
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// Keys and values of every position seen so far, per layer (`[kv_heads, positions, head_dim]`).
#[derive(Default, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor<3>, Tensor<3>)>>,
    len: usize,
}

impl KvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A Llama-family causal language model.
pub struct Llama {
    /// The architecture.
    pub config: LlamaConfig,
    embed_tokens: Embedding,
    layers: Vec<Block>,
    norm: Tensor<1>,
    lm_head: Linear,
    inv_freq: Vec<f64>,
    device: Device,
}

fn vector(ck: &Checkpoint, name: &str, n: usize, device: &Device) -> Result<Tensor<1>, DecoderError> {
    Ok(Tensor::from_data(TensorData::new(ck.get(name, &[n])?, [n]), device))
}

impl Llama {
    /// Builds the model from a checkpoint.
    pub fn load(config: LlamaConfig, ck: &Checkpoint, device: &Device) -> Result<Llama, DecoderError> {
        Self::load_adapted(config, ck, None, device)
    }

    /// Builds the model from a checkpoint with a LoRA adapter merged into its projections.
    pub fn load_adapted(config: LlamaConfig, ck: &Checkpoint, adapter: Option<&LoraAdapter>, device: &Device) -> Result<Llama, DecoderError> {
        config.validate().map_err(DecoderError::Model)?;
        let (h, hd, nh, nkv, ff, v) = (config.hidden_size, config.head_dim(), config.num_attention_heads, config.kv_heads(), config.intermediate_size, config.vocab_size);
        let quant_embed = if is_host_cpu(device) { ck.quantized("model.embed_tokens.weight", v, h) } else { None };
        let embed_tokens = match quant_embed {
            Some(q) => Embedding::Quant(q),
            None => Embedding::F32(ck.get("model.embed_tokens.weight", &[v, h])?),
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}");
            layers.push(Block {
                input_layernorm: vector(ck, &format!("{p}.input_layernorm.weight"), h, device)?,
                q_proj: linear(ck, &format!("{p}.self_attn.q_proj"), h, nh * hd, adapter, device)?,
                k_proj: linear(ck, &format!("{p}.self_attn.k_proj"), h, nkv * hd, adapter, device)?,
                v_proj: linear(ck, &format!("{p}.self_attn.v_proj"), h, nkv * hd, adapter, device)?,
                o_proj: linear(ck, &format!("{p}.self_attn.o_proj"), nh * hd, h, adapter, device)?,
                post_attention_layernorm: vector(ck, &format!("{p}.post_attention_layernorm.weight"), h, device)?,
                gate_proj: linear(ck, &format!("{p}.mlp.gate_proj"), h, ff, adapter, device)?,
                up_proj: linear(ck, &format!("{p}.mlp.up_proj"), h, ff, adapter, device)?,
                down_proj: linear(ck, &format!("{p}.mlp.down_proj"), ff, h, adapter, device)?,
            });
        }
        let norm = vector(ck, "model.norm.weight", h, device)?;
        let lm_head = if config.tie_word_embeddings || !ck.has("lm_head.weight") {
            match &embed_tokens {
                Embedding::Quant(q) => Linear::Quant { weight: q.clone(), bias: None },
                Embedding::F32(e) => Linear::Dense(Dense::new(transpose(e, v, h), vec![0.0; v], h, v, device)),
            }
        } else {
            linear(ck, "lm_head", h, v, None, device)?
        };
        let inv_freq = config.inv_freq();
        Ok(Llama { config, embed_tokens, layers, norm, lm_head, inv_freq, device: device.clone() })
    }

    /// Bytes of weights a decoding step reads (every matrix once, quantised ones as stored).
    pub fn weight_bytes(&self) -> usize {
        let lin = |l: &Linear| match l {
            Linear::Dense(d) => d.d_out() * d.d_in() * 4,
            Linear::Quant { weight, .. } => weight.n_bytes(),
        };
        let per_layer: usize = self.layers.iter().map(|b| [&b.q_proj, &b.k_proj, &b.v_proj, &b.o_proj, &b.gate_proj, &b.up_proj, &b.down_proj].into_iter().map(lin).sum::<usize>() + 2 * self.config.hidden_size * 4).sum();
        per_layer + lin(&self.lm_head) + self.config.hidden_size * 4
    }

    /// Parameters of the matrices (for FLOP counts: about 2 per parameter per token).
    pub fn matrix_parameters(&self) -> usize {
        let lin = |l: &Linear| match l {
            Linear::Dense(d) => d.d_out() * d.d_in(),
            Linear::Quant { weight, .. } => weight.d_out() * weight.d_in(),
        };
        self.layers.iter().map(|b| [&b.q_proj, &b.k_proj, &b.v_proj, &b.o_proj, &b.gate_proj, &b.up_proj, &b.down_proj].into_iter().map(lin).sum::<usize>()).sum::<usize>() + lin(&self.lm_head)
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache { layers: vec![None; self.layers.len()], len: 0 }
    }

    fn rms_norm(&self, x: Tensor<2>, w: &Tensor<1>) -> Tensor<2> {
        let ms = (x.clone() * x.clone()).mean_dim(1);
        x / ms.add_scalar(self.config.rms_norm_eps).sqrt() * w.clone().unsqueeze::<2>()
    }

    /// cos and sin of every (position, dimension), `[1, t, head_dim]`, rotate-half layout.
    fn rope_tables(&self, start: usize, t: usize) -> (Tensor<3>, Tensor<3>) {
        let hd = self.config.head_dim();
        let (mut cos, mut sin) = (Vec::with_capacity(t * hd), Vec::with_capacity(t * hd));
        for pos in start..start + t {
            for i in 0..hd {
                let angle = pos as f64 * self.inv_freq[i % (hd / 2)];
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        (Tensor::from_data(TensorData::new(cos, [1, t, hd]), &self.device), Tensor::from_data(TensorData::new(sin, [1, t, hd]), &self.device))
    }


    /// Runs `ids` (the positions after those in `cache`), appends their keys and values to
    /// the cache, and returns the logits of the last position.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>, DecoderError> {
        if ids.is_empty() {
            return Err(DecoderError::Model("no tokens to run".into()));
        }
        let c = &self.config;
        let (h, hd, nh, nkv) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.kv_heads());
        let (t, start) = (ids.len(), cache.len);
        if start + t > c.max_position_embeddings.max(1) * 4 {
            return Err(DecoderError::Model(format!("{} positions exceed the model's context ({})", start + t, c.max_position_embeddings)));
        }
        let mut rows = Vec::with_capacity(t * h);
        for &id in ids {
            let id = id as usize;
            if id >= c.vocab_size {
                return Err(DecoderError::Model(format!("token id {id} is outside the vocabulary ({})", c.vocab_size)));
            }
            match &self.embed_tokens {
                Embedding::F32(e) => rows.extend_from_slice(&e[id * h..(id + 1) * h]),
                Embedding::Quant(q) => {
                    let start = rows.len();
                    rows.resize(start + h, 0.0);
                    q.dequantize_row(id, &mut rows[start..]);
                }
            }
        }
        let mut x: Tensor<2> = Tensor::from_data(TensorData::new(rows, [t, h]), &self.device);
        let (cos, sin) = self.rope_tables(start, t);
        let s = start + t;
        // Causal mask: query t sees keys up to its own position.
        let group = nh / nkv;
        // Causal mask over the grouped query rows (each of the `group` query heads sharing a
        // key/value head repeats the `t` positions).
        let mask = (t > 1).then(|| {
            let m: Vec<f32> = (0..group * t).flat_map(|r| (0..s).map(move |j| if j <= start + r % t { 0.0 } else { f32::NEG_INFINITY })).collect();
            Tensor::<3>::from_data(TensorData::new(m, [1, group * t, s]), &self.device)
        });
        let scale = 1.0 / (hd as f64).sqrt();
        for (l, b) in self.layers.iter().enumerate() {
            let a = self.rms_norm(x.clone(), &b.input_layernorm);
            let q = b.q_proj.forward(a.clone()).reshape([t, nh, hd]).swap_dims(0, 1);
            let k = b.k_proj.forward(a.clone()).reshape([t, nkv, hd]).swap_dims(0, 1);
            let v = b.v_proj.forward(a).reshape([t, nkv, hd]).swap_dims(0, 1);
            let q = rope(q, &cos, &sin);
            let k = rope(k, &cos, &sin);
            let (k, v) = match cache.layers[l].take() {
                Some((pk, pv)) => (Tensor::cat(vec![pk, k], 1), Tensor::cat(vec![pv, v], 1)),
                None => (k, v),
            };
            cache.layers[l] = Some((k.clone(), v.clone()));
            // Grouped-query attention without copying keys and values per query head: the
            // query heads of one key/value head are stacked as rows ([kv_heads, group·t, hd]).
            let q = q.reshape([nkv, group * t, hd]);
            let mut scores = q.matmul(k.swap_dims(1, 2)).mul_scalar(scale);
            if let Some(m) = &mask {
                scores = scores + m.clone();
            }
            let attn = softmax(scores, 2).matmul(v).reshape([nh, t, hd]).swap_dims(0, 1).reshape([t, nh * hd]);
            x = x + b.o_proj.forward(attn);
            let m = self.rms_norm(x.clone(), &b.post_attention_layernorm);
            let gated = silu(b.gate_proj.forward(m.clone())) * b.up_proj.forward(m);
            x = x + b.down_proj.forward(gated);
        }
        cache.len = s;
        let last = x.slice([t - 1..t, 0..h]);
        let logits = self.lm_head.forward(self.rms_norm(last, &self.norm));
        logits.into_data().convert::<f32>().into_vec::<f32>().map_err(|e| DecoderError::Model(format!("{e:?}")))
    }
}
