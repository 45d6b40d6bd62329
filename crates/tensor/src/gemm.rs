//! Strided f32 matrix products through the `gemm` crate: the one layer the decoder's host
//! forward and the trainers' hand-written kernels share (the encoders' deterministic product is
//! [`crate::matmul`]). A [`Product`] names `beta · lhs[m, k] · rhs[k, n]` with each operand's
//! strides; [`gemm`] writes or accumulates it into a row-major destination, [`gemm_new`] into a
//! fresh buffer it never zero-fills. Each output element is summed in one fixed order whatever
//! the thread count.

/// Below this many multiply-adds a [`Threads::Auto`] product runs on the calling thread.
pub const PARALLEL_MIN: usize = 1 << 18;

/// A matrix operand: values, row stride and column stride (element `(i, j)` at
/// `i · rs + j · cs`).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// The values.
    pub v: &'a [f32],
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<'a> Operand<'a> {
    /// Row-major `[rows, cols]`.
    #[inline]
    pub fn rows(v: &'a [f32], cols: usize) -> Self {
        Operand { v, rs: cols, cs: 1 }
    }
    /// The transpose of row-major `[rows, cols]` (read as `[cols, rows]`).
    #[inline]
    pub fn transposed(v: &'a [f32], cols: usize) -> Self {
        Operand { v, rs: 1, cs: cols }
    }
    /// Columns `c0..` of a row-major matrix with `cols` columns.
    #[inline]
    pub fn cols_from(v: &'a [f32], cols: usize, c0: usize) -> Self {
        Operand { v: &v[c0..], rs: cols, cs: 1 }
    }
    /// The transpose of columns `c0..` of a row-major matrix with `cols` columns.
    #[inline]
    pub fn cols_from_transposed(v: &'a [f32], cols: usize, c0: usize) -> Self {
        Operand { v: &v[c0..], rs: 1, cs: cols }
    }
    fn check(&self, rows: usize, cols: usize, what: &str) {
        if rows > 0 && cols > 0 {
            let last = (rows - 1) * self.rs + (cols - 1) * self.cs;
            assert!(last < self.v.len(), "gemm {what}: element ({}, {}) at {last} outside {} values", rows - 1, cols - 1, self.v.len());
        }
    }
}

/// Which threads a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// All of rayon's when it has [`PARALLEL_MIN`] multiply-adds or more, else the caller's.
    Auto,
    /// The caller's only (inside a task that is already one of many).
    Caller,
    /// All of rayon's, whatever the size.
    All,
}

/// `beta · lhs[m, k] · rhs[k, n]`.
#[derive(Clone, Copy, Debug)]
pub struct Product<'a> {
    /// Rows of the result.
    pub m: usize,
    /// Columns of the result.
    pub n: usize,
    /// The shared dimension.
    pub k: usize,
    /// `[m, k]`.
    pub lhs: Operand<'a>,
    /// `[k, n]`.
    pub rhs: Operand<'a>,
    /// The scale of the product.
    pub beta: f32,
    /// Which threads it runs on.
    pub threads: Threads,
}

impl<'a> Product<'a> {
    /// `lhs[m, k] · rhs[k, n]`, threaded when large.
    #[inline]
    pub fn new(m: usize, n: usize, k: usize, lhs: Operand<'a>, rhs: Operand<'a>) -> Self {
        Product { m, n, k, lhs, rhs, beta: 1.0, threads: Threads::Auto }
    }
    /// The same product scaled by `beta`.
    #[inline]
    pub fn scaled(self, beta: f32) -> Self {
        Product { beta, ..self }
    }
    /// The same product on `threads`.
    #[inline]
    pub fn on(self, threads: Threads) -> Self {
        Product { threads, ..self }
    }
}

