//! Integer dot products of ggml weight blocks with activations quantised to 8 bits, in the
//! manner of ggml's `ggml_vec_dot_q4_1_q8_1` / `q8_0_q8_0` (`ggml-cpu/arch/x86/quants.c`) and
//! candle's `quantized/avx.rs`: an activation row is quantised once per matmul to blocks of 32
//! (`i8` values, an `f32` scale and the block's integer sum), then every weight row is dotted
//! with it in integers, with one float multiply-add per block and one horizontal sum per row.
//!
//! Kernel paths, chosen at run time ([`KernelPath::best`]; no `target-cpu=native` needed):
//! - [`KernelPath::Scalar`]: portable integer code, the reference every other path is tested
//!   against;
//! - [`KernelPath::Avx2`]: `vpmaddubsw` + `vpmaddwd` on 32 lanes (AVX2 + FMA);
//! - [`KernelPath::Avx512Vnni`]: `vpdpbusd` (AVX-512 VNNI on 256-bit vectors, AVX512VL).
//!
//! Q4_0, Q4_1 and Q8_0 have hand-written SIMD bodies; the K-quants (Q4_K, Q6_K) unpack a
//! 32-weight sub-block at a time into bytes and share one integer body, compiled once per
//! path with that path's target features (so the compiler vectorises it for each).
use crate::gguf::GgmlType;

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
        Self::ALL.into_iter().filter(|p| p.supported()).collect()
    }

    /// The fastest path this machine can run, unless `GAUGE_KERNEL` names another
    /// (`scalar`, `avx2`, `avx512vnni`; an unsupported or unknown name is ignored with a warning).
    pub fn best() -> KernelPath {
        static BEST: std::sync::OnceLock<KernelPath> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let fastest = *Self::available().last().expect("scalar is always available");
            match std::env::var("GAUGE_KERNEL") {
                Ok(name) if !name.is_empty() => match Self::parse(&name) {
                    Some(p) if p.supported() => p,
                    _ => {
                        tracing::warn!("GAUGE_KERNEL={name}: not a kernel path this machine runs ({}); using {}", Self::available().iter().map(|p| p.name()).collect::<Vec<_>>().join(", "), fastest.name());
                        fastest
                    }
                },
                _ => fastest,
            }
        })
    }
}

/// Activation rows quantised to blocks of 32: `x ≈ d · q` per block.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    /// Values, `rows × cols`.
    pub q: Vec<i8>,
    /// Scale of each block.
    pub d: Vec<f32>,
    /// Integer sum of each block's values.
    pub sum: Vec<i32>,
    /// Columns per row (a multiple of 32).
    pub cols: usize,
}

impl Q8Rows {
    /// Quantises `rows` rows of `x` (row-major, `cols` a multiple of 32) into `self`, reusing
    /// its buffers (ggml's `quantize_row_q8_1`, with the scale kept in f32).
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        assert!(cols.is_multiple_of(32) && x.len().is_multiple_of(cols));
        let nb = x.len() / 32;
        self.cols = cols;
        self.q.resize(x.len(), 0);
        self.d.resize(nb, 0.0);
        self.sum.resize(nb, 0);
        for (b, (xs, qs)) in x.chunks_exact(32).zip(self.q.chunks_exact_mut(32)).enumerate() {
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut s = 0i32;
            for (q, &v) in qs.iter_mut().zip(xs) {
                let r = (v * id).round() as i32;
                *q = r as i8;
                s += r;
            }
            self.d[b] = d;
            self.sum[b] = s;
        }
    }

    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.cols / 32
    }

    /// Row `r`: (values, scales, sums).
    pub fn row(&self, r: usize) -> (&[i8], &[f32], &[i32]) {
        let nb = self.blocks_per_row();
        (&self.q[r * self.cols..(r + 1) * self.cols], &self.d[r * nb..(r + 1) * nb], &self.sum[r * nb..(r + 1) * nb])
    }
}

/// Whether `ty` has an integer kernel.
pub fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4K | GgmlType::Q6K)
}

/// One quantised activation row: values, block scales, block sums.
pub type Row<'a> = (&'a [i8], &'a [f32], &'a [i32]);

