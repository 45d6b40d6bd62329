//! The Llama forward on the host CPU, without Burn: plain buffers reused from step to step,
//! RoPE tables computed at load, q/k/v and gate/up fused into one matrix each (at load, so
//! checkpoints keep their names), a KV cache per layer written in place (f32, or f16 as
//! llama.cpp keeps it by default), and one parallel region per matmul and per attention.
//!
//! Two precisions, chosen per call by what is run:
//! - a prompt (several positions of one sequence): Q4_K and Q6_K matrices run the int8 prompt
//!   GEMM of [`crate::prompt_k`] (activations quantised once per row, as llama.cpp's Q8_K); other
//!   quantised matrices are dequantised for one f32 gemm (or a fused f32 dot for few rows);
//!   attention is an f32 gemm per head;
//! - a decoding step (one position of each of one or more sequences) quantises the
//!   activations in two 8-bit levels and runs the integer kernels of [`crate::repack`] and
//!   [`crate::kernels`] (llama.cpp quantises to one level); every output depends only on its
//!   own sequence, so a batch decodes each sequence exactly as it would decode alone.
//!
//! A LoRA adapter's pairs sit beside quantised matrices ([`HostLora`]) and run in f32 on both
//! (a decoding step's rows one at a time, in a fixed order, so the batch rule above holds).
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::config::LlamaConfig;
use crate::kernels::{dot_f32, KernelPath, Q8Rows};
use crate::quant::{gemm_f32, QuantMatrix};
use gauge_tensor::gemm::{gemm, gemm_raw, Operand, Product, SendPtr, Threads};
use crate::DecoderError;

/// Rows at least this many run a gemm (f32 weights; quantised ones decide in [`QuantMatrix::matmul`]).
const GEMM_ROWS: usize = 16;

/// RoPE positions tabulated at load (later positions compute their angles on the fly).
const ROPE_TABLE_POSITIONS: usize = 8192;

/// A weight matrix `[out, in]`.
pub(crate) enum Weight {
    /// f32, row-major.
    F32(Vec<f32>),
    /// ggml blocks.
    Quant(QuantMatrix),
}

/// A linear layer on the host.
pub(crate) struct HostLinear {
    w: Weight,
    d_in: usize,
    d_out: usize,
    bias: Option<Vec<f32>>,
    /// LoRA pairs kept beside quantised weights (f32 weights take theirs merged).
    lora: Vec<HostLora>,
}

/// A LoRA pair beside a quantised layer, QLoRA's form: output columns
/// `offset..offset + d_out` of the layer get `(x Aᵀ)(s B)ᵀ` on top of `x Wᵀ`, the blocks staying
/// 4-bit (merging `s B A` into the matrix would need it in f32: twice the 1.5B's weight bytes
/// and, on 2 cores, twice its time per token).
pub(crate) struct HostLora {
    /// The first output column of the layer the pair adds to (a stacked layer holds several).
    offset: usize,
    /// Output columns.
    d_out: usize,
    /// Rank.
    rank: usize,
    /// `A`, `[rank, d_in]`.
    a: Vec<f32>,
    /// `s · B`, `[d_out, rank]`: the adapter's scale folded in at load.
    b: Vec<f32>,
}

impl HostLora {
    /// The pair of an adapter's module for a layer `[d_out, d_in]`, scaled by `scale`.
    pub(crate) fn new(pair: &crate::adapter::LoraPair, scale: f64) -> HostLora {
        let rank = pair.rank();
        HostLora { offset: 0, d_out: pair.d_out, rank, a: pair.a.clone(), b: pair.b.iter().map(|&b| (b as f64 * scale) as f32).collect() }
    }

    /// A prompt's rows: adds `(x Aᵀ)(s B)ᵀ` to columns `offset..offset + d_out` of `out`
    /// (`rows × width`) by two gemms.
    fn add_prompt(&self, x: &[f32], rows: usize, d_in: usize, out: &mut [f32], width: usize) {
        let (r, d_out, offset) = (self.rank, self.d_out, self.offset);
        debug_assert!(offset + d_out <= width && out.len() == rows * width && x.len() == rows * d_in);
        let mut h = vec![0f32; rows * r];
        gemm_f32(x, rows, &self.a, d_in, r, &mut h);
        // Added straight into the pair's columns (row stride: the layer's width).
        gemm(Product::new(rows, d_out, r, Operand::rows(&h, r), Operand::transposed(&self.b, r)).on(Threads::All), &mut out[offset..], width, true);
    }

