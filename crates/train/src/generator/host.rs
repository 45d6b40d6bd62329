//! The training step's CPU kernels: a Llama decoder block with LoRA, forward and backward,
//! written out by hand on host memory (the Burn path in [`crate::generator::model`] stays for CUDA and
//! as the reference these are tested against).
//!
//! Why by hand: on burn-flex the element-wise work of the step (RMSNorm, RoPE, SiLU·gate, the
//! causal softmax, the head's log-sum-exp) ran on one thread and called `expf` per element,
//! and every op allocated and zero-filled a fresh buffer. Here each element-wise kernel is one
//! fused pass, threaded over rows, with a vectorised `exp` ([`exp_in_place`]: run-time
//! dispatch between AVX-512, AVX2 and the baseline build, `std`'s `exp` as the scalar
//! reference); the matrix products go to `gemm` on every core, reading the frozen matrices
//! `[out, in]` as stored (no transposed copy); and a block's intermediate values are kept in
//! [`Acts`] so the backward pass reuses them (or recomputes them, as
//! [`Checkpointing`] says).
//!
//! Shapes: one sequence of `t` tokens; row-major `[t, features]`; heads side by side in a
//! row (`[t, heads · head_dim]`); the attention probabilities `[heads, t, t]`.
use std::borrow::Cow;

use rayon::prelude::*;

/// Which activations the backward pass keeps and which it recomputes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkpointing {
    /// The fastest setting whose estimated peak fits `max_memory_mib`.
    #[default]
    Auto,
    /// Keep every layer's input only; recompute one layer at a time in the backward pass (one
    /// extra forward pass, the least memory).
    Layers,
    /// Keep every intermediate value of every layer (no recomputation, the most memory).
    None,
    /// Groups of `checkpoint_layers` layers counted from the top: keep each group's input,
    /// recompute one group at a time (the top group is kept from the forward pass).
    EveryN,
}

/// A layer's frozen matrices and norms as the kernels read them.
pub(crate) struct HostWeights<'a> {
    /// Per projection, `[out, in]` row-major (borrowed when the base is held in f32).
    pub w: Vec<Cow<'a, [f32]>>,
    /// Per projection, the bias if the checkpoint has one.
    pub bias: Vec<Option<&'a [f32]>>,
    /// `input_layernorm`.
    pub n1: &'a [f32],
    /// `post_attention_layernorm`.
    pub n2: &'a [f32],
}

/// A layer's adapter, per projection: `(A [r, in], B [out, r])` or none.
pub(crate) struct HostLora<'a> {
    pub ab: Vec<Option<(&'a [f32], &'a [f32])>>,
    pub r: usize,
    pub scale: f32,
}

/// The shape of the block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub h: usize,
    pub nh: usize,
    pub nkv: usize,
    pub hd: usize,
    pub ff: usize,
    pub eps: f32,
}

impl Dims {
    /// `(d_in, d_out)` of projection `p` (q, k, v, o, gate, up, down).
    pub fn proj(&self, p: usize) -> (usize, usize) {
        let (h, q, kv, ff) = (self.h, self.nh * self.hd, self.nkv * self.hd, self.ff);
        [(h, q), (h, kv), (h, kv), (q, h), (h, ff), (h, ff), (ff, h)][p]
    }

    /// f32 values one token keeps in [`Acts`] in a sequence of `t` tokens (the input excluded),
    /// with adapters of rank `r` on `n_lora` projections.
    pub fn act_floats_per_token(&self, t: usize, r: usize, n_lora: usize) -> usize {
        let (h, q, kv, ff) = (self.h, self.nh * self.hd, self.nkv * self.hd, self.ff);
        let _ = t;
        // x2; q, k, v, attn; gate, up; the LoRA intermediates; two rstd; a log-sum-exp per head.
        h + q + 2 * kv + q + 2 * ff + r * n_lora + 2 + self.nh
    }
}

