//! GGUF files (llama.cpp's format): header, metadata, tensor table, and dequantisation of the
//! tensor types Llama-family files use (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K), exactly as
//! ggml computes them (in f32).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::DecoderError;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any unsigned integer type.
    U64(u64),
    /// Any signed integer type.
    I64(i64),
    /// f32 or f64.
    F64(f64),
    /// bool.
    Bool(bool),
    /// string.
    Str(String),
    /// array.
    Array(Vec<Value>),
}

impl Value {
    /// As an unsigned integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) if *v >= 0 => Some(*v as u64),
            _ => None,
        }
    }

    /// As a float.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            _ => None,
        }
    }

    /// As a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// As an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml tensor types gauge reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    Bf16,
    /// 32 weights: f16 scale, 32 × i8.
    Q8_0,
    /// 32 weights: f16 scale, 16 bytes of nibbles, offset 8.
    Q4_0,
    /// 32 weights: f16 scale, f16 minimum, 16 bytes of nibbles.
    Q4_1,
    /// 32 weights: f16 scale, 32 high bits, 16 bytes of nibbles, offset 16 (K-quant files'
    /// fallback for rows whose length is no multiple of 256; the integer kernels' generic body).
    Q5_0,
    /// 32 weights: f16 scale, f16 minimum, 32 high bits, 16 bytes of nibbles.
    Q5_1,
    /// 256 weights in 8 sub-blocks with 6-bit scales and minimums.
    Q4K,
    /// 256 weights, 6 bits each, 16 sub-blocks with i8 scales.
    Q6K,
}

impl GgmlType {
    fn from_id(id: u32) -> Option<GgmlType> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            14 => GgmlType::Q6K,
            30 => GgmlType::Bf16,
            _ => return None,
        })
    }

    /// (weights per block, bytes per block).
    pub fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::Bf16 => (1, 2),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q6K => (256, 210),
        }
    }
}

/// One tensor of the table.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Dimensions fastest-first (`ne`): a matrix `[in, out]` here is row-major `[out, in]`.
    pub dims: Vec<usize>,
    /// Type.
    pub ty: GgmlType,
    /// Offset from the start of the data section.
    pub offset: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of data.
    pub fn n_bytes(&self) -> usize {
        let (per, bytes) = self.ty.block();
        self.len() / per * bytes
    }
}

