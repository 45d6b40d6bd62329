//! The K-quants' prompt GEMM in 8-bit integers, in the manner of ggml's
//! `ggml_gemm_q4_K_8x8_q8_K` (`ggml-cpu/arch/x86/repack.cpp`): a prompt's activations are
//! quantised once per matmul to one 8-bit level per 256 values ([`PromptRows`], ggml's Q8_K),
//! and each unpacked sub-block of a repacked group-block
//! ([`crate::repack_k`]: eight weight rows, one per 32-bit lane) is dotted with several prompt
//! rows before the next is unpacked — `vpdpbusd` on AVX-512 VNNI, `vpmaddubsw` on AVX2. The
//! weights' sub-block scales (and Q4_K's minimums) apply per sub-block and row in floats, the
//! activations' scale once per super-block: a scale per 32 activations instead measured 7 %
//! slower on these cores, whose float and integer multiplies share ports (`kernel_probe`).
//!
//! A decoding step keeps two activation levels ([`crate::kernels::Q8Rows`]); a prompt runs one,
//! as llama.cpp runs both: half the integer work, at 8-bit precision of each activation. Every
//! output depends on its own prompt row only (the rows are quantised one by one and the float
//! accumulation runs in the same order whatever rows share a tile), so a prompt split in two —
//! a cached prefix, then the rest — gives the same values as the whole.
//!
//! [`gemm_scalar`] is the reference: the same integers, summed in scalar code.
use crate::gguf::GgmlType;
use crate::kernels::{KernelPath, GROUP};

/// Prompt rows quantised to one 8-bit level per 256 values (a super-block), with what the
/// K-quants' offsets need.
#[derive(Debug, Clone, Default)]
pub struct PromptRows {
    /// Values, `rows × cols`.
    pub q: Vec<i8>,
    /// Scale of each 256-value super-block.
    pub d: Vec<f32>,
    /// Each 32-value block's `Σq` (Q4_K's minimums multiply it), exact in `f32`.
    pub sum32: Vec<f32>,
    /// `−32 · Σq` over each 16 values (Q6_K's weights are their stored value − 32).
    pub offset16: Vec<i32>,
    /// Columns per row (a multiple of 256).
    pub cols: usize,
}

/// One row of [`PromptRows`].
#[derive(Debug, Clone, Copy)]
pub struct PromptRow<'a> {
    /// Values.
    pub q: &'a [i8],
    /// Super-block scales.
    pub d: &'a [f32],
    /// `Σq` per 32 values.
    pub sum32: &'a [f32],
    /// `−32 · Σq` per 16 values.
    pub offset16: &'a [i32],
}

impl PromptRows {
    /// Quantises `x` (row-major, `cols` wide) into `self`, reusing its buffers; rows in
    /// parallel on the rayon pool when there are many.
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        assert!(cols.is_multiple_of(256) && x.len().is_multiple_of(cols));
        let (n, nb) = (x.len(), x.len() / 32);
        self.cols = cols;
        self.q.resize(n, 0);
        self.d.resize(nb / 8, 0.0);
        self.sum32.resize(nb, 0.0);
        self.offset16.resize(2 * nb, 0);
        let avx2 = KernelPath::Avx2.supported();
        let rows = n / cols;
        let bufs = Bufs { q: self.q.as_mut_ptr(), d: self.d.as_mut_ptr(), sum32: self.sum32.as_mut_ptr(), offset16: self.offset16.as_mut_ptr() };
        // Chunks of 8 rows, spread like the matmul that follows (the decoding pool in a
        // session, rayon otherwise).
        crate::pool::parallel_for(rows.div_ceil(8), |c| {
            let (r0, r1) = (8 * c, (8 * c + 8).min(rows));
            let xs = &x[r0 * cols..r1 * cols];
            // SAFETY: rows r0..r1 of every buffer (sized above) belong to this chunk alone.
            let (q, d, ds, b16) = unsafe { bufs.rows(r0, r1 - r0, cols) };
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: AVX2 and FMA are present (checked above).
                return unsafe { quantize_avx2(xs, q, d, ds, b16) };
            }
            let _ = avx2;
            quantize_blocks(xs, q, d, ds, b16)
        });
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.q.len().checked_div(self.cols).unwrap_or(0)
    }

    /// Row `r`.
    pub fn row(&self, r: usize) -> PromptRow<'_> {
        let nb = self.cols / 32;
        PromptRow { q: &self.q[r * self.cols..(r + 1) * self.cols], d: &self.d[r * nb / 8..(r + 1) * nb / 8], sum32: &self.sum32[r * nb..(r + 1) * nb], offset16: &self.offset16[2 * r * nb..2 * (r + 1) * nb] }
    }
}

