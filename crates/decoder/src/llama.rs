//! The Llama architecture in Burn (weight names mirrored from the Hugging Face checkpoint):
//! RMSNorm, rotary position embeddings (rotate-half layout, Llama 3 scaling), grouped-query
//! causal attention with a KV cache, SiLU-gated MLP, tied or untied output head; q/k/v biases
//! when the checkpoint has them (Qwen2).
use gauge_tensor::Dense;
use gauge_tensor::burn::tensor::activation::{silu, softmax};
use gauge_tensor::burn::tensor::TensorData;
use gauge_tensor::device::{is_host_cpu, Device, Tensor};

use crate::adapter::{LoraAdapter, LoraPair};
use crate::checkpoint::Checkpoint;
use crate::host::{Embedding, HostBlock, HostCache, HostLinear, HostLora, HostModel, Step};
use crate::kernels::KernelPath;
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

/// A linear layer on a Burn device (f32; quantised blocks are a host-CPU matter, [`crate::host`]).
type Linear = Dense;

/// A host linear layer from a checkpoint's `[out, in]` weight (and bias): GGUF blocks stay
/// quantised, an adapter's pair for the module kept beside them (QLoRA's form, [`HostLora`]);
/// f32 weights take the pair merged (`W + s·B A`).
fn host_linear(ck: &Checkpoint, name: &str, d_in: usize, d_out: usize, adapter: Option<&LoraAdapter>) -> Result<HostLinear, DecoderError> {
    let bias_name = format!("{name}.bias");
    let bias = if ck.has(&bias_name) { Some(ck.get(&bias_name, &[d_out])?) } else { None };
    let pair = adapter_pair(name, d_in, d_out, adapter)?;
    if let Some(weight) = ck.quantized(&format!("{name}.weight"), d_out, d_in) {
        return Ok(match pair {
            Some((pair, scale)) => HostLinear::quant_adapted(weight, bias, HostLora::new(pair, scale)),
            None => HostLinear::quant(weight, bias),
        });
    }
    let delta = pair.map(|(p, scale)| p.delta(scale));
    let mut w = ck.get(&format!("{name}.weight"), &[d_out, d_in])?;
    if let Some(d) = delta {
        w.iter_mut().zip(d).for_each(|(w, d)| *w += d);
    }
    Ok(HostLinear::f32(w, bias, d_in, d_out))
}

/// The adapter's pair for the module `name` and its scale, when the adapter has it.
fn adapter_pair<'a>(name: &str, d_in: usize, d_out: usize, adapter: Option<&'a LoraAdapter>) -> Result<Option<(&'a LoraPair, f64)>, DecoderError> {
    match adapter.and_then(|a| a.modules.get(name).map(|p| (a, p))) {
        Some((_, p)) if (p.d_in, p.d_out) != (d_in, d_out) => {
            Err(DecoderError::Model(format!("adapter module `{name}` is [{}, {}], the model's is [{d_out}, {d_in}] (trained on another base?)", p.d_out, p.d_in)))
        }
        Some((a, p)) => Ok(Some((p, a.scale()))),
        None => Ok(None),
    }
}

/// The adapter's `s·B A` for the module `name`, when the adapter has it.
fn adapter_delta(name: &str, d_in: usize, d_out: usize, adapter: Option<&LoraAdapter>) -> Result<Option<Vec<f32>>, DecoderError> {
    Ok(adapter_pair(name, d_in, d_out, adapter)?.map(|(p, scale)| p.delta(scale)))
}

/// A Burn linear layer from a checkpoint's `[out, in]` weight (and bias, when present).
fn linear(ck: &Checkpoint, name: &str, d_in: usize, d_out: usize, adapter: Option<&LoraAdapter>, device: &Device) -> Result<Linear, DecoderError> {
    let bias_name = format!("{name}.bias");
    let bias = if ck.has(&bias_name) { Some(ck.get(&bias_name, &[d_out])?) } else { None };
    let delta = adapter_delta(name, d_in, d_out, adapter)?;
    let mut w = ck.get(&format!("{name}.weight"), &[d_out, d_in])?;
    if let Some(d) = delta {
        w.iter_mut().zip(d).for_each(|(w, d)| *w += d);
    }
    Ok(Dense::new(transpose(&w, d_out, d_in), bias.unwrap_or_else(|| vec![0.0; d_out]), d_in, d_out, device))
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

/// Keys and values of every position seen so far, per layer: on the host, position-major
/// buffers written in place ([`HostCache`]); on Burn devices, `[kv_heads, positions,
/// head_dim]` tensors.
#[derive(Clone)]
pub struct KvCache {
    inner: CacheInner,
}

#[derive(Clone)]
enum CacheInner {
    Burn { layers: Vec<Option<(Tensor<3>, Tensor<3>)>>, len: usize },
    Host(Box<HostCache>),
}

impl KvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        match &self.inner {
            CacheInner::Burn { len, .. } => *len,
            CacheInner::Host(h) => h.len(),
        }
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the first `n` positions (`0 < n ≤ len`) as a cache of their own, with room for
    /// `capacity` positions: the start of another prompt that shares them. `None` on Burn
    /// devices (their caches are not copied).
    pub fn prefix(&self, n: usize, capacity: usize) -> Option<KvCache> {
        match &self.inner {
            CacheInner::Host(h) => Some(KvCache { inner: CacheInner::Host(Box::new(h.prefix(n, capacity))) }),
            CacheInner::Burn { .. } => None,
        }
    }

    /// Bytes of keys and values held (host caches; 0 on Burn devices).
    pub fn n_bytes(&self) -> usize {
        match &self.inner {
            CacheInner::Burn { .. } => 0,
            CacheInner::Host(h) => h.n_bytes(),
        }
    }
}

