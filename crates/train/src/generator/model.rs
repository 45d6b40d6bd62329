//! The Llama network for training: the frozen base (4-bit, see [`crate::generator::frozen`]) with LoRA
//! on any of the seven projections, run in Burn with autodiff.
//!
//! Memory is bounded by *layer-wise recomputation*: the forward pass runs without a graph and
//! keeps only each layer's input; the backward pass walks the layers from the top, rebuilds
//! one layer's graph from its saved input (its base matrices dequantised to f32 for that layer
//! only), and back-propagates the gradient that reached its output. So at most one layer's f32
//! base weights and one layer's graph are alive at a time; the price is one extra forward pass
//! (≈ 1.5x the FLOPs of a plain forward + backward through the activations).
//!
//! Loss: the sum over target positions of `−log softmax(logits_t)[id_{t+1}]` (positions whose
//! next token is an assistant token), times a weight the caller sets (one over the target
//! count of the accumulation window: a token-weighted mean). Only target positions go through
//! the output head.
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Int, TensorData};
use rayon::prelude::*;
use gauge_decoder::adapter::{module_path, PROJECTIONS};
use gauge_decoder::{Checkpoint, LlamaConfig};
use gauge_tensor::device::{Device, Tensor};

use crate::generator::frozen::{BaseStorage, Frozen};
use crate::generator::host;
use crate::TrainError;

mod host_step;
mod step;

/// Projection indices in [`PROJECTIONS`] order.
const N_PROJ: usize = 7;

/// What to adapt and how.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraShape {
    /// Rank.
    pub r: usize,
    /// Scale numerator.
    pub alpha: f64,
    /// rsLoRA (`alpha / √r`).
    pub rslora: bool,
    /// Adapted projections (indices into [`PROJECTIONS`]).
    pub targets: Vec<usize>,
}

impl LoraShape {
    /// The factor on `B A`.
    pub fn scale(&self) -> f64 {
        gauge_tensor::adapter::lora_scale(self.r, self.alpha, self.rslora)
    }
}

/// The trainable matrices: per adapted (layer, projection), A `[r, in]` then B `[out, r]`,
/// row-major f32, in layer-then-projection order (the order of [`LoraParams::tensors`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraParams {
    /// The shape of the adapter.
    pub shape: LoraShape,
    /// One entry per adapted module.
    pub modules: Vec<LoraModule>,
}

/// One adapted projection.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraModule {
    /// Layer.
    pub layer: usize,
    /// Projection index into [`PROJECTIONS`].
    pub proj: usize,
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
    /// `[r, in]`.
    pub a: Vec<f32>,
    /// `[out, r]`.
    pub b: Vec<f32>,
}

impl LoraModule {
    /// `model.layers.{l}.self_attn.q_proj` etc.
    pub fn path(&self) -> String {
        module_path(self.layer, PROJECTIONS[self.proj])
    }
}

impl LoraParams {
    /// Every tensor (A, B, A, B, …) as a slice, in a fixed order.
    pub fn tensors(&self) -> Vec<&[f32]> {
        self.modules.iter().flat_map(|m| [m.a.as_slice(), m.b.as_slice()]).collect()
    }

    /// Every tensor, mutable, in the order of [`Self::tensors`].
    pub fn tensors_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.modules.iter_mut().flat_map(|m| [&mut m.a, &mut m.b]).collect()
    }

    /// Trainable parameters.
    pub fn count(&self) -> usize {
        self.modules.iter().map(|m| m.a.len() + m.b.len()).sum()
    }

    /// Zeros shaped like every tensor.
    pub fn zeros_like(&self) -> Vec<Vec<f32>> {
        self.tensors().iter().map(|t| vec![0.0; t.len()]).collect()
    }

    /// As a PEFT adapter.
    pub fn to_adapter(&self, dropout: f64, base: Option<String>) -> gauge_decoder::LoraAdapter {
        let targets: Vec<String> = self.shape.targets.iter().map(|&p| PROJECTIONS[p].to_string()).collect();
        let config = gauge_decoder::AdapterConfig::new(self.shape.r, self.shape.alpha, dropout, &targets, self.shape.rslora, base);
        let modules = self.modules.iter().map(|m| (m.path(), gauge_decoder::LoraPair { a: m.a.clone(), b: m.b.clone(), d_in: m.d_in, d_out: m.d_out })).collect();
        gauge_decoder::LoraAdapter { config, modules }
    }
}

