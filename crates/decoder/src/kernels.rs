//! Integer dot products of ggml weight blocks with activations quantised to integers, in the
//! manner of ggml's `ggml_vec_dot_q4_1_q8_1` / `q8_0_q8_0` (`ggml-cpu/arch/x86/quants.c`) and
//! candle's `quantized/avx.rs`: an activation row is quantised once per matmul to blocks of 32
//! ([`Q8Rows`]: two 8-bit levels, an `f32` scale and the block's integer sum), then every
//! weight row is dotted with it in integers, with one float multiply-add per block.
//!
//! Kernel paths, chosen at run time ([`KernelPath::best`]; no `target-cpu=native` needed):
//! - [`KernelPath::Scalar`]: portable integer code, the reference every other path is tested
//!   against;
//! - [`KernelPath::Avx2`]: `vpmaddubsw` + `vpmaddwd` (AVX2 + FMA);
//! - [`KernelPath::Avx512Vnni`]: `vpdpbusd` (AVX-512 VNNI on 256-bit vectors, AVX512VL).
//!
//! Q4_0, Q4_1 and Q8_0 have hand-written SIMD bodies over weight rows repacked eight at a time
//! ([`crate::repack`]); the K-quants (Q4_K, Q6_K) unpack a 32-weight sub-block at a time into
//! bytes and share one integer body, compiled once per path with that path's target features
//! (so the compiler vectorises it for each).
use crate::gguf::GgmlType;

/// Weight rows per repacked group ([`crate::repack`], [`crate::repack_k`]): one per 32-bit lane of a
/// 256-bit vector.
pub const GROUP: usize = 8;

/// Which implementation of the integer dot products runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelPath {
    /// Portable integer code (the reference).
    Scalar,
    /// AVX2 + FMA.
    Avx2,
    /// AVX-512 VNNI (`vpdpbusd` on 256-bit vectors) + AVX2.
    Avx512Vnni,
}

impl KernelPath {
    /// Every path, slowest first.
    pub const ALL: [KernelPath; 3] = [KernelPath::Scalar, KernelPath::Avx2, KernelPath::Avx512Vnni];

    /// Its name (`scalar`, `avx2`, `avx512vnni`).
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512Vnni => "avx512vnni",
        }
    }

    /// A path by name.
    pub fn parse(name: &str) -> Option<KernelPath> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether this machine can run it.
    pub fn supported(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512Vnni => {
                KernelPath::Avx2.supported() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The paths this machine can run.
    pub fn available() -> Vec<KernelPath> {
        gauge_tensor::cpu_path::available()
    }

    /// The fastest path this machine can run, unless `GAUGE_KERNEL` names another
    /// (`scalar`, `avx2`, `avx512vnni`; an unsupported or unknown name is ignored with a warning).
    pub fn best() -> KernelPath {
        static BEST: std::sync::OnceLock<KernelPath> = std::sync::OnceLock::new();
        *BEST.get_or_init(gauge_tensor::cpu_path::from_env::<KernelPath>)
    }
}

impl gauge_tensor::cpu_path::CpuPath for KernelPath {
    const ALL: &'static [KernelPath] = &KernelPath::ALL;
    const ENV: &'static str = "GAUGE_KERNEL";
    fn name(self) -> &'static str {
        KernelPath::name(self)
    }
    fn supported(self) -> bool {
        KernelPath::supported(self)
    }
}

/// Activation rows quantised to blocks of 32 in two 8-bit levels: `x ≈ d · (256·q + r)`, where
/// `q` is ggml's Q8 rounding (`|q| ≤ 127`, `d·256 = amax/127`) and `r` the rounding of what it
/// leaves (`|r| ≤ 127`). One level alone (ggml's `quantize_row_q8_1`, which llama.cpp decodes
/// with) moves a 615-token prompt's top-2 logit margins by up to ±0.4 — enough to flip greedy
/// tokens whose margin is 0.09; the second level brings activations to ~16 bits for twice the
/// integer dot products on weights unpacked once.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    /// First-level values, `rows × cols`.
    pub q: Vec<i8>,
    /// Second-level values (the first level's remainder, in units of `d`), `rows × cols`.
    pub r: Vec<i8>,
    /// Scale of each block (of the combined integer `256·q + r`).
    pub d: Vec<f32>,
    /// Each block's `Σ (256·q + r)`.
    pub sum: Vec<i32>,
    /// The same sum over each block's two halves of 16 (Q6_K's scales cover 16 weights).
    pub sum16: Vec<i32>,
    /// Both levels in one 16-bit value, `256·q + r` (`|·| ≤ 32,639`), `rows × cols`: the AVX2
    /// Q8_0 kernel multiplies it by the sign-extended weights with `vpmaddwd`.
    pub x16: Vec<i16>,
    /// Columns per row (a multiple of 32).
    pub cols: usize,
}

