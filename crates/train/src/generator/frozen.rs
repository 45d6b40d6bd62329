//! The frozen base weights, kept in 4 bits while training: GGUF blocks as the file holds them
//! (Q4_0, Q4_1, Q4_K, Q6_K, Q8_0), or NF4 (QLoRA's 4-bit NormalFloat: 16 code values, blocks of
//! 64 weights, one absmax scale per block) made from f32/f16/bf16 safetensors. A matrix is
//! dequantised to f32 only for the layer being computed, then dropped.
use gauge_decoder::gguf::{self, GgmlType};
use gauge_decoder::Checkpoint;
use serde::{Deserialize, Serialize};

use crate::TrainError;

/// QLoRA's NF4 code values (Dettmers et al. 2023, bitsandbytes `NF4` table).
pub const NF4_CODE: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

/// Weights per NF4 block.
pub const NF4_BLOCK: usize = 64;

/// How the frozen base is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BaseStorage {
    /// GGUF matrices in their quantised blocks; safetensors (f32/f16/bf16) matrices as NF4.
    #[default]
    Auto,
    /// NF4 for every matrix (a GGUF file's blocks are dequantised, then re-quantised).
    Nf4,
    /// f32 (exact; 8x the memory of 4 bits: for checks against references).
    F32,
}

/// One frozen `[out, in]` matrix.
#[derive(Debug, Clone)]
pub enum FrozenMatrix {
    /// Row-major f32.
    F32(Vec<f32>),
    /// GGUF blocks (rows are whole blocks).
    Ggml {
        /// Block type.
        ty: GgmlType,
        /// The blocks, row after row.
        bytes: Vec<u8>,
    },
    /// NF4: two codes per byte (low nibble first), one f32 absmax per 64 weights.
    Nf4 {
        /// Packed codes.
        codes: Vec<u8>,
        /// Block scales.
        scales: Vec<f32>,
    },
}

/// A frozen matrix with its shape.
#[derive(Debug, Clone)]
pub struct Frozen {
    /// The values.
    pub matrix: FrozenMatrix,
    /// Output features (rows).
    pub d_out: usize,
    /// Input features (columns).
    pub d_in: usize,
}

/// The nearest NF4 code of `x` in [-1, 1].
fn nf4_index(x: f32) -> u8 {
    // Midpoints between neighbouring codes.
    let mut best = 0;
    let mut dist = f32::INFINITY;
    for (i, &c) in NF4_CODE.iter().enumerate() {
        let d = (x - c).abs();
        if d < dist {
            dist = d;
            best = i;
        }
    }
    best as u8
}

/// Quantises row-major f32 values to NF4 (length a multiple of 64... or padded with zeros).
pub fn nf4_quantize(values: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let n_blocks = values.len().div_ceil(NF4_BLOCK);
    let mut codes = vec![0u8; n_blocks * NF4_BLOCK / 2];
    let mut scales = Vec::with_capacity(n_blocks);
    for (b, block) in values.chunks(NF4_BLOCK).enumerate() {
        let absmax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        scales.push(absmax);
        let inv = if absmax > 0.0 { 1.0 / absmax } else { 0.0 };
        for (i, &v) in block.iter().enumerate() {
            let q = nf4_index(v * inv);
            let k = b * NF4_BLOCK + i;
            codes[k / 2] |= if k.is_multiple_of(2) { q } else { q << 4 };
        }
    }
    (codes, scales)
}

/// Dequantises NF4 values `start..start+out.len()` into `out`.
fn nf4_dequantize(codes: &[u8], scales: &[f32], start: usize, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        let k = start + i;
        let byte = codes[k / 2];
        let q = if k.is_multiple_of(2) { byte & 0x0f } else { byte >> 4 };
        *o = NF4_CODE[q as usize] * scales[k / NF4_BLOCK];
    }
}

impl Frozen {
    /// Loads `name` (`[d_out, d_in]`) from a checkpoint, stored as `storage` asks.
    pub fn load(ck: &Checkpoint, name: &str, d_out: usize, d_in: usize, storage: BaseStorage) -> Result<Frozen, TrainError> {
        if storage == BaseStorage::Auto {
            if let Some((ty, bytes)) = ck.raw_blocks(name, d_out, d_in) {
                return Ok(Frozen { matrix: FrozenMatrix::Ggml { ty, bytes }, d_out, d_in });
            }
        }
        let values = ck.get(name, &[d_out, d_in])?;
        Ok(Self::from_f32(values, d_out, d_in, storage))
    }

    /// A matrix from f32 values, NF4-quantised unless `storage` is f32.
    pub fn from_f32(values: Vec<f32>, d_out: usize, d_in: usize, storage: BaseStorage) -> Frozen {
        let matrix = match storage {
            BaseStorage::F32 => FrozenMatrix::F32(values),
            BaseStorage::Auto | BaseStorage::Nf4 => {
                let (codes, scales) = nf4_quantize(&values);
                FrozenMatrix::Nf4 { codes, scales }
            }
        };
        Frozen { matrix, d_out, d_in }
    }

