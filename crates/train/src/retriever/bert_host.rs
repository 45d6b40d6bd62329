//! The encoder trainer's CPU kernels: the BERT (and MPNet) forward and backward pass of
//! [`crate::retriever::bert::TrainableBert`] written by hand on host memory, as [`crate::generator::host`] does for
//! the Llama block (the Burn graph in [`crate::retriever::bert`] stays for CUDA and as the reference the
//! tests compare these with).
//!
//! What differs from the Burn path besides fused, threaded element-wise kernels:
//! - **No padding.** Every sequence of the step is one run of rows in a single `[T, H]` matrix
//!   (T = the step's real tokens); the six projections are one `gemm` each over all of them,
//!   and attention runs per (sequence, head) over the sequence's own length. The Burn path
//!   pads each forward batch to its longest sequence and masks the padded keys, which gives
//!   the same values for the real tokens.
//! - **Attention probabilities are not kept**: each head keeps its rows' log-sum-exp and the
//!   backward pass rebuilds the probabilities from the scores (one `[n, n]` buffer per head
//!   in flight instead of every head's of every layer).
//! - GELU is exact (erf, [`gauge_encoder::bert::erf_f32`], the inference encoder's), its
//!   derivative `Φ(x) + x·φ(x)` with the vectorised `exp`.
//!
//! Shapes: row-major; heads side by side in a row (`[T, heads · head_dim]`).
use rayon::prelude::*;

use crate::retriever::bert_types::{linear_name, max_tokens, positions, Arch, EncoderParams, EncoderTask, Encoded, Tuning};
use crate::generator::host::{exp_in_place, project, project_backward, rows_per_task, Projection, Saved};
use gauge_tensor::gemm::{gemm, gemm_new, Operand, Product};
use crate::TrainError;
use gauge_encoder::bert::RelativeBias;
use gauge_encoder::{BertConfig, Pooling};

/// Where each sequence's rows start in the step's `[T, H]` matrix (`starts[s]..starts[s+1]`).
pub(crate) struct Rows {
    starts: Vec<usize>,
}

impl Rows {
    fn new(seqs: &[&Encoded]) -> Rows {
        let mut starts = vec![0];
        for s in seqs {
            starts.push(starts.last().copied().unwrap_or(0) + s.ids.len());
        }
        Rows { starts }
    }
    fn total(&self) -> usize {
        *self.starts.last().unwrap_or(&0)
    }
    fn count(&self) -> usize {
        self.starts.len() - 1
    }
    fn span(&self, s: usize) -> (usize, usize) {
        (self.starts[s], self.starts[s + 1] - self.starts[s])
    }
}

/// One layer's kept values for the backward pass.
struct LayerActs {
    /// The layer's input `[T, H]`.
    x: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Per (sequence, head), the log-sum-exp of each query row's scores (sequence-major).
    lse: Vec<f32>,
    /// Attention output before `attention.output.dense`.
    ctx: Vec<f32>,
    /// LoRA's `x Aᵀ` per module (none where the module has no adapter).
    u: Vec<Option<Vec<f32>>>,
    /// After the attention block's LayerNorm: normalised rows, `1/σ` per row, and the output.
    xhat1: Vec<f32>,
    rstd1: Vec<f32>,
    x1: Vec<f32>,
    /// `intermediate.dense`'s output before GELU `[T, I]`, and after.
    inter: Vec<f32>,
    act: Vec<f32>,
    /// After the output LayerNorm (the next layer's input is its affine image).
    xhat2: Vec<f32>,
    rstd2: Vec<f32>,
}

/// What the forward pass keeps.
pub(crate) struct Kept {
    rows: Rows,
    emb_xhat: Vec<f32>,
    emb_rstd: Vec<f32>,
    layers: Vec<LayerActs>,
    /// Last hidden states `[T, H]`.
    hidden: Vec<f32>,
    /// The task head's values: pooled rows before normalisation (embedder) or the pooler's
    /// tanh output (cross-encoder), `[B, H]`.
    pooled: Vec<f32>,
    /// The task's outputs `[B, d]`.
    out: Vec<f32>,
}