impl Q8Rows {
    /// Quantises `rows` rows of `x` (row-major, `cols` a multiple of 32) into `self`, reusing
    /// its buffers.
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        self.quantize_on(x, cols, KernelPath::Avx2.supported());
    }

    /// [`Self::quantize`] on the portable path only (the reference the other paths equal).
    pub fn quantize_scalar(&mut self, x: &[f32], cols: usize) {
        self.quantize_on(x, cols, false);
    }

    fn quantize_on(&mut self, x: &[f32], cols: usize, avx2: bool) {
        assert!(cols.is_multiple_of(32) && x.len().is_multiple_of(cols));
        let nb = x.len() / 32;
        self.cols = cols;
        self.q.resize(x.len(), 0);
        self.r.resize(x.len(), 0);
        self.d.resize(nb, 0.0);
        self.sum.resize(nb, 0);
        self.sum16.resize(2 * nb, 0);
        self.x16.resize(x.len(), 0);
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: the callers pass `avx2` only where AVX2 and FMA are present.
            unsafe { quantize_blocks_avx2(x, &mut self.q, &mut self.r, &mut self.x16, &mut self.d, &mut self.sum) };
            halves(&self.x16, &mut self.sum16);
            return;
        }
        let _ = avx2;
        quantize_blocks(x, &mut self.q, &mut self.r, &mut self.x16, &mut self.d, &mut self.sum);
        halves(&self.x16, &mut self.sum16);
    }

    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.cols / 32
    }

    /// Row `r`.
    pub fn row(&self, r: usize) -> Row<'_> {
        let nb = self.blocks_per_row();
        let span = r * self.cols..(r + 1) * self.cols;
        Row { q: &self.q[span.clone()], r: &self.r[span.clone()], x16: &self.x16[span], d: &self.d[r * nb..(r + 1) * nb], sum: &self.sum[r * nb..(r + 1) * nb], sum16: &self.sum16[2 * r * nb..2 * (r + 1) * nb] }
    }
}

/// The sums of `256·q + r` over every 16 values.
fn halves(x16: &[i16], sum16: &mut [i32]) {
    for (h, s) in x16.chunks_exact(16).zip(sum16.iter_mut()) {
        *s = h.iter().map(|&v| v as i32).sum();
    }
}

/// Both activation levels of every 32-value block. Compiled twice — portable, and with AVX2
/// (where `round` is an instruction, not a libm call, and the block vectorises): the same
/// IEEE operations in the same order (Rust never fuses a multiply and an add on its own), so
/// the same bytes on every path (a test checks).
#[inline(always)]
fn quantize_blocks(x: &[f32], q: &mut [i8], r: &mut [i8], x16: &mut [i16], d: &mut [f32], sum: &mut [i32]) {
    for (b, (((xs, qs), rs), ws)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).zip(r.chunks_exact_mut(32)).zip(x16.chunks_exact_mut(32)).enumerate() {
        let mut amax = 0f32;
        for v in xs {
            amax = amax.max(v.abs());
        }
        let scale = amax / 127.0;
        let id = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut s = 0i32;
        for (((q, r), w), &v) in qs.iter_mut().zip(rs.iter_mut()).zip(ws.iter_mut()).zip(xs) {
            let scaled = v * id;
            let hi = scaled.round();
            let lo = ((scaled - hi) * 256.0).round().clamp(-127.0, 127.0);
            *q = hi as i8;
            *r = lo as i8;
            *w = 256 * hi as i16 + lo as i16;
            s += 256 * hi as i32 + lo as i32;
        }
        d[b] = scale / 256.0;
        sum[b] = s;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_blocks_avx2(x: &[f32], q: &mut [i8], r: &mut [i8], x16: &mut [i16], d: &mut [f32], sum: &mut [i32]) {
    quantize_blocks(x, q, r, x16, d, sum)
}

/// Whether `ty` has an integer kernel.
pub fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q6K)
}