    /// Weights: `rank × (d_in + d_out)`.
    fn parameters(&self) -> usize {
        self.a.len() + self.b.len()
    }
}

/// Decoding rows: adds every pair's `(x Aᵀ)(s B)ᵀ` to its columns of `out` (`rows × width`),
/// all pairs of the layer in one parallel region. Each row runs alone, in a fixed order of dot
/// products, so a sequence's output never depends on the batch it decodes in (a gemm picks its
/// kernel by the number of rows).
fn add_pairs_decoding(pairs: &[HostLora], x: &[f32], rows: usize, d_in: usize, out: &mut [f32], width: usize) {
    debug_assert!(out.len() == rows * width && x.len() == rows * d_in);
    // `x Aᵀ` of every pair (rank × d_in per row: small), then `s B` by column chunks.
    let hs: Vec<Vec<f32>> = pairs
        .iter()
        .map(|p| {
            debug_assert!(p.offset + p.d_out <= width);
            x.chunks_exact(d_in).flat_map(|xr| (0..p.rank).map(move |k| dot_f32(&p.a[k * d_in..(k + 1) * d_in], xr))).collect()
        })
        .collect();
    const CHUNK: usize = 256;
    let items: Vec<(usize, usize)> = pairs.iter().enumerate().flat_map(|(i, p)| (0..p.d_out.div_ceil(CHUNK)).map(move |c| (i, c))).collect();
    let ptr = SendPtr(out.as_mut_ptr());
    let work = |j: usize| {
        let (i, c) = items[j];
        let (p, h) = (&pairs[i], &hs[i]);
        for o in c * CHUNK..((c + 1) * CHUNK).min(p.d_out) {
            let br = &p.b[o * p.rank..(o + 1) * p.rank];
            for (row, hr) in h.chunks_exact(p.rank).enumerate() {
                // SAFETY: pairs write disjoint columns, and column `offset + o` of a pair
                // belongs to this item only.
                unsafe { *ptr.get().add(row * width + p.offset + o) += dot_f32(br, hr) };
            }
        }
    };
    crate::pool::parallel_for(items.len(), work);
}

impl HostLinear {
    /// A layer over f32 weights `[d_out, d_in]`.
    pub(crate) fn f32(w: Vec<f32>, bias: Option<Vec<f32>>, d_in: usize, d_out: usize) -> HostLinear {
        assert_eq!(w.len(), d_in * d_out);
        HostLinear { w: Weight::F32(w), d_in, d_out, bias, lora: Vec::new() }
    }

    /// A layer over quantised blocks.
    pub(crate) fn quant(q: QuantMatrix, bias: Option<Vec<f32>>) -> HostLinear {
        HostLinear { d_in: q.d_in(), d_out: q.d_out(), w: Weight::Quant(q), bias, lora: Vec::new() }
    }

    /// A layer over quantised blocks with a LoRA pair beside them (see [`HostLora`]).
    pub(crate) fn quant_adapted(q: QuantMatrix, bias: Option<Vec<f32>>, lora: HostLora) -> HostLinear {
        assert_eq!((lora.d_out, lora.a.len()), (q.d_out(), lora.rank * q.d_in()), "a LoRA pair of another shape");
        HostLinear { lora: vec![lora], ..HostLinear::quant(q, bias) }
    }

    /// Bytes of weights (LoRA pairs included).
    pub(crate) fn n_bytes(&self) -> usize {
        let pairs: usize = self.lora.iter().map(HostLora::parameters).sum::<usize>() * 4;
        pairs
            + match &self.w {
                Weight::F32(w) => w.len() * 4,
                Weight::Quant(q) => q.n_bytes(),
            }
    }

    /// Weights (LoRA pairs included).
    pub(crate) fn parameters(&self) -> usize {
        self.d_in * self.d_out + self.lora.iter().map(HostLora::parameters).sum::<usize>()
    }