/// The parameters of one linear module, looked up once.
struct Linear<'a> {
    w: &'a [f32],
    b: &'a [f32],
    lora: Option<(&'a [f32], &'a [f32])>,
    d_in: usize,
    d_out: usize,
    wi: usize,
    bi: usize,
    ai: Option<(usize, usize)>,
}

fn linear<'a>(p: &'a EncoderParams, name: &str) -> Linear<'a> {
    let wi = p.index(&format!("{name}.weight")).unwrap_or_else(|| panic!("{name}.weight loaded"));
    let bi = p.index(&format!("{name}.bias")).unwrap_or_else(|| panic!("{name}.bias loaded"));
    let ai = p.index(&format!("{name}.lora_A.weight")).zip(p.index(&format!("{name}.lora_B.weight")));
    let (d_out, d_in) = (p.shapes[wi][0], p.shapes[wi][1]);
    Linear { w: &p.values[wi], b: &p.values[bi], lora: ai.map(|(a, b)| (p.values[a].as_slice(), p.values[b].as_slice())), d_in, d_out, wi, bi, ai }
}

fn get<'a>(p: &'a EncoderParams, name: &str) -> (usize, &'a [f32]) {
    let i = p.index(name).unwrap_or_else(|| panic!("{name} loaded"));
    (i, &p.values[i])
}

/// LayerNorm per row (biased variance, as PyTorch): `(x̂, 1/σ, x̂·γ + β)`.
fn layer_norm(x: &[f32], h: usize, g: &[f32], b: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / h;
    let (mut xhat, mut rstd, mut y) = (vec![0f32; x.len()], vec![0f32; rows], vec![0f32; x.len()]);
    let rpt = rows_per_task(h);
    xhat.par_chunks_mut(rpt * h).zip(y.par_chunks_mut(rpt * h)).zip(rstd.par_chunks_mut(rpt)).zip(x.par_chunks(rpt * h)).for_each(|(((xh, y), r), x)| {
        for (((xh, y), r), x) in xh.chunks_mut(h).zip(y.chunks_mut(h)).zip(r.iter_mut()).zip(x.chunks(h)) {
            let mean = x.iter().sum::<f32>() / h as f32;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
            *r = 1.0 / (var + eps).sqrt();
            for ((((xh, y), &x), &g), &b) in xh.iter_mut().zip(y.iter_mut()).zip(x).zip(g).zip(b) {
                *xh = (x - mean) * *r;
                *y = *xh * g + b;
            }
        }
    });
    (xhat, rstd, y)
}

/// The gradient of [`layer_norm`]: `dx = (1/σ)·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂))` with
/// `dx̂ = dy·γ`; `dγ += Σ dy·x̂`, `dβ += Σ dy` when asked.
fn layer_norm_backward(dy: &[f32], xhat: &[f32], rstd: &[f32], h: usize, g: &[f32], dx: &mut [f32], dgb: Option<(&mut [f32], &mut [f32])>) {
    let rpt = rows_per_task(h);
    dx.par_chunks_mut(rpt * h).zip(dy.par_chunks(rpt * h)).zip(xhat.par_chunks(rpt * h)).zip(rstd.par_chunks(rpt)).for_each(|(((dx, dy), xh), r)| {
        for (((dx, dy), xh), &r) in dx.chunks_mut(h).zip(dy.chunks(h)).zip(xh.chunks(h)).zip(r) {
            let (mut m1, mut m2) = (0f32, 0f32);
            for ((&dy, &xh), &g) in dy.iter().zip(xh).zip(g) {
                m1 += dy * g;
                m2 += dy * g * xh;
            }
            let (m1, m2) = (m1 / h as f32, m2 / h as f32);
            for (((dx, &dy), &xh), &g) in dx.iter_mut().zip(dy).zip(xh).zip(g) {
                *dx = r * (dy * g - m1 - xh * m2);
            }
        }
    });
    if let Some((dg, db)) = dgb {
        // In row order (deterministic).
        for (dy, xh) in dy.chunks(h).zip(xhat.chunks(h)) {
            for (((dg, db), &dy), &xh) in dg.iter_mut().zip(db.iter_mut()).zip(dy).zip(xh) {
                *dg += dy * xh;
                *db += dy;
            }
        }
    }
}