/// One quantised activation row ([`Q8Rows::row`]).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// First-level values.
    pub q: &'a [i8],
    /// Second-level values.
    pub r: &'a [i8],
    /// Both levels, `256·q + r`.
    pub x16: &'a [i16],
    /// Block scales.
    pub d: &'a [f32],
    /// Block sums of `256·q + r`.
    pub sum: &'a [i32],
    /// Half-block sums of `256·q + r` (two per block).
    pub sum16: &'a [i32],
}

impl Row<'_> {
    fn check(&self, nb: usize) {
        assert!(self.q.len() >= nb * 32 && self.r.len() >= nb * 32 && self.x16.len() >= nb * 32 && self.d.len() >= nb && self.sum.len() >= nb, "activation row shorter than the weights");
    }
}

/// The dot products of the weight rows in `w` (consecutive rows of `rb` bytes, ggml's blocks
/// of type `ty`) with the activation rows `xs`, into `out` (`[weight row][activation row]`).
/// The K-quants run their integer body compiled with `path`'s target features (the compiler
/// vectorises it); Q4_0, Q4_1 and Q8_0 rows in ggml's layout (a matrix's last `d_out mod 8`
/// rows) take the scalar reference — their fast kernels read the repacked groups
/// ([`crate::repack`]).
pub fn dot_matrix(path: KernelPath, ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32]) {
    assert!(w.len().is_multiple_of(rb) && out.len() == w.len() / rb * xs.len());
    let nb = rb / ty.block().1 * ty.block().0 / 32;
    xs.iter().for_each(|x| x.check(nb));
    // K-quants and Q5_0/Q5_1 (not repacked): their integer body compiled for the path.
    let k_quant = matches!(ty, GgmlType::Q4K | GgmlType::Q6K | GgmlType::Q5_0 | GgmlType::Q5_1);
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller runs only supported paths (`KernelPath::supported`).
        KernelPath::Avx2 if k_quant => unsafe { x86::k_quant_avx2(ty, w, rb, xs, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::Avx512Vnni if k_quant => unsafe { x86::k_quant_vnni(ty, w, rb, xs, out) },
        _ => rows_with(w, rb, xs, out, |wr, x| scalar::dot(ty, wr, x)),
    }
}

#[inline(always)]
fn rows_with(w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32], f: impl Fn(&[u8], &Row<'_>) -> f32) {
    for (wr, dst) in w.chunks_exact(rb).zip(out.chunks_exact_mut(xs.len().max(1))) {
        xs.iter().zip(dst.iter_mut()).for_each(|(x, v)| *v = f(wr, x));
    }
}

/// The dot product of one weight row with one quantised activation row, on `path` (a
/// convenience over [`dot_matrix`]).
pub fn dot(path: KernelPath, ty: GgmlType, w: &[u8], x: Row<'_>) -> f32 {
    let mut out = [0f32];
    dot_matrix(path, ty, w, w.len(), &[x], &mut out);
    out[0]
}

#[inline(always)]
fn f16(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// The 32 weights of sub-block `j` (0..8) of a K-quant super-block as integers, with the
/// sub-block's two 16-weight scales (equal for Q4_K) and its minimum (0 for Q6_K);
/// the super-block's `d` and `dmin` scale them.
#[inline(always)]
fn k_sub_block(ty: GgmlType, b: &[u8], j: usize, out: &mut [i8; 32]) -> (i32, i32, i32) {
    match ty {
        GgmlType::Q4K => {
            let (sc, m) = crate::gguf::scale_min_k4(j, &b[4..16]);
            let qs = &b[16 + (j / 2) * 32..16 + (j / 2) * 32 + 32];
            if j.is_multiple_of(2) {
                for l in 0..32 {
                    out[l] = (qs[l] & 0x0f) as i8;
                }
            } else {
                for l in 0..32 {
                    out[l] = (qs[l] >> 4) as i8;
                }
            }
            (sc as i32, sc as i32, m as i32)
        }
        GgmlType::Q6K => {
            let (hb, kind) = (j / 4, j % 4);
            let ql = &b[hb * 64..hb * 64 + 64];
            let qh = &b[128 + hb * 32..128 + hb * 32 + 32];
            let sc = &b[192 + hb * 8..192 + hb * 8 + 8];
            let (lo_off, lo_shift, hi_shift) = match kind {
                0 => (0, 0, 0),
                1 => (32, 0, 2),
                2 => (0, 4, 4),
                _ => (32, 4, 6),
            };
            for l in 0..32 {
                let lo = (ql[l + lo_off] >> lo_shift) & 0x0f;
                let hi = (qh[l] >> hi_shift) & 3;
                out[l] = ((lo | (hi << 4)) as i32 - 32) as i8;
            }
            (sc[kind * 2] as i8 as i32, sc[kind * 2 + 1] as i8 as i32, 0)
        }
        _ => unreachable!("K-quants only"),
    }
}

/// The K-quant dot (shared by every path; vectorised by the caller's target features).
#[inline(always)]
fn k_quant_dot(ty: GgmlType, w: &[u8], x: &Row<'_>) -> f32 {
    let bs = ty.block().1;
    let mut acc = 0f32;
    let mut vals = [0i8; 32];
    for (s, b) in w.chunks_exact(bs).enumerate() {
        let (dw, dmin) = match ty {
            GgmlType::Q4K => (f16(&b[0..2]), f16(&b[2..4])),
            _ => (f16(&b[208..210]), 0.0),
        };
        let mut block = 0f32;
        for j in 0..8 {
            let i = s * 8 + j;
            let (sc0, sc1, m) = k_sub_block(ty, b, j, &mut vals);
            let (q, r) = (&x.q[i * 32..i * 32 + 32], &x.r[i * 32..i * 32 + 32]);
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..16 {
                lo += vals[l] as i32 * (256 * q[l] as i32 + r[l] as i32);
                hi += vals[l + 16] as i32 * (256 * q[l + 16] as i32 + r[l + 16] as i32);
            }
            // Scales up to 127 times sums up to 2^24: in i64.
            let scaled = sc0 as i64 * lo as i64 + sc1 as i64 * hi as i64;
            block += x.d[i] * (dw * scaled as f32 - dmin * (m as i64 * x.sum[i] as i64) as f32);
        }
        acc += block;
    }
    acc
}

/// The portable reference.
pub mod scalar {
    use super::*;

    /// One weight row (ggml's blocks) against one quantised activation row.
    pub fn dot(ty: GgmlType, w: &[u8], x: &Row<'_>) -> f32 {
        block_dot(ty, w, x)
    }
}

/// One weight row against one activation row, every block type's integer body (inlined into
/// each path's target features; [`scalar::dot`] is it without them).
#[inline(always)]
fn block_dot(ty: GgmlType, w: &[u8], x: &Row<'_>) -> f32 {
    {
        if matches!(ty, GgmlType::Q4K | GgmlType::Q6K) {
            return k_quant_dot(ty, w, x);
        }
        let bs = ty.block().1;
        let mut acc = 0f32;
        for (i, b) in w.chunks_exact(bs).enumerate() {
            let dw = f16(&b[0..2]);
            let (d, sum) = (x.d[i], x.sum[i]);
            let q: &[i8; 32] = x.q[i * 32..i * 32 + 32].try_into().expect("32 values");
            let r: &[i8; 32] = x.r[i * 32..i * 32 + 32].try_into().expect("32 values");
            // The block's weights as integers (Q4_0's offset applied below).
            let mut wv = [0i32; 32];
            match ty {
                GgmlType::Q8_0 => (0..32).for_each(|j| wv[j] = (b[2 + j] as i8) as i32),
                GgmlType::Q5_0 | GgmlType::Q5_1 => {
                    // ggml's layout: nibble j | bit j of qh (weight j), nibble j >> 4 | bit j + 16.
                    let at = if ty == GgmlType::Q5_0 { 2 } else { 4 };
                    let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                    for (j, &q) in b[at + 4..at + 20].iter().enumerate() {
                        wv[j] = ((q & 0x0f) as u32 | (((qh >> j) << 4) & 0x10)) as i32;
                        wv[j + 16] = ((q >> 4) as u32 | ((qh >> (j + 12)) & 0x10)) as i32;
                    }
                }
                _ => {
                    let qs = if ty == GgmlType::Q4_1 { &b[4..20] } else { &b[2..18] };
                    for j in 0..16 {
                        wv[j] = (qs[j] & 0x0f) as i32;
                        wv[j + 16] = (qs[j] >> 4) as i32;
                    }
                }
            }
            let (mut sq, mut sr) = (0i32, 0i32);
            for j in 0..32 {
                sq += wv[j] * q[j] as i32;
                sr += wv[j] * r[j] as i32;
            }
            let s = 256 * sq + sr;
            acc += match ty {
                GgmlType::Q8_0 => dw * d * s as f32,
                GgmlType::Q4_0 => dw * d * (s - 8 * sum) as f32,
                GgmlType::Q4_1 | GgmlType::Q5_1 => dw * d * s as f32 + f16(&b[2..4]) * (d * sum as f32),
                GgmlType::Q5_0 => dw * d * (s - 16 * sum) as f32,
                _ => unreachable!("checked by the caller"),
            };
        }
        acc
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn k_quant_avx2(ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32]) {
        rows_with(w, rb, xs, out, |wr, x| block_dot(ty, wr, x))
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn k_quant_vnni(ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32]) {
        rows_with(w, rb, xs, out, |wr, x| block_dot(ty, wr, x))
    }
}

/// `Σ a·b` of two f32 rows, vectorised for the machine (AVX2 + FMA when present): the
/// decode kernel of float weights (Hugging Face folders, adapted matrices).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *FMA.get_or_init(|| KernelPath::Avx2.supported()) {
            // SAFETY: AVX2 and FMA were detected.
            return unsafe { dot_f32_avx2(a, b) };
        }
    }
    dot_f32_generic(a, b)
}