    /// Layers with the same input stacked into as few matrices as their formats allow (one
    /// when all are f32 or all share a block type).
    pub(crate) fn stack(parts: Vec<HostLinear>) -> Vec<HostLinear> {
        let mut out: Vec<HostLinear> = Vec::new();
        for p in parts {
            let Some(last) = out.last_mut() else {
                out.push(p);
                continue;
            };
            let same_width = last.d_in == p.d_in;
            // The first matrix grows in place (a model's largest allocations are not copied).
            let merged = match (&mut last.w, &p.w) {
                (Weight::F32(a), Weight::F32(b)) if same_width => {
                    a.extend_from_slice(b);
                    true
                }
                (Weight::Quant(a), Weight::Quant(b)) => a.append(b),
                _ => false,
            };
            if merged {
                let bias = match (&last.bias, &p.bias) {
                    (None, None) => None,
                    (a, b) => Some([a.clone().unwrap_or_else(|| vec![0.0; last.d_out]), b.clone().unwrap_or_else(|| vec![0.0; p.d_out])].concat()),
                };
                // The appended layer's pairs now write columns after the first's.
                let shift = last.d_out;
                last.lora.extend(p.lora.into_iter().map(|l| HostLora { offset: l.offset + shift, ..l }));
                last.d_out += p.d_out;
                last.bias = bias;
            } else {
                out.push(p);
            }
        }
        out
    }

    /// `x · Wᵀ (+ b)` for `rows` rows into `out` (`rows × d_out`): with `q8` (the same rows,
    /// quantised) on the integer kernels, else in f32.
    fn forward(&self, x: &[f32], rows: usize, q8: Option<&Q8Rows>, path: KernelPath, out: &mut [f32]) {
        debug_assert_eq!(out.len(), rows * self.d_out);
        match (&self.w, q8) {
            (Weight::Quant(m), Some(q8)) => m.matmul_q8(q8, rows, out, path),
            (Weight::Quant(m), None) => m.matmul_prompt(x, rows, path, out),
            (Weight::F32(w), _) if rows >= GEMM_ROWS => gemm_f32(x, rows, w, self.d_in, self.d_out, out),
            (Weight::F32(w), _) => {
                let (d_in, d_out) = (self.d_in, self.d_out);
                let ptr = SendPtr(out.as_mut_ptr());
                let chunk = 32;
                let work = |c: usize| {
                    for o in c * chunk..((c + 1) * chunk).min(d_out) {
                        let wr = &w[o * d_in..(o + 1) * d_in];
                        for r in 0..rows {
                            // SAFETY: (r, o) belongs to this chunk only.
                            unsafe { *ptr.get().add(r * d_out + o) = dot_f32(wr, &x[r * d_in..(r + 1) * d_in]) };
                        }
                    }
                };
                crate::pool::parallel_for(d_out.div_ceil(chunk), work);
            }
        }
        if self.lora.is_empty() {
        } else if q8.is_some() {
            add_pairs_decoding(&self.lora, x, rows, self.d_in, out, self.d_out);
        } else {
            for l in &self.lora {
                l.add_prompt(x, rows, self.d_in, out, self.d_out);
            }
        }
        if let Some(b) = &self.bias {
            for row in out.chunks_exact_mut(self.d_out) {
                row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
            }
        }
    }
}

/// Runs several layers that read the same input, writing their outputs side by side
/// (`rows × Σ d_out`).
fn forward_stacked(parts: &[HostLinear], x: &[f32], rows: usize, q8: Option<&Q8Rows>, path: KernelPath, out: &mut Vec<f32>, tmp: &mut Vec<f32>) {
    let total: usize = parts.iter().map(|p| p.d_out).sum();
    out.resize(rows * total, 0.0);
    if let [one] = parts {
        one.forward(x, rows, q8, path, out);
        return;
    }
    let mut col = 0;
    for p in parts {
        tmp.resize(rows * p.d_out, 0.0);
        p.forward(x, rows, q8, path, tmp);
        for r in 0..rows {
            out[r * total + col..r * total + col + p.d_out].copy_from_slice(&tmp[r * p.d_out..(r + 1) * p.d_out]);
        }
        col += p.d_out;
    }
}

/// The token embedding table (quantised only on the host).
pub(crate) enum Embedding {
    /// f32 rows.
    F32(Vec<f32>),
    /// Quantised rows, dequantised one at a time.
    Quant(QuantMatrix),
}