/// Exact GELU of `x` into a new buffer.
fn gelu(x: &[f32]) -> Vec<f32> {
    let mut y = x.to_vec();
    y.par_chunks_mut(1 << 14).for_each(|c| c.iter_mut().for_each(|v| *v = gauge_encoder::bert::gelu_scalar(*v)));
    y
}

/// `dx = dy · (Φ(x) + x·φ(x))`, `Φ(x) = (1 + erf(x/√2))/2`, `φ(x) = e^(−x²/2)/√(2π)`.
fn gelu_backward(dy: &[f32], x: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(1 << 14).zip(dy.par_chunks(1 << 14)).zip(x.par_chunks(1 << 14)).for_each(|((o, dy), x)| {
        for (o, &x) in o.iter_mut().zip(x) {
            *o = -0.5 * x * x;
        }
        exp_in_place(o);
        let inv_sqrt_2pi = 1.0 / (2.0 * std::f32::consts::PI).sqrt();
        for ((o, &dy), &x) in o.iter_mut().zip(dy).zip(x) {
            let cdf = 0.5 * (1.0 + gauge_encoder::bert::erf_f32(x * std::f32::consts::FRAC_1_SQRT_2));
            *o = dy * (cdf + x * *o * inv_sqrt_2pi);
        }
    });
    out
}

/// Softmax of each row of `p` `[n, n]` in place; the row's log-sum-exp into `lse`.
fn softmax_rows(p: &mut [f32], n: usize, lse: &mut [f32]) {
    for (row, lse) in p.chunks_mut(n).zip(lse) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        row.iter_mut().for_each(|v| *v -= max);
        exp_in_place(row);
        let sum: f32 = row.iter().sum();
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|v| *v *= inv);
        *lse = max + sum.ln();
    }
}

/// The (sequence, head) pairs of a step, and where each pair's log-sum-exp rows start.
fn pairs(rows: &Rows, heads: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::with_capacity(rows.count() * heads);
    for s in 0..rows.count() {
        let (start, n) = rows.span(s);
        for head in 0..heads {
            out.push((s, head, start * heads + head * n));
        }
    }
    out
}

/// Scaled scores `q kᵀ / √hd` of one (sequence, head), `[n, n]`, plus the relative-position
/// bias when the model has one.
fn scores(q: &[f32], k: &[f32], (h, hd): (usize, usize), start: usize, n: usize, head: usize, bias: Option<&RelativeBias>) -> Vec<f32> {
    let scale = 1.0 / (hd as f32).sqrt();
    let (qs, ks) = (&q[start * h..(start + n) * h], &k[start * h..(start + n) * h]);
    let mut s = gemm_new(Product::new(n, n, hd, Operand::cols_from(qs, h, head * hd), Operand::cols_from_transposed(ks, h, head * hd)).scaled(scale));
    if let Some(bias) = bias {
        for (t, row) in s.chunks_mut(n).enumerate() {
            row.iter_mut().zip(bias.row(head, t, n)).for_each(|(s, b)| *s += b);
        }
    }
    s
}

