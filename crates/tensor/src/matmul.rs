//! f32 matrix products whose every output has one summation order on every CPU.
//!
//! `c[i][j] = init[j] + Σₚ a[i][p]·b[p][j]`, accumulated for p = 0, 1, …, k − 1 in that order,
//! each step one fused multiply-add (one rounding). The SIMD body vectorises over output
//! columns only — each lane is one output's own chain — so AVX-512F, AVX2+FMA and the portable
//! body (`f32::mul_add`) produce the same bits, whatever the tile shape, the thread count or the
//! caches. The AVX-512 body doubles the f32 peak of a core with two 512-bit FMA units (Intel
//! server cores); on one that runs AVX-512 on 256-bit pipes (AMD Zen 4) it matches AVX2. A BLAS-style gemm (the `gemm` crate, OpenBLAS) picks micro-kernels and its k-blocking
//! from the CPU at run time, which changes the order of the partial sums: embeddings then
//! differ in their last bits between an AVX2 and an AVX-512 machine, and so do index
//! fingerprints and printed scores. This is what makes `eval/fra` rebuild byte for byte on
//! another CPU.

/// What an output starts from before the products are added.
#[derive(Debug, Clone, Copy)]
pub enum Init<'a> {
    /// Zero.
    Zero,
    /// `bias[j]` for column j (`n` values).
    Bias(&'a [f32]),
}

impl Init<'_> {
    #[inline(always)]
    fn at(&self, j: usize) -> f32 {
        match self {
            Init::Zero => 0.0,
            Init::Bias(b) => b[j],
        }
    }
}

/// The body a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulPath {
    /// Portable: `f32::mul_add` per output (software FMA where the CPU has none).
    Scalar,
    /// AVX2 + FMA, 6 rows × 16 columns per tile.
    Avx2,
    /// AVX-512F, 8 rows × 32 columns per tile (the columns past the last 16 on the AVX2 body).
    Avx512,
}

impl MatmulPath {
    /// The body [`matmul`] runs: the fastest this CPU has, unless `GAUGE_MATMUL` names another
    /// it has (`scalar`, `avx2`, `avx512`) — the results are the same bits either way, so this only
    /// checks that claim or measures the bodies.
    pub fn chosen() -> MatmulPath {
        static CHOSEN: std::sync::OnceLock<MatmulPath> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(crate::cpu_path::from_env::<MatmulPath>)
    }

    /// The fastest body this CPU runs.
    pub fn fastest() -> MatmulPath {
        crate::cpu_path::fastest()
    }

    /// Every body this CPU runs (the scalar one first).
    pub fn available() -> Vec<MatmulPath> {
        crate::cpu_path::available()
    }

    /// Whether this CPU runs it.
    pub fn supported(self) -> bool {
        match self {
            MatmulPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            MatmulPath::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            MatmulPath::Avx512 => MatmulPath::Avx2.supported() && is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The name `GAUGE_MATMUL` takes.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPath::Scalar => "scalar",
            MatmulPath::Avx2 => "avx2",
            MatmulPath::Avx512 => "avx512",
        }
    }
}

impl crate::cpu_path::CpuPath for MatmulPath {
    const ALL: &'static [MatmulPath] = &[MatmulPath::Scalar, MatmulPath::Avx2, MatmulPath::Avx512];
    const ENV: &'static str = "GAUGE_MATMUL";
    fn name(self) -> &'static str {
        MatmulPath::name(self)
    }
    fn supported(self) -> bool {
        MatmulPath::supported(self)
    }
}

/// A row-major matrix view: `rows × cols` values, row `r` starting at `r · stride`.
#[derive(Debug, Clone, Copy)]
pub struct Mat<'a> {
    /// The values.
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Distance between the starts of two rows.
    pub stride: usize,
}

impl<'a> Mat<'a> {
    /// A view, checked to lie inside `data`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize, stride: usize) -> Mat<'a> {
        assert!(cols <= stride || rows <= 1, "a row of {cols} columns does not fit a stride of {stride}");
        assert!(rows == 0 || (rows - 1) * stride + cols <= data.len(), "a {rows}×{cols} view (stride {stride}) needs more than {} values", data.len());
        Mat { data, rows, cols, stride }
    }
}

/// A right-hand side laid out for the kernels: panels of [`PANEL`] columns, each panel's k rows
/// of [`PANEL`] values contiguous (the last panel zero-padded). A weight is packed once at load,
/// so the inner loop reads it front to back instead of one cache line (and page) per row.
#[derive(Debug, Clone)]
pub struct PackedB {
    k: usize,
    n: usize,
    panels: Vec<f32>,
}