impl Embedding {
    /// Appends the rows of `ids` to `out`; ids outside the vocabulary are an error.
    pub(crate) fn rows(&self, ids: &[u32], c: &LlamaConfig, out: &mut Vec<f32>) -> Result<(), DecoderError> {
        let h = c.hidden_size;
        for &id in ids {
            let id = id as usize;
            if id >= c.vocab_size {
                return Err(DecoderError::Model(format!("token id {id} is outside the vocabulary ({})", c.vocab_size)));
            }
            let start = out.len();
            match self {
                Embedding::F32(e) => out.extend_from_slice(&e[id * h..(id + 1) * h]),
                Embedding::Quant(q) => {
                    out.resize(start + h, 0.0);
                    q.dequantize_row(id, &mut out[start..]);
                }
            }
        }
        Ok(())
    }
}

/// One transformer block's weights.
pub(crate) struct HostBlock {
    pub(crate) attn_norm: Vec<f32>,
    /// q, k, v (fused when their formats allow).
    pub(crate) qkv: Vec<HostLinear>,
    pub(crate) o: HostLinear,
    pub(crate) ffn_norm: Vec<f32>,
    /// gate, up (fused when their formats allow).
    pub(crate) gate_up: Vec<HostLinear>,
    pub(crate) down: HostLinear,
}

/// The whole model on the host.
pub(crate) struct HostModel {
    pub(crate) embed: Embedding,
    pub(crate) layers: Vec<HostBlock>,
    pub(crate) norm: Vec<f32>,
    pub(crate) lm_head: HostLinear,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    inv_freq: Vec<f64>,
    /// The integer kernels' path.
    pub(crate) kernel: KernelPath,
    /// Keys and values in f16.
    pub(crate) kv_f16: bool,
}

/// Keys or values of one layer, position-major (`[positions, kv_heads · head_dim]`).
#[derive(Clone, Debug)]
enum KvStore {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
}

impl KvStore {
    fn push(&mut self, row: &[f32]) {
        match self {
            KvStore::F32(v) => v.extend_from_slice(row),
            KvStore::F16(v) => {
                let start = v.len();
                v.resize(start + row.len(), half::f16::ZERO);
                v[start..].convert_from_f32_slice(row);
            }
        }
    }

    /// Its first `values` values, in a buffer with room for `capacity` values.
    fn prefix(&self, values: usize, capacity: usize) -> KvStore {
        match self {
            KvStore::F32(v) => {
                let mut out = Vec::with_capacity(capacity.max(values));
                out.extend_from_slice(&v[..values]);
                KvStore::F32(out)
            }
            KvStore::F16(v) => {
                let mut out = Vec::with_capacity(capacity.max(values));
                out.extend_from_slice(&v[..values]);
                KvStore::F16(out)
            }
        }
    }

    /// Values held (positions × width).
    fn len_f(&self) -> usize {
        match self {
            KvStore::F32(v) => v.len(),
            KvStore::F16(v) => v.len(),
        }
    }

    /// Rows `[0, n)` as f32 (borrowed, or converted into `buf`).
    fn as_f32<'a>(&'a self, n: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
        match self {
            KvStore::F32(v) => &v[..n],
            KvStore::F16(v) => {
                buf.resize(n, 0.0);
                v[..n].convert_to_f32_slice(buf);
                &buf[..]
            }
        }
    }
}

/// Buffers of one forward call, kept between calls.
#[derive(Default, Clone, Debug)]
struct Scratch {
    x: Vec<f32>,
    a: Vec<f32>,
    big: Vec<f32>,
    tmp: Vec<f32>,
    attn: Vec<f32>,
    act: Vec<f32>,
    q8: Q8Rows,
}

/// A sequence's keys and values on the host, with its buffers.
#[derive(Clone, Debug)]
pub struct HostCache {
    k: Vec<KvStore>,
    v: Vec<KvStore>,
    len: usize,
    scratch: Scratch,
}

impl HostCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of the first `n` positions (`0 < n ≤ len`), with room for `capacity` positions.
    pub(crate) fn prefix(&self, n: usize, capacity: usize) -> HostCache {
        assert!(n > 0 && n <= self.len, "a prefix of {n} positions of {}", self.len);
        let width = self.k.first().map_or(0, |s| s.len_f() / self.len);
        let copy = |stores: &[KvStore]| stores.iter().map(|s| s.prefix(n * width, capacity * width)).collect();
        HostCache { k: copy(&self.k), v: copy(&self.v), len: n, scratch: Scratch::default() }
    }

    /// Bytes of keys and values held.
    pub fn n_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|s| match s {
            KvStore::F32(v) => v.len() * 4,
            KvStore::F16(v) => v.len() * 2,
        }).sum()
    }
}