/// A GGUF file read into memory.
pub struct Gguf {
    /// Where it was read from.
    pub path: PathBuf,
    /// Format version.
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, Value>,
    /// Tensors by name.
    pub tensors: BTreeMap<String, TensorInfo>,
    bytes: Vec<u8>,
    data_start: usize,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecoderError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| DecoderError::file(self.path, format!("truncated GGUF (needed {n} bytes at offset {})", self.pos)))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, DecoderError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, DecoderError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn string(&mut self) -> Result<String, DecoderError> {
        let n = self.u64()? as usize;
        let path = self.path;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| DecoderError::file(path, "a GGUF string is not UTF-8".into()))
    }
    fn value(&mut self, ty: u32) -> Result<Value, DecoderError> {
        self.value_at(ty, 0)
    }
    fn value_at(&mut self, ty: u32, depth: usize) -> Result<Value, DecoderError> {
        Ok(match ty {
            0 => Value::U64(self.take(1)?[0] as u64),
            1 => Value::I64(self.take(1)?[0] as i8 as i64),
            2 => Value::U64(u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as u64),
            3 => Value::I64(i16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i64),
            4 => Value::U64(self.u32()? as u64),
            5 => Value::I64(self.u32()? as i32 as i64),
            6 => Value::F64(f32::from_le_bytes(self.take(4)?.try_into().expect("4")) as f64),
            7 => Value::Bool(self.take(1)?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                // Arrays of arrays exist; deeper nesting is a corrupt file (and would exhaust the stack).
                if depth >= 4 {
                    return Err(DecoderError::file(self.path, "GGUF metadata arrays nested more than 4 deep (corrupt file?)".into()));
                }
                let item = self.u32()?;
                let n = self.u64()? as usize;
                let mut items = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    items.push(self.value_at(item, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            other => return Err(DecoderError::file(self.path, format!("unknown GGUF metadata type {other}"))),
        })
    }
}

impl Gguf {
    /// Reads a GGUF file (v2 or v3).
    pub fn open(path: &Path) -> Result<Gguf, DecoderError> {
        let bytes = std::fs::read(path).map_err(|e| DecoderError::file(path, format!("cannot read ({e})")))?;
        Gguf::from_bytes(path, bytes)
    }

    /// Reads a GGUF file already in memory (`path` names it in errors).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Gguf, DecoderError> {
        let mut c = Cursor { bytes: &bytes, pos: 0, path };
        if c.take(4)? != b"GGUF" {
            return Err(DecoderError::file(path, "not a GGUF file (no GGUF magic)".into()));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(DecoderError::file(path, format!("GGUF version {version} (gauge reads 2 and 3)")));
        }
        let n_tensors = c.u64()? as usize;
        let n_kv = c.u64()? as usize;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let ty = c.u32()?;
            metadata.insert(key, c.value(ty)?);
        }
        let mut tensors = BTreeMap::new();
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()? as usize;
            // ggml tensors have at most 4 dimensions (GGML_MAX_DIMS).
            if n_dims > 4 {
                return Err(DecoderError::file(path, format!("tensor `{name}` has {n_dims} dimensions; GGUF tensors have at most 4 (corrupt file?)")));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(c.u64()? as usize);
            }
            if dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).is_none_or(|n| n > bytes.len().saturating_mul(8)) {
                return Err(DecoderError::file(path, format!("tensor `{name}` has dimensions {dims:?}, more elements than the file could hold (corrupt file?)")));
            }
            let ty_id = c.u32()?;
            let ty = GgmlType::from_id(ty_id).ok_or_else(|| DecoderError::file(path, format!("tensor `{name}` has ggml type {ty_id}, which gauge does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K)")))?;
            let offset = c.u64()? as usize;
            tensors.insert(name, TensorInfo { dims, ty, offset });
        }
        let alignment = metadata.get("general.alignment").and_then(Value::as_u64).unwrap_or(32) as usize;
        let data_start = c.pos.div_ceil(alignment) * alignment;
        for (name, t) in &tensors {
            if data_start.checked_add(t.offset).and_then(|o| o.checked_add(t.n_bytes())).is_none_or(|end| end > bytes.len()) {
                return Err(DecoderError::file(path, format!("tensor `{name}` runs past the end of the file (truncated download?)")));
            }
        }
        Ok(Gguf { path: path.to_path_buf(), version, metadata, tensors, bytes, data_start })
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The raw bytes of a tensor.
    pub fn raw(&self, name: &str) -> Option<(&TensorInfo, &[u8])> {
        let t = self.tensors.get(name)?;
        let start = self.data_start + t.offset;
        Some((t, &self.bytes[start..start + t.n_bytes()]))
    }

    /// A tensor dequantised to f32 (row-major, dims reversed: `[out, in]` for a matrix).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, DecoderError> {
        let (t, raw) = self.raw(name).ok_or_else(|| DecoderError::file(&self.path, format!("no tensor `{name}`")))?;
        Ok(dequantize(t.ty, raw, t.len()))
    }
}