/// Columns per packed panel (two AVX2 vectors).
pub const PANEL: usize = 16;

impl PackedB {
    /// `b` (k × n) packed.
    pub fn new(b: Mat<'_>) -> PackedB {
        let (k, n) = (b.rows, b.cols);
        let mut panels = vec![0.0f32; n.div_ceil(PANEL) * k * PANEL];
        if panels.is_empty() {
            return PackedB { k, n, panels };
        }
        for (t, panel) in panels.chunks_exact_mut(k * PANEL).enumerate() {
            let j0 = t * PANEL;
            let w = PANEL.min(n - j0);
            for p in 0..k {
                panel[p * PANEL..p * PANEL + w].copy_from_slice(&b.data[p * b.stride + j0..p * b.stride + j0 + w]);
            }
        }
        PackedB { k, n, panels }
    }

    /// Rows (the inner dimension).
    pub fn rows(&self) -> usize {
        self.k
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.n
    }
}

/// The right-hand side as the bodies read it: a strided view, or columns `j0..j0 + cols` of a
/// packed matrix.
#[derive(Debug, Clone, Copy)]
enum Rhs<'a> {
    Plain(Mat<'a>),
    Packed { b: &'a PackedB, j0: usize, cols: usize },
}

impl<'a> Rhs<'a> {
    fn rows(&self) -> usize {
        match self {
            Rhs::Plain(b) => b.rows,
            Rhs::Packed { b, .. } => b.k,
        }
    }

    fn cols(&self) -> usize {
        match self {
            Rhs::Plain(b) => b.cols,
            Rhs::Packed { cols, .. } => *cols,
        }
    }

    /// `b[p][j]`.
    #[inline(always)]
    fn at(&self, p: usize, j: usize) -> f32 {
        match self {
            Rhs::Plain(b) => b.data[p * b.stride + j],
            Rhs::Packed { b, j0, .. } => {
                let j = j0 + j;
                b.panels[(j / PANEL) * b.k * PANEL + p * PANEL + j % PANEL]
            }
        }
    }

    /// Where `b[0][j]` lies and the distance from `b[p][j]` to `b[p + 1][j]`; the next seven
    /// columns follow it (`j` a multiple of 8, `j + 8 ≤ cols`), the next fifteen when `j` is a
    /// multiple of 16 and `j + 16 ≤ cols` (a packed panel is 16 columns, and a packed view's
    /// first column is a multiple of 16: [`product`] splits columns by multiples of 16).
    #[inline(always)]
    fn column(&self, j: usize) -> (*const f32, usize) {
        match self {
            Rhs::Plain(b) => (b.data[j..].as_ptr(), b.stride),
            Rhs::Packed { b, j0, .. } => {
                let j = j0 + j;
                (b.panels[(j / PANEL) * b.k * PANEL + j % PANEL..].as_ptr(), PANEL)
            }
        }
    }

    /// Columns `j0..j0 + cols` of this one.
    fn columns(self, j0: usize, cols: usize) -> Rhs<'a> {
        match self {
            Rhs::Plain(b) => Rhs::Plain(Mat { data: &b.data[j0..], rows: b.rows, cols, stride: b.stride }),
            Rhs::Packed { b, j0: base, .. } => Rhs::Packed { b, j0: base + j0, cols },
        }
    }
}

/// Products with at least this many multiply-adds run on rayon's pool.
const PARALLEL_THRESHOLD: usize = 1 << 21;
/// Rows per parallel task (a multiple of the AVX2 tile's 6) when there are enough rows; fewer
/// rows (a query, a short passage) are split by columns instead.
const ROWS_PER_TASK: usize = 48;

/// `c = init + a · b` on [`MatmulPath::chosen`] (`c` is `a.rows × b.cols` with row stride `ldc`).
pub fn matmul(a: Mat<'_>, b: Mat<'_>, init: Init<'_>, c: &mut [f32], ldc: usize) {
    matmul_on(MatmulPath::chosen(), a, b, init, c, ldc)
}

/// [`matmul`] on a chosen body (tests run each one this CPU has).
pub fn matmul_on(path: MatmulPath, a: Mat<'_>, b: Mat<'_>, init: Init<'_>, c: &mut [f32], ldc: usize) {
    product(path, a, Rhs::Plain(b), init, c, ldc)
}