/// One query row's attention over every cached position: `out = softmax(scale · q·kₚ) · vₚ`,
/// where key and value `p` are `keys`/`values[p·row + off..][..q.len()]` (one key/value head
/// of a position-major cache). One call per head and step, vectorised for the machine inside
/// (a call per position cost more than its 64 multiply-adds).
#[allow(clippy::too_many_arguments)]
pub fn attend_one(q: &[f32], keys: &[f32], values: &[f32], row: usize, off: usize, scale: f32, scores: &mut Vec<f32>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *FMA.get_or_init(|| KernelPath::Avx2.supported()) {
            // SAFETY: AVX2 and FMA were detected.
            return unsafe { attend_one_avx2(q, keys, values, row, off, scale, scores, out) };
        }
    }
    attend_one_generic(q, keys, values, row, off, scale, scores, out)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_one_generic(q: &[f32], keys: &[f32], values: &[f32], row: usize, off: usize, scale: f32, scores: &mut Vec<f32>, out: &mut [f32]) {
    // Plain index loops: an iterator adaptor's `fold` (`extend`, `for_each`, `fold`) is a
    // generic function of its own, compiled for baseline x86-64 outside this
    // `#[target_feature]` body — the scores' dot products ran as SSE2 there (perf: 6 % of a
    // decoding step in `Map::fold`).
    let hd = q.len();
    let n = keys.len() / row;
    scores.clear();
    scores.resize(n, 0.0);
    for p in 0..n {
        scores[p] = dot_f32_generic(q, &keys[p * row + off..p * row + off + hd]) * scale;
    }
    let mut max = f32::NEG_INFINITY;
    for &v in scores.iter() {
        max = max.max(v);
    }
    let mut sum = 0f32;
    for v in scores.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    out.fill(0.0);
    for p in 0..n {
        axpy_generic(scores[p] * inv, &values[p * row + off..p * row + off + hd], out);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_one_avx2(q: &[f32], keys: &[f32], values: &[f32], row: usize, off: usize, scale: f32, scores: &mut Vec<f32>, out: &mut [f32]) {
    attend_one_generic(q, keys, values, row, off, scale, scores, out)
}

#[inline(always)]
fn axpy_generic(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}


#[inline(always)]
fn dot_f32_generic(a: &[f32], b: &[f32]) -> f32 {
    // 16 independent accumulators so the compiler keeps several vectors in flight.
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..16 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = 0f32;
    for a in acc {
        s += a;
    }
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_generic(a, b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// Random blocks of `ty` with sane f16 scales.
    pub(crate) fn random_blocks(ty: GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
        let mut next = rng(seed);
        let bs = ty.block().1;
        let mut out = vec![0u8; n_blocks * bs];
        for b in out.chunks_exact_mut(bs) {
            b.iter_mut().for_each(|v| *v = next() as u8);
            let scale = |n: u64| half::f16::from_f32(0.002 + (n % 100) as f32 / 20000.0).to_le_bytes();
            match ty {
                GgmlType::Q4K => {
                    b[0..2].copy_from_slice(&scale(next()));
                    b[2..4].copy_from_slice(&scale(next()));
                }
                GgmlType::Q6K => b[208..210].copy_from_slice(&scale(next())),
                GgmlType::Q4_1 | GgmlType::Q5_1 => {
                    b[0..2].copy_from_slice(&scale(next()));
                    b[2..4].copy_from_slice(&half::f16::from_f32(-0.04).to_le_bytes());
                }
                _ => b[0..2].copy_from_slice(&scale(next())),
            }
        }
        out
    }

    #[test]
    fn activation_quantisation_is_the_same_bytes_on_every_path() {
        let mut next = rng(11);
        // Random values, a zero block, ties at every rounding step (k/2 of the scale's units and
        // of its 1/256ths), and wide magnitudes.
        let mut x: Vec<f32> = (0..32 * 64).map(|_| ((next() % 20001) as f32 - 10000.0) / 997.0).collect();
        x[32..64].iter_mut().for_each(|v| *v = 0.0);
        for (i, v) in x[64..96].iter_mut().enumerate() {
            *v = if i == 0 { 127.0 } else { (i as f32 - 16.0) + 0.5 };
        }
        for (i, v) in x[96..128].iter_mut().enumerate() {
            *v = if i == 0 { 127.0 } else { (i as f32 - 16.0) / 256.0 * 3.0 + 1.0 / 512.0 };
        }
        for (i, v) in x[128..160].iter_mut().enumerate() {
            *v = (i as f32 - 16.0) * 1e-30;
        }
        let (mut a, mut b) = (Q8Rows::default(), Q8Rows::default());
        a.quantize(&x, 32 * 8);
        b.quantize_scalar(&x, 32 * 8);
        assert_eq!((&a.q, &a.r, &a.x16, &a.sum), (&b.q, &b.r, &b.x16, &b.sum));
        assert_eq!(a.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), b.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        // The levels reconstruct the row: 256·q + r = x16, Σ x16 = sum.
        for (blk, w) in a.x16.chunks_exact(32).enumerate() {
            assert_eq!(w.iter().map(|&v| v as i32).sum::<i32>(), a.sum[blk]);
        }
        for ((q, r), w) in a.q.iter().zip(&a.r).zip(&a.x16) {
            assert_eq!(256 * *q as i16 + *r as i16, *w);
        }
    }

    #[test]
    fn every_path_equals_the_dequantised_dot_on_every_type() {
        let d_in = 512;
        let mut next = rng(3);
        let x: Vec<f32> = (0..d_in).map(|_| ((next() % 2001) as f32 - 1000.0) / 700.0).collect();
        let mut q8 = Q8Rows::default();
        q8.quantize(&x, d_in);
        // The quantised activations, as floats: the exact value every kernel must reproduce.
        let xq: Vec<f32> = q8.q.iter().zip(&q8.r).enumerate().map(|(i, (&q, &r))| (256 * q as i32 + r as i32) as f32 * q8.d[i / 32]).collect();
        assert!(x.iter().zip(&xq).enumerate().all(|(i, (a, b))| (a - b).abs() <= q8.d[i / 32] * 1.0001), "quantisation error within one second-level step");
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(x.iter().zip(&xq).all(|(a, b)| (a - b).abs() <= amax / 127.0 / 256.0 * 1.0001), "two levels: ~16 bits");
        let paths = KernelPath::available();
        assert!(paths.contains(&KernelPath::Scalar));
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4K, GgmlType::Q6K] {
            let n_blocks = d_in / ty.block().0;
            for seed in 0..4 {
                let w = random_blocks(ty, n_blocks, 100 + seed);
                let wf = crate::gguf::dequantize(ty, &w, d_in);
                let want: f64 = wf.iter().zip(&xq).map(|(&a, &b)| a as f64 * b as f64).sum();
                let norm: f64 = wf.iter().zip(&xq).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                let reference = scalar::dot(ty, &w, &q8.row(0));
                assert!((reference as f64 - want).abs() <= 1e-5 * norm, "{ty:?} scalar: {reference} vs {want}");
                for &p in &paths {
                    let got = dot(p, ty, &w, q8.row(0));
                    assert!((got - reference).abs() <= 1e-5 * norm as f32, "{ty:?} {}: {got} vs scalar {reference}", p.name());
                }
            }
        }
    }

    #[test]
    fn f32_dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).cos()).collect();
        let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
        assert!((dot_f32(&a, &b) as f64 - want).abs() < 1e-3);
        assert!((dot_f32_generic(&a, &b) as f64 - want).abs() < 1e-3);
    }

    #[test]
    fn path_names_round_trip() {
        for p in KernelPath::ALL {
            assert_eq!(KernelPath::parse(p.name()), Some(p));
        }
        assert_eq!(KernelPath::parse("neon-ish"), None);
        assert!(KernelPath::best().supported());
    }
}