fn f16(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Dequantises `n` weights of type `ty` from `raw`, as ggml does.
pub fn dequantize(ty: GgmlType, raw: &[u8], n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n);
    match ty {
        GgmlType::F32 => out.extend(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        GgmlType::F16 => out.extend(raw.chunks_exact(2).map(f16)),
        GgmlType::Bf16 => out.extend(raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())),
        GgmlType::Q8_0 => {
            for b in raw.chunks_exact(34) {
                let d = f16(&b[0..2]);
                out.extend(b[2..34].iter().map(|&q| d * (q as i8) as f32));
            }
        }
        GgmlType::Q4_0 => {
            for b in raw.chunks_exact(18) {
                let d = f16(&b[0..2]);
                let qs = &b[2..18];
                out.extend(qs.iter().map(|&q| d * ((q & 0x0f) as i32 - 8) as f32));
                out.extend(qs.iter().map(|&q| d * ((q >> 4) as i32 - 8) as f32));
            }
        }
        GgmlType::Q4_1 => {
            for b in raw.chunks_exact(20) {
                let (d, m) = (f16(&b[0..2]), f16(&b[2..4]));
                let qs = &b[4..20];
                out.extend(qs.iter().map(|&q| d * (q & 0x0f) as f32 + m));
                out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            // ggml's dequantize_row_q5_0/q5_1: the low nibble of byte j and bit j of qh make
            // weight j; the high nibble and bit j + 16 make weight j + 16.
            let (bs, at) = if ty == GgmlType::Q5_0 { (22, 2) } else { (24, 4) };
            for b in raw.chunks_exact(bs) {
                let d = f16(&b[0..2]);
                let m = if ty == GgmlType::Q5_0 { -16.0 * d } else { f16(&b[2..4]) };
                let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                let qs = &b[at + 4..at + 20];
                out.extend(qs.iter().enumerate().map(|(j, &q)| d * ((q & 0x0f) as u32 | (((qh >> j) << 4) & 0x10)) as f32 + m));
                out.extend(qs.iter().enumerate().map(|(j, &q)| d * ((q >> 4) as u32 | ((qh >> (j + 12)) & 0x10)) as f32 + m));
            }
        }
        GgmlType::Q4K => {
            for b in raw.chunks_exact(144) {
                let (d, dmin) = (f16(&b[0..2]), f16(&b[2..4]));
                let scales = &b[4..16];
                let mut q = &b[16..144];
                let mut is = 0;
                for _ in 0..4 {
                    let (sc1, m1) = scale_min_k4(is, scales);
                    let (sc2, m2) = scale_min_k4(is + 1, scales);
                    let (d1, min1, d2, min2) = (d * sc1 as f32, dmin * m1 as f32, d * sc2 as f32, dmin * m2 as f32);
                    out.extend(q[..32].iter().map(|&x| d1 * (x & 0x0f) as f32 - min1));
                    out.extend(q[..32].iter().map(|&x| d2 * (x >> 4) as f32 - min2));
                    q = &q[32..];
                    is += 2;
                }
            }
        }
        GgmlType::Q6K => {
            for b in raw.chunks_exact(210) {
                let (ql_all, qh_all, sc_all) = (&b[0..128], &b[128..192], &b[192..208]);
                let d = f16(&b[208..210]);
                let mut y = [0f32; 256];
                for half_block in 0..2 {
                    let ql = &ql_all[half_block * 64..];
                    let qh = &qh_all[half_block * 32..];
                    let sc = &sc_all[half_block * 8..];
                    let base = half_block * 128;
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        y[base + l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        y[base + l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        y[base + l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        y[base + l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
                out.extend_from_slice(&y);
            }
        }
    }
    out.truncate(n);
    out
}

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K block (ggml's `get_scale_min_k4`).
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A GGUF v3 file: metadata `kv` (key, type id, value bytes) and tensor infos (name, dims,
    /// ggml type id, offset), then `data`.
    pub(crate) fn gguf_file(kv: &[(&str, u32, Vec<u8>)], tensors: &[(&str, Vec<u64>, u32, u64)], data: &[u8]) -> Vec<u8> {
        let s = |x: &str| [(x.len() as u64).to_le_bytes().to_vec(), x.as_bytes().to_vec()].concat();
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend((kv.len() as u64).to_le_bytes());
        for (k, ty, v) in kv {
            b.extend(s(k));
            b.extend(ty.to_le_bytes());
            b.extend(v);
        }
        for (name, dims, ty, offset) in tensors {
            b.extend(s(name));
            b.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
            b.extend(ty.to_le_bytes());
            b.extend(offset.to_le_bytes());
        }
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        b.extend(data);
        b
    }

    pub(crate) fn open_bytes(bytes: &[u8]) -> Result<Gguf, DecoderError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, bytes).unwrap();
        Gguf::open(&path)
    }

    #[test]
    fn corrupt_tensor_infos_are_one_line_errors_not_panics() {
        let ok = gguf_file(&[], &[("w", vec![4, 2], 0, 0)], &[0u8; 32]);
        assert_eq!(open_bytes(&ok).unwrap().tensors["w"].len(), 8);
        // 5 dimensions (and a count that would reserve terabytes).
        for n_dims in [5u32, u32::MAX] {
            let mut bad = gguf_file(&[], &[("w", vec![4, 2], 0, 0)], &[0u8; 32]);
            let at = 4 + 4 + 8 + 8 + 8 + 1;
            bad[at..at + 4].copy_from_slice(&n_dims.to_le_bytes());
            let e = open_bytes(&bad).err().expect("refused").to_string();
            assert!(e.contains("dimensions"), "{e}");
        }
        // Dimensions whose product overflows, or is far beyond the file.
        for dims in [vec![u64::MAX, 4], vec![1 << 40, 1 << 30]] {
            let e = open_bytes(&gguf_file(&[], &[("w", dims, 0, 0)], &[0u8; 32])).err().expect("refused").to_string();
            assert!(e.contains("more elements than the file"), "{e}");
        }
        // An offset near usize::MAX does not wrap around.
        let e = open_bytes(&gguf_file(&[], &[("w", vec![4, 2], 0, u64::MAX - 8)], &[0u8; 32])).err().expect("refused").to_string();
        assert!(e.contains("runs past the end"), "{e}");
        // Arrays nested without end.
        let mut nested = Vec::new();
        for _ in 0..64 {
            nested.extend(9u32.to_le_bytes());
            nested.extend(1u64.to_le_bytes());
        }
        nested.extend(4u32.to_le_bytes());
        nested.extend(0u64.to_le_bytes());
        let e = open_bytes(&gguf_file(&[("x", 9, nested)], &[], &[])).err().expect("refused").to_string();
        assert!(e.contains("nested"), "{e}");
    }

    fn f16_bytes(x: f32) -> [u8; 2] {
        half::f16::from_f32(x).to_le_bytes()
    }

    #[test]
    fn q4_1_and_q8_0_blocks_by_hand() {
        // Q4_1: d = 0.5, m = -1, nibbles: low = j % 16, high = 15 - j % 16.
        let mut b = Vec::new();
        b.extend_from_slice(&f16_bytes(0.5));
        b.extend_from_slice(&f16_bytes(-1.0));
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = dequantize(GgmlType::Q4_1, &b, 32);
        assert_eq!(y[3], 0.5 * 3.0 - 1.0);
        assert_eq!(y[16 + 3], 0.5 * 12.0 - 1.0);
        // Q8_0: d = 0.25, q = -16..16.
        let mut b = Vec::new();
        b.extend_from_slice(&f16_bytes(0.25));
        b.extend((0..32).map(|j| (j as i8 - 16) as u8));
        let y = dequantize(GgmlType::Q8_0, &b, 32);
        assert_eq!((y[0], y[31]), (-4.0, 3.75));
        // Q4_0: offset 8.
        let mut b = Vec::new();
        b.extend_from_slice(&f16_bytes(2.0));
        b.extend(std::iter::repeat_n(0x8f_u8, 16));
        let y = dequantize(GgmlType::Q4_0, &b, 32);
        assert_eq!((y[0], y[16]), (14.0, 0.0));
        // Q5_0: d = 0.5, nibbles j / 15 - j, high bits set for weights 1 and 17 only.
        let mut b = Vec::new();
        b.extend_from_slice(&f16_bytes(0.5));
        b.extend_from_slice(&((1u32 << 1) | (1u32 << 17)).to_le_bytes());
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = dequantize(GgmlType::Q5_0, &b, 32);
        assert_eq!((y[0], y[1], y[2]), (0.5 * (0.0 - 16.0), 0.5 * (17.0 - 16.0), 0.5 * (2.0 - 16.0)));
        assert_eq!((y[16], y[17], y[18]), (0.5 * (15.0 - 16.0), 0.5 * (30.0 - 16.0), 0.5 * (13.0 - 16.0)));
        // Q5_1: the same bits with a minimum instead of the offset.
        let mut b = Vec::new();
        b.extend_from_slice(&f16_bytes(0.5));
        b.extend_from_slice(&f16_bytes(-1.0));
        b.extend_from_slice(&((1u32 << 1) | (1u32 << 17)).to_le_bytes());
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = dequantize(GgmlType::Q5_1, &b, 32);
        assert_eq!((y[1], y[17], y[31]), (0.5 * 17.0 - 1.0, 0.5 * 30.0 - 1.0, 0.5 * 0.0 - 1.0));
    }

    #[test]
    fn k_quants_by_hand() {
        // Q4_K with d = 1, dmin = 0.5, every scale 2 and minimum 1 (6-bit packing), nibbles 3/7.
        let mut b = Vec::new();
        b.extend_from_slice(&f16_bytes(1.0));
        b.extend_from_slice(&f16_bytes(0.5));
        let mut scales = [0u8; 12];
        scales[..4].fill(2);
        scales[4..8].fill(1);
        scales[8..].fill(2 | (1 << 4));
        b.extend_from_slice(&scales);
        b.extend(std::iter::repeat_n(3u8 | (7 << 4), 128));
        let y = dequantize(GgmlType::Q4K, &b, 256);
        assert!(y[..32].iter().all(|&v| v == 2.0 * 3.0 - 0.5), "{:?}", &y[..4]);
        assert!(y[32..64].iter().all(|&v| v == 2.0 * 7.0 - 0.5));
        assert!(y[224..].iter().all(|&v| v == 2.0 * 7.0 - 0.5), "{:?}", &y[224..228]);
        // Q6_K with every 6-bit value 33 (→ +1), scales 3, d = 0.5.
        let mut b = vec![0u8; 210];
        for x in &mut b[0..128] {
            *x = 1 | (1 << 4);
        }
        for x in &mut b[128..192] {
            *x = 0b10_10_10_10;
        }
        for x in &mut b[192..208] {
            *x = 3;
        }
        b[208..210].copy_from_slice(&f16_bytes(0.5));
        let y = dequantize(GgmlType::Q6K, &b, 256);
        assert!(y.iter().all(|&v| v == 0.5 * 3.0 * 1.0), "{:?}", &y[..4]);
    }
}
