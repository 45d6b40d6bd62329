//! Linear layers whose weights stay quantised in memory (GGUF Q8_0, Q4_0, Q4_1, Q4_K, Q6_K
//! blocks), for the host CPU: decoding one token reads every weight once, so reading 4.5–8.5
//! bits instead of 32 per weight is what bounds its speed.
//!
//! Q4_0, Q4_1 and Q8_0 rows are repacked eight at a time when the matrix is built
//! ([`crate::repack`]: the same bytes, interleaved block by block), so memory stays the file's
//! size; every other reader sees ggml's blocks of a row through `row_blocks`.
//!
//! Two ways to multiply:
//! - [`QuantMatrix::matmul_q8`] (decoding): the activation rows are quantised once to integer
//!   blocks ([`crate::kernels::Q8Rows`]) and every weight row is dotted with them in integers
//!   ([`crate::repack`], [`crate::kernels`]), threaded over output rows; each output depends
//!   only on its own activation row, so a batch of sequences gets exactly the numbers each
//!   would get alone.
//! - [`QuantMatrix::matmul`] (prompts; f32 exact): many rows dequantise the matrix into a
//!   scratch buffer and run one gemm; few rows use a fused dequantise-and-dot in f32.
use rayon::prelude::*;

use crate::gguf::GgmlType;
use crate::kernels::{KernelPath, Q8Rows};
use gauge_tensor::gemm::{gemm, gemm_raw, Operand, Product, Threads};

/// Rows at least this many use dequantise + gemm instead of the fused kernel.
const GEMM_ROWS: usize = 16;

/// Output rows per dequantised tile of a prompt's matmul (a multiple of the packing group):
/// 64 × 576 f32 is 147 KB, 64 × 1536 is 393 KB — within a core's L2.
const DEQUANT_TILE: usize = 64;

/// A `[out, in]` weight matrix in ggml blocks (blocks run along `in`; rows repacked in groups
/// of eight where the type allows).
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    ty: GgmlType,
    d_in: usize,
    d_out: usize,
    /// The first `packed_rows` rows repacked eight at a time ([`crate::repack`]; Q4_0, Q4_1,
    /// Q8_0), the rest as the GGUF's row-major blocks.
    bytes: Vec<u8>,
    packed_rows: usize,
}

impl QuantMatrix {
    /// Whether gauge keeps this type quantised (the others are dequantised at load).
    pub fn supports(ty: GgmlType) -> bool {
        crate::kernels::supports(ty)
    }

    /// A matrix from its raw blocks.
    pub fn new(ty: GgmlType, bytes: Vec<u8>, d_out: usize, d_in: usize) -> QuantMatrix {
        assert!(Self::supports(ty) && d_in.is_multiple_of(ty.block().0));
        assert_eq!(bytes.len(), d_out * d_in / ty.block().0 * ty.block().1, "quantised matrix size");
        let packed_rows = if crate::repack::packs(ty) { d_out / crate::repack::GROUP * crate::repack::GROUP } else { 0 };
        let mut bytes = bytes;
        if packed_rows > 0 {
            let rb = d_in / ty.block().0 * ty.block().1;
            crate::repack::pack_in_place(ty, &mut bytes[..packed_rows * rb], packed_rows);
        }
        QuantMatrix { ty, d_in, d_out, bytes, packed_rows }
    }

    /// Row `o`'s ggml blocks (unpacked into `buf` when the row is in a packed group).
    fn row_blocks<'a>(&'a self, o: usize, buf: &'a mut Vec<u8>) -> &'a [u8] {
        let rb = self.row_bytes();
        if o >= self.packed_rows {
            return &self.bytes[o * rb..(o + 1) * rb];
        }
        let g = o / crate::repack::GROUP * crate::repack::GROUP;
        crate::repack::unpack_row(self.ty, &self.bytes[g * rb..(g + crate::repack::GROUP) * rb], o - g, buf);
        &buf[..]
    }

