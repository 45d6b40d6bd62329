//! BERT and MPNet encoders for training: the sentence embedder (pooled, normalised vectors)
//! and the cross-encoder (`BertForSequenceClassification`, one logit per pair), with LoRA on
//! the six linear modules of every layer or every weight trainable (full fine-tuning),
//! gradients by Burn autodiff over the same dispatch backend the inference encoder runs on.
//!
//! Parameters live on the host as named, row-major f32 arrays with the checkpoint's names
//! (`encoder.layer.0.attention.self.query.weight`, `[out, in]`; MPNet's
//! `encoder.layer.0.attention.attn.q.weight`) plus LoRA's (`….query.lora_A.weight` `[r, in]`,
//! `….lora_B.weight` `[out, r]`) and the classifier's; each step builds the graph from them,
//! so the optimiser, checkpoints and savers see plain arrays. The forward pass is Hugging
//! Face's `BertModel` / `MPNetModel` (post-norm, exact GELU, padded keys masked; MPNet's
//! relative-position bias added to the scores, its table frozen) written with differentiable
//! Burn ops; it is checked against the inference encoder and the fixtures in the tests.
//! Dropout is off (deterministic training).
use std::collections::HashMap;
use std::path::Path;

use burn::tensor::activation::{gelu, softmax};
use burn::tensor::module::embedding;
use burn::tensor::{Int, TensorData};
use gauge_tensor::device::{Device, Tensor};
use gauge_tensor::weights::Weights;
use gauge_encoder::bert::RelativeBias;
use gauge_encoder::mpnet::{relative_position_bucket, RELATIVE_BUCKETS, RELATIVE_MAX_DISTANCE};
use gauge_encoder::{BertConfig, EncoderConfig, MpnetConfig, Pooling};

use crate::generator::model::TrainKernels;
use crate::TrainError;
pub use crate::retriever::bert_types::{Arch, EncoderParams, EncoderTask, Encoded, Tuning, BERT_MODULES, MPNET_MODULES};
use crate::retriever::bert_types::{linear_name, max_tokens, positions};