/// `dst[m, n] ← (dst if accumulate) + product`; `dst` row-major with row stride `dst_rs`.
pub fn gemm(p: Product, dst: &mut [f32], dst_rs: usize, accumulate: bool) {
    let (m, n) = (p.m, p.n);
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * dst_rs + n <= dst.len(), "gemm dst: {m}×{n} (row stride {dst_rs}) outside {} values", dst.len());
    if p.k == 0 {
        if !accumulate {
            for i in 0..m {
                dst[i * dst_rs..i * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: `dst` holds every element of the m × n block (asserted above).
    unsafe { gemm_raw(p, dst.as_mut_ptr(), dst_rs, accumulate) }
}

/// The one call into the `gemm` crate; checks both operands' extents.
///
/// # Safety
/// `dst` must be valid for writes (and, with `accumulate`, reads) of the m × n elements at
/// `i · dst_rs + j`, and no other thread may touch them during the call.
pub unsafe fn gemm_raw(p: Product, dst: *mut f32, dst_rs: usize, accumulate: bool) {
    let Product { m, n, k, lhs, rhs, beta, threads } = p;
    lhs.check(m, k, "lhs");
    rhs.check(k, n, "rhs");
    let par = match threads {
        Threads::All => ::gemm::Parallelism::Rayon(0),
        Threads::Auto if m * n * k >= PARALLEL_MIN => ::gemm::Parallelism::Rayon(0),
        _ => ::gemm::Parallelism::None,
    };
    // SAFETY: the operands' elements are inside their slices (checked above), `dst` is the
    // caller's promise; with `accumulate` false gemm writes `dst` without reading it.
    unsafe {
        ::gemm::gemm(
            m, n, k,
            dst, 1, dst_rs as isize, accumulate,
            lhs.v.as_ptr(), lhs.cs as isize, lhs.rs as isize,
            rhs.v.as_ptr(), rhs.cs as isize, rhs.rs as isize,
            1.0, beta, false, false, false, par,
        );
    }
}

/// The product into a new row-major `[m, n]` buffer that is never zero-filled first (`gemm`
/// writes every element without reading it): large fresh buffers — attention scores, logits
/// slices, projection outputs — skip the `memset` a `vec![0; m·n]` would cost.
pub fn gemm_new(p: Product) -> Vec<f32> {
    let len = p.m * p.n;
    if p.k == 0 || len == 0 {
        return vec![0f32; len];
    }
    let mut dst: Vec<f32> = Vec::with_capacity(len);
    // SAFETY: `dst` has room for `len` elements; without `accumulate` gemm writes each of the
    // m × n (row stride n) once and reads none, so all are initialised before `set_len`.
    unsafe {
        gemm_raw(p, dst.as_mut_ptr(), p.n, false);
        dst.set_len(len);
    }
    dst
}

/// A raw pointer that may cross threads: a destination whose parts distinct tasks write (each
/// task's rows or heads disjoint from every other's).
#[derive(Clone, Copy, Debug)]
pub struct SendPtr(pub *mut f32);
// SAFETY: only a carrier; every user writes disjoint elements (see each use).
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer.
    #[inline]
    pub fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = gauge_core::rng::SplitMix64::new(seed);
        (0..n).map(|_| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32) - 0.5).collect()
    }

    #[test]
    fn gemm_reads_every_layout_on_every_thread_choice() {
        let (m, n, k) = (3, 4, 5);
        let a = noise(m * k, 9);
        let b = noise(k * n, 10);
        let want: Vec<f32> = (0..m * n).map(|ij| (0..k).map(|p| a[(ij / n) * k + p] * b[p * n + ij % n]).sum()).collect();
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        for (lhs, rhs) in [(Operand::rows(&a, k), Operand::rows(&b, n)), (Operand::transposed(&at, m), Operand::transposed(&bt, k))] {
            let p = Product::new(m, n, k, lhs, rhs).scaled(2.0);
            let mut c = vec![1f32; m * n];
            gemm(p, &mut c, n, true);
            for (c, w) in c.iter().zip(&want) {
                assert!((c - (1.0 + 2.0 * w)).abs() < 1e-5);
            }
            // Into a new buffer (no zero-fill): the same bits as into a zeroed one.
            let mut z = vec![0f32; m * n];
            gemm(p, &mut z, n, false);
            assert_eq!(gemm_new(p), z);
        }
        // Large enough to run threaded: the same bits on the caller's thread and on all.
        let (m, n, k) = (96, 80, 64);
        let (a, b) = (noise(m * k, 11), noise(k * n, 12));
        let p = Product::new(m, n, k, Operand::rows(&a, k), Operand::rows(&b, n)).scaled(0.5);
        assert!(m * n * k >= PARALLEL_MIN);
        let mut z = vec![0f32; m * n];
        gemm(p, &mut z, n, false);
        assert_eq!(gemm_new(p), z);
        assert_eq!(gemm_new(p.on(Threads::Caller)), z);
        assert_eq!(gemm_new(p.on(Threads::All)), z);
        // The empty inner dimension.
        assert_eq!(gemm_new(Product::new(2, 3, 0, Operand::rows(&a, 0), Operand::rows(&b, 3))), vec![0f32; 6]);
    }
}
