//! Weight rows repacked eight at a time for the decoding kernels, in the manner of ggml's
//! `repack.cpp` (`block_q4_0x8` and `ggml_gemv_q4_0_8x8_q8_0`): decoding multiplies one
//! activation row by every weight row, and with ggml's row-major blocks each 32-weight block
//! costs its own f16 scale conversions, offset term, int→float conversion, multiply-add and a
//! horizontal sum at the end of the row. Interleaving eight rows block by block puts each
//! row in its own 32-bit lane: the eight rows' scales convert in one `vcvtph2ps`, each
//! `vpdpbusd` (or `vpmaddubsw` + `vpmaddwd`) takes four bytes of every row against four bytes
//! of the activation broadcast to every lane, and a block's eight sums are one vector — no
//! horizontal sums at all.
//!
//! A group-block (eight rows, one block column) holds the rows' scales, then (Q4_1) their
//! minimums, then the weights in chunks of 32 bytes: chunk `c` is bytes `4c..4c + 4` of each
//! row's quants, row `k` at offset `4k`. Q4_0 and Q4_1 have 4 chunks (low nibbles are the
//! block's weights `4c..4c + 4`, high nibbles `16 + 4c..`), Q8_0 has 8. A packed matrix is its
//! groups in order, each group its blocks in order: the same bytes as the GGUF's, moved.
//!
//! Activations come in two 8-bit levels ([`crate::kernels::Q8Rows`]); both are dotted with
//! the same unpacked weights (`256·Σw·q + Σw·r` in 32-bit integers). Each row's sum is formed
//! in the same order whatever the number of activation rows (1–4 per pass: the weights are
//! unpacked once for all of them), so a sequence decodes to the same bits alone or in a batch.
//!
//! Measured with `cargo run --release --example kernel_probe` (one thread, SmolLM2's shapes,
//! AVX-512 VNNI, two levels): a Q4_1 block costs 1.1–1.6 ns against 3.4–4.2 ns for ggml's
//! row-major blocks with one level; four activation rows 0.65 ns per block and row.
use crate::gguf::GgmlType;
use crate::kernels::{KernelPath, Row};

/// Rows per group.
pub use crate::kernels::GROUP;

/// Whether `ty` is repacked (Q4_0, Q4_1, Q8_0 here; Q4_K and Q6_K in [`crate::repack_k`]).
pub fn packs(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::Q4K | GgmlType::Q6K)
}

fn k_quant(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q6K)
}

/// (bytes of a block before its quants, bytes of quants) in ggml's block, and the offset of
/// the quants in a group-block.
fn layout(ty: GgmlType) -> (usize, usize, usize) {
    match ty {
        GgmlType::Q4_1 => (4, 16, 32),
        GgmlType::Q4_0 => (2, 16, 16),
        GgmlType::Q8_0 => (2, 32, 16),
        _ => unreachable!("not a repacked type"),
    }
}

/// Packs `rows` rows of ggml blocks (row-major, `rows` a multiple of [`GROUP`]).
pub fn pack(ty: GgmlType, plain: &[u8], rows: usize) -> Vec<u8> {
    let mut out = plain.to_vec();
    pack_in_place(ty, &mut out, rows);
    out
}

/// [`pack`] in place, a group at a time through one group's scratch (a model's matrices are
/// packed where the file's bytes were read: no second copy of the weights is allocated).
pub fn pack_in_place(ty: GgmlType, bytes: &mut [u8], rows: usize) {
    assert!(packs(ty) && rows.is_multiple_of(GROUP) && bytes.len().is_multiple_of(rows.max(1)));
    let rb = bytes.len().checked_div(rows).unwrap_or(0);
    let mut plain = vec![0u8; GROUP * rb];
    for dst_group in bytes.chunks_exact_mut(GROUP * rb.max(1)) {
        plain.copy_from_slice(dst_group);
        pack_group(ty, &plain, rb, dst_group);
    }
}