/// The dot products of the weight rows in `w` (consecutive rows of `rb` bytes, blocks of type
/// `ty`) with the activation rows `xs`, into `out` (`[weight row][activation row]`), on `path`
/// (which the caller has checked is supported). Each weight block is unpacked once for up to
/// four activation rows, and each row's result has the same bits whatever rows it is computed
/// with (a batch decodes each sequence exactly as alone).
pub fn dot_matrix(path: KernelPath, ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32]) {
    assert!(w.len().is_multiple_of(rb) && out.len() == w.len() / rb * xs.len());
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller runs only supported paths (`KernelPath::supported`).
        KernelPath::Avx2 => unsafe { x86::matrix_avx2(ty, w, rb, xs, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::Avx512Vnni => unsafe { x86::matrix_vnni(ty, w, rb, xs, out) },
        _ => {
            for (wr, dst) in w.chunks_exact(rb).zip(out.chunks_exact_mut(xs.len().max(1))) {
                xs.iter().zip(dst.iter_mut()).for_each(|((q, d, s), v)| *v = scalar::dot(ty, wr, q, d, s));
            }
        }
    }
}

/// The dot product of one weight row with one quantised activation row (`q`, block scales
/// `d`, block sums `sum`), on `path` (a convenience over [`dot_matrix`]).
pub fn dot(path: KernelPath, ty: GgmlType, w: &[u8], q: &[i8], d: &[f32], sum: &[i32]) -> f32 {
    let mut out = [0f32];
    dot_matrix(path, ty, w, w.len(), &[(q, d, sum)], &mut out);
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
fn k_quant_dot(ty: GgmlType, w: &[u8], q: &[i8], d: &[f32], sum: &[i32]) -> f32 {
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
            let x = s * 8 + j;
            let (sc0, sc1, m) = k_sub_block(ty, b, j, &mut vals);
            let xs = &q[x * 32..x * 32 + 32];
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..16 {
                lo += vals[l] as i32 * xs[l] as i32;
                hi += vals[l + 16] as i32 * xs[l + 16] as i32;
            }
            block += d[x] * (dw * (sc0 * lo + sc1 * hi) as f32 - dmin * (m * sum[x]) as f32);
        }
        acc += block;
    }
    acc
}

/// The portable reference.
pub mod scalar {
    use super::*;

    /// One weight row against one quantised activation row.
    pub fn dot(ty: GgmlType, w: &[u8], q: &[i8], d: &[f32], sum: &[i32]) -> f32 {
        if matches!(ty, GgmlType::Q4K | GgmlType::Q6K) {
            return k_quant_dot(ty, w, q, d, sum);
        }
        let bs = ty.block().1;
        let mut acc = 0f32;
        for (i, b) in w.chunks_exact(bs).enumerate() {
            let xs = &q[i * 32..i * 32 + 32];
            let dw = f16(&b[0..2]);
            acc += match ty {
                GgmlType::Q8_0 => {
                    let s: i32 = b[2..34].iter().zip(xs).map(|(&w, &x)| (w as i8) as i32 * x as i32).sum();
                    dw * d[i] * s as f32
                }
                GgmlType::Q4_0 => {
                    let s = nibble_dot(&b[2..18], xs) - 8 * sum[i];
                    dw * d[i] * s as f32
                }
                GgmlType::Q4_1 => {
                    let m = f16(&b[2..4]);
                    dw * d[i] * nibble_dot(&b[4..20], xs) as f32 + m * d[i] * sum[i] as f32
                }
                _ => unreachable!("checked by the caller"),
            };
        }
        acc
    }

    /// `Σ n_j x_j` for 32 4-bit weights (low nibbles first, as ggml stores them).
    #[inline(always)]
    fn nibble_dot(qs: &[u8], xs: &[i8]) -> i32 {
        let mut s = 0i32;
        for j in 0..16 {
            s += (qs[j] & 0x0f) as i32 * xs[j] as i32 + (qs[j] >> 4) as i32 * xs[j + 16] as i32;
        }
        s
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// 16 bytes of nibbles → 32 bytes: low nibbles, then high nibbles.
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let tmp = _mm_loadu_si128(p as *const __m128i);
        let both = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
    }

    /// 8 i32 partial sums of `u · s` (u unsigned, s signed bytes).
    #[inline(always)]
    unsafe fn dot_us_avx2(u: __m256i, s: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
    }

    #[inline(always)]
    unsafe fn dot_us_vnni(u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
    }

    use super::Row;