/// [`matmul`] with a packed right-hand side: the same bits as with `b` unpacked.
pub fn matmul_packed(a: Mat<'_>, b: &PackedB, init: Init<'_>, c: &mut [f32], ldc: usize) {
    matmul_packed_on(MatmulPath::chosen(), a, b, init, c, ldc)
}

/// [`matmul_packed`] on a chosen body.
pub fn matmul_packed_on(path: MatmulPath, a: Mat<'_>, b: &PackedB, init: Init<'_>, c: &mut [f32], ldc: usize) {
    product(path, a, Rhs::Packed { b, j0: 0, cols: b.n }, init, c, ldc)
}

fn product(path: MatmulPath, a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, c: &mut [f32], ldc: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols());
    assert_eq!(b.rows(), k, "a is {m}×{k} but b has {} rows", b.rows());
    if let Init::Bias(bias) = init {
        assert_eq!(bias.len(), n, "bias has {} values for {n} columns", bias.len());
    }
    assert!(n <= ldc || m <= 1, "c's stride {ldc} is below its {n} columns");
    assert!(m == 0 || (m - 1) * ldc + n <= c.len(), "c holds {} values, below {m}×{n} (stride {ldc})", c.len());
    if m == 0 || n == 0 {
        return;
    }
    let out = Out { ptr: c.as_mut_ptr(), ldc };
    let threads = rayon::current_num_threads();
    if m * n * k < PARALLEL_THRESHOLD || threads == 1 {
        // SAFETY: `out` covers m × n (checked above); nothing else writes it.
        return unsafe { block(path, a, b, init, out) };
    }
    use rayon::prelude::*;
    if m >= 2 * ROWS_PER_TASK {
        (0..m.div_ceil(ROWS_PER_TASK)).into_par_iter().for_each(|t| {
            let r0 = t * ROWS_PER_TASK;
            let rows = ROWS_PER_TASK.min(m - r0);
            let a_rows = Mat { data: &a.data[r0 * a.stride..], rows, cols: k, stride: a.stride };
            // SAFETY: task t writes rows r0..r0 + rows of c only, disjoint from every other
            // task's; the bounds were checked above.
            unsafe { block(path, a_rows, b, init, out.offset(r0 * ldc)) };
        });
    } else {
        let width = n.div_ceil(2 * threads).div_ceil(16) * 16;
        (0..n.div_ceil(width)).into_par_iter().for_each(|t| {
            let j0 = t * width;
            let cols = width.min(n - j0);
            let b_cols = b.columns(j0, cols);
            let init = match init {
                Init::Zero => Init::Zero,
                Init::Bias(bias) => Init::Bias(&bias[j0..j0 + cols]),
            };
            // SAFETY: task t writes columns j0..j0 + cols of every row only, disjoint from
            // every other task's; the bounds were checked above.
            unsafe { block(path, a, b_cols, init, out.offset(j0)) };
        });
    }
}

/// Where outputs go: `c[i][j]` at `ptr + i·ldc + j`. Parallel tasks get disjoint parts of one
/// output through copies of it.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    ldc: usize,
}
// SAFETY: tasks holding copies write disjoint elements (see `matmul_on`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}
impl Out {
    /// The same output moved by `by` elements.
    ///
    /// # Safety
    /// `by` must stay inside the output.
    unsafe fn offset(self, by: usize) -> Out {
        Out { ptr: self.ptr.add(by), ldc: self.ldc }
    }

    /// Writes `c[i][j]`.
    ///
    /// # Safety
    /// `(i, j)` must be inside the output and written by this task only.
    #[inline(always)]
    unsafe fn put(self, i: usize, j: usize, value: f32) {
        *self.ptr.add(i * self.ldc + j) = value;
    }
}