/// Bidirectional multi-head attention over each sequence's own rows: `(ctx [T, H], lse)`.
fn attention(q: &[f32], k: &[f32], v: &[f32], rows: &Rows, (h, heads): (usize, usize), bias: Option<&RelativeBias>) -> (Vec<f32>, Vec<f32>) {
    let hd = h / heads;
    let work = pairs(rows, heads);
    let results: Vec<(Vec<f32>, Vec<f32>)> = work
        .par_iter()
        .map(|&(s, head, _)| {
            let (start, n) = rows.span(s);
            let mut p = scores(q, k, (h, hd), start, n, head, bias);
            let mut lse = vec![0f32; n];
            softmax_rows(&mut p, n, &mut lse);
            let o = gemm_new(Product::new(n, hd, n, Operand::rows(&p, n), Operand::cols_from(&v[start * h..(start + n) * h], h, head * hd)));
            (o, lse)
        })
        .collect();
    let mut ctx = vec![0f32; rows.total() * h];
    let mut lse_all = vec![0f32; rows.total() * heads];
    for (&(s, head, at), (o, lse)) in work.iter().zip(results) {
        let (start, n) = rows.span(s);
        for (r, src) in o.chunks(hd).enumerate() {
            ctx[(start + r) * h + head * hd..(start + r) * h + (head + 1) * hd].copy_from_slice(src);
        }
        lse_all[at..at + n].copy_from_slice(&lse);
    }
    (ctx, lse_all)
}

/// The gradient of [`attention`]: `(dq, dk, dv)` from `d_ctx`, the probabilities rebuilt
/// from the scores and the kept log-sum-exp.
fn attention_backward(d_ctx: &[f32], (q, k, v): (&[f32], &[f32], &[f32]), lse: &[f32], rows: &Rows, (h, heads): (usize, usize), bias: Option<&RelativeBias>) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let hd = h / heads;
    let work = pairs(rows, heads);
    let scale = 1.0 / (hd as f32).sqrt();
    let results: Vec<[Vec<f32>; 3]> = work
        .par_iter()
        .map(|&(s, head, at)| {
            let (start, n) = rows.span(s);
            let span = start * h..(start + n) * h;
            let (qs, ks, vs, dos) = (&q[span.clone()], &k[span.clone()], &v[span.clone()], &d_ctx[span]);
            let mut p = scores(q, k, (h, hd), start, n, head, bias);
            for (row, &l) in p.chunks_mut(n).zip(&lse[at..at + n]) {
                row.iter_mut().for_each(|x| *x -= l);
                exp_in_place(row);
            }
            // dV = Pᵀ dO; dP = dO Vᵀ; dS = P ⊙ (dP − rowsum(dP ⊙ P)).
            let dv = gemm_new(Product::new(n, hd, n, Operand::transposed(&p, n), Operand::cols_from(dos, h, head * hd)));
            let mut dp = gemm_new(Product::new(n, n, hd, Operand::cols_from(dos, h, head * hd), Operand::cols_from_transposed(vs, h, head * hd)));
            for (dp, p) in dp.chunks_mut(n).zip(p.chunks(n)) {
                let dot: f32 = dp.iter().zip(p).map(|(a, b)| a * b).sum();
                dp.iter_mut().zip(p).for_each(|(d, &p)| *d = p * (*d - dot));
            }
            let dq = gemm_new(Product::new(n, hd, n, Operand::rows(&dp, n), Operand::cols_from(ks, h, head * hd)).scaled(scale));
            let dk = gemm_new(Product::new(n, hd, n, Operand::transposed(&dp, n), Operand::cols_from(qs, h, head * hd)).scaled(scale));
            [dq, dk, dv]
        })
        .collect();
    let mut out = [vec![0f32; rows.total() * h], vec![0f32; rows.total() * h], vec![0f32; rows.total() * h]];
    for (&(s, head, _), parts) in work.iter().zip(results) {
        let start = rows.span(s).0;
        for (dst, src) in out.iter_mut().zip(parts) {
            for (r, row) in src.chunks(hd).enumerate() {
                dst[(start + r) * h + head * hd..(start + r) * h + (head + 1) * hd].copy_from_slice(row);
            }
        }
    }
    let [dq, dk, dv] = out;
    (dq, dk, dv)
}

/// `y = x Wᵀ + b (+ s · (x Aᵀ) Bᵀ)` of one module.
fn forward_linear(x: &[f32], t: usize, m: &Linear, r: usize, scale: f32) -> (Vec<f32>, Option<Vec<f32>>) {
    project(&Projection { w: m.w, bias: Some(m.b), lora: m.lora, d_in: m.d_in, d_out: m.d_out, r, scale }, x, t, None)
}