    /// Block `i` of weight row `wp` against block `i` of each of the `R` activation rows,
    /// accumulated into `acc` / `extra`: the block is unpacked (and its f16 scales converted)
    /// once for all rows.
    #[inline(always)]
    unsafe fn step<const R: usize>(ty: GgmlType, wp: *const u8, i: usize, xs: &[Row<'_>; R], acc: &mut [__m256; R], extra: &mut [f32; R], dot_us: unsafe fn(__m256i, __m256i) -> __m256i) {
        let b = wp.add(i * ty.block().1);
        let dw = half::f16::from_le_bytes([*b, *b.add(1)]).to_f32();
        let (wv, m) = match ty {
            GgmlType::Q8_0 => (_mm256_loadu_si256(b.add(2) as *const __m256i), 0.0),
            GgmlType::Q4_0 => (nibbles(b.add(2)), 0.0),
            _ => (nibbles(b.add(4)), half::f16::from_le_bytes([*b.add(2), *b.add(3)]).to_f32()),
        };
        // Q8_0's weights are signed: |w| against x with w's sign (vpmaddubsw / vpdpbusd take
        // one unsigned operand).
        let u = if ty == GgmlType::Q8_0 { _mm256_sign_epi8(wv, wv) } else { wv };
        for r in 0..R {
            let (q, d, sum) = xs[r];
            let x = _mm256_loadu_si256(q.as_ptr().add(i * 32) as *const __m256i);
            let s = if ty == GgmlType::Q8_0 { _mm256_sign_epi8(x, wv) } else { x };
            let (d, sum) = (*d.get_unchecked(i), *sum.get_unchecked(i));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * d), _mm256_cvtepi32_ps(dot_us(u, s)), acc[r]);
            extra[r] += match ty {
                GgmlType::Q4_0 => -8.0 * dw * d * sum as f32,
                GgmlType::Q4_1 => m * d * sum as f32,
                _ => 0.0,
            };
        }
    }

    /// One weight row against `R` activation rows into `out[..R]`. Blocks alternate between
    /// two accumulators (independent dependency chains); every row's sum is formed in the
    /// same order whatever `R`, so a row gets the same bits alone or in a batch.
    #[inline(always)]
    unsafe fn body<const R: usize>(ty: GgmlType, w: &[u8], xs: &[Row<'_>; R], out: &mut [f32], dot_us: unsafe fn(__m256i, __m256i) -> __m256i) {
        let nb = w.len() / ty.block().1;
        for (q, d, sum) in xs {
            assert!(q.len() >= nb * 32 && d.len() >= nb && sum.len() >= nb);
        }
        assert!(out.len() >= R);
        let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
        let (mut extra0, mut extra1) = ([0f32; R], [0f32; R]);
        let wp = w.as_ptr();
        let mut i = 0;
        while i + 1 < nb {
            step(ty, wp, i, xs, &mut acc0, &mut extra0, dot_us);
            step(ty, wp, i + 1, xs, &mut acc1, &mut extra1, dot_us);
            i += 2;
        }
        if i < nb {
            step(ty, wp, i, xs, &mut acc0, &mut extra0, dot_us);
        }
        for r in 0..R {
            out[r] = hsum(_mm256_add_ps(acc0[r], acc1[r])) + (extra0[r] + extra1[r]);
        }
    }

    /// One block against one activation row: the integer sums, their scale and the offset
    /// term (the same expressions as [`step`], so one row alone gets the bits it gets in a batch).
    #[inline(always)]
    unsafe fn block(ty: GgmlType, b: *const u8, x: __m256i, d: f32, sum: i32, dot_us: unsafe fn(__m256i, __m256i) -> __m256i) -> (__m256i, f32, f32) {
        let dw = half::f16::from_le_bytes([*b, *b.add(1)]).to_f32();
        match ty {
            GgmlType::Q8_0 => {
                let wv = _mm256_loadu_si256(b.add(2) as *const __m256i);
                (dot_us(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(x, wv)), dw * d, 0.0)
            }
            GgmlType::Q4_0 => (dot_us(nibbles(b.add(2)), x), dw * d, -8.0 * dw * d * sum as f32),
            _ => {
                let m = half::f16::from_le_bytes([*b.add(2), *b.add(3)]).to_f32();
                (dot_us(nibbles(b.add(4)), x), dw * d, m * d * sum as f32)
            }
        }
    }

    /// [`body`] for one activation row, with pointers hoisted (measured 1.6× faster than
    /// `body::<1>` on one token); same accumulation order.
    #[inline(always)]
    unsafe fn body1(ty: GgmlType, w: &[u8], (q, d, sum): Row<'_>, dot_us: unsafe fn(__m256i, __m256i) -> __m256i) -> f32 {
        let bs = ty.block().1;
        let nb = w.len() / bs;
        assert!(q.len() >= nb * 32 && d.len() >= nb && sum.len() >= nb);
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (mut extra0, mut extra1) = (0f32, 0f32);
        let (wp, qp, dp, sp) = (w.as_ptr(), q.as_ptr(), d.as_ptr(), sum.as_ptr());
        let mut i = 0;
        while i + 1 < nb {
            let x0 = _mm256_loadu_si256(qp.add(i * 32) as *const __m256i);
            let x1 = _mm256_loadu_si256(qp.add(i * 32 + 32) as *const __m256i);
            let (s0, c0, e0) = block(ty, wp.add(i * bs), x0, *dp.add(i), *sp.add(i), dot_us);
            let (s1, c1, e1) = block(ty, wp.add(i * bs + bs), x1, *dp.add(i + 1), *sp.add(i + 1), dot_us);
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(c0), _mm256_cvtepi32_ps(s0), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(c1), _mm256_cvtepi32_ps(s1), acc1);
            extra0 += e0;
            extra1 += e1;
            i += 2;
        }
        if i < nb {
            let x0 = _mm256_loadu_si256(qp.add(i * 32) as *const __m256i);
            let (s0, c0, e0) = block(ty, wp.add(i * bs), x0, *dp.add(i), *sp.add(i), dot_us);
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(c0), _mm256_cvtepi32_ps(s0), acc0);
            extra0 += e0;
        }
        hsum(_mm256_add_ps(acc0, acc1)) + (extra0 + extra1)
    }

    /// `body` for 1–4 rows (`xs.len()`).
    #[inline(always)]
    unsafe fn rows(ty: GgmlType, w: &[u8], xs: &[Row<'_>], out: &mut [f32], dot_us: unsafe fn(__m256i, __m256i) -> __m256i) {
        match xs.len() {
            1 => out[0] = body1(ty, w, xs[0], dot_us),
            2 => body::<2>(ty, w, &[xs[0], xs[1]], out, dot_us),
            3 => body::<3>(ty, w, &[xs[0], xs[1], xs[2]], out, dot_us),
            _ => body::<4>(ty, w, &[xs[0], xs[1], xs[2], xs[3]], out, dot_us),
        }
    }

    /// Every weight row of `w` (rows of `rb` bytes) against every row of `xs`, into `out`
    /// (`[weight row][activation row]`), four activation rows per pass.
    #[inline(always)]
    unsafe fn matrix(ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32], dot_us: unsafe fn(__m256i, __m256i) -> __m256i) {
        let n = xs.len();
        for (o, wr) in w.chunks_exact(rb).enumerate() {
            let dst = &mut out[o * n..(o + 1) * n];
            if matches!(ty, GgmlType::Q4K | GgmlType::Q6K) {
                xs.iter().zip(dst.iter_mut()).for_each(|((q, d, s), v)| *v = k_quant_dot(ty, wr, q, d, s));
                continue;
            }
            for (xc, dc) in xs.chunks(4).zip(dst.chunks_mut(4)) {
                rows(ty, wr, xc, dc, dot_us);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn matrix_avx2(ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32]) {
        matrix(ty, w, rb, xs, out, dot_us_avx2)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn matrix_vnni(ty: GgmlType, w: &[u8], rb: usize, xs: &[Row<'_>], out: &mut [f32]) {
        matrix(ty, w, rb, xs, out, dot_us_vnni)
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

/// `y += a · x`, vectorised for the machine like [`dot_f32`].
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *FMA.get_or_init(|| KernelPath::Avx2.supported()) {
            // SAFETY: AVX2 and FMA were detected.
            return unsafe { axpy_avx2(a, x, y) };
        }
    }
    axpy_generic(a, x, y)
}

#[inline(always)]
fn axpy_generic(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(a: f32, x: &[f32], y: &mut [f32]) {
    axpy_generic(a, x, y)
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
    let mut s: f32 = acc.iter().sum();
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
                GgmlType::Q4_1 => {
                    b[0..2].copy_from_slice(&scale(next()));
                    b[2..4].copy_from_slice(&half::f16::from_f32(-0.04).to_le_bytes());
                }
                _ => b[0..2].copy_from_slice(&scale(next())),
            }
        }
        out
    }

    #[test]
    fn every_path_equals_the_dequantised_dot_on_every_type() {
        let d_in = 512;
        let mut next = rng(3);
        let x: Vec<f32> = (0..d_in).map(|_| ((next() % 2001) as f32 - 1000.0) / 700.0).collect();
        let mut q8 = Q8Rows::default();
        q8.quantize(&x, d_in);
        // The quantised activations, as floats: the exact value every kernel must reproduce.
        let xq: Vec<f32> = q8.q.iter().enumerate().map(|(i, &v)| v as f32 * q8.d[i / 32]).collect();
        assert!(x.iter().zip(&xq).enumerate().all(|(i, (a, b))| (a - b).abs() <= q8.d[i / 32] * 0.5001), "quantisation error within half a step");
        let paths = KernelPath::available();
        assert!(paths.contains(&KernelPath::Scalar));
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4K, GgmlType::Q6K] {
            let n_blocks = d_in / ty.block().0;
            for seed in 0..4 {
                let w = random_blocks(ty, n_blocks, 100 + seed);
                let wf = crate::gguf::dequantize(ty, &w, d_in);
                let want: f64 = wf.iter().zip(&xq).map(|(&a, &b)| a as f64 * b as f64).sum();
                let norm: f64 = wf.iter().zip(&xq).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                let reference = scalar::dot(ty, &w, &q8.q, &q8.d, &q8.sum);
                assert!((reference as f64 - want).abs() <= 1e-5 * norm, "{ty:?} scalar: {reference} vs {want}");
                for &p in &paths {
                    let got = dot(p, ty, &w, &q8.q, &q8.d, &q8.sum);
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