struct FrozenLayer {
    input_layernorm: Vec<f32>,
    post_attention_layernorm: Vec<f32>,
    proj: Vec<Frozen>,
    bias: Vec<Option<Vec<f32>>>,
}

/// One training sequence: token ids and, per position, whether the *next* token is a target.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequence {
    /// Token ids.
    pub ids: Vec<u32>,
    /// `target[t]`: position t's prediction of `ids[t + 1]` counts (length `ids.len() − 1`).
    pub target: Vec<bool>,
}

impl Sequence {
    /// From ids and a per-token mask of the tokens to learn (the assistant's): position t is a
    /// target when token t + 1 is learned.
    pub fn from_response_mask(ids: Vec<u32>, learned: &[bool]) -> Sequence {
        let target = (0..ids.len().saturating_sub(1)).map(|t| learned[t + 1]).collect();
        Sequence { ids, target }
    }

    /// Target positions.
    pub fn n_targets(&self) -> usize {
        self.target.iter().filter(|&&t| t).count()
    }
}

/// One sequence's gradients from one layer: (tensor index, values) per adapter tensor, and the
/// gradient reaching the layer's input.
type LayerGrads = (Vec<(usize, Vec<f32>)>, Option<Tensor<2>>);

/// Rows of the output head dequantised to f32 at a time.
pub const HEAD_SLICE: usize = 8192;

/// Per-module dropout masks of one sequence in one layer (`None`: no dropout).
type Masks = Vec<Option<Tensor<2>>>;

/// The frozen base, ready to train adapters on.
pub struct TrainableLlama {
    /// The architecture.
    pub config: LlamaConfig,
    embed: Frozen,
    layers: Vec<FrozenLayer>,
    norm: Vec<f32>,
    /// `None`: tied to the embeddings.
    lm_head: Option<Frozen>,
    inv_freq: Vec<f64>,
    device: Device,
    ad_device: Device,
    kernels: TrainKernels,
    /// Layers recomputed together in the backward pass (host kernels): 1 recomputes each
    /// layer from its input, the layer count keeps everything (no recomputation).
    recompute_group: usize,
}

/// Which implementation runs the training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainKernels {
    /// [`crate::generator::host`]: fused, threaded CPU kernels and `gemm` on host memory (CPU devices).
    Host,
    /// Burn ops with autodiff on the device (CUDA, and the reference on the CPU); always
    /// recomputes layer by layer.
    Burn,
}

/// [`TrainKernels::Host`] on a CPU device unless `GAUGE_TRAIN_KERNELS=burn`; Burn elsewhere.
pub(crate) fn default_kernels(device: &Device) -> TrainKernels {
    if gauge_tensor::device::is_host_cpu(device) && std::env::var("GAUGE_TRAIN_KERNELS").as_deref() != Ok("burn") {
        TrainKernels::Host
    } else {
        TrainKernels::Burn
    }
}

/// `kernels` if `device` can run them (the host kernels need a CPU device).
pub(crate) fn kernels_for(device: &Device, kernels: TrainKernels) -> Result<TrainKernels, TrainError> {
    if kernels == TrainKernels::Host && !gauge_tensor::device::is_host_cpu(device) {
        return Err(TrainError::Config("the host training kernels run on the CPU; use the Burn kernels on this device".into()));
    }
    Ok(kernels)
}

fn t1(v: &[f32], device: &Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), device)
}

fn t2(v: Vec<f32>, shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// A tensor's values.
pub fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().expect("f32 tensor data")
}

/// RoPE tables for the query and the key heads.
struct Rope {
    q: (Tensor<3>, Tensor<3>),
    k: (Tensor<3>, Tensor<3>),
}

/// A layer's base matrices as f32 tensors (for one pass).
struct LayerWeights {
    w_t: Vec<Tensor<2>>,
    bias: Vec<Option<Tensor<1>>>,
    n1: Tensor<1>,
    n2: Tensor<1>,
}

/// A layer's LoRA tensors: per projection, `Aᵀ` `[in, r]` and `Bᵀ` `[r, out]` (or none), and the
/// leaves to read gradients from.
struct LayerLora {
    a: Vec<Option<Tensor<2>>>,
    b: Vec<Option<Tensor<2>>>,
}