/// RoPE tables `[t, head_dim]`.
pub(crate) struct HostRope {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

impl HostRope {
    /// Tables for positions `0..t` (angles in f64, as the Burn path).
    pub fn new(t: usize, hd: usize, inv_freq: &[f64]) -> HostRope {
        let (mut cos, mut sin) = (Vec::with_capacity(t * hd), Vec::with_capacity(t * hd));
        for pos in 0..t {
            for i in 0..hd {
                let angle = pos as f64 * inv_freq[i % (hd / 2)];
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        HostRope { cos, sin }
    }
}

/// One block's intermediate values for one sequence (what the backward pass reads).
///
/// What is cheap to recompute is not kept: the normalised inputs (`x · rstd · w`), `silu(g)·up`,
/// and the attention probabilities (rebuilt per head from `q`, `k` and each row's
/// log-sum-exp, as flash attention does), so a token costs about 6k floats per layer
/// (SmolLM2-135M) rather than 14k plus `heads · t`.
pub(crate) struct Acts {
    pub x: Vec<f32>,
    rstd1: Vec<f32>,
    /// Per projection: `drop(input) · Aᵀ` `[t, r]`.
    u: Vec<Option<Vec<f32>>>,
    /// Per projection: the dropout mask over its input (`keep / (1 − p)` or 0).
    masks: Vec<Option<Vec<f32>>>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Per head and row, the log-sum-exp of the scaled scores `[heads, t]`.
    lse: Vec<f32>,
    attn: Vec<f32>,
    x2: Vec<f32>,
    rstd2: Vec<f32>,
    g: Vec<f32>,
    up: Vec<f32>,
}

// ---------------------------------------------------------------------------------------------
// exp

/// The implementations of [`exp_in_place`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpPath {
    /// `f32::exp` per element: the reference.
    Scalar,
    /// The polynomial below, as the baseline build vectorises it.
    Baseline,
    /// The polynomial compiled for AVX2 + FMA.
    Avx2,
    /// The polynomial compiled for AVX-512F.
    Avx512,
}

impl ExpPath {
    /// Every path this machine can run.
    pub fn available() -> Vec<ExpPath> {
        let mut v = vec![ExpPath::Scalar, ExpPath::Baseline];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                v.push(ExpPath::Avx2);
            }
            if is_x86_feature_detected!("avx512f") {
                v.push(ExpPath::Avx512);
            }
        }
        v
    }

    /// The fastest path here.
    pub fn best() -> ExpPath {
        static BEST: std::sync::OnceLock<ExpPath> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| *ExpPath::available().last().expect("baseline"))
    }
}