/// [`PromptRows`]' buffers, shared by the chunks of its quantisation (disjoint rows each).
struct Bufs {
    q: *mut i8,
    d: *mut f32,
    sum32: *mut f32,
    offset16: *mut i32,
}

// SAFETY: each chunk writes only its own rows.
unsafe impl Sync for Bufs {}

impl Bufs {
    /// Rows `r0..r0 + n` of each buffer (`cols` values per row).
    ///
    /// # Safety
    /// The rows must exist and be borrowed by no one else.
    #[allow(clippy::mut_from_ref)]
    unsafe fn rows(&self, r0: usize, n: usize, cols: usize) -> (&mut [i8], &mut [f32], &mut [f32], &mut [i32]) {
        let bpr = cols / 32;
        (
            std::slice::from_raw_parts_mut(self.q.add(r0 * cols), n * cols),
            std::slice::from_raw_parts_mut(self.d.add(r0 * bpr / 8), n * bpr / 8),
            std::slice::from_raw_parts_mut(self.sum32.add(r0 * bpr), n * bpr),
            std::slice::from_raw_parts_mut(self.offset16.add(2 * r0 * bpr), 2 * n * bpr),
        )
    }
}

/// One level of every 256-value super-block: Q8_K's scale (`max |x| / 127`), rounded to
/// nearest, ties to even (what `vcvtps2dq` does, so the AVX2 body below gives the same bytes; a
/// test checks).
fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], sum32: &mut [f32], offset16: &mut [i32]) {
    for (b, (xs, qs)) in x.chunks_exact(256).zip(q.chunks_exact_mut(256)).enumerate() {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let id = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut half = [0i32; 16];
        for (j, (q, &v)) in qs.iter_mut().zip(xs).enumerate() {
            let v = (v * id).round_ties_even() as i8;
            *q = v;
            half[j / 16] += v as i32;
        }
        d[b] = scale;
        for h in 0..16 {
            offset16[16 * b + h] = -32 * half[h];
        }
        for k in 0..8 {
            sum32[8 * b + k] = (half[2 * k] + half[2 * k + 1]) as f32;
        }
    }
}

/// [`quantize_blocks`] in AVX2: the same IEEE operations on eight values at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_avx2(x: &[f32], q: &mut [i8], d: &mut [f32], sum32: &mut [f32], offset16: &mut [i32]) {
    use std::arch::x86_64::*;
    let sign = _mm256_set1_ps(-0.0);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let hsum = |v: __m256i| {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)))
    };
    for (b, (xs, qs)) in x.chunks_exact(256).zip(q.chunks_exact_mut(256)).enumerate() {
        let p = xs.as_ptr();
        let mut m = _mm256_setzero_ps();
        for c in 0..32 {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * c))));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
        let scale = amax / 127.0;
        let id = _mm256_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
        for k in 0..8 {
            let pk = p.add(32 * k);
            let i: [__m256i; 4] = std::array::from_fn(|c| _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(pk.add(8 * c)), id)));
            // i32 → i16 → i8 packs interleave the 128-bit lanes; the permute puts them back.
            let (w01, w23) = (_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
            _mm256_storeu_si256(qs.as_mut_ptr().add(32 * k) as *mut __m256i, _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order));
            let (h0, h1) = (hsum(_mm256_add_epi32(i[0], i[1])), hsum(_mm256_add_epi32(i[2], i[3])));
            offset16[16 * b + 2 * k] = -32 * h0;
            offset16[16 * b + 2 * k + 1] = -32 * h1;
            sum32[8 * b + k] = (h0 + h1) as f32;
        }
        d[b] = scale;
    }
}

/// Whether the int8 prompt GEMM runs `ty` on `path` (the K-quants on the SIMD paths; a
/// portable build runs prompts in f32).
pub fn runs(ty: GgmlType, path: KernelPath) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q6K) && path != KernelPath::Scalar && path.supported()
}