/// Indices into [`Arch::modules`] of PEFT `target_modules` names: `all` (or `all-linear`),
/// or the architecture's names ([`Arch::peft_names`]: BERT's `query`, `key`, `value`,
/// `dense`; MPNet's `q`, `k`, `v`, `o`, `dense`), `dense` covering every module so named.
pub fn module_targets(names: &[String], arch: Arch) -> Result<Vec<usize>, TrainError> {
    let peft = arch.peft_names();
    let mut out = Vec::new();
    for n in names {
        let idx: Vec<usize> = match n.as_str() {
            "all" | "all-linear" => (0..6).collect(),
            other => (0..6).filter(|&m| peft[m] == other).collect(),
        };
        if idx.is_empty() {
            let mut known: Vec<&str> = peft.to_vec();
            known.dedup();
            return Err(TrainError::Config(format!("unknown encoder target module `{n}` for this {} base (expected {} or all)", arch.label(), known.join(", "))));
        }
        out.extend(idx);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The PEFT `target_modules` list of module indices.
pub fn target_names(targets: &[usize], arch: Arch) -> Vec<String> {
    let peft = arch.peft_names();
    let mut names: Vec<String> = Vec::new();
    for &t in targets {
        if !names.iter().any(|n| n == peft[t]) {
            names.push(peft[t].to_string());
        }
    }
    names
}

/// The trainable encoder.
pub struct TrainableBert {
    /// Architecture (an MPNet base's shape in BERT's fields: one token type, no table).
    pub config: BertConfig,
    /// BERT or MPNet.
    pub arch: Arch,
    /// Embedder or cross-encoder.
    pub task: EncoderTask,
    /// LoRA or full.
    pub tuning: Tuning,
    /// MPNet's relative-position bias, tabulated from its (frozen) table.
    bias: Option<RelativeBias>,
    device: Device,
    ad_device: Device,
    kernels: TrainKernels,
}

impl Arch {
    /// Reads a model folder's `config.json`: the architecture and its shape in BERT's fields.
    pub fn from_dir(dir: &Path) -> Result<(Arch, BertConfig), TrainError> {
        match EncoderConfig::from_file(&dir.join("config.json")).map_err(|e| TrainError::Model(e.to_string()))? {
            EncoderConfig::Bert(c) if c.is_roberta() => Err(TrainError::Config(format!("{}: train-lora's encoder targets train BERT and MPNet checkpoints; this is {}", dir.display(), c.model_type))),
            EncoderConfig::Bert(c) => Ok((Arch::Bert, c)),
            EncoderConfig::Mpnet(c) => Ok((Arch::Mpnet, mpnet_shape(&c))),
        }
    }
}

/// An MPNet config in BERT's fields (one token type; positions handled by [`Arch::Mpnet`]).
fn mpnet_shape(c: &MpnetConfig) -> BertConfig {
    BertConfig {
        model_type: c.model_type.clone(),
        architectures: c.architectures.clone(),
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: c.num_attention_heads,
        intermediate_size: c.intermediate_size,
        hidden_act: c.hidden_act.clone(),
        max_position_embeddings: c.max_position_embeddings,
        type_vocab_size: 1,
        layer_norm_eps: c.layer_norm_eps,
        pad_token_id: c.pad_token_id,
        position_embedding_type: "relative_key".into(),
        id2label: Default::default(),
    }
}

/// MPNet's relative-attention-bias table (`[buckets, heads]`).
pub const RELATIVE_BIAS: &str = "encoder.relative_attention_bias.weight";

/// Seeded normal(0, std) values (Box–Muller).
fn normal(n: usize, std: f64, rng: &mut gauge_core::rng::SplitMix64) -> Vec<f32> {
    let mut u = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (0..n).map(|_| ((-2.0 * u().ln()).sqrt() * (2.0 * std::f64::consts::PI * u()).cos() * std) as f32).collect()
}

impl TrainableBert {
    /// Loads a BERT or MPNet checkpoint folder (config.json + model.safetensors) as `task`,
    /// tuned as `tuning`. LoRA A matrices start Kaiming-uniform (PEFT), B at zero; a
    /// cross-encoder (BERT only) without a one-logit `classifier` gets a new one
    /// (normal(0, 0.02), bias 0, as `BertForSequenceClassification` initialises it) and,
    /// without a pooler, a new pooler. MPNet's relative-attention-bias table is loaded frozen
    /// (full tuning trains every other weight).
    pub fn load(dir: &Path, task: EncoderTask, tuning: Tuning, seed: u64, device: &Device) -> Result<(TrainableBert, EncoderParams), TrainError> {
        fn model(e: impl std::fmt::Display) -> TrainError {
            TrainError::Model(e.to_string())
        }
        let (arch, config) = Arch::from_dir(dir)?;
        if arch == Arch::Mpnet && task == EncoderTask::CrossEncoder {
            return Err(TrainError::Config(format!("{}: an MPNet base trains as --target embedder; the reranker (a cross-encoder) needs a BERT base", dir.display())));
        }
        let weights = Weights::open(&dir.join("model.safetensors"), &arch.weight_prefixes()).map_err(model)?;
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let full = matches!(tuning, Tuning::Full);
        let mut p = EncoderParams { names: vec![], shapes: vec![], values: vec![], trainable: vec![], by_name: HashMap::new() };
        let take = |p: &mut EncoderParams, name: &str, shape: Vec<usize>, trainable: bool| -> Result<(), TrainError> {
            let w = weights.get(name, &shape).map_err(model)?;
            p.push(name.to_string(), shape, w.values, trainable);
            Ok(())
        };
        take(&mut p, "embeddings.word_embeddings.weight", vec![config.vocab_size, h], full)?;
        take(&mut p, "embeddings.position_embeddings.weight", vec![config.max_position_embeddings, h], full)?;
        if arch == Arch::Bert {
            take(&mut p, "embeddings.token_type_embeddings.weight", vec![config.type_vocab_size, h], full)?;
        }
        take(&mut p, "embeddings.LayerNorm.weight", vec![h], full)?;
        take(&mut p, "embeddings.LayerNorm.bias", vec![h], full)?;
        let dims = [(h, h), (h, h), (h, h), (h, h), (h, i), (i, h)];
        let bias = match arch {
            Arch::Bert => None,
            Arch::Mpnet => {
                // `nn.Embedding(buckets, heads)`: row = bucket, column = head; frozen.
                let heads = config.num_attention_heads;
                take(&mut p, RELATIVE_BIAS, vec![RELATIVE_BUCKETS, heads], false)?;
                let table = p.get(RELATIVE_BIAS).expect("just loaded").to_vec();
                Some(RelativeBias::new(heads, max_tokens(arch, &config), |r, head| table[relative_position_bucket(r, RELATIVE_BUCKETS, RELATIVE_MAX_DISTANCE) * heads + head]))
            }
        };
        for l in 0..config.num_hidden_layers {
            for (m, &(d_in, d_out)) in dims.iter().enumerate() {
                let name = linear_name(arch, l, m);
                take(&mut p, &format!("{name}.weight"), vec![d_out, d_in], full)?;
                take(&mut p, &format!("{name}.bias"), vec![d_out], full)?;
            }
            for norm in [arch.attention_norm(), "output.LayerNorm"] {
                take(&mut p, &format!("encoder.layer.{l}.{norm}.weight"), vec![h], full)?;
                take(&mut p, &format!("encoder.layer.{l}.{norm}.bias"), vec![h], full)?;
            }
        }
        let mut rng = gauge_core::rng::SplitMix64::new(seed ^ 0xB127);
        if task == EncoderTask::CrossEncoder {
            if weights.contains("pooler.dense.weight") {
                take(&mut p, "pooler.dense.weight", vec![h, h], true)?;
                take(&mut p, "pooler.dense.bias", vec![h], true)?;
            } else {
                p.push("pooler.dense.weight".into(), vec![h, h], normal(h * h, 0.02, &mut rng), true);
                p.push("pooler.dense.bias".into(), vec![h], vec![0.0; h], true);
            }
            let has_head = weights.contains("classifier.weight") && config.num_labels() == 1;
            if has_head {
                take(&mut p, "classifier.weight", vec![1, h], true)?;
                take(&mut p, "classifier.bias", vec![1], true)?;
            } else {
                p.push("classifier.weight".into(), vec![1, h], normal(h, 0.02, &mut rng), true);
                p.push("classifier.bias".into(), vec![1], vec![0.0], true);
            }
        }
        if let Tuning::Lora { r, targets, .. } = &tuning {
            for l in 0..config.num_hidden_layers {
                for &m in targets {
                    let (d_in, d_out) = dims[m];
                    let bound = 1.0 / (d_in as f64).sqrt();
                    let a = (0..r * d_in).map(|_| (((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * bound) as f32).collect();
                    let name = linear_name(arch, l, m);
                    p.push(format!("{name}.lora_A.weight"), vec![*r, d_in], a, true);
                    p.push(format!("{name}.lora_B.weight"), vec![d_out, *r], vec![0.0; d_out * r], true);
                }
            }
        }
        let ad_device = burn::DispatchDevice::autodiff(device.clone());
        let kernels = crate::generator::model::default_kernels(device);
        Ok((TrainableBert { config, arch, task, tuning, bias, device: device.clone(), ad_device, kernels }, p))
    }

    /// Which implementation runs the step: [`TrainKernels::Host`] on CPU devices (unless
    /// `GAUGE_TRAIN_KERNELS=burn`), Burn's autodiff elsewhere.
    pub fn kernels(&self) -> TrainKernels {
        self.kernels
    }

    /// Chooses the implementation (the host kernels need a CPU device).
    pub fn set_kernels(&mut self, kernels: TrainKernels) -> Result<(), TrainError> {
        self.kernels = crate::generator::model::kernels_for(&self.device, kernels)?;
        Ok(())
    }

    fn host(&self) -> crate::retriever::bert_host::HostBert<'_> {
        crate::retriever::bert_host::HostBert { config: &self.config, arch: self.arch, bias: self.bias.as_ref(), task: self.task, tuning: &self.tuning, scale: self.lora_scale() as f32 }
    }

    /// Host outputs of `batches` (all sequences in one pass) as one tensor per batch on `device`.
    fn host_outputs(&self, out: &[f32], batches: &[Vec<&Encoded>], device: &Device, track: bool) -> Vec<Tensor<2>> {
        let d = crate::retriever::bert_host::output_width(self.task, self.config.hidden_size);
        let mut at = 0;
        batches
            .iter()
            .map(|b| {
                let x = Tensor::<2>::from_data(TensorData::new(out[at * d..(at + b.len()) * d].to_vec(), [b.len(), d]), device);
                at += b.len();
                if track { x.require_grad() } else { x }
            })
            .collect()
    }

    /// The LoRA scale (0 for full tuning).
    pub fn lora_scale(&self) -> f64 {
        match &self.tuning {
            Tuning::Lora { r, alpha, rslora, .. } => gauge_tensor::adapter::lora_scale(*r, *alpha, *rslora),
            Tuning::Full => 0.0,
        }
    }

    /// Multiply-adds per token of the encoder's matrices (for FLOP accounting).
    pub fn matrix_parameters(&self) -> usize {
        let (h, i) = (self.config.hidden_size, self.config.intermediate_size);
        self.config.num_hidden_layers * (4 * h * h + 2 * h * i)
    }

    /// Every parameter as a tensor on `device` (1-D ones as `[1, n]`); with `track`, the
    /// trainable ones are autodiff leaves.
    fn tensors(&self, p: &EncoderParams, device: &Device, track: bool) -> Vec<Tensor<2>> {
        p.values
            .iter()
            .zip(&p.shapes)
            .zip(&p.trainable)
            .map(|((v, s), &t)| {
                let shape = if s.len() == 1 { [1, s[0]] } else { [s[0], s[1]] };
                let x = Tensor::<2>::from_data(TensorData::new(v.clone(), shape), device);
                if track && t { x.require_grad() } else { x }
            })
            .collect()
    }

    fn layer_norm(x: Tensor<2>, g: &Tensor<2>, b: &Tensor<2>, eps: f64) -> Tensor<2> {
        let mean = x.clone().mean_dim(1);
        let xc = x - mean;
        let var = (xc.clone() * xc.clone()).mean_dim(1);
        xc / var.add_scalar(eps).sqrt() * g.clone() + b.clone()
    }

    fn linear(&self, x: Tensor<2>, p: &EncoderParams, t: &[Tensor<2>], name: &str) -> Tensor<2> {
        let w = &t[p.index(&format!("{name}.weight")).expect("weight loaded")];
        let b = &t[p.index(&format!("{name}.bias")).expect("bias loaded")];
        let mut y = x.clone().matmul(w.clone().transpose()) + b.clone();
        if let (Some(a), Some(bb)) = (p.index(&format!("{name}.lora_A.weight")), p.index(&format!("{name}.lora_B.weight"))) {
            // The scale goes on B (r × out values), not on the N × out product.
            y = y + x.matmul(t[a].clone().transpose()).matmul(t[bb].clone().mul_scalar(self.lora_scale()).transpose());
        }
        y
    }

    /// Last hidden states `[B·L, H]` of a padded batch (rows of sequence b at `b·L..`), and L.
    fn hidden(&self, p: &EncoderParams, t: &[Tensor<2>], batch: &[&Encoded], device: &Device) -> Result<(Tensor<2>, usize), TrainError> {
        let c = &self.config;
        let (h, heads) = (c.hidden_size, c.num_attention_heads);
        let hd = h / heads;
        let b = batch.len();
        let l = batch.iter().map(|e| e.ids.len()).max().unwrap_or(1).max(1);
        let max = max_tokens(self.arch, c);
        if l > max {
            return Err(TrainError::Model(format!("a sequence of {l} tokens is longer than the model's {max} positions")));
        }
        let (mut ids, mut types, mut pos, mut mask) = (vec![c.pad_token_id as i64; b * l], vec![0i64; b * l], vec![c.pad_token_id as i64; b * l], vec![0f32; b * l]);
        for (r, e) in batch.iter().enumerate() {
            for (k, (&id, &ty)) in e.ids.iter().zip(&e.types).enumerate() {
                if id as usize >= c.vocab_size || ty as usize >= c.type_vocab_size {
                    return Err(TrainError::Model(format!("token id {id} (type {ty}) is outside the vocabulary ({}, {} types)", c.vocab_size, c.type_vocab_size)));
                }
                ids[r * l + k] = id as i64;
                types[r * l + k] = ty as i64;
            }
            for (k, p) in positions(self.arch, c, &e.ids).into_iter().enumerate() {
                pos[r * l + k] = p as i64;
            }
            for k in 0..l {
                mask[r * l + k] = if k < e.ids.len() { 0.0 } else { -1e9 };
            }
        }
        let int = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, l]), device);
        let get = |name: &str| t[p.index(name).unwrap_or_else(|| panic!("{name} loaded"))].clone();
        let mut x = embedding(get("embeddings.word_embeddings.weight"), int(ids)) + embedding(get("embeddings.position_embeddings.weight"), int(pos));
        if self.arch == Arch::Bert {
            x = x + embedding(get("embeddings.token_type_embeddings.weight"), int(types));
        }
        let eps = c.layer_norm_eps;
        let mut x = Self::layer_norm(x.reshape([b * l, h]), &get("embeddings.LayerNorm.weight"), &get("embeddings.LayerNorm.bias"), eps);
        // Additive key mask (and MPNet's relative-position bias) at full shape [B, heads, L, L].
        let mut full_mask = Vec::with_capacity(b * heads * l * l);
        for r in 0..b {
            let row = &mask[r * l..(r + 1) * l];
            for head in 0..heads {
                for q in 0..l {
                    match &self.bias {
                        Some(bias) => full_mask.extend(row.iter().zip(bias.row(head, q, l)).map(|(m, b)| m + b)),
                        None => full_mask.extend_from_slice(row),
                    }
                }
            }
        }
        let key_mask = Tensor::<4>::from_data(TensorData::new(full_mask, [b, heads, l, l]), device);
        let scale = 1.0 / (hd as f64).sqrt();
        for layer in 0..c.num_hidden_layers {
            let split = |y: Tensor<2>| y.reshape([b, l, heads, hd]).swap_dims(1, 2);
            let name = |m: usize| linear_name(self.arch, layer, m);
            let q = split(self.linear(x.clone(), p, t, &name(0)));
            let k = split(self.linear(x.clone(), p, t, &name(1)));
            let v = split(self.linear(x.clone(), p, t, &name(2)));
            let scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(scale) + key_mask.clone();
            let ctx = softmax(scores, 3).matmul(v).swap_dims(1, 2).reshape([b * l, h]);
            let attn = self.linear(ctx, p, t, &name(3)) + x;
            let norm = self.arch.attention_norm();
            x = Self::layer_norm(attn, &get(&format!("encoder.layer.{layer}.{norm}.weight")), &get(&format!("encoder.layer.{layer}.{norm}.bias")), eps);
            let ff = self.linear(gelu(self.linear(x.clone(), p, t, &name(4))), p, t, &name(5)) + x;
            x = Self::layer_norm(ff, &get(&format!("encoder.layer.{layer}.output.LayerNorm.weight")), &get(&format!("encoder.layer.{layer}.output.LayerNorm.bias")), eps);
        }
        Ok((x, l))
    }

    /// The task's output for a batch: `[B, H]` sentence vectors (embedder) or `[B, 1]` logits
    /// (cross-encoder).
    fn output(&self, p: &EncoderParams, t: &[Tensor<2>], batch: &[&Encoded], device: &Device) -> Result<Tensor<2>, TrainError> {
        let (x, l) = self.hidden(p, t, batch, device)?;
        let (b, h) = (batch.len(), self.config.hidden_size);
        match self.task {
            EncoderTask::Embedder { pooling, normalize } => {
                let pooled = match pooling {
                    Pooling::Cls => x.reshape([b, l, h]).narrow(1, 0, 1).reshape([b, h]),
                    _ => {
                        // Mean over real tokens: a [B, B·L] averaging matrix times the rows.
                        let mut avg = vec![0f32; b * b * l];
                        for (r, e) in batch.iter().enumerate() {
                            let n = e.ids.len().max(1);
                            for k in 0..e.ids.len() {
                                avg[r * b * l + r * l + k] = 1.0 / n as f32;
                            }
                        }
                        Tensor::<2>::from_data(TensorData::new(avg, [b, b * l]), device).matmul(x)
                    }
                };
                Ok(if normalize {
                    let norm = (pooled.clone() * pooled.clone()).sum_dim(1).sqrt().clamp_min(1e-12);
                    pooled / norm
                } else {
                    pooled
                })
            }
            EncoderTask::CrossEncoder => {
                let cls = x.reshape([b, l, h]).narrow(1, 0, 1).reshape([b, h]);
                let pooled = self.linear(cls, p, t, "pooler.dense").tanh();
                Ok(self.linear(pooled, p, t, "classifier"))
            }
        }
    }

    /// Outputs without gradients (evaluation, mining, checks), as host rows.
    pub fn infer(&self, p: &EncoderParams, batch: &[&Encoded]) -> Result<Vec<Vec<f32>>, TrainError> {
        if self.kernels == TrainKernels::Host {
            let kept = self.host().forward(p, batch, false)?;
            let d = crate::retriever::bert_host::output_width(self.task, self.config.hidden_size);
            return Ok(kept.outputs().chunks_exact(d).map(<[f32]>::to_vec).collect());
        }
        let t = self.tensors(p, &self.device, false);
        let out = self.output(p, &t, batch, &self.device)?;
        let [_, d] = out.dims();
        Ok(crate::generator::model::values(out).chunks_exact(d).map(<[f32]>::to_vec).collect())
    }

    /// Runs `loss_fn` on the task's outputs of every batch in `batches`, back-propagates, and
    /// returns the loss and the gradient of every trainable parameter (in
    /// [`EncoderParams::trainable_indices`] order; zeros where none reached).
    ///
    /// The batches are split into one shard per thread; each shard builds its own graph (its
    /// own parameter leaves) and runs its forward passes in parallel with the others. The
    /// loss is then computed on detached copies of all outputs (it couples every sequence of
    /// the step: in-batch negatives), its gradient with respect to each output is sent back
    /// into the shard that produced it (`backward` of `Σ ⟨output, ∂loss/∂output⟩`), and the
    /// shards' parameter gradients are summed. Exactly the gradient of one big graph, with
    /// both cores busy (burn-flex's element-wise kernels are single-threaded).
    ///
    /// With the host kernels ([`crate::retriever::bert_host`]) every sequence of the step runs in one
    /// unpadded pass; the loss and its gradient with respect to the outputs still come from
    /// `loss_fn` on Burn's autodiff device, and the host backward pass takes it from there.
    pub fn loss_and_gradients(&self, p: &EncoderParams, batches: &[Vec<&Encoded>], loss_fn: impl FnOnce(Vec<Tensor<2>>) -> Tensor<1>) -> Result<(f64, Vec<Vec<f32>>), TrainError> {
        use rayon::prelude::*;
        if self.kernels == TrainKernels::Host {
            let seqs: Vec<&Encoded> = batches.iter().flatten().copied().collect();
            let host = self.host();
            let kept = host.forward(p, &seqs, true)?;
            let leaves = self.host_outputs(kept.outputs(), batches, &self.ad_device, true);
            let loss = loss_fn(leaves.clone());
            let value = crate::generator::model::values(loss.clone().inner())[0] as f64;
            let g = loss.backward();
            let upstream: Vec<f32> = leaves.iter().flat_map(|l| l.grad(&g).map(crate::generator::model::values).unwrap_or_else(|| vec![0.0; l.dims().iter().product()])).collect();
            return Ok((value, host.backward(p, &seqs, kept, &upstream)));
        }
        let threads = rayon::current_num_threads().max(1).min(batches.len().max(1));
        let per = batches.len().div_ceil(threads).max(1);
        let shards: Vec<&[Vec<&Encoded>]> = batches.chunks(per).collect();
        // Phase 1: forward with graphs, one shard per thread.
        type Shard = (Vec<Tensor<2>>, Vec<Tensor<2>>);
        let forwards: Vec<Result<Shard, TrainError>> = shards
            .par_iter()
            .map(|shard| {
                let t = self.tensors(p, &self.ad_device, true);
                let outs = shard.iter().map(|b| self.output(p, &t, b, &self.ad_device)).collect::<Result<Vec<_>, _>>()?;
                Ok((t, outs))
            })
            .collect();
        let forwards: Vec<Shard> = forwards.into_iter().collect::<Result<_, _>>()?;
        // Phase 2: the loss on detached outputs, and its gradient with respect to each.
        let leaves: Vec<Tensor<2>> = forwards.iter().flat_map(|(_, outs)| outs.iter().map(|o| Tensor::<2>::from_data(o.clone().inner().into_data(), &self.ad_device).require_grad())).collect();
        let loss = loss_fn(leaves.clone());
        let value = crate::generator::model::values(loss.clone().inner())[0] as f64;
        let g = loss.backward();
        let upstream: Vec<Tensor<2>> = leaves.iter().map(|l| l.grad(&g).map(|x| Tensor::<2>::from_data(x.into_data(), &self.ad_device)).unwrap_or_else(|| l.clone().detach().zeros_like())).collect();
        // Phase 3: each shard back-propagates its outputs' gradients.
        let mut offsets = Vec::with_capacity(forwards.len());
        let mut k = 0;
        for (_, outs) in &forwards {
            offsets.push(k);
            k += outs.len();
        }
        let trainable = p.trainable_indices();
        let parts: Vec<Vec<Vec<f32>>> = forwards
            .into_par_iter()
            .zip(offsets)
            .map(|((t, outs), off)| {
                let surrogate = outs.into_iter().enumerate().map(|(j, o)| (o * upstream[off + j].clone()).sum()).reduce(|a, b| a + b).expect("a shard has outputs");
                let grads = surrogate.backward();
                trainable.iter().map(|&i| t[i].grad(&grads).map(crate::generator::model::values).unwrap_or_else(|| vec![0.0; p.values[i].len()])).collect()
            })
            .collect();
        let mut total = parts[0].clone();
        for part in &parts[1..] {
            for (acc, g) in total.iter_mut().zip(part) {
                acc.iter_mut().zip(g).for_each(|(a, b)| *a += b);
            }
        }
        Ok((value, total))
    }

    /// The loss alone (same `loss_fn`), without a graph; batches run in parallel.
    pub fn loss(&self, p: &EncoderParams, batches: &[Vec<&Encoded>], loss_fn: impl FnOnce(Vec<Tensor<2>>) -> Tensor<1>) -> Result<f64, TrainError> {
        use rayon::prelude::*;
        if self.kernels == TrainKernels::Host {
            let seqs: Vec<&Encoded> = batches.iter().flatten().copied().collect();
            let kept = self.host().forward(p, &seqs, false)?;
            let outs = self.host_outputs(kept.outputs(), batches, &self.device, false);
            return Ok(crate::generator::model::values(loss_fn(outs))[0] as f64);
        }
        let t = self.tensors(p, &self.device, false);
        let outs: Vec<Vec<f32>> = batches.par_iter().map(|b| self.output(p, &t, b, &self.device).map(crate::generator::model::values)).collect::<Result<_, _>>()?;
        let outs: Vec<Tensor<2>> = outs.into_iter().zip(batches).map(|(v, b)| { let d = v.len() / b.len(); Tensor::<2>::from_data(TensorData::new(v, [b.len(), d]), &self.device) }).collect();
        Ok(crate::generator::model::values(loss_fn(outs))[0] as f64)
    }

    /// The device losses are built on (for constants such as masks and labels): the autodiff
    /// device when `train`, else the plain one.
    pub fn device(&self, train: bool) -> &Device {
        if train { &self.ad_device } else { &self.device }
    }

    /// The LoRA adapter (PEFT, `FEATURE_EXTRACTION`, the checkpoint's module names) of LoRA
    /// parameters.
    pub fn adapter(&self, p: &EncoderParams, base: Option<String>) -> Option<gauge_tensor::adapter::LoraAdapter> {
        let Tuning::Lora { r, alpha, rslora, targets } = &self.tuning else { return None };
        let config = gauge_tensor::adapter::AdapterConfig::new(*r, *alpha, 0.0, &target_names(targets, self.arch), *rslora, base).with_task_type("FEATURE_EXTRACTION");
        let mut modules = std::collections::BTreeMap::new();
        for (i, name) in p.names.iter().enumerate() {
            if let Some(module) = name.strip_suffix(".lora_A.weight") {
                let bi = p.index(&format!("{module}.lora_B.weight")).expect("B follows A");
                let (d_in, d_out) = (p.shapes[i][1], p.shapes[bi][0]);
                modules.insert(module.to_string(), gauge_tensor::adapter::LoraPair { a: p.values[i].clone(), b: p.values[bi].clone(), d_in, d_out });
            }
        }
        Some(gauge_tensor::adapter::LoraAdapter { config, modules })
    }

    /// The checkpoint's tensors with LoRA merged in (`W + s·B A`), under Hugging Face names:
    /// `prefix` before the encoder's (`bert.` for `BertForSequenceClassification`), the
    /// classifier's as they are.
    pub fn merged_tensors(&self, p: &EncoderParams, prefix: &str) -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let adapter = self.adapter(p, None);
        let scale = self.lora_scale();
        let mut out = Vec::new();
        for (i, name) in p.names.iter().enumerate() {
            if name.contains(".lora_") {
                continue;
            }
            let mut values = p.values[i].clone();
            if let (Some(module), Some(ad)) = (name.strip_suffix(".weight"), &adapter) {
                if let Some(pair) = ad.modules.get(module) {
                    values.iter_mut().zip(pair.delta(scale)).for_each(|(w, d)| *w += d);
                }
            }
            let full = if name.starts_with("classifier.") { name.clone() } else { format!("{prefix}{name}") };
            out.push((full, p.shapes[i].clone(), values));
        }
        out
    }
}