/// One group of eight rows (`plain`, row-major, `rb` bytes a row) into `dst`.
fn pack_group(ty: GgmlType, plain: &[u8], rb: usize, dst_group: &mut [u8]) {
    let bs = ty.block().1;
    if k_quant(ty) {
        for (i, dst) in dst_group.chunks_exact_mut(GROUP * bs).enumerate() {
            crate::repack_k::pack_block(ty, |k| &plain[k * rb + i * bs..][..bs], dst);
        }
        return;
    }
    let (head, nq, qoff) = layout(ty);
    for (i, dst) in dst_group.chunks_exact_mut(GROUP * bs).enumerate() {
        for k in 0..GROUP {
            let src = &plain[k * rb + i * bs..][..bs];
            dst[2 * k..2 * k + 2].copy_from_slice(&src[0..2]);
            if ty == GgmlType::Q4_1 {
                dst[16 + 2 * k..16 + 2 * k + 2].copy_from_slice(&src[2..4]);
            }
            for c in 0..nq / 4 {
                dst[qoff + 32 * c + 4 * k..][..4].copy_from_slice(&src[head + 4 * c..][..4]);
            }
        }
    }
}

/// The eight rows of a packed group (`nb` group-blocks) dequantised into `out` (`8 × nb·32`,
/// row-major), read straight from the interleaved bytes; each value is computed as
/// [`crate::gguf::dequantize`] computes it (`d·q`, `d·(n − 8)`, `d·n + m`), so the same bits.
pub fn dequantize_group(ty: GgmlType, group: &[u8], nb: usize, out: &mut [f32]) {
    if k_quant(ty) {
        // Row by row through ggml's blocks (prompts only; the same bits as the GGUF's).
        let d_in = out.len() / GROUP;
        let mut row = Vec::new();
        for (k, o) in out.chunks_exact_mut(d_in).enumerate() {
            unpack_row(ty, group, k, &mut row);
            o.copy_from_slice(&crate::gguf::dequantize(ty, &row, d_in));
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if KernelPath::Avx2.supported() {
        // SAFETY: AVX2, FMA and F16C are present (checked at run time).
        return unsafe { x86::dequantize_group_avx2(ty, group, nb, out) };
    }
    dequantize_group_generic(ty, group, nb, out)
}

/// [`dequantize_group`]'s body: compiled portable and with AVX2 (the same operations).
#[inline(always)]
fn dequantize_group_generic(ty: GgmlType, group: &[u8], nb: usize, out: &mut [f32]) {
    let bs = ty.block().1;
    let (_, _, qoff) = layout(ty);
    let d_in = nb * 32;
    assert!(group.len() == GROUP * nb * bs && out.len() == GROUP * d_in);
    let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    for (i, src) in group.chunks_exact(GROUP * bs).enumerate() {
        for k in 0..GROUP {
            let d = f16(&src[2 * k..]);
            let o = &mut out[k * d_in + i * 32..k * d_in + i * 32 + 32];
            match ty {
                GgmlType::Q8_0 => {
                    for c in 0..8 {
                        for t in 0..4 {
                            o[4 * c + t] = d * (src[qoff + 32 * c + 4 * k + t] as i8) as f32;
                        }
                    }
                }
                GgmlType::Q4_0 => {
                    for c in 0..4 {
                        for t in 0..4 {
                            let q = src[qoff + 32 * c + 4 * k + t];
                            o[4 * c + t] = d * ((q & 0x0f) as i32 - 8) as f32;
                            o[16 + 4 * c + t] = d * ((q >> 4) as i32 - 8) as f32;
                        }
                    }
                }
                _ => {
                    let m = f16(&src[16 + 2 * k..]);
                    for c in 0..4 {
                        for t in 0..4 {
                            let q = src[qoff + 32 * c + 4 * k + t];
                            o[4 * c + t] = d * (q & 0x0f) as f32 + m;
                            o[16 + 4 * c + t] = d * (q >> 4) as f32 + m;
                        }
                    }
                }
            }
        }
    }
}

/// Row `k` (0..8) of a packed group (`nb` group-blocks) as ggml blocks, into `out`.
pub fn unpack_row(ty: GgmlType, group: &[u8], k: usize, out: &mut Vec<u8>) {
    let bs = ty.block().1;
    out.clear();
    if k_quant(ty) {
        for src in group.chunks_exact(GROUP * bs) {
            let start = out.len();
            out.resize(start + bs, 0);
            crate::repack_k::unpack_block(ty, src, k, &mut out[start..]);
        }
        return;
    }
    let (head, nq, qoff) = layout(ty);
    for src in group.chunks_exact(GROUP * bs) {
        let start = out.len();
        out.resize(start + bs, 0);
        let dst = &mut out[start..];
        dst[0..2].copy_from_slice(&src[2 * k..2 * k + 2]);
        if ty == GgmlType::Q4_1 {
            dst[2..4].copy_from_slice(&src[16 + 2 * k..16 + 2 * k + 2]);
        }
        for c in 0..nq / 4 {
            dst[head + 4 * c..][..4].copy_from_slice(&src[qoff + 32 * c + 4 * k..][..4]);
        }
    }
}

/// The dot products of the packed groups in `w` (whole groups of eight rows, `nb` blocks per
/// row) with the activation rows `xs`, into `out` (`[weight row][activation row]`), on `path`
/// (which the caller has checked is supported). The scalar path unpacks each row and runs
/// [`crate::kernels::scalar::dot`], the reference.
pub fn dot_packed(path: KernelPath, ty: GgmlType, w: &[u8], nb: usize, xs: &[Row<'_>], out: &mut [f32]) {
    let gbytes = GROUP * nb * ty.block().1;
    assert!(packs(ty) && gbytes > 0 && w.len().is_multiple_of(gbytes) && out.len() == w.len() / gbytes * GROUP * xs.len());
    // Activation blocks of 32 per weight block (8 per K-quant super-block).
    let n32 = nb * ty.block().0 / 32;
    for x in xs {
        assert!(x.q.len() >= n32 * 32 && x.r.len() >= n32 * 32 && x.x16.len() >= n32 * 32 && x.d.len() >= n32 && x.sum.len() >= n32 && x.sum16.len() >= 2 * n32, "activation row shorter than the weights");
    }
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller runs only supported paths (`KernelPath::supported`); lengths checked above.
        KernelPath::Avx2 => unsafe { x86::packed_avx2(ty, w, nb, xs, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::Avx512Vnni => unsafe { x86::packed_vnni(ty, w, nb, xs, out) },
        _ => {
            let n = xs.len();
            let mut row = Vec::new();
            for (g, group) in w.chunks_exact(gbytes).enumerate() {
                for k in 0..GROUP {
                    unpack_row(ty, group, k, &mut row);
                    for (r, x) in xs.iter().enumerate() {
                        out[(g * GROUP + k) * n + r] = crate::kernels::scalar::dot(ty, &row, x);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// `acc + Σ u·s` over each 32-bit lane's four byte pairs (u unsigned, s signed).
    type DotAcc = unsafe fn(__m256i, __m256i, __m256i) -> __m256i;

    #[inline(always)]
    unsafe fn dot_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
    }

    #[inline(always)]
    unsafe fn dot_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }

    /// Four activation bytes at `p` in every lane.
    #[inline(always)]
    unsafe fn bcast(p: *const i8) -> __m256i {
        _mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32))
    }

    /// One group of eight weight rows (`g`, `nb` group-blocks) against `R` activation rows:
    /// `out[r][k]` = row `k` · activation `r`.
    #[inline(always)]
    unsafe fn group<const R: usize>(ty: GgmlType, g: *const u8, nb: usize, xs: &[Row<'_>; R], out: &mut [[f32; GROUP]; R], dot: DotAcc, vnni: bool) {
        match ty {
            GgmlType::Q4K => return crate::repack_k::x86::group_q4k::<R>(g, nb, xs, out, dot, vnni),
            GgmlType::Q6K => return crate::repack_k::x86::group_q6k::<R>(g, nb, xs, out, dot, vnni),
            _ => {}
        }
        let gb = GROUP * ty.block().1;
        let zero = _mm256_setzero_si256();
        let mut acc = [_mm256_setzero_ps(); R];
        let mut off = [_mm256_setzero_ps(); R];
        let mask = _mm256_set1_epi8(0x0f);
        for i in 0..nb {
            let b = g.add(i * gb);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
            if ty == GgmlType::Q8_0 && !vnni {
                // AVX2: the weights sign-extended to 16 bits (rows 0–3 of a 32-byte step, then
                // rows 4–7) against both activation levels as one 16-bit value `256·q + r`,
                // broadcast four at a time: one `vpmaddwd` per half-step gives the same integers
                // as two levels of `vpmaddubsw` + `vpmaddwd` (|w·x| pairs ≤ 8.4·10⁶; a block sums
                // to < 2³¹), for half the multiplies. Lanes come out as row pairs.
                let (mut lo, mut hi) = ([zero; R], [zero; R]);
                for c in 0..8 {
                    let w = b.add(16 + 32 * c);
                    let w_lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(w as *const __m128i));
                    let w_hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.add(16) as *const __m128i));
                    for r in 0..R {
                        let xb = _mm256_set1_epi64x(std::ptr::read_unaligned(xs[r].x16.as_ptr().add(i * 32 + 4 * c) as *const i64));
                        lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(w_lo, xb));
                        hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(w_hi, xb));
                    }
                }
                for r in 0..R {
                    // [r0 r1 r4 r5 | r2 r3 r6 r7] → rows in order.
                    let isum = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(lo[r], hi[r]), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(*xs[r].d.get_unchecked(i))), acc[r]);
                }
            } else if ty == GgmlType::Q8_0 {
                let mut w = [zero; 8];
                for (c, v) in w.iter_mut().enumerate() {
                    *v = _mm256_loadu_si256(b.add(16 + 32 * c) as *const __m256i);
                }
                // The weights are signed; `vpdpbusd` and `vpmaddubsw` take one unsigned operand:
                // w + 128 with 128·Σx taken off after (VNNI does not saturate), or |w| against
                // x with w's sign (AVX2: |w| ≤ 128 keeps `vpmaddubsw` from saturating).
                let mut u = [zero; 8];
                for c in 0..8 {
                    u[c] = if vnni { _mm256_xor_si256(w[c], _mm256_set1_epi8(-128)) } else { _mm256_sign_epi8(w[c], w[c]) };
                }
                for r in 0..R {
                    let x = xs[r];
                    let (qp, rp) = (x.q.as_ptr().add(i * 32), x.r.as_ptr().add(i * 32));
                    // Both levels against the same unpacked weights: (Σ w·q) · 256 + Σ w·r.
                    let (mut s0, mut s1) = (zero, zero);
                    for c in 0..8 {
                        let (xq, xr) = (bcast(qp.add(4 * c)), bcast(rp.add(4 * c)));
                        if vnni {
                            s0 = dot(s0, u[c], xq);
                            s1 = dot(s1, u[c], xr);
                        } else {
                            s0 = dot(s0, u[c], _mm256_sign_epi8(xq, w[c]));
                            s1 = dot(s1, u[c], _mm256_sign_epi8(xr, w[c]));
                        }
                    }
                    let mut isum = _mm256_add_epi32(_mm256_slli_epi32(s0, 8), s1);
                    if vnni {
                        isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(128 * *x.sum.get_unchecked(i)));
                    }
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(*x.d.get_unchecked(i))), acc[r]);
                }
            } else {
                let (_, _, qoff) = layout(ty);
                let (mut lo, mut hi) = ([zero; 4], [zero; 4]);
                for c in 0..4 {
                    let v = _mm256_loadu_si256(b.add(qoff + 32 * c) as *const __m256i);
                    lo[c] = _mm256_and_si256(v, mask);
                    hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
                }
                let m = if ty == GgmlType::Q4_1 { _mm256_cvtph_ps(_mm_loadu_si128(b.add(16) as *const __m128i)) } else { _mm256_setzero_ps() };
                for r in 0..R {
                    let x = xs[r];
                    let (qp, rp) = (x.q.as_ptr().add(i * 32), x.r.as_ptr().add(i * 32));
                    // Both levels against the same unpacked weights: (Σ n·q) · 256 + Σ n·r.
                    let isum = if vnni {
                        let (mut s0, mut s1) = (zero, zero);
                        for c in 0..4 {
                            s0 = dot(s0, lo[c], bcast(qp.add(4 * c)));
                            s0 = dot(s0, hi[c], bcast(qp.add(16 + 4 * c)));
                            s1 = dot(s1, lo[c], bcast(rp.add(4 * c)));
                            s1 = dot(s1, hi[c], bcast(rp.add(16 + 4 * c)));
                        }
                        _mm256_add_epi32(_mm256_slli_epi32(s0, 8), s1)
                    } else {
                        // `vpmaddubsw`'s pair sums (nibble ≤ 15, |x| ≤ 127: |·| ≤ 3,810) add up
                        // over the block's eight steps in 16 bits without overflow (≤ 30,480),
                        // so each level takes one `vpmaddwd` (× 256 for the first) instead of
                        // eight: the same integers, a third fewer multiplies.
                        let (mut p0, mut p1) = (zero, zero);
                        for c in 0..4 {
                            p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(lo[c], bcast(qp.add(4 * c))));
                            p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(hi[c], bcast(qp.add(16 + 4 * c))));
                            p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(lo[c], bcast(rp.add(4 * c))));
                            p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(hi[c], bcast(rp.add(16 + 4 * c))));
                        }
                        _mm256_add_epi32(_mm256_madd_epi16(p0, _mm256_set1_epi16(256)), _mm256_madd_epi16(p1, _mm256_set1_epi16(1)))
                    };
                    let (di, si) = (*x.d.get_unchecked(i), *x.sum.get_unchecked(i));
                    let mut isum = isum;
                    if ty == GgmlType::Q4_0 {
                        // Q4_0's weights are nibble − 8.
                        isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * si));
                    }
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(di)), acc[r]);
                    if ty == GgmlType::Q4_1 {
                        off[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(di * si as f32), off[r]);
                    }
                }
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), _mm256_add_ps(acc[r], off[r]));
        }
    }

    #[inline(always)]
    unsafe fn packed(ty: GgmlType, w: &[u8], nb: usize, xs: &[Row<'_>], out: &mut [f32], dot: DotAcc, vnni: bool) {
        let gbytes = GROUP * nb * ty.block().1;
        let n = xs.len();
        let mut res = [[0f32; GROUP]; 4];
        for (gi, gw) in w.chunks_exact(gbytes).enumerate() {
            let gp = gw.as_ptr();
            for (ci, xc) in xs.chunks(4).enumerate() {
                match xc.len() {
                    1 => group::<1>(ty, gp, nb, &[xc[0]], (&mut res[..1]).try_into().expect("1"), dot, vnni),
                    2 => group::<2>(ty, gp, nb, &[xc[0], xc[1]], (&mut res[..2]).try_into().expect("2"), dot, vnni),
                    3 => group::<3>(ty, gp, nb, &[xc[0], xc[1], xc[2]], (&mut res[..3]).try_into().expect("3"), dot, vnni),
                    _ => group::<4>(ty, gp, nb, &[xc[0], xc[1], xc[2], xc[3]], &mut res, dot, vnni),
                }
                for k in 0..GROUP {
                    for j in 0..xc.len() {
                        out[(gi * GROUP + k) * n + ci * 4 + j] = res[j][k];
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dequantize_group_avx2(ty: GgmlType, group: &[u8], nb: usize, out: &mut [f32]) {
        dequantize_group_generic(ty, group, nb, out)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn packed_avx2(ty: GgmlType, w: &[u8], nb: usize, xs: &[Row<'_>], out: &mut [f32]) {
        packed(ty, w, nb, xs, out, dot_avx2, false)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn packed_vnni(ty: GgmlType, w: &[u8], nb: usize, xs: &[Row<'_>], out: &mut [f32]) {
        packed(ty, w, nb, xs, out, dot_vnni, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Q8Rows;

    #[test]
    fn a_packed_group_dequantises_to_the_gguf_values() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q6K] {
            let (rows, nb) = (16, 5);
            let per = ty.block().0;
            let plain = crate::kernels::tests::random_blocks(ty, rows * nb, 3);
            let packed = pack(ty, &plain, rows);
            let want = crate::gguf::dequantize(ty, &plain, rows * nb * per);
            let gbytes = GROUP * nb * ty.block().1;
            let run = |f: fn(GgmlType, &[u8], usize, &mut [f32])| {
                let mut out = vec![0f32; rows * nb * per];
                for (g, o) in out.chunks_exact_mut(GROUP * nb * per).enumerate() {
                    f(ty, &packed[g * gbytes..(g + 1) * gbytes], nb, o);
                }
                out
            };
            let got = run(dequantize_group);
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{ty:?}");
            if k_quant(ty) {
                continue;
            }
            // The portable body too (the call above takes AVX2 where the machine has it).
            let portable = run(dequantize_group_generic);
            assert_eq!(portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{ty:?} portable");
        }
    }

    #[test]
    fn pack_then_unpack_gives_every_row_back() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q6K] {
            let (rows, nb) = (16, 5);
            let plain = crate::kernels::tests::random_blocks(ty, rows * nb, 9);
            let packed = pack(ty, &plain, rows);
            assert_ne!(packed, plain);
            let rb = nb * ty.block().1;
            let mut row = Vec::new();
            for r in 0..rows {
                unpack_row(ty, &packed[r / GROUP * GROUP * rb..][..GROUP * rb], r % GROUP, &mut row);
                assert_eq!(row, plain[r * rb..(r + 1) * rb], "{ty:?} row {r}");
            }
        }
    }

    #[test]
    fn every_path_matches_the_row_major_kernels_and_is_batch_invariant() {
        let (rows, d_in) = (24, 768);
        let n = 6;
        let x: Vec<f32> = (0..n * d_in).map(|i| (((i * 7919) % 2001) as f32 - 1000.0) / 613.0).collect();
        let mut q8 = Q8Rows::default();
        q8.quantize(&x, d_in);
        let xs: Vec<Row<'_>> = (0..n).map(|r| q8.row(r)).collect();
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q6K] {
            let nb = d_in / ty.block().0;
            let plain = crate::kernels::tests::random_blocks(ty, rows * nb, 21);
            let packed = pack(ty, &plain, rows);
            let rb = nb * ty.block().1;
            let mut reference = vec![0f32; rows * n];
            crate::kernels::dot_matrix(KernelPath::Scalar, ty, &plain, rb, &xs, &mut reference);
            // Σ |w·x| of each output: random weights cancel to sums far below their terms, and
            // float order (per sub-block here, per super-block in the reference) moves the last
            // bits of the terms.
            let per = ty.block().0;
            let norms: Vec<f32> = (0..rows * n)
                .map(|i| {
                    let (o, r) = (i / n, i % n);
                    let w = crate::gguf::dequantize(ty, &plain[o * rb..(o + 1) * rb], nb * per);
                    w.iter().enumerate().map(|(j, v)| (v * x[r * d_in + j]).abs()).sum()
                })
                .collect();
            for path in KernelPath::available() {
                let mut got = vec![0f32; rows * n];
                dot_packed(path, ty, &packed, nb, &xs, &mut got);
                for ((g, r), norm) in got.iter().zip(&reference).zip(&norms) {
                    assert!((g - r).abs() <= 1e-5 * (1.0 + r.abs()) + 1e-7 * norm, "{ty:?} {}: {g} vs scalar {r} (Σ|w·x| {norm})", path.name());
                }
                for r in 0..n {
                    let mut alone = vec![0f32; rows];
                    dot_packed(path, ty, &packed, nb, &xs[r..r + 1], &mut alone);
                    let batched: Vec<f32> = (0..rows).map(|o| got[o * n + r]).collect();
                    assert_eq!(alone, batched, "{ty:?} {}: activation row {r} alone vs in a batch of {n}", path.name());
                }
            }
        }
    }
}