/// The gradient slot of each parameter (its position among the trainable ones).
pub(crate) struct Grads {
    slot: Vec<Option<usize>>,
    /// In [`EncoderParams::trainable_indices`] order.
    pub values: Vec<Vec<f32>>,
}

impl Grads {
    fn new(p: &EncoderParams) -> Grads {
        let mut slot = vec![None; p.names.len()];
        let mut values = Vec::new();
        for (i, t) in p.trainable.iter().enumerate() {
            if *t {
                slot[i] = Some(values.len());
                values.push(vec![0f32; p.values[i].len()]);
            }
        }
        Grads { slot, values }
    }
    fn get(&mut self, i: usize) -> Option<&mut [f32]> {
        self.slot[i].map(|s| self.values[s].as_mut_slice())
    }
    fn pair(&mut self, i: usize, j: usize) -> Option<(&mut [f32], &mut [f32])> {
        let (a, b) = (self.slot[i]?, self.slot[j]?);
        assert_ne!(a, b);
        if a < b {
            let (lo, hi) = self.values.split_at_mut(b);
            Some((&mut lo[a], &mut hi[0]))
        } else {
            let (lo, hi) = self.values.split_at_mut(a);
            Some((&mut hi[0], &mut lo[b]))
        }
    }
}

/// The gradient of one module: `dx += dy W (+ LoRA's part)`, LoRA's A and B, and — when they
/// train — the weight (`dyᵀ x`) and the bias (`Σ dy`).
fn backward_linear(dy: &[f32], saved: Saved, t: usize, m: &Linear, (r, scale): (usize, f32), dx: &mut [f32], g: &mut Grads) {
    let x = saved.x;
    let lora_grads = m.ai.and_then(|(a, b)| g.pair(a, b));
    project_backward(&Projection { w: m.w, bias: None, lora: m.lora, d_in: m.d_in, d_out: m.d_out, r, scale }, dy, t, saved, dx, lora_grads);
    if let Some(gw) = g.get(m.wi) {
        gemm(Product::new(m.d_out, m.d_in, t, Operand::transposed(dy, m.d_out), Operand::rows(x, m.d_in)), gw, m.d_in, true);
    }
    if let Some(gb) = g.get(m.bi) {
        for row in dy.chunks(m.d_out) {
            gb.iter_mut().zip(row).for_each(|(g, &d)| *g += d);
        }
    }
}

/// The host implementation of the encoder's training step.
pub(crate) struct HostBert<'a> {
    pub config: &'a BertConfig,
    pub arch: Arch,
    /// MPNet's relative-position bias (frozen).
    pub bias: Option<&'a RelativeBias>,
    pub task: EncoderTask,
    pub tuning: &'a Tuning,
    pub scale: f32,
}