    /// Every row's ggml blocks, row-major (the GGUF's bytes).
    fn plain_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len());
        let mut buf = Vec::new();
        for o in 0..self.d_out {
            out.extend_from_slice(self.row_blocks(o, &mut buf));
        }
        out
    }

    /// Input features.
    pub fn d_in(&self) -> usize {
        self.d_in
    }

    /// Output features.
    pub fn d_out(&self) -> usize {
        self.d_out
    }

    /// Bytes held.
    pub fn n_bytes(&self) -> usize {
        self.bytes.len()
    }

    fn row_bytes(&self) -> usize {
        self.d_in / self.ty.block().0 * self.ty.block().1
    }

    /// The block type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Another matrix of the same type and width stacked below this one (rows of `other`
    /// after rows of `self`): fused q/k/v or gate/up projections. `None` when the types or
    /// widths differ.
    pub fn stacked(&self, other: &QuantMatrix) -> Option<QuantMatrix> {
        (self.ty == other.ty && self.d_in == other.d_in).then(|| {
            if self.packed_rows == self.d_out {
                // Whole groups: `other`'s groups (and plain tail) follow as they are.
                let mut bytes = Vec::with_capacity(self.bytes.len() + other.bytes.len());
                bytes.extend_from_slice(&self.bytes);
                bytes.extend_from_slice(&other.bytes);
                return QuantMatrix { ty: self.ty, d_in: self.d_in, d_out: self.d_out + other.d_out, bytes, packed_rows: self.d_out + other.packed_rows };
            }
            let mut bytes = self.plain_bytes();
            bytes.extend_from_slice(&other.plain_bytes());
            QuantMatrix::new(self.ty, bytes, self.d_out + other.d_out, self.d_in)
        })
    }

    /// Stacks `other` below this matrix in place ([`Self::stacked`] without a copy of `self`
    /// when its rows are whole groups: the allocation grows, which for a large one moves no
    /// bytes). `false` (and no change) when the types or widths differ.
    pub fn append(&mut self, other: &QuantMatrix) -> bool {
        if self.ty != other.ty || self.d_in != other.d_in {
            return false;
        }
        if self.packed_rows == self.d_out {
            self.bytes.extend_from_slice(&other.bytes);
            self.packed_rows = self.d_out + other.packed_rows;
            self.d_out += other.d_out;
        } else {
            *self = self.stacked(other).expect("checked above");
        }
        true
    }

    /// `x · Wᵀ` for the quantised activation rows `x` (`rows × d_in`), into `out`
    /// (`rows × d_out`, row-major), with the integer kernels of `path`, threaded over output
    /// rows on the current rayon pool (one parallel region).
    pub fn matmul_q8(&self, x: &Q8Rows, rows: usize, out: &mut [f32], path: KernelPath) {
        assert!(x.cols == self.d_in && out.len() == rows * self.d_out && x.q.len() >= rows * self.d_in);
        let rb = self.row_bytes();
        let d_out = self.d_out;
        let threads = crate::pool::threads();
        // A few chunks per thread (uneven cores), each a multiple of 8 rows.
        let chunk = (d_out.div_ceil(threads * 4)).div_ceil(8) * 8;
        let n_chunks = d_out.div_ceil(chunk);
        let out_ptr = SendPtr(out.as_mut_ptr());
        let xs: Vec<crate::kernels::Row<'_>> = (0..rows).map(|r| x.row(r)).collect();
        let (packed, nb) = (self.packed_rows, self.d_in / self.ty.block().0);
        let work = |c: usize| {
            let (o0, o1) = (c * chunk, ((c + 1) * chunk).min(d_out));
            let mut owned = Vec::new();
            let vals: &mut [f32] = if rows == 1 {
                // One row: the chunk's outputs are contiguous in `out`; write them in place.
                // SAFETY: out[o0..o1] belongs to this chunk alone; `out` holds d_out values.
                unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(o0), o1 - o0) }
            } else {
                owned.resize((o1 - o0) * rows, 0f32);
                &mut owned
            };
            // Whole groups of the packed rows (chunks start at multiples of 8), then the rest.
            let p1 = o1.min(packed).max(o0);
            if p1 > o0 {
                crate::repack::dot_packed(path, self.ty, &self.bytes[o0 * rb..p1 * rb], nb, &xs, &mut vals[..(p1 - o0) * rows]);
            }
            if o1 > p1 {
                crate::kernels::dot_matrix(path, self.ty, &self.bytes[p1 * rb..o1 * rb], rb, &xs, &mut vals[(p1 - o0) * rows..]);
            }
            if rows == 1 {
                return;
            }
            for (i, v) in vals.chunks_exact(rows).enumerate() {
                for (r, &v) in v.iter().enumerate() {
                    // SAFETY: (r, o0 + i) is written by this chunk only; `out` holds rows × d_out.
                    unsafe { *out_ptr.get().add(r * d_out + o0 + i) = v };
                }
            }
        };
        if n_chunks == 1 || rows * self.bytes.len() < 32 * 1024 {
            (0..n_chunks).for_each(work);
        } else {
            crate::pool::parallel_for(n_chunks, work);
        }
    }

    /// A prompt's `x · Wᵀ` (`rows × d_in` f32 rows) into `out` (`rows × d_out`): the
    /// K-quants on the int8 prompt GEMM of [`crate::prompt_k`] where `path` runs it, every
    /// other type (and a portable build) in f32 ([`Self::matmul`]). Threaded over chunks of
    /// output rows; each chunk walks the prompt in tiles whose quantised rows stay in L2 while
    /// every group-block of the chunk passes over them.
    pub fn matmul_prompt(&self, x: &[f32], rows: usize, path: KernelPath, out: &mut [f32]) {
        assert!(x.len() == rows * self.d_in && out.len() == rows * self.d_out);
        if !crate::prompt_k::runs(self.ty, path) || self.packed_rows == 0 {
            out.copy_from_slice(&self.matmul(x, rows));
            return;
        }
        thread_local! {
            /// The quantised prompt, kept per calling thread between calls.
            static ROWS: std::cell::RefCell<crate::prompt_k::PromptRows> = std::cell::RefCell::new(Default::default());
        }
        ROWS.with_borrow_mut(|q| {
            q.quantize(x, self.d_in);
            let xs: Vec<crate::prompt_k::PromptRow<'_>> = (0..rows).map(|r| q.row(r)).collect();
            let (rb, d_out, packed) = (self.row_bytes(), self.d_out, self.packed_rows);
            let nsb = self.d_in / 256;
            // Prompt rows per tile: ~256 KB of quantised values.
            let tile = (256 * 1024 / self.d_in).clamp(4, 128) / 4 * 4;
            let threads = crate::pool::threads();
            let chunk = (d_out.div_ceil(threads * 4)).div_ceil(8) * 8;
            let out_ptr = SendPtr(out.as_mut_ptr());
            let work = |c: usize| {
                let (o0, o1) = (c * chunk, ((c + 1) * chunk).min(d_out));
                let p1 = o1.min(packed).max(o0);
                if p1 > o0 {
                    for (t, xt) in xs.chunks(tile).enumerate() {
                        // SAFETY: rows t·tile.. of columns o0..p1 of `out` (rows × d_out) are
                        // written by this chunk only.
                        unsafe { crate::prompt_k::gemm(path, self.ty, &self.bytes[o0 * rb..p1 * rb], nsb, xt, out_ptr.get().add(t * tile * d_out + o0), d_out) };
                    }
                }
                // Rows past the last whole group: dequantised, f32 dots.
                let mut wf = vec![0f32; if o1 > p1 { self.d_in } else { 0 }];
                for o in p1..o1 {
                    self.dequantize_row(o, &mut wf);
                    for r in 0..rows {
                        // SAFETY: (r, o) is written by this chunk only.
                        unsafe { *out_ptr.get().add(r * d_out + o) = crate::kernels::dot_f32(&wf, &x[r * self.d_in..(r + 1) * self.d_in]) };
                    }
                }
            };
            crate::pool::parallel_for(d_out.div_ceil(chunk), work);
        });
    }

    /// One row, dequantised into `out`.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let mut buf = Vec::new();
        let v = crate::gguf::dequantize(self.ty, self.row_blocks(row, &mut buf), self.d_in);
        out.copy_from_slice(&v);
    }

    /// `x · Wᵀ` for `rows` rows of `x` (row-major `[rows, in]`), into `[rows, out]`.
    pub fn matmul(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.d_in);
        if rows >= GEMM_ROWS {
            return self.matmul_dequantized(x, rows);
        }
        let nb = self.d_in / 32;
        // Per block: the sum of x (Q4_1's minimum, Q4_0's offset multiply it).
        let sums: Vec<f32> = x.chunks_exact(32).map(|c| c.iter().sum()).collect();
        let (bs, ty) = (self.ty.block().1, self.ty);
        let mut out = vec![0f32; rows * self.d_out];
        // Output rows in parallel chunks; each writes its column of `out` for every input row.
        let chunk = 64;
        let cols: Vec<Vec<f32>> = (0..self.d_out.div_ceil(chunk))
            .into_par_iter()
            .map(|c| {
                let (o0, o1) = (c * chunk, ((c + 1) * chunk).min(self.d_out));
                let mut acc = vec![0f32; (o1 - o0) * rows];
                let mut buf = Vec::new();
                for o in o0..o1 {
                    let w = self.row_blocks(o, &mut buf);
                    if matches!(ty, GgmlType::Q4K | GgmlType::Q6K | GgmlType::Q5_0 | GgmlType::Q5_1) {
                        let wf = crate::gguf::dequantize(ty, w, self.d_in);
                        for r in 0..rows {
                            acc[(o - o0) * rows + r] = crate::kernels::dot_f32(&wf, &x[r * self.d_in..(r + 1) * self.d_in]);
                        }
                        continue;
                    }
                    for r in 0..rows {
                        let xr = &x[r * self.d_in..(r + 1) * self.d_in];
                        let sr = &sums[r * nb..(r + 1) * nb];
                        acc[(o - o0) * rows + r] = dot(ty, w, bs, xr, sr);
                    }
                }
                acc
            })
            .collect();
        for (c, acc) in cols.into_iter().enumerate() {
            let o0 = c * chunk;
            for (i, v) in acc.chunks_exact(rows).enumerate() {
                for (r, &val) in v.iter().enumerate() {
                    out[r * self.d_out + o0 + i] = val;
                }
            }
        }
        out
    }

    /// A prompt's product: the weights dequantised [`DEQUANT_TILE`] output rows at a time into
    /// a per-thread buffer that stays in cache while gemm reads it, each tile its own gemm
    /// (tiles in parallel). Dequantising whole matrices to f32 first wrote and re-read ~0.4 GB
    /// per prompt through memory, plus a zeroed allocation and a copy per row: half of a
    /// 37-token prefill (perf).
    fn matmul_dequantized(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let (d_in, d_out) = (self.d_in, self.d_out);
        let rb = self.row_bytes();
        let mut out = vec![0f32; rows * d_out];
        let ptr = SendPtr(out.as_mut_ptr());
        let nb = d_in / self.ty.block().0;
        thread_local! {
            /// A tile's dequantised weights, kept per thread between calls.
            static TILE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        (0..d_out.div_ceil(DEQUANT_TILE)).into_par_iter().for_each(|t| TILE.with_borrow_mut(|w| {
            let (o0, o1) = (t * DEQUANT_TILE, ((t + 1) * DEQUANT_TILE).min(d_out));
            w.resize((o1 - o0) * d_in, 0.0);
            // Whole packed groups (tiles start at multiples of 8), then any plain rows.
            let mut o = o0;
            while o < o1 {
                if o + crate::repack::GROUP <= self.packed_rows.min(o1) {
                    let g = &self.bytes[o * rb..(o + crate::repack::GROUP) * rb];
                    crate::repack::dequantize_group(self.ty, g, nb, &mut w[(o - o0) * d_in..(o - o0 + crate::repack::GROUP) * d_in]);
                    o += crate::repack::GROUP;
                } else {
                    self.dequantize_row(o, &mut w[(o - o0) * d_in..(o - o0 + 1) * d_in]);
                    o += 1;
                }
            }
            // lhs rows × d_in; rhs the tile viewed as [d_in, o1 - o0] (column stride d_in).
            let p = Product::new(rows, o1 - o0, d_in, Operand::rows(x, d_in), Operand::transposed(w, d_in)).on(Threads::Caller);
            // SAFETY: dst is columns o0..o1 of `out` (rows × d_out, row stride d_out), which
            // only this tile writes.
            unsafe { gemm_raw(p, ptr.get().add(o0), d_out, false) }
        }));
        out
    }
}