/// # Safety
/// `out` must hold `a.rows × b.cols` outputs that nothing else writes meanwhile.
unsafe fn block(path: MatmulPath, a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out) {
    match path {
        MatmulPath::Scalar => block_scalar(a, b, init, out, 0),
        #[cfg(target_arch = "x86_64")]
        MatmulPath::Avx2 => {
            assert!(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"), "the AVX2 matmul body needs AVX2 and FMA");
            // SAFETY: AVX2 and FMA are present (checked above); the views were bounds-checked.
            avx2::block(a, b, init, out)
        }
        #[cfg(target_arch = "x86_64")]
        MatmulPath::Avx512 => {
            assert!(MatmulPath::Avx512.supported(), "the AVX-512 matmul body needs AVX-512F, AVX2 and FMA");
            // SAFETY: AVX-512F, AVX2 and FMA are present (checked above); the views were
            // bounds-checked.
            avx512::block(a, b, init, out)
        }
        #[cfg(not(target_arch = "x86_64"))]
        MatmulPath::Avx2 | MatmulPath::Avx512 => unreachable!("no SIMD body off x86-64"),
    }
}

/// The reference: columns `j0..` of every row, one `mul_add` chain per output. Inlined into
/// the AVX2 body for its last columns, where `mul_add` is one instruction instead of a call.
///
/// # Safety
/// As [`block`].
#[inline(always)]
unsafe fn block_scalar(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out, j0: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols());
    for i in 0..m {
        let a_row = &a.data[i * a.stride..i * a.stride + k];
        for j in j0..n {
            let mut acc = init.at(j);
            for (p, &x) in a_row.iter().enumerate() {
                acc = x.mul_add(b.at(p, j), acc);
            }
            out.put(i, j, acc);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{block_scalar, Init, Mat, Out, Rhs};
    use std::arch::x86_64::*;

    /// Rows per tile.
    const MR: usize = 6;

    /// Steps of k per pass over a tile: a 16-column panel of `b` (KC × 64 bytes) and six rows
    /// of `a` stay in L1. Between passes the accumulators go to `c` and come back unchanged
    /// (a store and a load are exact), so each output's chain is unbroken.
    const KC: usize = 256;

    /// k in passes of [`KC`]; within a pass columns in tiles of 16, then 8, then the rest on
    /// the scalar body (the same chain per output, run after the last pass); rows in tiles of
    /// six, then one tile of the rest.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out) {
        let (m, k, n) = (a.rows, a.cols, b.cols());
        let full8 = n / 8 * 8;
        let mut p0 = 0;
        loop {
            let p1 = (p0 + KC).min(k);
            let mut j = 0;
            while j + 16 <= full8 {
                rows::<2>(a, b, init, out, j, p0, p1, m);
                j += 16;
            }
            if j < full8 {
                rows::<1>(a, b, init, out, j, p0, p1, m);
            }
            p0 = p1;
            if p0 >= k {
                break;
            }
        }
        if full8 < n {
            block_scalar(a, b, init, out, full8);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows<const V: usize>(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out, j: usize, p0: usize, p1: usize, m: usize) {
        let mut i = 0;
        while i + MR <= m {
            tile::<MR, V>(a, b, init, out, i, j, p0, p1);
            i += MR;
        }
        match m - i {
            0 => {}
            1 => tile::<1, V>(a, b, init, out, i, j, p0, p1),
            2 => tile::<2, V>(a, b, init, out, i, j, p0, p1),
            3 => tile::<3, V>(a, b, init, out, i, j, p0, p1),
            4 => tile::<4, V>(a, b, init, out, i, j, p0, p1),
            _ => tile::<5, V>(a, b, init, out, i, j, p0, p1),
        }
    }

    /// Rows `i..i + R`, columns `j..j + 8·V`, steps `p0..p1` of k: R·V accumulators started
    /// from `init` (first pass) or from `c` (later passes), FMA in order, stored back to `c`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize, const V: usize>(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out, i: usize, j: usize, p0: usize, p1: usize) {
        let (c_ptr, ldc) = (out.ptr.add(i * out.ldc + j), out.ldc);
        let mut acc = [[_mm256_setzero_ps(); V]; R];
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = if p0 > 0 {
                    _mm256_loadu_ps(c_ptr.add(r * ldc + 8 * v))
                } else {
                    match init {
                        Init::Zero => _mm256_setzero_ps(),
                        Init::Bias(bias) => _mm256_loadu_ps(bias.as_ptr().add(j + 8 * v)),
                    }
                };
            }
        }
        let a_ptr = a.data.as_ptr().add(i * a.stride);
        let (b_ptr, b_step) = b.column(j);
        for p in p0..p1 {
            let b_row = b_ptr.add(p * b_step);
            let mut bv = [_mm256_setzero_ps(); V];
            for (v, slot) in bv.iter_mut().enumerate() {
                *slot = _mm256_loadu_ps(b_row.add(8 * v));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a_ptr.add(r * a.stride + p));
                for v in 0..V {
                    row[v] = _mm256_fmadd_ps(x, bv[v], row[v]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, value) in row.iter().enumerate() {
                _mm256_storeu_ps(c_ptr.add(r * ldc + 8 * v), *value);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Init, Mat, Out, Rhs};
    use std::arch::x86_64::*;

    /// Rows per tile: 8 rows × 2 vectors are 16 of the 32 registers.
    const MR: usize = 8;

    /// Steps of k per pass, as the AVX2 body's (a 32-column slice of `b` over KC steps is
    /// 32 KiB).
    const KC: usize = 256;

    /// k in passes of [`KC`]; within a pass columns in tiles of 32, then 16; rows in tiles of
    /// eight, then one tile of the rest. The columns past the last multiple of 16 run on the
    /// AVX2 body (its 8-wide tiles, then the scalar chain): every output keeps its one chain,
    /// whichever body computes it.
    ///
    /// # Safety
    /// AVX-512F, AVX2 and FMA present; as [`super::block`] otherwise.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn block(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out) {
        let (m, k, n) = (a.rows, a.cols, b.cols());
        let full16 = n / 16 * 16;
        let mut p0 = 0;
        loop {
            let p1 = (p0 + KC).min(k);
            let mut j = 0;
            while j + 32 <= full16 {
                rows::<2>(a, b, init, out, j, p0, p1, m);
                j += 32;
            }
            if j < full16 {
                rows::<1>(a, b, init, out, j, p0, p1, m);
            }
            p0 = p1;
            if p0 >= k {
                break;
            }
        }
        if full16 < n {
            let init = match init {
                Init::Zero => Init::Zero,
                Init::Bias(bias) => Init::Bias(&bias[full16..]),
            };
            super::avx2::block(a, b.columns(full16, n - full16), init, out.offset(full16));
        }
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows<const V: usize>(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out, j: usize, p0: usize, p1: usize, m: usize) {
        let mut i = 0;
        while i + MR <= m {
            tile::<MR, V>(a, b, init, out, i, j, p0, p1);
            i += MR;
        }
        match m - i {
            0 => {}
            1 => tile::<1, V>(a, b, init, out, i, j, p0, p1),
            2 => tile::<2, V>(a, b, init, out, i, j, p0, p1),
            3 => tile::<3, V>(a, b, init, out, i, j, p0, p1),
            4 => tile::<4, V>(a, b, init, out, i, j, p0, p1),
            5 => tile::<5, V>(a, b, init, out, i, j, p0, p1),
            6 => tile::<6, V>(a, b, init, out, i, j, p0, p1),
            _ => tile::<7, V>(a, b, init, out, i, j, p0, p1),
        }
    }

    /// Rows `i..i + R`, columns `j..j + 16·V`, steps `p0..p1` of k: R·V accumulators started
    /// from `init` (first pass) or from `c` (later passes), FMA in order, stored back to `c`.
    /// Each 16-column vector of `b` is read through [`Rhs::column`] on its own (two vectors
    /// are two packed panels).
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize, const V: usize>(a: Mat<'_>, b: Rhs<'_>, init: Init<'_>, out: Out, i: usize, j: usize, p0: usize, p1: usize) {
        let (c_ptr, ldc) = (out.ptr.add(i * out.ldc + j), out.ldc);
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = if p0 > 0 {
                    _mm512_loadu_ps(c_ptr.add(r * ldc + 16 * v))
                } else {
                    match init {
                        Init::Zero => _mm512_setzero_ps(),
                        Init::Bias(bias) => _mm512_loadu_ps(bias.as_ptr().add(j + 16 * v)),
                    }
                };
            }
        }
        let a_ptr = a.data.as_ptr().add(i * a.stride);
        let mut columns = [(std::ptr::null::<f32>(), 0usize); V];
        for (v, slot) in columns.iter_mut().enumerate() {
            *slot = b.column(j + 16 * v);
        }
        for p in p0..p1 {
            let mut bv = [_mm512_setzero_ps(); V];
            for (v, slot) in bv.iter_mut().enumerate() {
                let (ptr, step) = columns[v];
                *slot = _mm512_loadu_ps(ptr.add(p * step));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a_ptr.add(r * a.stride + p));
                for v in 0..V {
                    row[v] = _mm512_fmadd_ps(x, bv[v], row[v]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, value) in row.iter().enumerate() {
                _mm512_storeu_ps(c_ptr.add(r * ldc + 16 * v), *value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0) * 0.731).collect()
    }

    #[test]
    fn every_body_gives_the_same_bits_and_the_exact_sum() {
        // Shapes with tails in both directions, strided views, bias and zero starts, k over
        // several passes, and two products large enough to run in parallel: one split by rows,
        // one (few rows) by columns.
        for &(m, k, n, parallel) in &[(1, 1, 1, false), (7, 5, 3, false), (13, 33, 27, false), (6, 64, 16, false), (20, 17, 40, false), (9, 270, 24, false), (10, 8, 17, false), (11, 40, 33, false), (150, 384, 70, true), (20, 384, 300, true), (100, 300, 96, true)] {
            let lda = k + 3;
            let ldb = n + 5;
            let ldc = n + 2;
            let a = values(m * lda, 1);
            let b = values(k * ldb, 2);
            let bias = values(n, 3);
            assert_eq!(m * n * k >= PARALLEL_THRESHOLD, parallel, "shape {m}×{k}×{n}");
            for init in [Init::Zero, Init::Bias(&bias)] {
                let mut outs = Vec::new();
                let packed = PackedB::new(Mat::new(&b, k, n, ldb));
                for path in MatmulPath::available() {
                    let mut c = vec![f32::NAN; (m - 1) * ldc + n];
                    matmul_on(path, Mat::new(&a, m, k, lda), Mat::new(&b, k, n, ldb), init, &mut c, ldc);
                    outs.push((format!("{path:?}"), c));
                    let mut c = vec![f32::NAN; (m - 1) * ldc + n];
                    matmul_packed_on(path, Mat::new(&a, m, k, lda), &packed, init, &mut c, ldc);
                    outs.push((format!("{path:?} packed"), c));
                }
                for i in 0..m {
                    for j in 0..n {
                        let want = init.at(j) as f64 + (0..k).map(|p| a[i * lda + p] as f64 * b[p * ldb + j] as f64).sum::<f64>();
                        let got = outs[0].1[i * ldc + j];
                        assert!((got as f64 - want).abs() < 1e-4 * (1.0 + want.abs()), "{m}×{k}×{n} [{i},{j}]: {got} vs {want}");
                        for (path, c) in &outs[1..] {
                            assert_eq!(c[i * ldc + j].to_bits(), got.to_bits(), "{path} differs from the scalar body at {m}×{k}×{n} [{i},{j}]");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_order_is_the_documented_chain() {
        // 1 + 2⁻²⁴ + 2⁻²⁴ summed left to right rounds each step back to 1; any pairwise or
        // blocked order that adds the two small terms first gives 1 + 2⁻²³.
        let tiny = f32::EPSILON / 2.0;
        let k = 40;
        let mut a = vec![tiny; k];
        a[0] = 1.0;
        let b = vec![1.0f32; k * 16];
        for path in MatmulPath::available() {
            let mut c = vec![0.0f32; 16];
            matmul_on(path, Mat::new(&a, 1, k, k), Mat::new(&b, k, 16, 16), Init::Zero, &mut c, 16);
            assert!(c.iter().all(|&v| v == 1.0), "{path:?}: {c:?}");
        }
    }

    #[test]
    fn empty_products_write_their_start() {
        let bias = [0.5f32, -1.0, 2.0];
        for path in MatmulPath::available() {
            // k = 0: every output is its start value, packed or not.
            let mut c = vec![f32::NAN; 6];
            matmul_on(path, Mat::new(&[], 2, 0, 0), Mat::new(&[], 0, 3, 3), Init::Bias(&bias), &mut c, 3);
            assert_eq!(c, [0.5, -1.0, 2.0, 0.5, -1.0, 2.0]);
            let packed = PackedB::new(Mat::new(&[], 0, 3, 3));
            let mut c = vec![f32::NAN; 6];
            matmul_packed_on(path, Mat::new(&[], 2, 0, 0), &packed, Init::Bias(&bias), &mut c, 3);
            assert_eq!(c, [0.5, -1.0, 2.0, 0.5, -1.0, 2.0]);
            // n = 0: nothing to write.
            let packed = PackedB::new(Mat::new(&[1.0, 2.0], 2, 0, 1));
            matmul_packed_on(path, Mat::new(&[1.0, 2.0], 1, 2, 2), &packed, Init::Zero, &mut [], 0);
        }
    }

    #[test]
    #[should_panic(expected = "b has 4 rows")]
    fn mismatched_shapes_are_refused() {
        let a = vec![0.0f32; 15];
        let b = vec![0.0f32; 8];
        let mut c = vec![0.0f32; 6];
        matmul(Mat::new(&a, 3, 5, 5), Mat::new(&b, 4, 2, 2), Init::Zero, &mut c, 2);
    }
}