impl HostBert<'_> {
    fn rank(&self) -> usize {
        match self.tuning {
            Tuning::Lora { r, .. } => *r,
            Tuning::Full => 0,
        }
    }

    /// The task's outputs `[B, d]` of `seqs` (`d` = hidden size for the embedder, 1 for the
    /// cross-encoder) and, with `keep`, what the backward pass needs.
    pub fn forward(&self, p: &EncoderParams, seqs: &[&Encoded], keep: bool) -> Result<Kept, TrainError> {
        let c = self.config;
        let (h, heads, eps) = (c.hidden_size, c.num_attention_heads, c.layer_norm_eps as f32);
        let rows = Rows::new(seqs);
        let t = rows.total();
        let r = self.rank();
        // Embeddings.
        let (_, word) = get(p, "embeddings.word_embeddings.weight");
        let (_, pos) = get(p, "embeddings.position_embeddings.weight");
        let types = p.get("embeddings.token_type_embeddings.weight");
        let max = max_tokens(self.arch, c);
        let mut x = vec![0f32; t * h];
        for (s, e) in seqs.iter().enumerate() {
            if e.ids.len() > max {
                return Err(TrainError::Model(format!("a sequence of {} tokens is longer than the model's {max} positions", e.ids.len())));
            }
            let start = rows.span(s).0;
            for (k, ((&id, &ty), position)) in e.ids.iter().zip(&e.types).zip(positions(self.arch, c, &e.ids)).enumerate() {
                if id as usize >= c.vocab_size || ty as usize >= c.type_vocab_size {
                    return Err(TrainError::Model(format!("token id {id} (type {ty}) is outside the vocabulary ({}, {} types)", c.vocab_size, c.type_vocab_size)));
                }
                let row = &mut x[(start + k) * h..(start + k + 1) * h];
                let (wr, pr) = (&word[id as usize * h..][..h], &pos[position * h..][..h]);
                row.iter_mut().zip(wr).zip(pr).for_each(|((o, &a), &b)| *o = a + b);
                if let Some(types) = types {
                    row.iter_mut().zip(&types[ty as usize * h..][..h]).for_each(|(o, &cc)| *o += cc);
                }
            }
        }
        let (_, g) = get(p, "embeddings.LayerNorm.weight");
        let (_, b) = get(p, "embeddings.LayerNorm.bias");
        let (emb_xhat, emb_rstd, mut x) = layer_norm(&x, h, g, b, eps);
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            let m: Vec<Linear> = (0..6).map(|i| linear(p, &linear_name(self.arch, l, i))).collect();
            let (q, uq) = forward_linear(&x, t, &m[0], r, self.scale);
            let (k, uk) = forward_linear(&x, t, &m[1], r, self.scale);
            let (v, uv) = forward_linear(&x, t, &m[2], r, self.scale);
            let (ctx, lse) = attention(&q, &k, &v, &rows, (h, heads), self.bias);
            let (mut attn, uo) = forward_linear(&ctx, t, &m[3], r, self.scale);
            attn.iter_mut().zip(&x).for_each(|(a, &x)| *a += x);
            let norm = self.arch.attention_norm();
            let (_, g1) = get(p, &format!("encoder.layer.{l}.{norm}.weight"));
            let (_, b1) = get(p, &format!("encoder.layer.{l}.{norm}.bias"));
            let (xhat1, rstd1, x1) = layer_norm(&attn, h, g1, b1, eps);
            drop(attn);
            let (inter, ui) = forward_linear(&x1, t, &m[4], r, self.scale);
            let act = gelu(&inter);
            let (mut ff, uf) = forward_linear(&act, t, &m[5], r, self.scale);
            ff.iter_mut().zip(&x1).for_each(|(a, &x)| *a += x);
            let (_, g2) = get(p, &format!("encoder.layer.{l}.output.LayerNorm.weight"));
            let (_, b2) = get(p, &format!("encoder.layer.{l}.output.LayerNorm.bias"));
            let (xhat2, rstd2, x2) = layer_norm(&ff, h, g2, b2, eps);
            let prev = std::mem::replace(&mut x, x2);
            if !keep {
                continue;
            }
            layers.push(LayerActs { x: prev, q, k, v, lse, ctx, u: vec![uq, uk, uv, uo, ui, uf], xhat1, rstd1, x1, inter, act, xhat2, rstd2 });
        }
        let hidden = x;
        let n = rows.count();
        let (pooled, out) = match self.task {
            EncoderTask::Embedder { pooling, normalize } => {
                let mut pooled = vec![0f32; n * h];
                for s in 0..n {
                    let (start, len) = rows.span(s);
                    let dst = &mut pooled[s * h..(s + 1) * h];
                    match pooling {
                        Pooling::Cls => dst.copy_from_slice(&hidden[start * h..(start + 1) * h]),
                        _ => {
                            for row in hidden[start * h..(start + len) * h].chunks(h) {
                                dst.iter_mut().zip(row).for_each(|(d, &x)| *d += x);
                            }
                            let inv = 1.0 / len.max(1) as f32;
                            dst.iter_mut().for_each(|d| *d *= inv);
                        }
                    }
                }
                let mut out = pooled.clone();
                if normalize {
                    for row in out.chunks_mut(h) {
                        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                        row.iter_mut().for_each(|v| *v /= norm);
                    }
                }
                (pooled, out)
            }
            EncoderTask::CrossEncoder => {
                let cls: Vec<f32> = (0..n).flat_map(|s| { let start = rows.span(s).0; hidden[start * h..(start + 1) * h].iter().copied() }).collect();
                let (mut pooled, _) = forward_linear(&cls, n, &linear(p, "pooler.dense"), 0, 0.0);
                pooled.iter_mut().for_each(|v| *v = v.tanh());
                let (out, _) = forward_linear(&pooled, n, &linear(p, "classifier"), 0, 0.0);
                (pooled, out)
            }
        };
        Ok(Kept { rows, emb_xhat, emb_rstd, layers, hidden, pooled, out })
    }

    /// The gradient of `Σ ⟨out, d_out⟩` with respect to every trainable parameter (in
    /// [`EncoderParams::trainable_indices`] order).
    pub fn backward(&self, p: &EncoderParams, seqs: &[&Encoded], kept: Kept, d_out: &[f32]) -> Vec<Vec<f32>> {
        let c = self.config;
        let (h, heads) = (c.hidden_size, c.num_attention_heads);
        let Kept { rows, emb_xhat, emb_rstd, mut layers, hidden, pooled, out } = kept;
        let (t, n, r) = (rows.total(), rows.count(), self.rank());
        let mut g = Grads::new(p);
        // The task head → d hidden.
        let mut dx = vec![0f32; t * h];
        match self.task {
            EncoderTask::Embedder { pooling, normalize } => {
                let mut dp = d_out.to_vec();
                if normalize {
                    // y = p/‖p‖: dp = (dy − y ⟨y, dy⟩) / ‖p‖.
                    for ((dp, y), pr) in dp.chunks_mut(h).zip(out.chunks(h)).zip(pooled.chunks(h)) {
                        let norm = pr.iter().map(|v| v * v).sum::<f32>().sqrt();
                        if norm <= 1e-12 {
                            // Clamped norm: y = p / 1e-12, a linear map.
                            dp.iter_mut().for_each(|d| *d /= 1e-12);
                            continue;
                        }
                        let dot: f32 = dp.iter().zip(y).map(|(a, b)| a * b).sum();
                        dp.iter_mut().zip(y).for_each(|(d, &y)| *d = (*d - y * dot) / norm);
                    }
                }
                for s in 0..n {
                    let (start, len) = rows.span(s);
                    let src = &dp[s * h..(s + 1) * h];
                    match pooling {
                        Pooling::Cls => dx[start * h..(start + 1) * h].copy_from_slice(src),
                        _ => {
                            let inv = 1.0 / len.max(1) as f32;
                            for row in dx[start * h..(start + len) * h].chunks_mut(h) {
                                row.iter_mut().zip(src).for_each(|(d, &s)| *d = s * inv);
                            }
                        }
                    }
                }
            }
            EncoderTask::CrossEncoder => {
                let cls: Vec<f32> = (0..n).flat_map(|s| { let start = rows.span(s).0; hidden[start * h..(start + 1) * h].iter().copied() }).collect();
                let classifier = linear(p, "classifier");
                let mut d_pooled = vec![0f32; n * h];
                backward_linear(d_out, Saved { x: &pooled, mask: None, u: None }, n, &classifier, (0, 0.0), &mut d_pooled, &mut g);
                d_pooled.iter_mut().zip(&pooled).for_each(|(d, &y)| *d *= 1.0 - y * y);
                let mut d_cls = vec![0f32; n * h];
                backward_linear(&d_pooled, Saved { x: &cls, mask: None, u: None }, n, &linear(p, "pooler.dense"), (0, 0.0), &mut d_cls, &mut g);
                for s in 0..n {
                    let start = rows.span(s).0;
                    dx[start * h..(start + 1) * h].copy_from_slice(&d_cls[s * h..(s + 1) * h]);
                }
            }
        }
        drop(hidden);
        // The layers, top down; `dx` is the gradient of the layer's output.
        for l in (0..c.num_hidden_layers).rev() {
            let a = layers.pop().expect("one kept set per layer");
            let m: Vec<Linear> = (0..6).map(|i| linear(p, &linear_name(self.arch, l, i))).collect();
            let (g2i, g2) = get(p, &format!("encoder.layer.{l}.output.LayerNorm.weight"));
            let b2i = p.index(&format!("encoder.layer.{l}.output.LayerNorm.bias")).expect("bias loaded");
            let mut d_ff = vec![0f32; t * h];
            layer_norm_backward(&dx, &a.xhat2, &a.rstd2, h, g2, &mut d_ff, g.pair(g2i, b2i));
            // ff = dense(act) + x1.
            let mut d_act = vec![0f32; t * m[5].d_in];
            backward_linear(&d_ff, Saved { x: &a.act, mask: None, u: a.u[5].as_deref() }, t, &m[5], (r, self.scale), &mut d_act, &mut g);
            let d_inter = gelu_backward(&d_act, &a.inter);
            drop(d_act);
            let mut d_x1 = d_ff;
            backward_linear(&d_inter, Saved { x: &a.x1, mask: None, u: a.u[4].as_deref() }, t, &m[4], (r, self.scale), &mut d_x1, &mut g);
            drop(d_inter);
            let norm = self.arch.attention_norm();
            let (g1i, g1) = get(p, &format!("encoder.layer.{l}.{norm}.weight"));
            let b1i = p.index(&format!("encoder.layer.{l}.{norm}.bias")).expect("bias loaded");
            let mut d_attn = vec![0f32; t * h];
            layer_norm_backward(&d_x1, &a.xhat1, &a.rstd1, h, g1, &mut d_attn, g.pair(g1i, b1i));
            drop(d_x1);
            // attn = dense(ctx) + x.
            let mut d_ctx = vec![0f32; t * h];
            backward_linear(&d_attn, Saved { x: &a.ctx, mask: None, u: a.u[3].as_deref() }, t, &m[3], (r, self.scale), &mut d_ctx, &mut g);
            let (dq, dk, dv) = attention_backward(&d_ctx, (&a.q, &a.k, &a.v), &a.lse, &rows, (h, heads), self.bias);
            drop(d_ctx);
            let mut d_x = d_attn;
            for (i, d) in [(0, &dq), (1, &dk), (2, &dv)] {
                backward_linear(d, Saved { x: &a.x, mask: None, u: a.u[i].as_deref() }, t, &m[i], (r, self.scale), &mut d_x, &mut g);
            }
            dx = d_x;
        }
        // Embeddings (only when they train).
        let (gi, gam) = get(p, "embeddings.LayerNorm.weight");
        let bi = p.index("embeddings.LayerNorm.bias").expect("bias loaded");
        let tables = ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight"].map(|n| p.index(n));
        let trains = g.slot[gi].is_some() || g.slot[bi].is_some() || tables.iter().flatten().any(|&i| g.slot[i].is_some());
        if trains {
            let mut d_emb = vec![0f32; t * h];
            layer_norm_backward(&dx, &emb_xhat, &emb_rstd, h, gam, &mut d_emb, g.pair(gi, bi));
            for (s, e) in seqs.iter().enumerate() {
                let start = rows.span(s).0;
                for (k, ((&id, &ty), position)) in e.ids.iter().zip(&e.types).zip(positions(self.arch, c, &e.ids)).enumerate() {
                    let src = &d_emb[(start + k) * h..(start + k + 1) * h];
                    for (table, row) in tables.iter().zip([id as usize, position, ty as usize]) {
                        if let Some(gt) = table.and_then(|i| g.get(i)) {
                            gt[row * h..(row + 1) * h].iter_mut().zip(src).for_each(|(g, &d)| *g += d);
                        }
                    }
                }
            }
        }
        g.values
    }
}

/// The output width of a task.
pub(crate) fn output_width(task: EncoderTask, h: usize) -> usize {
    match task {
        EncoderTask::Embedder { .. } => h,
        EncoderTask::CrossEncoder => 1,
    }
}

impl Kept {
    /// The task's outputs `[B, d]`.
    pub fn outputs(&self) -> &[f32] {
        &self.out
    }
}