impl TrainableLlama {
    /// Builds the trainable network from a checkpoint; matrices held as `storage` says.
    pub fn load(config: LlamaConfig, ck: &Checkpoint, storage: BaseStorage, device: &Device) -> Result<TrainableLlama, TrainError> {
        config.validate().map_err(TrainError::Model)?;
        let (h, hd, nh, nkv, ff, v) = (config.hidden_size, config.head_dim(), config.num_attention_heads, config.kv_heads(), config.intermediate_size, config.vocab_size);
        let dims = [(h, nh * hd), (h, nkv * hd), (h, nkv * hd), (nh * hd, h), (h, ff), (h, ff), (ff, h)];
        let embed = Frozen::load(ck, "model.embed_tokens.weight", v, h, storage)?;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let mut proj = Vec::with_capacity(N_PROJ);
            let mut bias = Vec::with_capacity(N_PROJ);
            for (p, &(d_in, d_out)) in dims.iter().enumerate() {
                let name = module_path(l, PROJECTIONS[p]);
                proj.push(Frozen::load(ck, &format!("{name}.weight"), d_out, d_in, storage)?);
                let bn = format!("{name}.bias");
                bias.push(if ck.has(&bn) { Some(ck.get(&bn, &[d_out])?) } else { None });
            }
            layers.push(FrozenLayer {
                input_layernorm: ck.get(&format!("model.layers.{l}.input_layernorm.weight"), &[h])?,
                post_attention_layernorm: ck.get(&format!("model.layers.{l}.post_attention_layernorm.weight"), &[h])?,
                proj,
                bias,
            });
        }
        let norm = ck.get("model.norm.weight", &[h])?;
        let lm_head = if config.tie_word_embeddings || !ck.has("lm_head.weight") { None } else { Some(Frozen::load(ck, "lm_head.weight", v, h, storage)?) };
        let inv_freq = config.inv_freq();
        let ad_device = burn::DispatchDevice::autodiff(device.clone());
        // The host kernels on a CPU device; `GAUGE_TRAIN_KERNELS=burn` keeps Burn's ops (the
        // reference, for comparisons).
        let kernels = default_kernels(device);
        Ok(TrainableLlama { config, embed, layers, norm, lm_head, inv_freq, device: device.clone(), ad_device, kernels, recompute_group: 1 })
    }

    /// The kernels the step runs on.
    pub fn kernels(&self) -> TrainKernels {
        self.kernels
    }

    /// Runs the step on `kernels` (the host kernels need a CPU device).
    pub fn set_kernels(&mut self, kernels: TrainKernels) -> Result<(), TrainError> {
        self.kernels = kernels_for(&self.device, kernels)?;
        Ok(())
    }

    /// Recomputes `group` layers at a time in the backward pass, the top `group` layers kept
    /// from the forward pass (1: each layer from its saved input; the layer count or more:
    /// keeps every activation). The result does not change.
    pub fn set_recompute_group(&mut self, group: usize) {
        self.recompute_group = group.clamp(1, self.layers.len().max(1));
    }

    /// Layers recomputed together (see [`Self::set_recompute_group`]).
    pub fn recompute_group(&self) -> usize {
        self.recompute_group
    }

    /// Number of decoder layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Estimated bytes the step holds beyond the base and the adapter for sequences of
    /// `lens` tokens with `targets` target positions, recomputing `group` layers at a time
    /// (host kernels), with adapters of `shape` (and their dropout masks when `dropout`): saved
    /// layer inputs, kept activations, one layer's f32 matrices, the head's slice.
    pub fn step_bytes_estimate(&self, lens: &[usize], targets: usize, group: usize, shape: &LoraShape, dropout: bool) -> usize {
        let d = self.dims();
        let l = self.layers.len();
        let group = group.clamp(1, l.max(1));
        let groups = l.div_ceil(group);
        let tokens: usize = lens.iter().sum();
        let inputs = (groups - 1) * tokens * d.h * 4;
        // With dropout, each adapted projection's mask over its input is kept too.
        let masks: usize = if dropout { shape.targets.iter().map(|&p| d.proj(p).0).sum() } else { 0 };
        let acts_layer: usize = lens.iter().map(|&t| t * (d.h + masks + d.act_floats_per_token(t, shape.r, shape.targets.len())) * 4).sum();
        // The backward pass of one layer holds a few gradients of its widest activation, and
        // each thread a head's scores and their gradient `[t, t]`.
        let threads = rayon::current_num_threads();
        let working: usize = lens.iter().map(|&t| (t * (3 * d.ff + 2 * d.h) + 2 * threads * t * t) * 4).max().unwrap_or(0);
        let head = HEAD_SLICE * (targets + self.head().d_in) * 4 + targets * d.h * 8;
        inputs + group * acts_layer + working + self.layer_f32_bytes() + head
    }

    /// `(d_in, d_out)` of projection `p`.
    pub fn projection_dims(&self, p: usize) -> (usize, usize) {
        let f = &self.layers[0].proj[p];
        (f.d_in, f.d_out)
    }

    /// Bytes of the frozen base as held, and its storage kinds (e.g. `Q4_1`, `nf4`).
    pub fn base_bytes(&self) -> (usize, Vec<String>) {
        let mut kinds: Vec<String> = self.layers.iter().flat_map(|l| l.proj.iter().map(|p| p.kind())).collect();
        kinds.push(self.embed.kind());
        kinds.sort();
        kinds.dedup();
        let bytes = self.layers.iter().map(|l| l.proj.iter().map(Frozen::n_bytes).sum::<usize>()).sum::<usize>() + self.embed.n_bytes() + self.lm_head.as_ref().map_or(0, Frozen::n_bytes);
        (bytes, kinds)
    }

    /// Largest f32 bytes of one layer's dequantised matrices (alive during a layer's pass).
    pub fn layer_f32_bytes(&self) -> usize {
        self.layers.first().map(|l| l.proj.iter().map(|p| p.d_in * p.d_out * 4).sum()).unwrap_or(0)
    }

    /// Multiply-adds per token of the frozen matrices (projections and head).
    pub fn matrix_parameters(&self) -> usize {
        self.layers.iter().map(|l| l.proj.iter().map(|p| p.d_in * p.d_out).sum::<usize>()).sum::<usize>() + self.head().d_in * self.head().d_out
    }

    /// New adapter matrices initialised like PEFT: A Kaiming-uniform with a = √5 (uniform in
    /// ±1/√in), B zeros; seeded.
    pub fn init_lora(&self, shape: LoraShape, seed: u64) -> LoraParams {
        let mut rng = gauge_core::rng::SplitMix64::new(seed);
        let mut modules = Vec::new();
        for layer in 0..self.layers.len() {
            for &proj in &shape.targets {
                let (d_in, d_out) = self.projection_dims(proj);
                let bound = 1.0 / (d_in as f64).sqrt();
                let a = (0..shape.r * d_in).map(|_| ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * bound).map(|x| x as f32).collect();
                modules.push(LoraModule { layer, proj, d_in, d_out, a, b: vec![0.0; d_out * shape.r] });
            }
        }
        LoraParams { shape, modules }
    }

    fn layer_weights(&self, l: usize, device: &Device) -> LayerWeights {
        let layer = &self.layers[l];
        let w_t = layer.proj.iter().map(|p| t2(p.dequantize_transposed(), [p.d_in, p.d_out], device)).collect();
        let bias = layer.bias.iter().map(|b| b.as_ref().map(|b| t1(b, device))).collect();
        LayerWeights { w_t, bias, n1: t1(&layer.input_layernorm, device), n2: t1(&layer.post_attention_layernorm, device) }
    }

    /// A layer's LoRA tensors on `device`; with `track`, as autodiff leaves.
    fn layer_lora(&self, params: &LoraParams, l: usize, device: &Device, track: bool) -> (LayerLora, Vec<(usize, Tensor<2>, Tensor<2>)>) {
        let mut a = vec![None; N_PROJ];
        let mut b = vec![None; N_PROJ];
        let mut leaves = Vec::new();
        for (i, m) in params.modules.iter().enumerate().filter(|(_, m)| m.layer == l) {
            let r = params.shape.r;
            let mut ta = t2(m.a.clone(), [r, m.d_in], device);
            let mut tb = t2(m.b.clone(), [m.d_out, r], device);
            if track {
                ta = ta.require_grad();
                tb = tb.require_grad();
                leaves.push((i, ta.clone(), tb.clone()));
            }
            a[m.proj] = Some(ta.transpose());
            b[m.proj] = Some(tb.transpose());
        }
        (LayerLora { a, b }, leaves)
    }

    fn rms_norm(&self, x: Tensor<2>, w: &Tensor<1>) -> Tensor<2> {
        let ms = (x.clone() * x.clone()).mean_dim(1);
        x / ms.add_scalar(self.config.rms_norm_eps).sqrt() * w.clone().unsqueeze::<2>()
    }

    /// cos and sin tables `[heads, t, head_dim]` for the query and the key heads, materialised
    /// at full shape (broadcasting a `[1, t, hd]` table goes through burn-flex's slow strided
    /// path).
    fn rope_tables(&self, t: usize, device: &Device) -> Rope {
        let hd = self.config.head_dim();
        let (mut cos, mut sin) = (Vec::with_capacity(t * hd), Vec::with_capacity(t * hd));
        for pos in 0..t {
            for i in 0..hd {
                let angle = pos as f64 * self.inv_freq[i % (hd / 2)];
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let tile = |v: &[f32], n: usize| Tensor::<3>::from_data(TensorData::new(v.repeat(n), [n, t, hd]), device);
        let (nh, nkv) = (self.config.num_attention_heads, self.config.kv_heads());
        Rope { q: (tile(&cos, nh), tile(&sin, nh)), k: (tile(&cos, nkv), tile(&sin, nkv)) }
    }


    /// The causal mask over the grouped query rows, `[kv_heads, group·t, t]` (full shape, see
    /// [`Self::rope_tables`]).
    fn causal_mask(&self, t: usize, device: &Device) -> Tensor<3> {
        let nkv = self.config.kv_heads();
        let group = self.config.num_attention_heads / nkv;
        let m: Vec<f32> = (0..group * t).flat_map(|r| (0..t).map(move |j| if j <= r % t { 0.0 } else { f32::NEG_INFINITY })).collect();
        Tensor::from_data(TensorData::new(m.repeat(nkv), [nkv, group * t, t]), device)
    }

    /// `x Wᵀ (+ bias) + s · (drop(x) Aᵀ) Bᵀ`.
    fn project(x: &Tensor<2>, p: usize, w: &LayerWeights, lora: &LayerLora, scale: f64, masks: &Masks) -> Tensor<2> {
        let mut y = x.clone().matmul(w.w_t[p].clone());
        if let Some(b) = &w.bias[p] {
            y = y + b.clone().unsqueeze::<2>();
        }
        if let (Some(a), Some(b)) = (&lora.a[p], &lora.b[p]) {
            let xin = match &masks[p] {
                Some(m) => x.clone() * m.clone(),
                None => x.clone(),
            };
            y = y + xin.matmul(a.clone()).matmul(b.clone()).mul_scalar(scale);
        }
        y
    }

    /// One decoder block.
    /// (`rope`, `mask`: the positions' rotary table and the causal mask.)
    fn block(&self, x: Tensor<2>, w: &LayerWeights, lora: &LayerLora, scale: f64, masks: &Masks, (rope, mask): (&Rope, &Tensor<3>)) -> Tensor<2> {
        let c = &self.config;
        let (hd, nh, nkv) = (c.head_dim(), c.num_attention_heads, c.kv_heads());
        let [t, _] = x.dims();
        let group = nh / nkv;
        let a = self.rms_norm(x.clone(), &w.n1);
        let q = Self::project(&a, 0, w, lora, scale, masks).reshape([t, nh, hd]).swap_dims(0, 1);
        let k = Self::project(&a, 1, w, lora, scale, masks).reshape([t, nkv, hd]).swap_dims(0, 1);
        let v = Self::project(&a, 2, w, lora, scale, masks).reshape([t, nkv, hd]).swap_dims(0, 1);
        let q = gauge_decoder::llama::rope(q, &rope.q.0, &rope.q.1).reshape([nkv, group * t, hd]);
        let k = gauge_decoder::llama::rope(k, &rope.k.0, &rope.k.1);
        let scores = q.matmul(k.swap_dims(1, 2)).mul_scalar(1.0 / (hd as f64).sqrt()) + mask.clone();
        let attn = softmax(scores, 2).matmul(v).reshape([nh, t, hd]).swap_dims(0, 1).reshape([t, nh * hd]);
        let x = x + Self::project(&attn, 3, w, lora, scale, masks);
        let m = self.rms_norm(x.clone(), &w.n2);
        let gated = silu(Self::project(&m, 4, w, lora, scale, masks)) * Self::project(&m, 5, w, lora, scale, masks);
        x + Self::project(&gated, 6, w, lora, scale, masks)
    }

    fn embed(&self, ids: &[u32]) -> Result<Vec<f32>, TrainError> {
        let h = self.config.hidden_size;
        let mut rows = vec![0f32; ids.len() * h];
        for (i, &id) in ids.iter().enumerate() {
            if id as usize >= self.config.vocab_size {
                return Err(TrainError::Model(format!("token id {id} is outside the vocabulary ({})", self.config.vocab_size)));
            }
            self.embed.row(id as usize, &mut rows[i * h..(i + 1) * h]);
        }
        Ok(rows)
    }

    /// Dropout masks for sequence `s` in layer `l` (`keep / (1 − p)` or 0), from `seed`, as
    /// host values `[t, d_in]` per projection.
    fn mask_values(&self, params: &LoraParams, dropout: Option<(f64, u64)>, s: usize, l: usize, t: usize) -> Vec<Option<Vec<f32>>> {
        let mut masks = vec![None; N_PROJ];
        let Some((p, seed)) = dropout.filter(|(p, _)| *p > 0.0) else { return masks };
        for &proj in &params.shape.targets {
            let d_in = self.layers[l].proj[proj].d_in;
            let key = seed ^ ((s as u64) << 40) ^ ((l as u64) << 20) ^ (proj as u64 + 1).wrapping_mul(0x9E37_79B9);
            let mut rng = gauge_core::rng::SplitMix64::new(key);
            let keep = (1.0 / (1.0 - p)) as f32;
            masks[proj] = Some((0..t * d_in).map(|_| if ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p { 0.0 } else { keep }).collect());
        }
        masks
    }

    /// [`Self::mask_values`] as tensors on `device`.
    fn masks(&self, params: &LoraParams, dropout: Option<(f64, u64)>, s: usize, l: usize, t: usize, device: &Device) -> Masks {
        self.mask_values(params, dropout, s, l, t)
            .into_iter()
            .enumerate()
            .map(|(p, m)| m.map(|m| t2(m, [t, self.layers[l].proj[p].d_in], device)))
            .collect()
    }

    /// Forward without a graph: each layer's input per sequence (`inputs[l][s]`, `[T, h]`) and
    /// the last hidden states.
    fn forward_saving(&self, params: &LoraParams, seqs: &[Sequence], dropout: Option<(f64, u64)>) -> Result<(Vec<Vec<Tensor<2>>>, Vec<Tensor<2>>), TrainError> {
        let h = self.config.hidden_size;
        let scale = self.scale(params);
        let mut xs: Vec<Tensor<2>> = seqs.iter().map(|s| Ok(t2(self.embed(&s.ids)?, [s.ids.len(), h], &self.device))).collect::<Result<_, TrainError>>()?;
        let mut inputs = Vec::with_capacity(self.layers.len());
        let tables: Vec<(Rope, Tensor<3>)> = seqs.iter().map(|s| (self.rope_tables(s.ids.len(), &self.device), self.causal_mask(s.ids.len(), &self.device))).collect();
        for l in 0..self.layers.len() {
            let w = self.layer_weights(l, &self.device);
            let (lora, _) = self.layer_lora(params, l, &self.device, false);
            // Sequences run in parallel: burn-flex's element-wise kernels are single-threaded.
            let next: Vec<Tensor<2>> = xs
                .par_iter()
                .enumerate()
                .map(|(s, x)| {
                    let t = seqs[s].ids.len();
                    let (rope, mask) = &tables[s];
                    let masks = self.masks(params, dropout, s, l, t, &self.device);
                    self.block(x.clone(), &w, &lora, scale, &masks, (rope, mask))
                })
                .collect();
            inputs.push(std::mem::replace(&mut xs, next));
        }
        Ok((inputs, xs))
    }
}

/// Projection indices of `targets` names (`q_proj`, …, or `all`).
pub fn target_indices(targets: &[String]) -> Result<Vec<usize>, TrainError> {
    let mut out = Vec::new();
    for t in targets {
        if t == "all" || t == "all-linear" {
            out.extend(0..N_PROJ);
            continue;
        }
        let i = PROJECTIONS.iter().position(|p| p == t).ok_or_else(|| TrainError::Config(format!("unknown target module `{t}` (use q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj or all)")))?;
        out.push(i);
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(TrainError::Config("no target modules".into()));
    }
    Ok(out)
}