/// One sequence's share of a forward call.
pub(crate) struct Step<'a> {
    pub(crate) ids: &'a [u32],
    pub(crate) cache: &'a mut HostCache,
}

impl HostModel {
    pub(crate) fn new(c: &LlamaConfig, embed: Embedding, layers: Vec<HostBlock>, norm: Vec<f32>, lm_head: HostLinear, kernel: KernelPath, kv_f16: bool) -> HostModel {
        let half = c.head_dim() / 2;
        let inv_freq = c.inv_freq();
        let positions = c.max_position_embeddings.clamp(1, ROPE_TABLE_POSITIONS);
        let (mut rope_cos, mut rope_sin) = (Vec::with_capacity(positions * half), Vec::with_capacity(positions * half));
        for pos in 0..positions {
            for f in &inv_freq[..half] {
                let angle = pos as f64 * f;
                rope_cos.push(angle.cos() as f32);
                rope_sin.push(angle.sin() as f32);
            }
        }
        HostModel { embed, layers, norm, lm_head, rope_cos, rope_sin, inv_freq, kernel, kv_f16 }
    }

    /// An empty cache with room for `capacity` positions before it grows.
    pub(crate) fn new_cache(&self, c: &LlamaConfig, capacity: usize) -> HostCache {
        let row = c.kv_heads() * c.head_dim();
        let store = || if self.kv_f16 { KvStore::F16(Vec::with_capacity(capacity * row)) } else { KvStore::F32(Vec::with_capacity(capacity * row)) };
        HostCache { k: (0..self.layers.len()).map(|_| store()).collect(), v: (0..self.layers.len()).map(|_| store()).collect(), len: 0, scratch: Scratch::default() }
    }

