//! K-quant super-blocks (Q4_K, Q6_K: 256 weights) repacked eight rows at a time, in the manner
//! of ggml's `block_q4_Kx8` (`repack.cpp`): the layout [`crate::repack`] gives Q4_0/Q4_1/Q8_0,
//! with each row in its own 32-bit lane, for the K-quants' sub-block scales. A group-block is
//! the eight rows' super-block `i`, the same bytes as the GGUF's, moved (the file's size):
//!
//! - **Q4_K** (1,152 bytes): `d` ×8 (f16), `dmin` ×8, then the 12 scale bytes of each row as
//!   three 32-bit words, word `w` of row `k` at `32 + 32w + 4k` — in lanes, so llama.cpp's
//!   `kmask` shuffle decodes the eight rows' 6-bit scales and minimums at once — then the
//!   quants: pair `p` (sub-blocks `2p`, low nibbles, and `2p + 1`, high), chunk `c`: bytes
//!   `32p + 4c..+4` of row `k` at `128 + 256p + 32c + 4k`.
//! - **Q6_K** (1,680 bytes): `d` ×8, the 16 signed scales as `[scale][row]` (`16 + 8s + k`),
//!   then `ql` by half `h` and chunk `c` (0..16) at `144 + 512h + 32c + 4k`, then `qh` by half
//!   and chunk (0..8) at `1168 + 256h + 32c + 4k`.
//!
//! The kernels ([`crate::repack`]'s SIMD bodies call [`x86`]) take both activation levels against
//! each unpacked sub-block (`256·Σw·q + Σw·r`), one float multiply-add per sub-block (Q4_K) or
//! 16-weight half (Q6_K, whose unsigned 6-bit values carry their −32 through the activations'
//! half sums); the scalar path unpacks a row and runs [`crate::kernels::scalar::dot`].
use crate::gguf::GgmlType;
use crate::kernels::GROUP;

/// Bytes of one row's super-block.
fn block_bytes(ty: GgmlType) -> usize {
    ty.block().1
}

/// Where row `k`'s bytes `from..from + 4` of its super-block go in the group-block (`to + 4k`):
/// the 4-byte moves (Q6_K's scales and the f16 scales move on their own).
fn moves(ty: GgmlType) -> &'static [(usize, usize)] {
    static Q4K: std::sync::OnceLock<Vec<(usize, usize)>> = std::sync::OnceLock::new();
    static Q6K: std::sync::OnceLock<Vec<(usize, usize)>> = std::sync::OnceLock::new();
    match ty {
        GgmlType::Q4K => Q4K.get_or_init(|| {
            let scales = (0..3).map(|w| (4 + 4 * w, 32 + 32 * w));
            scales.chain((0..4).flat_map(|p| (0..8).map(move |c| (16 + 32 * p + 4 * c, 128 + 256 * p + 32 * c)))).collect()
        }),
        GgmlType::Q6K => Q6K.get_or_init(|| {
            (0..2)
                .flat_map(|h| {
                    let ql = (0..16).map(move |c| (64 * h + 4 * c, 144 + 512 * h + 32 * c));
                    ql.chain((0..8).map(move |c| (128 + 32 * h + 4 * c, 1168 + 256 * h + 32 * c)))
                })
                .collect()
        }),
        _ => unreachable!("K-quants only"),
    }
}

/// One group-block from the eight rows' super-blocks (`src(k)` is row `k`'s block).
pub(crate) fn pack_block<'a>(ty: GgmlType, src: impl Fn(usize) -> &'a [u8], dst: &mut [u8]) {
    for k in 0..GROUP {
        let b = src(k);
        match ty {
            GgmlType::Q4K => {
                dst[2 * k..2 * k + 2].copy_from_slice(&b[0..2]);
                dst[16 + 2 * k..16 + 2 * k + 2].copy_from_slice(&b[2..4]);
            }
            _ => {
                dst[2 * k..2 * k + 2].copy_from_slice(&b[208..210]);
                for s in 0..16 {
                    dst[16 + 8 * s + k] = b[192 + s];
                }
            }
        }
        for &(from, to) in moves(ty) {
            dst[to + 4 * k..to + 4 * k + 4].copy_from_slice(&b[from..from + 4]);
        }
    }
}