    /// Bytes held.
    pub fn n_bytes(&self) -> usize {
        match &self.matrix {
            FrozenMatrix::F32(v) => v.len() * 4,
            FrozenMatrix::Ggml { bytes, .. } => bytes.len(),
            FrozenMatrix::Nf4 { codes, scales } => codes.len() + scales.len() * 4,
        }
    }

    /// A short name of the storage (`f32`, `Q4_1`, `nf4`).
    pub fn kind(&self) -> String {
        match &self.matrix {
            FrozenMatrix::F32(_) => "f32".into(),
            FrozenMatrix::Ggml { ty, .. } => format!("{ty:?}"),
            FrozenMatrix::Nf4 { .. } => "nf4".into(),
        }
    }

    /// Row `row`, dequantised into `out` (`d_in` values).
    pub fn row(&self, row: usize, out: &mut [f32]) {
        match &self.matrix {
            FrozenMatrix::F32(v) => out.copy_from_slice(&v[row * self.d_in..(row + 1) * self.d_in]),
            FrozenMatrix::Ggml { ty, bytes } => {
                let rb = bytes.len() / self.d_out;
                out.copy_from_slice(&gguf::dequantize(*ty, &bytes[row * rb..(row + 1) * rb], self.d_in));
            }
            FrozenMatrix::Nf4 { codes, scales } => nf4_dequantize(codes, scales, row * self.d_in, out),
        }
    }

    /// Rows `r0..r1` as f32 `[r1 − r0, in]`, row-major: borrowed when the matrix is held in
    /// f32, else dequantised (threaded over rows). What the host kernels read.
    pub fn rows_f32(&self, r0: usize, r1: usize) -> std::borrow::Cow<'_, [f32]> {
        use rayon::prelude::*;
        if let FrozenMatrix::F32(v) = &self.matrix {
            return std::borrow::Cow::Borrowed(&v[r0 * self.d_in..r1 * self.d_in]);
        }
        let mut w = vec![0f32; (r1 - r0) * self.d_in];
        w.par_chunks_mut(self.d_in).enumerate().for_each(|(r, out)| self.row(r0 + r, out));
        std::borrow::Cow::Owned(w)
    }

    /// The whole matrix as f32, transposed to `[in, out]` (the right-hand side of `x Wᵀ`).
    pub fn dequantize_transposed(&self) -> Vec<f32> {
        self.dequantize_rows_transposed(0, self.d_out)
    }

    /// Rows `r0..r1` as f32, transposed to `[in, r1 − r0]`.
    pub fn dequantize_rows_transposed(&self, r0: usize, r1: usize) -> Vec<f32> {
        use rayon::prelude::*;
        let (rows, cols) = (r1 - r0, self.d_in);
        let mut w = vec![0f32; rows * cols];
        w.par_chunks_mut(cols).enumerate().for_each(|(r, out)| self.row(r0 + r, out));
        let mut t = vec![0f32; rows * cols];
        const B: usize = 32;
        // Blocked transpose, threaded over column blocks (disjoint rows of the output).
        t.par_chunks_mut(B * rows).enumerate().for_each(|(cb, out)| {
            let c0 = cb * B;
            let c1 = (c0 + B).min(cols);
            for r0 in (0..rows).step_by(B) {
                for r in r0..(r0 + B).min(rows) {
                    for c in c0..c1 {
                        out[(c - c0) * rows + r] = w[r * cols + c];
                    }
                }
            }
        });
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nf4_round_trip_is_within_half_a_code_step_of_each_block_scale() {
        let mut rng = gauge_core::rng::SplitMix64::new(3);
        let values: Vec<f32> = (0..256).map(|_| (rng.next_u64() as f64 / u64::MAX as f64 * 2.0 - 1.0) as f32 * 0.05).collect();
        let f = Frozen::from_f32(values.clone(), 2, 128, BaseStorage::Nf4);
        assert_eq!(f.n_bytes(), 128 + 4 * 4);
        let back = f.dequantize_transposed();
        let widest_gap = NF4_CODE.windows(2).map(|w| w[1] - w[0]).fold(0f32, f32::max);
        for (i, v) in values.iter().enumerate() {
            let (r, c) = (i / 128, i % 128);
            let scale = values[(i / 64) * 64..(i / 64) * 64 + 64].iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!((back[c * 2 + r] - v).abs() <= widest_gap / 2.0 * scale + 1e-7, "{i}");
        }
        // The block maximum itself is exact (code ±1).
        let max_i = (0..64).max_by(|&a, &b| values[a].abs().total_cmp(&values[b].abs())).unwrap();
        assert_eq!(back[max_i * 2], values[max_i]);
    }

    #[test]
    fn f32_storage_is_exact() {
        let f = Frozen::from_f32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3, BaseStorage::F32);
        assert_eq!(f.dequantize_transposed(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(f.dequantize_rows_transposed(1, 2), vec![4.0, 5.0, 6.0]);
    }
}