    fn rope(&self, x: &mut [f32], pos: usize, hd: usize) {
        let half = hd / 2;
        let mut cs = [0f32; 256];
        let (cos, sin): (&[f32], &[f32]) = if (pos + 1) * half <= self.rope_cos.len() {
            (&self.rope_cos[pos * half..(pos + 1) * half], &self.rope_sin[pos * half..(pos + 1) * half])
        } else {
            let (c, s) = cs.split_at_mut(128);
            for i in 0..half {
                let angle = pos as f64 * self.inv_freq[i];
                c[i] = angle.cos() as f32;
                s[i] = angle.sin() as f32;
            }
            (&c[..half], &s[..half])
        };
        for head in x.chunks_exact_mut(hd) {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x1, x2) = (a[i], b[i]);
                a[i] = x1 * cos[i] - x2 * sin[i];
                b[i] = x2 * cos[i] + x1 * sin[i];
            }
        }
    }

    /// Runs each step's tokens (the positions after those in its cache), appends their keys
    /// and values, and returns each step's last-position logits.
    pub(crate) fn forward(&self, c: &LlamaConfig, steps: &mut [Step<'_>]) -> Result<Vec<Vec<f32>>, DecoderError> {
        let decode = steps.iter().all(|s| s.ids.len() == 1);
        if decode {
            // A decoding step's ~150 small regions run on the spinning pool.
            let _session = crate::pool::session();
            return self.forward_on_pool(c, steps);
        }
        // A prompt: gemm and attention on rayon, from a pool thread (the regions fork from a
        // worker instead of waking a sleeping caller each time).
        if rayon::current_thread_index().is_none() {
            return rayon::scope(|_| self.forward_on_pool(c, steps));
        }
        self.forward_on_pool(c, steps)
    }

    fn forward_on_pool(&self, c: &LlamaConfig, steps: &mut [Step<'_>]) -> Result<Vec<Vec<f32>>, DecoderError> {
        let (h, hd, nh, nkv, ff) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.kv_heads(), c.intermediate_size);
        if hd / 2 > 128 {
            return Err(DecoderError::Model(format!("head_dim {hd} is above the host path's 256")));
        }
        let rows: usize = steps.iter().map(|s| s.ids.len()).sum();
        // Decoding steps (one position per sequence) run on the integer kernels; prompts in f32.
        let decode = rows == steps.len();
        let mut sc = std::mem::take(&mut steps[0].cache.scratch);
        let Scratch { x, a, big, tmp, attn, act, q8 } = &mut sc;
        x.clear();
        for s in steps.iter() {
            self.embed.rows(s.ids, c, x)?;
        }
        let path = self.kernel;
        let qkv_w = (nh + 2 * nkv) * hd;
        let scale = 1.0 / (hd as f32).sqrt();
        for (l, b) in self.layers.iter().enumerate() {
            rms_norm(x, &b.attn_norm, c.rms_norm_eps as f32, a);
            let q8a = quantized(decode, q8, a, h);
            forward_stacked(&b.qkv, a, rows, q8a, path, big, tmp);
            // RoPE on q and k, then k and v into each sequence's cache.
            let mut r0 = 0;
            for s in steps.iter_mut() {
                let start = s.cache.len;
                for i in 0..s.ids.len() {
                    let row = &mut big[(r0 + i) * qkv_w..(r0 + i + 1) * qkv_w];
                    self.rope(&mut row[..(nh + nkv) * hd], start + i, hd);
                    s.cache.k[l].push(&row[nh * hd..(nh + nkv) * hd]);
                    s.cache.v[l].push(&row[(nh + nkv) * hd..]);
                }
                r0 += s.ids.len();
            }
            attn.resize(rows * nh * hd, 0.0);
            if rows == steps.len() {
                // One position per sequence: every (sequence, head) pair in one region.
                let kv: Vec<(&KvStore, &KvStore)> = steps.iter().map(|s| (&s.cache.k[l], &s.cache.v[l])).collect();
                attention_decode(&kv, big, qkv_w, Heads { nh, nkv, hd, scale }, attn);
            } else {
                let mut r0 = 0;
                for s in steps.iter() {
                    let (t, start) = (s.ids.len(), s.cache.len);
                    attention((&s.cache.k[l], &s.cache.v[l]), &big[r0 * qkv_w..(r0 + t) * qkv_w], qkv_w, (t, start), Heads { nh, nkv, hd, scale }, &mut attn[r0 * nh * hd..(r0 + t) * nh * hd]);
                    r0 += t;
                }
            }
            let q8o = quantized(decode, q8, attn, nh * hd);
            tmp.resize(rows * h, 0.0);
            b.o.forward(attn, rows, q8o, path, tmp);
            x.iter_mut().zip(tmp.iter()).for_each(|(x, o)| *x += o);
            rms_norm(x, &b.ffn_norm, c.rms_norm_eps as f32, a);
            let q8m = quantized(decode, q8, a, h);
            forward_stacked(&b.gate_up, a, rows, q8m, path, big, tmp);
            act.resize(rows * ff, 0.0);
            for (r, out) in act.chunks_exact_mut(ff).enumerate() {
                let gu = &big[r * 2 * ff..(r + 1) * 2 * ff];
                let (g, u) = gu.split_at(ff);
                for j in 0..ff {
                    out[j] = g[j] / (1.0 + (-g[j]).exp()) * u[j];
                }
            }
            let q8d = quantized(decode, q8, act, ff);
            tmp.resize(rows * h, 0.0);
            b.down.forward(act, rows, q8d, path, tmp);
            x.iter_mut().zip(tmp.iter()).for_each(|(x, o)| *x += o);
        }
        // Last row of each step, normed, through the head.
        let n = steps.len();
        let mut last = Vec::with_capacity(n * h);
        let mut r0 = 0;
        for s in steps.iter() {
            r0 += s.ids.len();
            last.extend_from_slice(&x[(r0 - 1) * h..r0 * h]);
        }
        rms_norm(&last, &self.norm, c.rms_norm_eps as f32, a);
        let q8h = quantized(decode, q8, a, h);
        let v = self.lm_head.d_out;
        let mut logits = vec![0f32; n * v];
        self.lm_head.forward(a, n, q8h, path, &mut logits);
        for s in steps.iter_mut() {
            s.cache.len += s.ids.len();
        }
        steps[0].cache.scratch = sc;
        Ok(logits.chunks_exact(v).map(<[f32]>::to_vec).collect())
    }
}