/// A Llama-family causal language model.
pub struct Llama {
    /// The architecture.
    pub config: LlamaConfig,
    net: Net,
}

#[allow(clippy::large_enum_variant)] // one per model
enum Net {
    /// The host CPU: plain buffers, quantised kernels ([`crate::host`]).
    Host(HostModel),
    /// A Burn device (CUDA): tensors.
    Burn(BurnNet),
}

struct BurnNet {
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

    /// Builds the model from a checkpoint with a LoRA adapter on its projections: beside
    /// quantised blocks on the host CPU, merged into f32 weights otherwise.
    pub fn load_adapted(config: LlamaConfig, ck: &Checkpoint, adapter: Option<&LoraAdapter>, device: &Device) -> Result<Llama, DecoderError> {
        config.validate().map_err(DecoderError::Model)?;
        if is_host_cpu(device) {
            let host = Self::load_host(&config, ck, adapter)?;
            return Ok(Llama { config, net: Net::Host(host) });
        }
        let (h, hd, nh, nkv, ff, v) = (config.hidden_size, config.head_dim(), config.num_attention_heads, config.kv_heads(), config.intermediate_size, config.vocab_size);
        let embed_tokens = Embedding::F32(ck.get("model.embed_tokens.weight", &[v, h])?);
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
            let Embedding::F32(e) = &embed_tokens else { unreachable!("f32 on Burn devices") };
            Dense::new(transpose(e, v, h), vec![0.0; v], h, v, device)
        } else {
            linear(ck, "lm_head", h, v, None, device)?
        };
        let inv_freq = config.inv_freq();
        Ok(Llama { config, net: Net::Burn(BurnNet { embed_tokens, layers, norm, lm_head, inv_freq, device: device.clone() }) })
    }

    fn load_host(config: &LlamaConfig, ck: &Checkpoint, adapter: Option<&LoraAdapter>) -> Result<HostModel, DecoderError> {
        let (h, hd, nh, nkv, ff, v) = (config.hidden_size, config.head_dim(), config.num_attention_heads, config.kv_heads(), config.intermediate_size, config.vocab_size);
        let embed = match ck.quantized("model.embed_tokens.weight", v, h) {
            Some(q) => Embedding::Quant(q),
            None => Embedding::F32(ck.get("model.embed_tokens.weight", &[v, h])?),
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let lin = |name: &str, d_in, d_out| host_linear(ck, &format!("{p}.{name}"), d_in, d_out, adapter);
            layers.push(HostBlock {
                attn_norm: ck.get(&format!("{p}.input_layernorm.weight"), &[h])?,
                qkv: HostLinear::stack(vec![lin("self_attn.q_proj", h, nh * hd)?, lin("self_attn.k_proj", h, nkv * hd)?, lin("self_attn.v_proj", h, nkv * hd)?]),
                o: lin("self_attn.o_proj", nh * hd, h)?,
                ffn_norm: ck.get(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                gate_up: HostLinear::stack(vec![lin("mlp.gate_proj", h, ff)?, lin("mlp.up_proj", h, ff)?]),
                down: lin("mlp.down_proj", ff, h)?,
            });
        }
        let norm = ck.get("model.norm.weight", &[h])?;
        let lm_head = if config.tie_word_embeddings || !ck.has("lm_head.weight") {
            match &embed {
                Embedding::Quant(q) => HostLinear::quant(q.clone(), None),
                Embedding::F32(e) => HostLinear::f32(e.clone(), None, h, v),
            }
        } else {
            host_linear(ck, "lm_head", h, v, None)?
        };
        Ok(HostModel::new(config, embed, layers, norm, lm_head, KernelPath::best(), false))
    }

    /// The integer kernels' path on the host CPU (`None` on Burn devices).
    pub fn kernel_path(&self) -> Option<KernelPath> {
        match &self.net {
            Net::Host(m) => Some(m.kernel),
            Net::Burn(_) => None,
        }
    }

    /// Runs decoding steps on `path` (tests and benchmarks compare paths); fails when this
    /// machine cannot run it. No effect on Burn devices.
    pub fn set_kernel_path(&mut self, path: KernelPath) -> Result<(), DecoderError> {
        if !path.supported() {
            return Err(DecoderError::Model(format!("kernel path `{}` is not supported on this CPU (available: {})", path.name(), KernelPath::available().iter().map(|p| p.name()).collect::<Vec<_>>().join(", "))));
        }
        if let Net::Host(m) = &mut self.net {
            m.kernel = path;
        }
        Ok(())
    }

    /// Keeps keys and values of new caches in f16 (half the memory; as llama.cpp by default)
    /// instead of f32. Host CPU only.
    pub fn set_kv_f16(&mut self, on: bool) {
        if let Net::Host(m) = &mut self.net {
            m.kv_f16 = on;
        }
    }

    /// Whether this model runs on the host CPU path.
    pub fn is_host(&self) -> bool {
        matches!(self.net, Net::Host(_))
    }

    /// Bytes of weights a decoding step reads (every matrix once, quantised ones as stored).
    pub fn weight_bytes(&self) -> usize {
        let net = match &self.net {
            Net::Host(m) => {
                let per_layer: usize = m.layers.iter().map(|b| b.qkv.iter().chain(&b.gate_up).chain([&b.o, &b.down]).map(HostLinear::n_bytes).sum::<usize>() + 2 * self.config.hidden_size * 4).sum();
                return per_layer + m.lm_head.n_bytes() + self.config.hidden_size * 4;
            }
            Net::Burn(n) => n,
        };
        let lin = |d: &Linear| d.d_out() * d.d_in() * 4;
        let per_layer: usize = net.layers.iter().map(|b| [&b.q_proj, &b.k_proj, &b.v_proj, &b.o_proj, &b.gate_proj, &b.up_proj, &b.down_proj].into_iter().map(lin).sum::<usize>() + 2 * self.config.hidden_size * 4).sum();
        per_layer + lin(&net.lm_head) + self.config.hidden_size * 4
    }

    /// Parameters of the matrices (for FLOP counts: about 2 per parameter per token).
    pub fn matrix_parameters(&self) -> usize {
        let net = match &self.net {
            Net::Host(m) => {
                return m.layers.iter().map(|b| b.qkv.iter().chain(&b.gate_up).chain([&b.o, &b.down]).map(HostLinear::parameters).sum::<usize>()).sum::<usize>() + m.lm_head.parameters();
            }
            Net::Burn(n) => n,
        };
        let lin = |d: &Linear| d.d_out() * d.d_in();
        net.layers.iter().map(|b| [&b.q_proj, &b.k_proj, &b.v_proj, &b.o_proj, &b.gate_proj, &b.up_proj, &b.down_proj].into_iter().map(lin).sum::<usize>()).sum::<usize>() + lin(&net.lm_head)
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> KvCache {
        self.new_cache_with_capacity(0)
    }

    /// An empty cache with room for `positions` before it grows (the host cache is written
    /// in place; give the prompt plus the token budget).
    pub fn new_cache_with_capacity(&self, positions: usize) -> KvCache {
        match &self.net {
            Net::Host(m) => KvCache { inner: CacheInner::Host(Box::new(m.new_cache(&self.config, positions))) },
            Net::Burn(n) => KvCache { inner: CacheInner::Burn { layers: vec![None; n.layers.len()], len: 0 } },
        }
    }

    fn check_context(&self, positions: usize) -> Result<(), DecoderError> {
        let c = &self.config;
        if positions > c.max_position_embeddings.max(1) * 4 {
            return Err(DecoderError::Model(format!("{positions} positions exceed the model's context ({})", c.max_position_embeddings)));
        }
        Ok(())
    }

    /// Runs `ids` (the positions after those in `cache`), appends their keys and values to
    /// the cache, and returns the logits of the last position.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>, DecoderError> {
        if ids.is_empty() {
            return Err(DecoderError::Model("no tokens to run".into()));
        }
        self.check_context(cache.len() + ids.len())?;
        match (&self.net, &mut cache.inner) {
            (Net::Host(m), CacheInner::Host(h)) => Ok(m.forward(&self.config, &mut [Step { ids, cache: h }])?.remove(0)),
            (Net::Burn(n), CacheInner::Burn { layers, len }) => n.forward(&self.config, ids, layers, len),
            _ => Err(DecoderError::Model("a KV cache of another model".into())),
        }
    }

    /// One decoding step of several sequences at once: `tokens[i]` follows the positions in
    /// `caches[i]`. Every weight is read once for the whole batch; each sequence's logits
    /// are exactly those it would get alone.
    pub fn forward_batch(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>, DecoderError> {
        if tokens.len() != caches.len() || tokens.is_empty() {
            return Err(DecoderError::Model(format!("{} tokens for {} caches", tokens.len(), caches.len())));
        }
        for c in caches.iter() {
            self.check_context(c.len() + 1)?;
        }
        match &self.net {
            Net::Host(m) => {
                let mut steps = Vec::with_capacity(tokens.len());
                for (t, c) in tokens.iter().zip(caches.iter_mut()) {
                    match &mut c.inner {
                        CacheInner::Host(h) => steps.push(Step { ids: std::slice::from_ref(t), cache: h }),
                        CacheInner::Burn { .. } => return Err(DecoderError::Model("a KV cache of another model".into())),
                    }
                }
                m.forward(&self.config, &mut steps)
            }
            Net::Burn(_) => tokens.iter().zip(caches.iter_mut()).map(|(t, c)| self.forward(std::slice::from_ref(t), c)).collect(),
        }
    }
}

impl BurnNet {
    fn rms_norm(&self, c: &LlamaConfig, x: Tensor<2>, w: &Tensor<1>) -> Tensor<2> {
        let ms = (x.clone() * x.clone()).mean_dim(1);
        x / ms.add_scalar(c.rms_norm_eps).sqrt() * w.clone().unsqueeze::<2>()
    }

    /// cos and sin of every (position, dimension), `[1, t, head_dim]`, rotate-half layout.
    fn rope_tables(&self, c: &LlamaConfig, start: usize, t: usize) -> (Tensor<3>, Tensor<3>) {
        let hd = c.head_dim();
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


    fn forward(&self, c: &LlamaConfig, ids: &[u32], cache: &mut [Option<(Tensor<3>, Tensor<3>)>], cache_len: &mut usize) -> Result<Vec<f32>, DecoderError> {
        let (h, hd, nh, nkv) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.kv_heads());
        let (t, start) = (ids.len(), *cache_len);
        let mut rows = Vec::with_capacity(t * h);
        self.embed_tokens.rows(ids, c, &mut rows)?;
        let mut x: Tensor<2> = Tensor::from_data(TensorData::new(rows, [t, h]), &self.device);
        let (cos, sin) = self.rope_tables(c, start, t);
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
            let a = self.rms_norm(c, x.clone(), &b.input_layernorm);
            let q = b.q_proj.forward(a.clone()).reshape([t, nh, hd]).swap_dims(0, 1);
            let k = b.k_proj.forward(a.clone()).reshape([t, nkv, hd]).swap_dims(0, 1);
            let v = b.v_proj.forward(a).reshape([t, nkv, hd]).swap_dims(0, 1);
            let q = rope(q, &cos, &sin);
            let k = rope(k, &cos, &sin);
            let (k, v) = match cache[l].take() {
                Some((pk, pv)) => (Tensor::cat(vec![pk, k], 1), Tensor::cat(vec![pv, v], 1)),
                None => (k, v),
            };
            cache[l] = Some((k.clone(), v.clone()));
            // Grouped-query attention without copying keys and values per query head: the
            // query heads of one key/value head are stacked as rows ([kv_heads, group·t, hd]).
            let q = q.reshape([nkv, group * t, hd]);
            let mut scores = q.matmul(k.swap_dims(1, 2)).mul_scalar(scale);
            if let Some(m) = &mask {
                scores = scores + m.clone();
            }
            let attn = softmax(scores, 2).matmul(v).reshape([nh, t, hd]).swap_dims(0, 1).reshape([t, nh * hd]);
            x = x + b.o_proj.forward(attn);
            let m = self.rms_norm(c, x.clone(), &b.post_attention_layernorm);
            let gated = silu(b.gate_proj.forward(m.clone())) * b.up_proj.forward(m);
            x = x + b.down_proj.forward(gated);
        }
        *cache_len = s;
        let last = x.slice([t - 1..t, 0..h]);
        let logits = self.lm_head.forward(self.rms_norm(c, last, &self.norm));
        logits.into_data().convert::<f32>().into_vec::<f32>().map_err(|e| DecoderError::Model(format!("{e:?}")))
    }
}