/// Row `k`'s super-block from a group-block, into `out` (`block_bytes` long).
pub(crate) fn unpack_block(ty: GgmlType, src: &[u8], k: usize, out: &mut [u8]) {
    match ty {
        GgmlType::Q4K => {
            out[0..2].copy_from_slice(&src[2 * k..2 * k + 2]);
            out[2..4].copy_from_slice(&src[16 + 2 * k..16 + 2 * k + 2]);
        }
        _ => {
            out[208..210].copy_from_slice(&src[2 * k..2 * k + 2]);
            for s in 0..16 {
                out[192 + s] = src[16 + 8 * s + k];
            }
        }
    }
    for &(from, to) in moves(ty) {
        out[from..from + 4].copy_from_slice(&src[to + 4 * k..to + 4 * k + 4]);
    }
    debug_assert_eq!(out.len(), block_bytes(ty));
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::*;
    use crate::kernels::Row;
    use std::arch::x86_64::*;

    /// `acc + Σ u·s` over each 32-bit lane's four byte pairs (u unsigned, s signed).
    pub type DotAcc = unsafe fn(__m256i, __m256i, __m256i) -> __m256i;

    /// Four activation bytes at `p` in every lane.
    #[inline(always)]
    unsafe fn bcast(p: *const i8) -> __m256i {
        _mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32))
    }

    /// Asks for the cache lines of `n` bytes at `p` (a group-block four ahead: the weights
    /// stream from memory once per token, and the hardware prefetcher alone left the kernel
    /// waiting on them).
    #[inline(always)]
    unsafe fn prefetch(p: *const u8, n: usize) {
        for off in (0..n).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8);
        }
    }

    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p as *const __m256i)
    }

    /// Lane-wise byte `j` (0..4) of `v` as floats.
    #[inline(always)]
    unsafe fn byte_lane(v: __m256i, j: usize) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set1_epi32(8 * j as i32)), _mm256_set1_epi32(0xff)))
    }

    /// Both levels of one activation block (from `at`, `N` chunks of 4) against the chunks `w`:
    /// `256·Σ w·q + Σ w·r` per lane. `vpmaddubsw`'s pair sums of 4-bit weights add up in 16
    /// bits over eight chunks (≤ 30,480), so AVX2 takes one `vpmaddwd` per level for them.
    /// (Splitting each level's chain of `vpdpbusd` over several accumulators measured no
    /// faster: `kernel_probe`.)
    #[inline(always)]
    unsafe fn levels<const N: usize>(w: &[__m256i; N], x: &Row<'_>, at: usize, dot: DotAcc, vnni: bool, nibbles: bool) -> __m256i {
        let (qp, rp) = (x.q.as_ptr().add(at), x.r.as_ptr().add(at));
        let zero = _mm256_setzero_si256();
        let (mut s0, mut s1) = (zero, zero);
        for (c, &wc) in w.iter().enumerate() {
            let (xq, xr) = (bcast(qp.add(4 * c)), bcast(rp.add(4 * c)));
            if vnni || !nibbles {
                s0 = dot(s0, wc, xq);
                s1 = dot(s1, wc, xr);
            } else {
                s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(wc, xq));
                s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(wc, xr));
            }
        }
        if vnni || !nibbles {
            _mm256_add_epi32(_mm256_slli_epi32(s0, 8), s1)
        } else {
            _mm256_add_epi32(_mm256_madd_epi16(s0, _mm256_set1_epi16(256)), _mm256_madd_epi16(s1, _mm256_set1_epi16(1)))
        }
    }

    /// One Q4_K group (eight rows, `nsb` super-blocks at `g`) against `R` activation rows.
    #[inline(always)]
    pub unsafe fn group_q4k<const R: usize>(g: *const u8, nsb: usize, xs: &[Row<'_>; R], out: &mut [[f32; GROUP]; R], dot: DotAcc, vnni: bool) {
        let mask = _mm256_set1_epi8(0x0f);
        let (k1, k2, k3) = (_mm256_set1_epi32(0x3f3f3f3f), _mm256_set1_epi32(0x0f0f0f0f), _mm256_set1_epi32(0x03030303));
        let mut acc = [_mm256_setzero_ps(); R];
        let mut off = [_mm256_setzero_ps(); R];
        for i in 0..nsb {
            let b = g.add(i * 1152);
            prefetch(b.add(4 * 1152), 1152);
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
                    let x = &xs[r];
                    let isum = levels::<8>(&w, x, blk * 32, dot, vnni, true);
                    let xd = *x.d.get_unchecked(blk);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dsc, _mm256_set1_ps(xd)), acc[r]);
                    off[r] = _mm256_fmadd_ps(dm, _mm256_set1_ps(xd * *x.sum.get_unchecked(blk) as f32), off[r]);
                }
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), _mm256_sub_ps(acc[r], off[r]));
        }
    }

    /// One Q6_K group (eight rows, `nsb` super-blocks at `g`) against `R` activation rows.
    #[inline(always)]
    pub unsafe fn group_q6k<const R: usize>(g: *const u8, nsb: usize, xs: &[Row<'_>; R], out: &mut [[f32; GROUP]; R], dot: DotAcc, vnni: bool) {
        let (mask, three) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(3));
        let mut acc = [_mm256_setzero_ps(); R];
        for i in 0..nsb {
            let b = g.add(i * 1680);
            prefetch(b.add(4 * 1680), 1680);
            let d = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
            for h in 0..2 {
                for kind in 0..4 {
                    let blk = 8 * i + 4 * h + kind;
                    for half in 0..2 {
                        let s = 8 * h + 2 * kind + half;
                        let sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(16 + 8 * s) as *const __m128i)));
                        let dsc = _mm256_mul_ps(d, sc);
                        let mut w = [_mm256_setzero_si256(); 4];
                        for (t, v) in w.iter_mut().enumerate() {
                            let c = 4 * half + t;
                            let ql = load(b.add(144 + 512 * h + 32 * (c + 8 * (kind & 1))));
                            let qh = load(b.add(1168 + 256 * h + 32 * c));
                            let lo = if kind < 2 { _mm256_and_si256(ql, mask) } else { _mm256_and_si256(_mm256_srli_epi16(ql, 4), mask) };
                            let hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * kind as i32)), three);
                            *v = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                        }
                        for r in 0..R {
                            let x = &xs[r];
                            let mut isum = levels::<4>(&w, x, blk * 32 + 16 * half, dot, vnni, false);
                            // The weights are the stored 6-bit values − 32.
                            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(32 * *x.sum16.get_unchecked(2 * blk + half)));
                            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dsc, _mm256_set1_ps(*x.d.get_unchecked(blk))), acc[r]);
                        }
                    }
                }
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
    }
}