/// `x` quantised into `q8` for a decoding step (the integer kernels), `None` for a prompt (f32).
fn quantized<'a>(decode: bool, q8: &'a mut Q8Rows, x: &[f32], cols: usize) -> Option<&'a Q8Rows> {
    decode.then(|| {
        q8.quantize(x, cols);
        &*q8
    })
}

/// RMSNorm of each row of `x` into `out`.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut Vec<f32>) {
    let h = w.len();
    out.resize(x.len(), 0.0);
    for (xr, or) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
        let ms = xr.iter().map(|v| v * v).sum::<f32>() / h as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * inv * g;
        }
    }
}

/// The attention heads of a layer: query heads, key/value heads, head width, score scale.
#[derive(Clone, Copy, Debug)]
struct Heads {
    nh: usize,
    nkv: usize,
    hd: usize,
    scale: f32,
}

/// Causal grouped-query attention of `t` query rows (positions `start..start+t`, rows of
/// width `stride` with the query heads first) over the cache's `start + t` positions, into
/// `out` (`t × nh·hd`).
fn attention((k, v): (&KvStore, &KvStore), q: &[f32], stride: usize, (t, start): (usize, usize), heads: Heads, out: &mut [f32]) {
    let Heads { nh, nkv, hd, scale } = heads;
    if t == 1 {
        return attention_decode(&[(k, v)], q, stride, heads, out);
    }
    let s = start + t;
    let row = nkv * hd;
    let group = nh / nkv;
    let (mut kb, mut vb) = (Vec::new(), Vec::new());
    let keys = k.as_f32(s * row, &mut kb);
    let values = v.as_f32(s * row, &mut vb);
    let out_w = nh * hd;
    let ptr = SendPtr(out.as_mut_ptr());
    // A prompt: per head, scores = Q Kᵀ by gemm, causal softmax, then · V by gemm.
    (0..nh).into_par_iter().for_each(|head| {
        let g = head / group;
        let mut scores = vec![0f32; t * s];
        // scores t × s = scale · Q rows of this head (stride `stride`) · Kᵀ read from the cache
        // rows of this kv head (column stride `row`).
        let qk = Product::new(t, s, hd, Operand { v: &q[head * hd..], rs: stride, cs: 1 }, Operand { v: &keys[g * hd..], rs: 1, cs: row });
        gemm(qk.scaled(scale).on(Threads::Caller), &mut scores, s, false);
        for (i, r) in scores.chunks_exact_mut(s).enumerate() {
            let visible = start + i + 1;
            softmax(&mut r[..visible]);
            r[visible..].iter_mut().for_each(|v| *v = 0.0);
        }
        let pv = Product::new(t, hd, s, Operand::rows(&scores, s), Operand { v: &values[g * hd..], rs: row, cs: 1 }).on(Threads::Caller);
        // SAFETY: out rows of this head's hd columns (row stride out_w), which only this head
        // writes; `out` holds t rows of out_w.
        unsafe { gemm_raw(pv, ptr.get().add(head * hd), out_w, false) }
    });
}

/// One query position per sequence (a decoding step): sequence `i`'s query heads are row `i`
/// of `q` (width `stride`), its keys and values `kv[i]` (every cached position, the new one
/// included); out row `i` gets its `nh · hd` outputs. Every (sequence, head) pair is one work
/// item of a single parallel region, so a batch keeps both cores busy however few heads a
/// sequence has; each pair's arithmetic is the same whatever the batch.
fn attention_decode(kv: &[(&KvStore, &KvStore)], q: &[f32], stride: usize, heads: Heads, out: &mut [f32]) {
    let Heads { nh, nkv, hd, scale } = heads;
    let row = nkv * hd;
    let group = nh / nkv;
    // f32 views of each sequence's keys and values (an f16 cache converted once per layer).
    let mut bufs: Vec<(Vec<f32>, Vec<f32>)> = vec![Default::default(); kv.len()];
    let mut positions = 0;
    let views: Vec<(&[f32], &[f32])> = kv
        .iter()
        .zip(bufs.iter_mut())
        .map(|((k, v), (kb, vb))| {
            let n = k.len_f();
            positions += n / row;
            (k.as_f32(n, kb), v.as_f32(n, vb))
        })
        .collect();
    let ptr = SendPtr(out.as_mut_ptr());
    let work = |item: usize| {
        let (i, head) = (item / nh, item % nh);
        let (keys, values) = views[i];
        let mut acc = [0f32; 256];
        let mut scores = Vec::with_capacity(keys.len() / row);
        crate::kernels::attend_one(&q[i * stride + head * hd..i * stride + (head + 1) * hd], keys, values, row, head / group * hd, scale, &mut scores, &mut acc[..hd]);
        // SAFETY: item (i, head) writes only its own hd columns of row i.
        unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), ptr.get().add(i * nh * hd + head * hd), hd) };
    };
    if positions * nh * hd < 1 << 14 {
        (0..kv.len() * nh).for_each(work);
    } else {
        crate::pool::parallel_for(kv.len() * nh, work);
    }
}