/// `e^x` for `x` in [-87, 88] (clamped outside): Cephes' `expf` polynomial after the
/// reduction `x = n ln 2 + r`, `|r| ≤ ln 2 / 2`; relative error below 2e-7. Branch-free, so
/// a loop over it vectorises.
#[inline(always)]
fn exp_poly(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2²³: adding and subtracting rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[inline(always)]
fn exp_loop(xs: &mut [f32]) {
    for x in xs {
        *x = exp_poly(*x);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_avx2(xs: &mut [f32]) {
    exp_loop(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_avx512(xs: &mut [f32]) {
    exp_loop(xs)
}

/// `x ← e^x` over a slice, on `path`.
pub fn exp_in_place_with(xs: &mut [f32], path: ExpPath) {
    match path {
        ExpPath::Scalar => xs.iter_mut().for_each(|x| *x = x.exp()),
        ExpPath::Baseline => exp_loop(xs),
        // SAFETY: `ExpPath::available` lists these only where the CPU has the features.
        #[cfg(target_arch = "x86_64")]
        ExpPath::Avx2 => unsafe { exp_avx2(xs) },
        #[cfg(target_arch = "x86_64")]
        ExpPath::Avx512 => unsafe { exp_avx512(xs) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => exp_loop(xs),
    }
}

/// `x ← e^x` over a slice, on the fastest path of this machine.
pub fn exp_in_place(xs: &mut [f32]) {
    exp_in_place_with(xs, ExpPath::best())
}

// ---------------------------------------------------------------------------------------------
// matrix products

pub(crate) use gauge_tensor::gemm::{gemm, gemm_new, Operand, Product};

// ---------------------------------------------------------------------------------------------
// element-wise kernels (threaded over rows)

/// Rows per rayon task for an element-wise kernel over rows of `width` values.
pub(crate) fn rows_per_task(width: usize) -> usize {
    (16_384 / width.max(1)).max(1)
}

/// `out = x · rstd · w` per row, `rstd = 1 / √(mean(x²) + eps)`; returns `(out, rstd)`.
pub(crate) fn rms_norm(x: &[f32], h: usize, w: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let rstd: Vec<f32> = x.par_chunks(h).map(|x| 1.0 / (x.iter().map(|v| v * v).sum::<f32>() / h as f32 + eps).sqrt()).collect();
    (rms_apply(x, &rstd, h, w), rstd)
}

/// `x · rstd · w` per row from a saved `rstd` (what [`rms_norm`] returned).
fn rms_apply(x: &[f32], rstd: &[f32], h: usize, w: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let rpt = rows_per_task(h);
    out.par_chunks_mut(rpt * h).zip(x.par_chunks(rpt * h)).zip(rstd.par_chunks(rpt)).for_each(|((o, x), r)| {
        for ((o, x), &r) in o.chunks_mut(h).zip(x.chunks(h)).zip(r) {
            for ((o, &x), &w) in o.iter_mut().zip(x).zip(w) {
                *o = x * r * w;
            }
        }
    });
    out
}

/// `dx += rstd · (dy·w − x̂ · mean(dy·w · x̂))`, `x̂ = x · rstd`: the gradient of [`rms_norm`].
pub(crate) fn rms_norm_backward(dy: &[f32], x: &[f32], rstd: &[f32], h: usize, w: &[f32], dx: &mut [f32]) {
    let rpt = rows_per_task(h);
    dx.par_chunks_mut(rpt * h).zip(dy.par_chunks(rpt * h)).zip(x.par_chunks(rpt * h)).zip(rstd.par_chunks(rpt)).for_each(|(((dx, dy), x), rstd)| {
        for (((dx, dy), x), &r) in dx.chunks_mut(h).zip(dy.chunks(h)).zip(x.chunks(h)).zip(rstd) {
            let dot = dy.iter().zip(x).zip(w).map(|((&dy, &x), &w)| dy * w * x * r).sum::<f32>() / h as f32;
            for (((dx, &dy), &x), &w) in dx.iter_mut().zip(dy).zip(x).zip(w) {
                *dx += r * (dy * w - x * r * dot);
            }
        }
    });
}

/// RoPE in place over `[t, heads · hd]` (`x·cos + rotate_half(x)·sin`, rotate_half = `[−x₂, x₁]`).
pub(crate) fn rope(x: &mut [f32], heads: usize, hd: usize, tab: &HostRope) {
    let width = heads * hd;
    let half = hd / 2;
    x.par_chunks_mut(width).enumerate().for_each(|(pos, row)| {
        let (c, s) = (&tab.cos[pos * hd..(pos + 1) * hd], &tab.sin[pos * hd..(pos + 1) * hd]);
        for head in row.chunks_mut(hd) {
            for i in 0..half {
                let (x1, x2) = (head[i], head[i + half]);
                head[i] = x1 * c[i] - x2 * s[i];
                head[i + half] = x2 * c[i + half] + x1 * s[i + half];
            }
        }
    });
}

/// The gradient of [`rope`], in place: `dx = dy·cos + rotate_halfᵀ(dy·sin)`.
pub(crate) fn rope_backward(d: &mut [f32], heads: usize, hd: usize, tab: &HostRope) {
    let width = heads * hd;
    let half = hd / 2;
    d.par_chunks_mut(width).enumerate().for_each(|(pos, row)| {
        let (c, s) = (&tab.cos[pos * hd..(pos + 1) * hd], &tab.sin[pos * hd..(pos + 1) * hd]);
        for head in row.chunks_mut(hd) {
            for i in 0..half {
                let (d1, d2) = (head[i], head[i + half]);
                head[i] = d1 * c[i] + d2 * s[i + half];
                head[i + half] = d2 * c[i + half] - d1 * s[i];
            }
        }
    });
}

/// `z = silu(g) · up` (as `g · σ(g) · up`, the same arithmetic the backward pass recomputes).
fn silu_gate(g: &[f32], up: &[f32], ff: usize) -> Vec<f32> {
    silu_gate_from(g, up, &sigmoid(g, ff))
}

/// `σ(g)` element-wise.
fn sigmoid(g: &[f32], ff: usize) -> Vec<f32> {
    let mut sig = vec![0f32; g.len()];
    let rpt = rows_per_task(ff) * ff;
    sig.par_chunks_mut(rpt).zip(g.par_chunks(rpt)).for_each(|(s, g)| {
        for (s, &g) in s.iter_mut().zip(g) {
            *s = -g;
        }
        exp_in_place(s);
        s.iter_mut().for_each(|s| *s = 1.0 / (1.0 + *s));
    });
    sig
}

/// `silu(g) · up` from `σ(g)`.
fn silu_gate_from(g: &[f32], up: &[f32], sig: &[f32]) -> Vec<f32> {
    g.par_iter().zip(up).zip(sig).map(|((&g, &u), &s)| g * s * u).collect()
}

/// The gradient of [`silu_gate`]: `(dg, dup)` from `dz`, given `σ(g)`.
fn silu_gate_backward(dz: &[f32], g: &[f32], up: &[f32], sig: &[f32], ff: usize) -> (Vec<f32>, Vec<f32>) {
    let mut dg = vec![0f32; g.len()];
    let mut dup = vec![0f32; g.len()];
    let rpt = rows_per_task(ff) * ff;
    dg.par_chunks_mut(rpt).zip(dup.par_chunks_mut(rpt)).zip(dz.par_chunks(rpt)).zip(g.par_chunks(rpt)).zip(up.par_chunks(rpt).zip(sig.par_chunks(rpt))).for_each(|((((dg, dup), dz), g), (up, sig))| {
        for (((((dg, dup), &dz), &g), &u), &s) in dg.iter_mut().zip(dup.iter_mut()).zip(dz).zip(g).zip(up).zip(sig) {
            *dup = dz * g * s;
            *dg = dz * u * s * (1.0 + g * (1.0 - s));
        }
    });
    (dg, dup)
}

/// Softmax in place over the causal part of each row of `[t, t]` scores (`j ≤ i`), zero above;
/// writes each row's log-sum-exp into `lse`.
fn causal_softmax(p: &mut [f32], t: usize, lse: &mut [f32]) {
    for (i, (row, lse)) in p.chunks_mut(t).zip(lse).enumerate() {
        let (live, dead) = row.split_at_mut(i + 1);
        let max = live.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        live.iter_mut().for_each(|x| *x -= max);
        exp_in_place(live);
        let sum = live.iter().sum::<f32>();
        let inv = 1.0 / sum;
        live.iter_mut().for_each(|x| *x *= inv);
        dead.fill(0.0);
        *lse = max + sum.ln();
    }
}

/// The probabilities of a causal row from its scores and log-sum-exp: `e^(s − lse)` for
/// `j ≤ i`, zero above.
fn causal_probabilities(p: &mut [f32], t: usize, lse: &[f32]) {
    for (i, (row, &l)) in p.chunks_mut(t).zip(lse).enumerate() {
        let (live, dead) = row.split_at_mut(i + 1);
        live.iter_mut().for_each(|x| *x -= l);
        exp_in_place(live);
        dead.fill(0.0);
    }
}

// ---------------------------------------------------------------------------------------------
// projections

/// One projection: `y = x Wᵀ (+ b) + scale · (drop(x) Aᵀ) Bᵀ` — its weight `[d_out, d_in]`,
/// bias, and LoRA pair (`A [r, d_in]`, `B [d_out, r]`) with its rank and scale.
#[derive(Clone, Copy)]
pub(crate) struct Projection<'a> {
    pub w: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub lora: Option<(&'a [f32], &'a [f32])>,
    pub d_in: usize,
    pub d_out: usize,
    pub r: usize,
    pub scale: f32,
}

/// What a projection's forward kept for its gradient: its input, the dropout mask on LoRA's
/// input, and LoRA's intermediate `u = drop(x) Aᵀ`.
#[derive(Clone, Copy)]
pub(crate) struct Saved<'a> {
    pub x: &'a [f32],
    pub mask: Option<&'a [f32]>,
    pub u: Option<&'a [f32]>,
}

/// `y = x Wᵀ (+ bias) + s · (drop(x) Aᵀ) Bᵀ` over `[t, d_in]`; returns `y` and `drop(x) Aᵀ`.
pub(crate) fn project(p: &Projection, x: &[f32], t: usize, mask: Option<&[f32]>) -> (Vec<f32>, Option<Vec<f32>>) {
    let Projection { w, bias, lora, d_in, d_out, r, scale } = *p;
    let mut y = match bias {
        Some(b) => {
            let mut y: Vec<f32> = b.iter().copied().cycle().take(t * d_out).collect();
            gemm(Product::new(t, d_out, d_in, Operand::rows(x, d_in), Operand::transposed(w, d_in)), &mut y, d_out, true);
            y
        }
        None => gemm_new(Product::new(t, d_out, d_in, Operand::rows(x, d_in), Operand::transposed(w, d_in))),
    };
    let u = lora.map(|(a, b)| {
        let dropped: Cow<[f32]> = match mask {
            Some(m) => Cow::Owned(x.iter().zip(m).map(|(x, m)| x * m).collect()),
            None => Cow::Borrowed(x),
        };
        let u = gemm_new(Product::new(t, r, d_in, Operand::rows(&dropped, d_in), Operand::transposed(a, d_in)));
        gemm(Product::new(t, d_out, r, Operand::rows(&u, r), Operand::transposed(b, r)).scaled(scale), &mut y, d_out, true);
        u
    });
    (y, u)
}

/// The gradient of [`project`]: `dx += dy W + ((s · dy B) A) ⊙ mask`, and the adapter's
/// `dA += (s · dy B)ᵀ drop(x)`, `dB += s · dyᵀ u`.
pub(crate) fn project_backward(p: &Projection, dy: &[f32], t: usize, saved: Saved, dx: &mut [f32], grads: Option<(&mut [f32], &mut [f32])>) {
    let Projection { w, lora, d_in, d_out, r, scale, .. } = *p;
    let Saved { x, mask, u } = saved;
    gemm(Product::new(t, d_in, d_out, Operand::rows(dy, d_out), Operand::rows(w, d_in)), dx, d_in, true);
    let (Some((a, b)), Some(u), Some((ga, gb))) = (lora, u, grads) else { return };
    let du = gemm_new(Product::new(t, r, d_out, Operand::rows(dy, d_out), Operand::rows(b, r)).scaled(scale));
    gemm(Product::new(d_out, r, t, Operand::transposed(dy, d_out), Operand::rows(u, r)).scaled(scale), gb, r, true);
    match mask {
        Some(m) => {
            let dropped: Vec<f32> = x.iter().zip(m).map(|(x, m)| x * m).collect();
            gemm(Product::new(r, d_in, t, Operand::transposed(&du, r), Operand::rows(&dropped, d_in)), ga, d_in, true);
            let dxl = gemm_new(Product::new(t, d_in, r, Operand::rows(&du, r), Operand::rows(a, d_in)));
            dx.iter_mut().zip(dxl).zip(m).for_each(|((dx, g), m)| *dx += g * m);
        }
        None => {
            gemm(Product::new(r, d_in, t, Operand::transposed(&du, r), Operand::rows(x, d_in)), ga, d_in, true);
            gemm(Product::new(t, d_in, r, Operand::rows(&du, r), Operand::rows(a, d_in)), dx, d_in, true);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// attention

/// Causal grouped-query attention: `(out [t, nh·hd], log-sum-exp [nh, t])`. The heads run in
/// parallel, each with its own `[t, t]` scores (freed when the head is done).
fn attention(q: &[f32], k: &[f32], v: &[f32], t: usize, d: &Dims) -> (Vec<f32>, Vec<f32>) {
    let (nh, nkv, hd) = (d.nh, d.nkv, d.hd);
    let (qw, kw) = (nh * hd, nkv * hd);
    let group = nh / nkv;
    let mut lse = vec![0f32; nh * t];
    let heads: Vec<Vec<f32>> = lse
        .par_chunks_mut(t)
        .enumerate()
        .map(|(head, lse)| {
            let mut p = scores(q, k, t, d, head);
            causal_softmax(&mut p, t, lse);
            gemm_new(Product::new(t, hd, t, Operand::rows(&p, t), Operand::cols_from(v, kw, (head / group) * hd)))
        })
        .collect();
    let mut out = vec![0f32; t * qw];
    for (head, o) in heads.iter().enumerate() {
        for (row, src) in out.chunks_mut(qw).zip(o.chunks(hd)) {
            row[head * hd..(head + 1) * hd].copy_from_slice(src);
        }
    }
    (out, lse)
}

/// Head `head`'s scaled scores `q kᵀ / √hd`, `[t, t]`.
fn scores(q: &[f32], k: &[f32], t: usize, d: &Dims, head: usize) -> Vec<f32> {
    let g = head / (d.nh / d.nkv);
    let scale = 1.0 / (d.hd as f32).sqrt();
    gemm_new(Product::new(t, t, d.hd, Operand::cols_from(q, d.nh * d.hd, head * d.hd), Operand::cols_from_transposed(k, d.nkv * d.hd, g * d.hd)).scaled(scale))
}

/// The gradient of [`attention`]: `(dq, dk, dv)` from `d_out`.
fn attention_backward(d_out: &[f32], q: &[f32], k: &[f32], v: &[f32], lse: &[f32], t: usize, d: &Dims) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (nh, nkv, hd) = (d.nh, d.nkv, d.hd);
    let (qw, kw) = (nh * hd, nkv * hd);
    let group = nh / nkv;
    let scale = 1.0 / (hd as f32).sqrt();
    let per_head: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..nh)
        .into_par_iter()
        .map(|head| {
            let g = head / group;
            let mut p = scores(q, k, t, d, head);
            causal_probabilities(&mut p, t, &lse[head * t..(head + 1) * t]);
            let ph = &p[..];
            let d_o = Operand::cols_from(d_out, qw, head * hd);
            // dV = Pᵀ dO; dP = dO Vᵀ; dS = P ⊙ (dP − rowsum(dP ⊙ P)).
            let dv = gemm_new(Product::new(t, hd, t, Operand::transposed(ph, t), d_o));
            let mut ds = gemm_new(Product::new(t, t, hd, d_o, Operand::cols_from_transposed(v, kw, g * hd)));
            for (i, (ds, pr)) in ds.chunks_mut(t).zip(ph.chunks(t)).enumerate() {
                let dot: f32 = ds[..=i].iter().zip(&pr[..=i]).map(|(a, b)| a * b).sum();
                for (x, &pv) in ds[..=i].iter_mut().zip(&pr[..=i]) {
                    *x = pv * (*x - dot);
                }
                ds[i + 1..].fill(0.0);
            }
            // dQ = dS K · scale; dK = dSᵀ Q · scale.
            let dq = gemm_new(Product::new(t, hd, t, Operand::rows(&ds, t), Operand::cols_from(k, kw, g * hd)).scaled(scale));
            let dk = gemm_new(Product::new(t, hd, t, Operand::transposed(&ds, t), Operand::cols_from(q, qw, head * hd)).scaled(scale));
            (dq, dk, dv)
        })
        .collect();
    let mut dq = vec![0f32; t * qw];
    let mut dk = vec![0f32; t * kw];
    let mut dv = vec![0f32; t * kw];
    // Heads in order: each kv head's gradient is the same sum whatever the threads did.
    for (head, (hq, hk, hv)) in per_head.iter().enumerate() {
        let g = head / group;
        for pos in 0..t {
            dq[pos * qw + head * hd..pos * qw + (head + 1) * hd].copy_from_slice(&hq[pos * hd..(pos + 1) * hd]);
            for (dst, src) in [(&mut dk, hk), (&mut dv, hv)] {
                dst[pos * kw + g * hd..pos * kw + (g + 1) * hd].iter_mut().zip(&src[pos * hd..(pos + 1) * hd]).for_each(|(a, b)| *a += b);
            }
        }
    }
    (dq, dk, dv)
}

// ---------------------------------------------------------------------------------------------
// the block

/// One decoder block's parameters: its dimensions, frozen weights, adapter and rotary table.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    pub d: &'a Dims,
    pub w: &'a HostWeights<'a>,
    pub lora: &'a HostLora<'a>,
    pub rope: &'a HostRope,
}

/// One decoder block over `x` `[t, h]`: its output and its intermediate values.
pub(crate) fn block_forward(b: &Block, x: Vec<f32>, masks: Vec<Option<Vec<f32>>>) -> (Vec<f32>, Acts) {
    let Block { d, w, lora, rope: rope_tab } = *b;
    let t = x.len() / d.h;
    let proj = |p: usize, input: &[f32]| {
        let (d_in, d_out) = d.proj(p);
        project(&Projection { w: &w.w[p], bias: w.bias[p], lora: lora.ab[p], d_in, d_out, r: lora.r, scale: lora.scale }, input, t, masks[p].as_deref())
    };
    let (a, rstd1) = rms_norm(&x, d.h, w.n1, d.eps);
    let (mut q, uq) = proj(0, &a);
    let (mut k, uk) = proj(1, &a);
    let (v, uv) = proj(2, &a);
    drop(a);
    rope(&mut q, d.nh, d.hd, rope_tab);
    rope(&mut k, d.nkv, d.hd, rope_tab);
    let (attn, lse) = attention(&q, &k, &v, t, d);
    let (o, uo) = proj(3, &attn);
    let x2: Vec<f32> = x.iter().zip(&o).map(|(a, b)| a + b).collect();
    drop(o);
    let (m, rstd2) = rms_norm(&x2, d.h, w.n2, d.eps);
    let (g, ug) = proj(4, &m);
    let (up, uu) = proj(5, &m);
    drop(m);
    let z = silu_gate(&g, &up, d.ff);
    let (down, ud) = proj(6, &z);
    drop(z);
    let out: Vec<f32> = x2.iter().zip(&down).map(|(a, b)| a + b).collect();
    let acts = Acts { x, rstd1, u: vec![uq, uk, uv, uo, ug, uu, ud], masks, q, k, v, lse, attn, x2, rstd2, g, up };
    (out, acts)
}

/// The gradient of [`block_forward`]: from `d_out` (`[t, h]`), adds each adapter's gradient into
/// `grads[p]` (`(dA, dB)` of projection `p`, when adapted) and returns the gradient at the
/// block's input when `need_dx`.
pub(crate) fn block_backward(b: &Block, acts: &Acts, d_out: &[f32], grads: &mut [Option<(&mut [f32], &mut [f32])>], need_dx: bool) -> Option<Vec<f32>> {
    let Block { d, w, lora, rope: rope_tab } = *b;
    let t = acts.x.len() / d.h;
    let mut back = |p: usize, dy: &[f32], input: &[f32], dx: &mut [f32]| {
        let (d_in, d_out) = d.proj(p);
        let g = grads[p].as_mut().map(|(a, b)| (&mut **a, &mut **b));
        let projection = Projection { w: &w.w[p], bias: None, lora: lora.ab[p], d_in, d_out, r: lora.r, scale: lora.scale };
        project_backward(&projection, dy, t, Saved { x: input, mask: acts.masks[p].as_deref(), u: acts.u[p].as_deref() }, dx, g);
    };
    // out = x2 + down(z), z = silu(g)·up (recomputed): dx2 = d_out; dz = d_out ∂down.
    let sig = sigmoid(&acts.g, d.ff);
    let z = silu_gate_from(&acts.g, &acts.up, &sig);
    let mut dz = vec![0f32; t * d.ff];
    back(6, d_out, &z, &mut dz);
    drop(z);
    let (dg, dup) = silu_gate_backward(&dz, &acts.g, &acts.up, &sig, d.ff);
    drop((dz, sig));
    let m = rms_apply(&acts.x2, &acts.rstd2, d.h, w.n2);
    let mut dm = vec![0f32; t * d.h];
    back(4, &dg, &m, &mut dm);
    back(5, &dup, &m, &mut dm);
    drop((dg, dup, m));
    let mut dx2 = d_out.to_vec();
    rms_norm_backward(&dm, &acts.x2, &acts.rstd2, d.h, w.n2, &mut dx2);
    drop(dm);
    // x2 = x + o(attn).
    let mut d_attn = vec![0f32; t * d.nh * d.hd];
    back(3, &dx2, &acts.attn, &mut d_attn);
    let (mut dq, mut dk, dv) = attention_backward(&d_attn, &acts.q, &acts.k, &acts.v, &acts.lse, t, d);
    drop(d_attn);
    rope_backward(&mut dq, d.nh, d.hd, rope_tab);
    rope_backward(&mut dk, d.nkv, d.hd, rope_tab);
    let a = rms_apply(&acts.x, &acts.rstd1, d.h, w.n1);
    let mut da = vec![0f32; t * d.h];
    back(0, &dq, &a, &mut da);
    back(1, &dk, &a, &mut da);
    back(2, &dv, &a, &mut da);
    drop(a);
    if !need_dx {
        return None;
    }
    rms_norm_backward(&da, &acts.x, &acts.rstd1, d.h, w.n1, &mut dx2);
    Some(dx2)
}

/// The output head over normalised rows `sel` `[n, h]` predicting `next`: the summed NLL and,
/// with `weight`, the gradient of `weight × NLL` at `sel`. `rows(a, b)` gives the head's rows
/// `a..b` as `[b − a, h]` f32 (a slice of at most `slice` rows is alive at a time).
///
/// One pass over the vocabulary, as flash attention does over keys: per row a running maximum
/// `m` and sum `s = Σ e^(logit − m)`, and the running `Σ e^(logit − m) · W[token]`, rescaled by
/// `e^(m_old − m_new)` when the maximum grows; at the end `∂NLL/∂sel = that / s − W[target]`.
/// So each slice's logits are computed once (no second pass over the head) and only one
/// slice's logits are alive.
pub(crate) fn head_loss<'w>(sel: &[f32], h: usize, vocab: usize, next: &[u32], weight: Option<f64>, slice: usize, rows: &dyn Fn(usize, usize) -> Cow<'w, [f32]>) -> (f64, Option<Vec<f32>>) {
    let n = next.len();
    let sel_op = Operand::rows(sel, h);
    let mut max = vec![f32::NEG_INFINITY; n];
    let mut sum = vec![0f64; n];
    let mut target_logit = vec![0f64; n];
    let mut g = weight.map(|_| vec![0f32; n * h]);
    for a in (0..vocab).step_by(slice) {
        let b = (a + slice).min(vocab);
        let w = rows(a, b);
        let vs = b - a;
        let mut logits = gemm_new(Product::new(n, vs, h, sel_op, Operand::transposed(&w, h)));
        for (i, &tok) in next.iter().enumerate() {
            let tok = tok as usize;
            if (a..b).contains(&tok) {
                // The target logit in f64 from the head row, as the reference does.
                let row = &w[(tok - a) * h..(tok - a + 1) * h];
                target_logit[i] = row.iter().zip(&sel[i * h..(i + 1) * h]).map(|(&w, &x)| w as f64 * x as f64).sum();
            }
        }
        // Per row: the new maximum, the factor on what was summed so far, e^(logit − max).
        let factors: Vec<f32> = logits
            .par_chunks_mut(vs)
            .zip(max.par_iter_mut())
            .zip(sum.par_iter_mut())
            .map(|((row, m), s)| {
                let m_new = row.iter().fold(*m, |m, &x| m.max(x));
                let factor = if *m == f32::NEG_INFINITY { 0.0 } else { ((*m - m_new) as f64).exp() };
                row.iter_mut().for_each(|x| *x -= m_new);
                exp_in_place(row);
                *s = *s * factor + row.iter().map(|&x| x as f64).sum::<f64>();
                *m = m_new;
                factor as f32
            })
            .collect();
        if let Some(g) = g.as_mut() {
            g.par_chunks_mut(h).zip(&factors).for_each(|(g, &f)| g.iter_mut().for_each(|x| *x *= f));
            gemm(Product::new(n, h, vs, Operand::rows(&logits, vs), Operand::rows(&w, h)), g, h, true);
        }
    }
    let lse: Vec<f64> = max.iter().zip(&sum).map(|(&m, &s)| m as f64 + s.ln()).collect();
    let nll: f64 = lse.iter().zip(&target_logit).map(|(l, t)| l - t).sum();
    let grad = g.map(|mut g| {
        let weight = weight.expect("a gradient is asked for with a weight");
        for (i, &tok) in next.iter().enumerate() {
            let target_row = rows(tok as usize, tok as usize + 1);
            let inv = 1.0 / sum[i];
            for (x, &w) in g[i * h..(i + 1) * h].iter_mut().zip(target_row.iter()) {
                *x = ((*x as f64 * inv - w as f64) * weight) as f32;
            }
        }
        g
    });
    (nll, grad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exp_path_matches_f64_exp() {
        let xs: Vec<f32> = (0..20_000).map(|i| -87.0 + 175.0 * i as f32 / 20_000.0).chain([0.0, -0.0, 1.0, -1.0, 1e-8, 88.0, -87.0]).collect();
        for path in ExpPath::available() {
            let mut got = xs.clone();
            exp_in_place_with(&mut got, path);
            for (x, g) in xs.iter().zip(&got) {
                let want = (*x as f64).exp();
                let rel = ((*g as f64) - want).abs() / want;
                assert!(rel <= 3e-7, "{path:?}: exp({x}) = {g}, want {want} (relative error {rel:e})");
            }
        }
    }

    #[test]
    fn exp_clamps_outside_its_range() {
        for path in ExpPath::available().into_iter().filter(|p| *p != ExpPath::Scalar) {
            let mut v = vec![-1000.0f32, 1000.0, f32::NEG_INFINITY];
            exp_in_place_with(&mut v, path);
            assert!(v[0] >= 0.0 && v[0] < 1e-37 && v[2] < 1e-37, "{path:?}: {v:?}");
            assert!(v[1].is_finite() && v[1] > 1e38, "{path:?}: {v:?}");
        }
    }

    /// Central finite differences of a scalar function of `x` against an analytic gradient.
    fn check_grad(name: &str, x: &[f32], f: &dyn Fn(&[f32]) -> f64, grad: &[f32]) {
        let eps = 1e-2f32;
        let mut worst = 0f64;
        for i in (0..x.len()).step_by((x.len() / 40).max(1)) {
            let mut xp = x.to_vec();
            xp[i] += eps;
            let mut xm = x.to_vec();
            xm[i] -= eps;
            let fd = (f(&xp) - f(&xm)) / (2.0 * eps as f64);
            worst = worst.max((fd - grad[i] as f64).abs());
        }
        let scale = grad.iter().fold(0f32, |m, g| m.max(g.abs())) as f64;
        assert!(worst <= 2e-3 * scale.max(1.0), "{name}: finite differences differ by {worst} (gradient scale {scale})");
    }

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = gauge_core::rng::SplitMix64::new(seed);
        (0..n).map(|_| ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32).collect()
    }

    #[test]
    fn element_wise_gradients_match_finite_differences() {
        let (t, h) = (5, 8);
        let x = noise(t * h, 1);
        let w: Vec<f32> = noise(h, 2).iter().map(|v| 1.0 + 0.5 * v).collect();
        let dy = noise(t * h, 3);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>();
        // RMSNorm.
        let (_, rstd) = rms_norm(&x, h, &w, 1e-5);
        let mut dx = vec![0f32; t * h];
        rms_norm_backward(&dy, &x, &rstd, h, &w, &mut dx);
        check_grad("rms_norm", &x, &|x| dot(&rms_norm(x, h, &w, 1e-5).0, &dy), &dx);
        // SiLU · gate, both inputs.
        let up = noise(t * h, 4);
        let (dg, dup) = silu_gate_backward(&dy, &x, &up, &sigmoid(&x, h), h);
        check_grad("silu_gate/g", &x, &|g| dot(&silu_gate(g, &up, h), &dy), &dg);
        check_grad("silu_gate/up", &up, &|u| dot(&silu_gate(&x, u, h), &dy), &dup);
        // RoPE.
        let hd = 4;
        let tab = HostRope::new(t, hd, &[1.0, 0.1]);
        let mut d = dy.clone();
        rope_backward(&mut d, h / hd, hd, &tab);
        check_grad("rope", &x, &|x| {
            let mut y = x.to_vec();
            rope(&mut y, h / hd, hd, &tab);
            dot(&y, &dy)
        }, &d);
    }

    #[test]
    fn attention_gradients_match_finite_differences() {
        let d = Dims { h: 0, nh: 4, nkv: 2, hd: 4, ff: 0, eps: 0.0 };
        let t = 6;
        let (q, k, v) = (noise(t * 16, 5), noise(t * 8, 6), noise(t * 8, 7));
        let dy = noise(t * 16, 8);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>();
        let (_, lse) = attention(&q, &k, &v, t, &d);
        // Causal: a row's probabilities, rebuilt from the log-sum-exp, sum to one and vanish
        // above the diagonal.
        for head in 0..d.nh {
            let mut p = scores(&q, &k, t, &d, head);
            causal_probabilities(&mut p, t, &lse[head * t..(head + 1) * t]);
            for (i, row) in p.chunks(t).enumerate() {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5 && row[i + 1..].iter().all(|&x| x == 0.0), "head {head} row {i}: {row:?}");
            }
        }
        let (dq, dk, dv) = attention_backward(&dy, &q, &k, &v, &lse, t, &d);
        check_grad("attention/q", &q, &|q| dot(&attention(q, &k, &v, t, &d).0, &dy), &dq);
        check_grad("attention/k", &k, &|k| dot(&attention(&q, k, &v, t, &d).0, &dy), &dk);
        check_grad("attention/v", &v, &|v| dot(&attention(&q, &k, v, t, &d).0, &dy), &dv);
    }

    #[test]
    fn head_loss_is_the_same_in_slices_and_matches_finite_differences() {
        let (n, h, vocab) = (4, 6, 11);
        let sel = noise(n * h, 11);
        let w: Vec<f32> = noise(vocab * h, 12).iter().map(|x| 3.0 * x).collect();
        let next = [3u32, 10, 0, 3];
        let rows = |a: usize, b: usize| Cow::Borrowed(&w[a * h..b * h]);
        let (whole, g_whole) = head_loss(&sel, h, vocab, &next, Some(0.5), vocab, &rows);
        // The NLL from its definition, in f64.
        let want: f64 = (0..n)
            .map(|i| {
                let logit = |v: usize| (0..h).map(|j| sel[i * h + j] as f64 * w[v * h + j] as f64).sum::<f64>();
                (0..vocab).map(|v| logit(v).exp()).sum::<f64>().ln() - logit(next[i] as usize)
            })
            .sum();
        assert!((whole - want).abs() < 1e-5, "{whole} vs {want}");
        for slice in [1, 3, 4, 10] {
            let (nll, g) = head_loss(&sel, h, vocab, &next, Some(0.5), slice, &rows);
            assert!((nll - whole).abs() < 1e-5, "slice {slice}: {nll} vs {whole}");
            for (a, b) in g.unwrap().iter().zip(g_whole.as_ref().unwrap()) {
                assert!((a - b).abs() < 1e-5, "slice {slice}: {a} vs {b}");
            }
        }
        let g = g_whole.unwrap();
        check_grad("head_loss", &sel, &|s| 0.5 * head_loss(s, h, vocab, &next, None, 3, &rows).0, &g);
    }
}