/// `out[r · stride + 8g + k]` = weight row `8g + k` of the packed groups `w` (`nsb` super-blocks
/// per row) · prompt row `r` of `xs`, for every row of `xs`, on `path` ([`runs`] must hold).
///
/// # Safety
/// `out` must be valid for writes at `r · stride + o` for every row `r` of `xs` and every
/// weight row `o` of `w`, and no other thread may write there.
pub unsafe fn gemm(path: KernelPath, ty: GgmlType, w: &[u8], nsb: usize, xs: &[PromptRow<'_>], out: *mut f32, stride: usize) {
    let gbytes = GROUP * nsb * ty.block().1;
    assert!(runs(ty, path) && gbytes > 0 && w.len().is_multiple_of(gbytes));
    for x in xs {
        assert!(x.q.len() >= nsb * 256 && x.d.len() >= nsb && x.sum32.len() >= nsb * 8 && x.offset16.len() >= nsb * 16, "prompt row shorter than the weights");
    }
    #[cfg(target_arch = "x86_64")]
    match path {
        KernelPath::Avx512Vnni => x86::gemm_vnni(ty, w, nsb, xs, out, stride),
        _ => x86::gemm_avx2(ty, w, nsb, xs, out, stride),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (out, stride);
}

/// The reference of [`gemm`]: each weight row unpacked, its integer sub-block products with
/// each prompt row summed in scalar code, scaled per sub-block (Q4_K) or 16-weight half (Q6_K),
/// then by the prompt row's super-block scale.
/// Returns `[prompt row][weight row]`.
pub fn gemm_scalar(ty: GgmlType, w: &[u8], nsb: usize, xs: &[PromptRow<'_>]) -> Vec<Vec<f32>> {
    let bb = ty.block().1;
    let gbytes = GROUP * nsb * bb;
    let rows = w.len() / gbytes * GROUP;
    let mut out = vec![vec![0f32; rows]; xs.len()];
    let mut block = vec![0u8; bb];
    for o in 0..rows {
        let g = &w[o / GROUP * gbytes..(o / GROUP + 1) * gbytes];
        for i in 0..nsb {
            crate::repack_k::unpack_block(ty, &g[i * GROUP * bb..(i + 1) * GROUP * bb], o % GROUP, &mut block);
            for (x, acc) in xs.iter().zip(out.iter_mut()) {
                acc[o] += super_block(ty, &block, x, i);
            }
        }
    }
    out
}

/// One super-block (`b`, GGUF layout) of a weight row · prompt row `x`'s super-block `i`.
fn super_block(ty: GgmlType, b: &[u8], x: &PromptRow<'_>, i: usize) -> f32 {
    let f16 = |at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    let q = &x.q[256 * i..256 * (i + 1)];
    // The super-block's sum before the activations' scale.
    let mut u = 0f32;
    match ty {
        GgmlType::Q4K => {
            let (d, dmin) = (f16(0), f16(2));
            let sc = &b[4..16];
            for j in 0..8 {
                // ggml's `get_scale_min_k4`.
                let (s, m) = if j < 4 { (sc[j] & 63, sc[j + 4] & 63) } else { ((sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) };
                let qs = &b[16 + 32 * (j / 2)..16 + 32 * (j / 2 + 1)];
                let isum: i32 = (0..32).map(|l| (if j % 2 == 0 { qs[l] & 15 } else { qs[l] >> 4 }) as i32 * q[32 * j + l] as i32).sum();
                let blk = 8 * i + j;
                u += isum as f32 * (d * s as f32) - dmin * m as f32 * x.sum32[blk];
            }
        }
        _ => {
            let d = f16(208);
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            // ggml's Q6_K layout: two halves of 128, each four runs of 32.
            let mut vals = [0i32; 256];
            for h in 0..2 {
                for l in 0..32 {
                    let (lq, hq) = (&ql[64 * h..], qh[32 * h + l]);
                    vals[128 * h + l] = ((lq[l] & 15) | ((hq & 3) << 4)) as i32;
                    vals[128 * h + l + 32] = ((lq[l + 32] & 15) | (((hq >> 2) & 3) << 4)) as i32;
                    vals[128 * h + l + 64] = ((lq[l] >> 4) | (((hq >> 4) & 3) << 4)) as i32;
                    vals[128 * h + l + 96] = ((lq[l + 32] >> 4) | (((hq >> 6) & 3) << 4)) as i32;
                }
            }
            for s in 0..16 {
                let isum: i32 = (0..16).map(|l| vals[16 * s + l] * q[16 * s + l] as i32).sum::<i32>() + x.offset16[16 * i + s];
                u += isum as f32 * (d * (sc[s] as i8) as f32);
            }
        }
    }
    u * x.d[i]
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// Prompt rows per tile: each unpacked sub-block serves this many rows (AVX2 has 16
    /// vector registers, AVX-512 32).
    const TILE_AVX2: usize = 4;
    const TILE_VNNI: usize = 8;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p as *const __m256i)
    }

    /// Four activation bytes at `p` in every lane.
    #[inline(always)]
    unsafe fn bcast(p: *const i8) -> __m256i {
        _mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32))
    }

    /// Lane-wise byte `j` (0..4) of `v` as floats.
    #[inline(always)]
    unsafe fn byte_lane(v: __m256i, j: usize) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set1_epi32(8 * j as i32)), _mm256_set1_epi32(0xff)))
    }

    /// `Σ w·x` per lane over eight chunks of 4-bit weights and four activation bytes at `x`
    /// each. VNNI: two chains of `vpdpbusd` (one chain of eight per row measured 8 % slower in
    /// `kernel_probe`). AVX2: `vpmaddubsw` pair sums added in 16 bits (≤ 8 · 3,810), widened once.
    #[inline(always)]
    unsafe fn dot_nibbles(w: &[__m256i; 8], x: *const i8, vnni: bool) -> __m256i {
        let zero = _mm256_setzero_si256();
        if vnni {
            let (mut s0, mut s1) = (zero, zero);
            for c in (0..8).step_by(2) {
                s0 = _mm256_dpbusd_epi32(s0, w[c], bcast(x.add(4 * c)));
                s1 = _mm256_dpbusd_epi32(s1, w[c + 1], bcast(x.add(4 * c + 4)));
            }
            return _mm256_add_epi32(s0, s1);
        }
        let mut p = zero;
        for (c, &wc) in w.iter().enumerate() {
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wc, bcast(x.add(4 * c))));
        }
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }

    /// `init + Σ w·x` per lane over `N` chunks of 6-bit weights (AVX2: pairs ≤ 16,002, widened
    /// per chunk).
    #[inline(always)]
    unsafe fn dot_from<const N: usize>(init: __m256i, w: &[__m256i; N], x: *const i8, vnni: bool) -> __m256i {
        let mut s = init;
        for (c, &wc) in w.iter().enumerate() {
            s = if vnni { _mm256_dpbusd_epi32(s, wc, bcast(x.add(4 * c))) } else { _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(wc, bcast(x.add(4 * c))), _mm256_set1_epi16(1))) };
        }
        s
    }

    /// One Q4_K group (eight weight rows, `nsb` super-blocks at `g`) · `R` prompt rows.
    #[inline(always)]
    unsafe fn group_q4k<const R: usize>(g: *const u8, nsb: usize, xs: &[PromptRow<'_>], out: &mut [[f32; GROUP]; R], vnni: bool) {
        let mask = _mm256_set1_epi8(0x0f);
        let (k1, k2, k3) = (_mm256_set1_epi32(0x3f3f3f3f), _mm256_set1_epi32(0x0f0f0f0f), _mm256_set1_epi32(0x03030303));
        let mut acc = [_mm256_setzero_ps(); R];
        // The rows' pointers, read once.
        let (qp, dp, sp): ([*const i8; R], [*const f32; R], [*const f32; R]) = (std::array::from_fn(|r| xs[r].q.as_ptr()), std::array::from_fn(|r| xs[r].d.as_ptr()), std::array::from_fn(|r| xs[r].sum32.as_ptr()));
        for i in 0..nsb {
            let b = g.add(i * 1152);
            // The super-block's sums before the activations' scale.
            let mut u = [_mm256_setzero_ps(); R];
            let d = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(b.add(16) as *const __m128i));
            // llama.cpp's 12-byte scale decoding, eight rows at once (one per lane).
            let (u0, u1, u2) = (load(b.add(32)), load(b.add(64)), load(b.add(96)));
            let sc_lo = _mm256_and_si256(u0, k1);
            let sc_hi = _mm256_or_si256(_mm256_and_si256(u2, k2), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), k3), 4));
            let mn_lo = _mm256_and_si256(u1, k1);
            let mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), k2), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), k3), 4));
            for j in 0..8 {
                let (sv, mv) = if j < 4 { (sc_lo, mn_lo) } else { (sc_hi, mn_hi) };
                let dsc = _mm256_mul_ps(d, byte_lane(sv, j % 4));
                let dm = _mm256_mul_ps(dmin, byte_lane(mv, j % 4));
                let q = b.add(128 + 256 * (j / 2));
                let mut w = [_mm256_setzero_si256(); 8];
                for (c, v) in w.iter_mut().enumerate() {
                    let raw = load(q.add(32 * c));
                    *v = if j % 2 == 0 { _mm256_and_si256(raw, mask) } else { _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask) };
                }
                let blk = 8 * i + j;
                for r in 0..R {
                    let isum = dot_nibbles(&w, qp[r].add(32 * blk), vnni);
                    u[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dsc, u[r]);
                    u[r] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(*sp[r].add(blk)), u[r]);
                }
            }
            for r in 0..R {
                acc[r] = _mm256_fmadd_ps(u[r], _mm256_set1_ps(*dp[r].add(i)), acc[r]);
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
    }

    /// One Q6_K group (eight weight rows, `nsb` super-blocks at `g`) · `R` prompt rows.
    #[inline(always)]
    unsafe fn group_q6k<const R: usize>(g: *const u8, nsb: usize, xs: &[PromptRow<'_>], out: &mut [[f32; GROUP]; R], vnni: bool) {
        let (mask, three) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(3));
        let mut acc = [_mm256_setzero_ps(); R];
        for i in 0..nsb {
            let b = g.add(i * 1680);
            let d = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
            let mut u = [_mm256_setzero_ps(); R];
            for h in 0..2 {
                for kind in 0..4 {
                    let blk = 8 * i + 4 * h + kind;
                    // The two 16-weight halves' scales.
                    let s = 8 * h + 2 * kind;
                    let sc = |half: usize| _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(16 + 8 * (s + half)) as *const __m128i))));
                    let (dsc0, dsc1) = (sc(0), sc(1));
                    let mut w = [_mm256_setzero_si256(); 8];
                    for (c, v) in w.iter_mut().enumerate() {
                        let ql = load(b.add(144 + 512 * h + 32 * (c + 8 * (kind & 1))));
                        let qh = load(b.add(1168 + 256 * h + 32 * c));
                        let lo = if kind < 2 { _mm256_and_si256(ql, mask) } else { _mm256_and_si256(_mm256_srli_epi16(ql, 4), mask) };
                        let hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * kind as i32)), three);
                        *v = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                    }
                    let (w0, w1) = (&*(w.as_ptr() as *const [__m256i; 4]), &*(w.as_ptr().add(4) as *const [__m256i; 4]));
                    for (r, ur) in u.iter_mut().enumerate() {
                        let x = xs.get_unchecked(r);
                        let q = x.q.as_ptr().add(32 * blk);
                        // Each half's chain starts from its −32·Σq (the weights are the stored
                        // 6-bit values − 32).
                        let i0 = dot_from::<4>(_mm256_set1_epi32(*x.offset16.get_unchecked(2 * blk)), w0, q, vnni);
                        let i1 = dot_from::<4>(_mm256_set1_epi32(*x.offset16.get_unchecked(2 * blk + 1)), w1, q.add(16), vnni);
                        *ur = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), dsc0, *ur);
                        *ur = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), dsc1, *ur);
                    }
                }
            }
            for r in 0..R {
                acc[r] = _mm256_fmadd_ps(u[r], _mm256_set1_ps(*xs.get_unchecked(r).d.get_unchecked(i)), acc[r]);
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
    }

    #[inline(always)]
    unsafe fn group<const R: usize>(ty: GgmlType, g: *const u8, nsb: usize, xs: &[PromptRow<'_>], out: &mut [[f32; GROUP]; R], vnni: bool) {
        if ty == GgmlType::Q4K {
            group_q4k::<R>(g, nsb, xs, out, vnni)
        } else {
            group_q6k::<R>(g, nsb, xs, out, vnni)
        }
    }

    #[inline(always)]
    unsafe fn gemm<const T: usize>(ty: GgmlType, w: &[u8], nsb: usize, xs: &[PromptRow<'_>], out: *mut f32, stride: usize, vnni: bool) {
        let gbytes = GROUP * nsb * ty.block().1;
        let mut res = [[0f32; GROUP]; T];
        for (gi, gw) in w.chunks_exact(gbytes).enumerate() {
            for (ti, tile) in xs.chunks(T).enumerate() {
                let n = tile.len();
                let g = gw.as_ptr();
                match n {
                    1 => group::<1>(ty, g, nsb, tile, (&mut res[..1]).try_into().expect("1"), vnni),
                    2 => group::<2>(ty, g, nsb, tile, (&mut res[..2]).try_into().expect("2"), vnni),
                    3 => group::<3>(ty, g, nsb, tile, (&mut res[..3]).try_into().expect("3"), vnni),
                    4 => group::<4>(ty, g, nsb, tile, (&mut res[..4]).try_into().expect("4"), vnni),
                    5 if T > 4 => group::<5>(ty, g, nsb, tile, (&mut res[..5]).try_into().expect("5"), vnni),
                    6 if T > 4 => group::<6>(ty, g, nsb, tile, (&mut res[..6]).try_into().expect("6"), vnni),
                    7 if T > 4 => group::<7>(ty, g, nsb, tile, (&mut res[..7]).try_into().expect("7"), vnni),
                    _ => group::<T>(ty, g, nsb, tile, &mut res, vnni),
                }
                for (j, r) in res[..n].iter().enumerate() {
                    std::ptr::copy_nonoverlapping(r.as_ptr(), out.add((ti * T + j) * stride + gi * GROUP), GROUP);
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn gemm_avx2(ty: GgmlType, w: &[u8], nsb: usize, xs: &[PromptRow<'_>], out: *mut f32, stride: usize) {
        gemm::<TILE_AVX2>(ty, w, nsb, xs, out, stride, false)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn gemm_vnni(ty: GgmlType, w: &[u8], nsb: usize, xs: &[PromptRow<'_>], out: *mut f32, stride: usize) {
        gemm::<TILE_VNNI>(ty, w, nsb, xs, out, stride, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` prompt rows of `d_in` values with a spread of magnitudes (and one row of zeros).
    fn prompt(n: usize, d_in: usize) -> Vec<f32> {
        (0..n * d_in).map(|i| if i / d_in == 2 { 0.0 } else { ((((i * 7919) % 2001) as f32 - 1000.0) / 613.0) * (1.0 + (i % 97) as f32 / 9.0) }).collect()
    }

    #[test]
    fn every_path_matches_the_scalar_reference_and_the_f32_product() {
        let (rows, d_in, n) = (24, 768, 11);
        let x = prompt(n, d_in);
        let mut q = PromptRows::default();
        q.quantize(&x, d_in);
        let xs: Vec<PromptRow<'_>> = (0..n).map(|r| q.row(r)).collect();
        for ty in [GgmlType::Q4K, GgmlType::Q6K] {
            let nsb = d_in / 256;
            let plain = crate::kernels::tests::random_blocks(ty, rows * nsb, 17);
            let packed = crate::repack::pack(ty, &plain, rows);
            let rb = nsb * ty.block().1;
            let reference = gemm_scalar(ty, &packed, nsb, &xs);
            // Σ |w·x| of each output: random weights cancel to sums far below their terms, and
            // the float order (fused multiply-adds on the SIMD paths) moves the terms' last bits.
            let mut norms = vec![vec![0f32; rows]; n];
            for o in 0..rows {
                let w = crate::gguf::dequantize(ty, &plain[o * rb..(o + 1) * rb], d_in);
                for r in 0..n {
                    let xr = &x[r * d_in..(r + 1) * d_in];
                    let exact: f32 = w.iter().zip(xr).map(|(a, b)| a * b).sum();
                    // Rounding each activation moves it by at most half its block's step.
                    let bound: f32 = w.iter().enumerate().map(|(j, v)| v.abs() * q.row(r).d[j / 256] * 0.5).sum::<f32>() * 1.001;
                    let got = reference[r][o];
                    norms[r][o] = w.iter().zip(xr).map(|(a, b)| (a * b).abs()).sum();
                    assert!((got - exact).abs() <= bound + 1e-4, "{ty:?} row {o} · prompt row {r}: int8 {got} vs f32 {exact} (bound {bound})");
                }
            }
            for path in KernelPath::available().into_iter().filter(|&p| runs(ty, p)) {
                let mut out = vec![f32::NAN; n * rows];
                // SAFETY: `out` is n × rows, written by this call only.
                unsafe { gemm(path, ty, &packed, nsb, &xs, out.as_mut_ptr(), rows) };
                for r in 0..n {
                    for o in 0..rows {
                        let (g, want) = (out[r * rows + o], reference[r][o]);
                        assert!((g - want).abs() <= 1e-5 * (1.0 + want.abs()) + 1e-6 * norms[r][o], "{ty:?} {}: row {o} · prompt row {r}: {g} vs scalar {want} (Σ|w·x| {})", path.name(), norms[r][o]);
                    }
                }
                // A row alone gives the bits it gives in a tile.
                for r in 0..n {
                    let mut alone = vec![0f32; rows];
                    // SAFETY: as above.
                    unsafe { gemm(path, ty, &packed, nsb, &xs[r..r + 1], alone.as_mut_ptr(), rows) };
                    assert_eq!(alone, out[r * rows..(r + 1) * rows], "{ty:?} {}: prompt row {r} alone vs in tiles of {n}", path.name());
                }
            }
        }
    }

    #[test]
    fn quantisation_is_the_same_on_every_path_and_zero_rows_stay_zero() {
        let d_in = 512;
        let mut x = prompt(5, d_in);
        // Row 4: ties (max 127, so the scale is 1 and k + ½ rounds to the even neighbour).
        for (j, v) in x[4 * d_in..].iter_mut().enumerate() {
            *v = if j % 256 == 0 { 127.0 } else { (j % 32) as f32 - 16.5 };
        }
        let mut fast = PromptRows::default();
        fast.quantize(&x, d_in);
        let (mut q, mut d, mut ds, mut b) = (vec![0i8; x.len()], vec![0f32; x.len() / 256], vec![0f32; x.len() / 32], vec![0i32; x.len() / 16]);
        quantize_blocks(&x, &mut q, &mut d, &mut ds, &mut b);
        assert_eq!((fast.q.clone(), fast.offset16.clone()), (q, b));
        assert_eq!(fast.d.iter().chain(&fast.sum32).map(|v| v.to_bits()).collect::<Vec<_>>(), d.iter().chain(&ds).map(|v| v.to_bits()).collect::<Vec<_>>());
        let zero = fast.row(2);
        assert!(zero.q.iter().all(|&v| v == 0) && zero.d.iter().all(|&v| v == 0.0));
        assert_eq!(fast.rows(), 5);
        assert_eq!(&fast.row(4).q[..6], &[127, -16, -14, -14, -12, -12], "ties to even");
    }

    #[test]
    fn a_prompt_split_in_two_gives_the_bits_of_the_whole() {
        // The matrix-level entry point: what a cached prefix followed by the rest computes.
        let (d_out, d_in, n) = (40, 512, 13);
        let x = prompt(n, d_in);
        for ty in [GgmlType::Q4K, GgmlType::Q6K] {
            let plain = crate::kernels::tests::random_blocks(ty, d_out * d_in / 256, 5);
            let m = crate::quant::QuantMatrix::new(ty, plain, d_out, d_in);
            for path in KernelPath::available() {
                let mut whole = vec![0f32; n * d_out];
                m.matmul_prompt(&x, n, path, &mut whole);
                let split = 6;
                let (mut a, mut b) = (vec![0f32; split * d_out], vec![0f32; (n - split) * d_out]);
                m.matmul_prompt(&x[..split * d_in], split, path, &mut a);
                m.matmul_prompt(&x[split * d_in..], n - split, path, &mut b);
                assert_eq!([a, b].concat(), whole, "{ty:?} {}", path.name());
            }
        }
    }
}