/// In-place softmax.
fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgmlType;
    use crate::kernels::tests::random_blocks;

    /// A layer of `d_out` rows of `ty` blocks over 256 inputs, with a seeded rank-2 pair when
    /// `pair` (scale 1.5).
    fn layer(ty: GgmlType, d_out: usize, seed: u64, pair: bool) -> (HostLinear, Option<Vec<f32>>) {
        let d_in = 256;
        let q = QuantMatrix::new(ty, random_blocks(ty, d_out * d_in / ty.block().0, seed), d_out, d_in);
        if !pair {
            return (HostLinear::quant(q, None), None);
        }
        let u = |i: usize| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 1000.0 - 0.5) * 0.2;
        let p = crate::adapter::LoraPair { a: (0..2 * d_in).map(u).collect(), b: (0..d_out * 2).map(|i| u(i + 7919)).collect(), d_in, d_out };
        let delta = p.delta(1.5);
        (HostLinear::quant_adapted(q, None, HostLora::new(&p, 1.5)), Some(delta))
    }

    #[test]
    fn stacked_pairs_add_to_their_own_columns_whether_or_not_the_parts_fuse() {
        // q (Q4_K, no pair), k (Q6_K, pair), v (Q6_K, pair), as a Q4_K_M attention block can
        // mix them: q stays alone, k and v fuse, v's pair shifted past k's rows. Then gate (no
        // pair) and up (pair) of one type, fused.
        for parts in [
            vec![(GgmlType::Q4K, 8, 1, false), (GgmlType::Q6K, 4, 2, true), (GgmlType::Q6K, 4, 3, true)],
            vec![(GgmlType::Q4K, 12, 4, false), (GgmlType::Q4K, 8, 5, true)],
        ] {
            let (adapted, deltas): (Vec<HostLinear>, Vec<Option<Vec<f32>>>) = parts.iter().map(|&(ty, n, seed, pair)| layer(ty, n, seed, pair)).unzip();
            let plain: Vec<HostLinear> = parts.iter().map(|&(ty, n, seed, _)| layer(ty, n, seed, false).0).collect();
            let (adapted, plain) = (HostLinear::stack(adapted), HostLinear::stack(plain));
            assert_eq!(adapted.len(), if parts.len() == 3 { 2 } else { 1 });
            let total: usize = parts.iter().map(|p| p.1).sum();
            for rows in [1, 3] {
                let x: Vec<f32> = (0..rows * 256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
                let mut q8 = Q8Rows::default();
                let q8 = (rows == 1).then(|| {
                    q8.quantize(&x, 256);
                    &q8
                });
                let (mut got, mut base, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
                forward_stacked(&adapted, &x, rows, q8, KernelPath::best(), &mut got, &mut tmp);
                forward_stacked(&plain, &x, rows, q8, KernelPath::best(), &mut base, &mut tmp);
                // The base's output plus x · (s B A)ᵀ on each part's columns.
                let mut col = 0;
                for (&(_, n, _, _), delta) in parts.iter().zip(&deltas) {
                    for r in 0..rows {
                        for o in 0..n {
                            let add = delta.as_ref().map_or(0.0, |d| (0..256).map(|k| d[o * 256 + k] as f64 * x[r * 256 + k] as f64).sum::<f64>());
                            let (g, b) = (got[r * total + col + o] as f64, base[r * total + col + o] as f64);
                            assert!((g - b - add).abs() < 1e-4, "rows {rows}, column {}: {g} − {b} ≠ {add}", col + o);
                        }
                    }
                    col += n;
                }
            }
        }
    }
}