/// `out[rows, d_out] = x[rows, d_in] · w[d_out, d_in]ᵀ` by gemm (threaded on the rayon pool).
pub(crate) fn gemm_f32(x: &[f32], rows: usize, w: &[f32], d_in: usize, d_out: usize, out: &mut [f32]) {
    // rhs: W viewed as [d_in, d_out] (column stride d_in, row stride 1).
    gemm(Product::new(rows, d_out, d_in, Operand::rows(x, d_in), Operand::transposed(w, d_in)).on(Threads::All), out, d_out, false);
}

pub(crate) use gauge_tensor::gemm::SendPtr;

/// One row of blocks against one input row. Fixed-size views let the compiler vectorise the
/// 16/32-lane inner loops.
#[inline]
fn dot(ty: GgmlType, w: &[u8], bs: usize, x: &[f32], sums: &[f32]) -> f32 {
    let mut acc = 0f32;
    for ((block, xs), &sum) in w.chunks_exact(bs).zip(x.chunks_exact(32)).zip(sums) {
        let xs: &[f32; 32] = xs.try_into().expect("32 lanes");
        let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        acc += match ty {
            GgmlType::Q8_0 => {
                let q: &[u8; 32] = block[2..34].try_into().expect("32 bytes");
                let mut s = [0f32; 32];
                for j in 0..32 {
                    s[j] = (q[j] as i8) as f32 * xs[j];
                }
                d * s.iter().sum::<f32>()
            }
            GgmlType::Q4_1 | GgmlType::Q4_0 => {
                let (m, q): (f32, &[u8; 16]) = if ty == GgmlType::Q4_1 {
                    (half::f16::from_le_bytes([block[2], block[3]]).to_f32(), block[4..20].try_into().expect("16 bytes"))
                } else {
                    (-8.0 * d, block[2..18].try_into().expect("16 bytes"))
                };
                let mut s = [0f32; 16];
                for j in 0..16 {
                    s[j] = (q[j] & 0x0f) as f32 * xs[j] + (q[j] >> 4) as f32 * xs[j + 16];
                }
                d * s.iter().sum::<f32>() + m * sum
            }
            _ => unreachable!("checked in new"),
        };
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random Q4_1 / Q8_0 / Q4_0 blocks.
    fn blocks(ty: GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let bs = ty.block().1;
        let mut out = Vec::with_capacity(n_blocks * bs);
        for _ in 0..n_blocks {
            let d = half::f16::from_f32(0.01 + (next() % 100) as f32 / 5000.0).to_le_bytes();
            out.extend_from_slice(&d);
            if ty == GgmlType::Q4_1 {
                out.extend_from_slice(&half::f16::from_f32(-0.05).to_le_bytes());
            }
            while out.len() % bs != 0 {
                out.push(next() as u8);
            }
        }
        out
    }

    #[test]
    fn fused_kernel_and_gemm_path_equal_dequantised_matmul() {
        let (d_in, d_out) = (96, 70);
        for ty in [GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_0] {
            let m = QuantMatrix::new(ty, blocks(ty, d_out * d_in / 32, 7), d_out, d_in);
            for rows in [1, 3, 20] {
                let x: Vec<f32> = (0..rows * d_in).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
                let got = m.matmul(&x, rows);
                let mut w = vec![0f32; d_in];
                for o in 0..d_out {
                    m.dequantize_row(o, &mut w);
                    for r in 0..rows {
                        let want: f32 = (0..d_in).map(|k| w[k] * x[r * d_in + k]).sum();
                        assert!((got[r * d_out + o] - want).abs() <= 1e-4 * (1.0 + want.abs()), "{ty:?} rows {rows}: {} vs {want}", got[r * d_out + o]);
                    }
                }
            }
        }
    }

    #[test]
    fn stacked_matrices_keep_every_row() {
        // Whole groups above (rows a multiple of 8: concatenated as they are) and a ragged one
        // (unpacked and packed again), on a repacked and a K-quant type.
        for ty in [GgmlType::Q4_1, GgmlType::Q4K, GgmlType::Q6K] {
            let d_in = 512;
            for (top, below) in [(16, 12), (13, 8)] {
                let per_row = d_in / ty.block().0;
                let a = QuantMatrix::new(ty, crate::kernels::tests::random_blocks(ty, top * per_row, 5), top, d_in);
                let b = QuantMatrix::new(ty, crate::kernels::tests::random_blocks(ty, below * per_row, 6), below, d_in);
                let s = a.stacked(&b).expect("same type and width");
                let mut appended = a.clone();
                assert!(appended.append(&b));
                assert_eq!((appended.bytes.clone(), appended.packed_rows, appended.d_out), (s.bytes.clone(), s.packed_rows, s.d_out), "{ty:?}: append = stacked");
                assert_eq!((s.d_out(), s.n_bytes()), (top + below, a.n_bytes() + b.n_bytes()));
                let (mut want, mut got) = (vec![0f32; d_in], vec![0f32; d_in]);
                for o in 0..top + below {
                    if o < top { a.dequantize_row(o, &mut want) } else { b.dequantize_row(o - top, &mut want) }
                    s.dequantize_row(o, &mut got);
                    assert_eq!(got, want, "{ty:?} {top}+{below}: row {o}");
                }
            }
        }
    }

    #[test]
    fn integer_kernels_on_every_path_match_the_scalar_reference_and_are_batch_invariant() {
        let (d_in, d_out) = (512, 150);
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4K, GgmlType::Q6K] {
            let n_blocks = d_out * d_in / ty.block().0;
            let m = QuantMatrix::new(ty, crate::kernels::tests::random_blocks(ty, n_blocks, 11), d_out, d_in);
            let rows = 3;
            let x: Vec<f32> = (0..rows * d_in).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
            let mut q8 = Q8Rows::default();
            q8.quantize(&x, d_in);
            let mut reference = vec![0f32; rows * d_out];
            m.matmul_q8(&q8, rows, &mut reference, KernelPath::Scalar);
            // Against f32 on the dequantised weights (the activations' ~16-bit rounding aside).
            let exact = m.matmul(&x, rows);
            let scale = exact.iter().fold(0f32, |a, v| a.max(v.abs()));
            let worst = exact.iter().zip(&reference).fold(0f32, |a, (e, r)| a.max((e - r).abs()));
            assert!(worst <= 2e-4 * scale, "{ty:?}: two-level activations off by {worst} (scale {scale})");
            for path in KernelPath::available() {
                let mut got = vec![0f32; rows * d_out];
                m.matmul_q8(&q8, rows, &mut got, path);
                for (g, r) in got.iter().zip(&reference) {
                    assert!((g - r).abs() <= 1e-4 * (1.0 + r.abs()), "{ty:?} {}: {g} vs scalar {r}", path.name());
                }
                // A row alone gets exactly the numbers it gets in the batch.
                for r in 0..rows {
                    let mut one = Q8Rows::default();
                    one.quantize(&x[r * d_in..(r + 1) * d_in], d_in);
                    let mut alone = vec![0f32; d_out];
                    m.matmul_q8(&one, 1, &mut alone, path);
                    assert_eq!(alone[..], got[r * d_out..(r + 1) * d_out], "{ty:?} {}: row {r} alone vs batched", path.name());
                }
            }
        }
    }
}
