//! The dense (faiss) index on the CPU or, in builds with the `faiss-gpu` feature, on a CUDA
//! device: building (train + add) on either, and a searchable index that converts between
//! them. What is written to disk is always the CPU form, so an index built on a GPU opens on
//! any machine, and a CPU-built index can be searched on a GPU.
use std::fmt;
use std::str::FromStr;

use faiss::index::IndexImpl;
use faiss::Index;
use serde::{Deserialize, Serialize};

/// Where faiss builds or searches: `cpu`, or `cuda` / `cuda:N` (feature `faiss-gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub enum FaissDevice {
    /// faiss on the CPU (the default).
    #[default]
    Cpu,
    /// faiss on CUDA device N.
    Cuda(u32),
}

impl FaissDevice {
    /// Whether this is the CPU.
    pub fn is_cpu(&self) -> bool {
        *self == FaissDevice::Cpu
    }
}

impl fmt::Display for FaissDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaissDevice::Cpu => write!(f, "cpu"),
            FaissDevice::Cuda(0) => write!(f, "cuda"),
            FaissDevice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for FaissDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(FaissDevice::Cpu),
            "cuda" | "gpu" => Ok(FaissDevice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(FaissDevice::Cuda)
                .ok_or_else(|| format!("unknown faiss device `{s}` (expected cpu, cuda or cuda:N)")),
        }
    }
}

impl TryFrom<String> for FaissDevice {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<FaissDevice> for String {
    fn from(d: FaissDevice) -> String {
        d.to_string()
    }
}

/// A faiss error as a one-line `anyhow` error.
pub(crate) fn faiss_err(e: faiss::error::Error) -> anyhow::Error {
    anyhow::anyhow!("faiss: {e}")
}

/// A dense index ready to search, on the CPU or a GPU.
pub enum DenseIndex {
    /// In host memory.
    Cpu(IndexImpl),
    /// On a CUDA device (a faiss GPU index holding its own copy of the vectors).
    #[cfg(feature = "faiss-gpu")]
    Gpu {
        /// The GPU index.
        index: faiss::GpuIndexImpl<'static, IndexImpl>,
        /// Its CUDA device.
        device: u32,
    },
}

impl fmt::Debug for DenseIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenseIndex::Cpu(i) => write!(f, "DenseIndex::Cpu({} vectors)", i.ntotal()),
            #[cfg(feature = "faiss-gpu")]
            DenseIndex::Gpu { index: i, .. } => write!(f, "DenseIndex::Gpu({} vectors)", i.ntotal()),
        }
    }
}

impl DenseIndex {
    /// A copy of a CPU index on a CUDA device (the CPU index stays as it is).
    pub fn copy_to(index: &IndexImpl, device: FaissDevice) -> anyhow::Result<DenseIndex> {
        match device {
            FaissDevice::Cpu => anyhow::bail!("copy_to places CPU indexes on a GPU; a CPU index is searched where it is"),
            FaissDevice::Cuda(n) => gpu::copy_to_gpu(index, n),
        }
    }

    /// Where the index lives.
    pub fn device(&self) -> FaissDevice {
        match self {
            DenseIndex::Cpu(_) => FaissDevice::Cpu,
            #[cfg(feature = "faiss-gpu")]
            DenseIndex::Gpu { device, .. } => FaissDevice::Cuda(*device),
        }
    }

    /// Top-`k` (inner product) for one or more queries laid end to end.
    pub fn search(&mut self, queries: &[f32], k: usize) -> anyhow::Result<faiss::index::SearchResult> {
        match self {
            DenseIndex::Cpu(i) => i.search(queries, k).map_err(faiss_err),
            #[cfg(feature = "faiss-gpu")]
            DenseIndex::Gpu { index: i, .. } => i.search(queries, k).map_err(faiss_err),
        }
    }

    /// Vectors held.
    pub fn ntotal(&self) -> u64 {
        match self {
            DenseIndex::Cpu(i) => i.ntotal(),
            #[cfg(feature = "faiss-gpu")]
            DenseIndex::Gpu { index: i, .. } => i.ntotal(),
        }
    }

    /// The CPU form (a copy from the GPU when the index lives there).
    pub fn into_cpu(self) -> anyhow::Result<IndexImpl> {
        match self {
            DenseIndex::Cpu(i) => Ok(i),
            #[cfg(feature = "faiss-gpu")]
            DenseIndex::Gpu { index: i, .. } => i.into_cpu().map_err(faiss_err),
        }
    }
}

/// Sets a faiss parameter (`nprobe`, `efSearch`, …) on a CPU index.
pub fn set_parameter(index: &IndexImpl, name: &str, value: f64) -> anyhow::Result<()> {
    let space = faiss::index::autotune::ParameterSpace::new().map_err(faiss_err)?;
    space.set_index_parameter(index, name, value).map_err(faiss_err)
}

/// Builds an index from a faiss factory string: trained when the type needs it, then every
/// vector added, on `device`; returns the CPU form (what is written to disk).
pub fn build(vectors: &[f32], dim: usize, description: &str, device: FaissDevice) -> anyhow::Result<IndexImpl> {
    let mut index = faiss::index_factory(dim as u32, description, faiss::MetricType::InnerProduct)
        .map_err(|e| anyhow::anyhow!("faiss index type `{description}`: {e} (try Flat, HNSW32, IVF64,Flat, IVF64,PQ16)"))?;
    let rows = vectors.len() / dim.max(1);
    match device {
        FaissDevice::Cpu => {
            if !index.is_trained() {
                index.train(vectors).map_err(|e| anyhow::anyhow!("training `{description}` on {rows} vectors failed: {e}"))?;
            }
            index.add(vectors).map_err(faiss_err)?;
            Ok(index)
        }
        FaissDevice::Cuda(n) => {
            let mut placed = gpu::copy_to_gpu(&index, n).map_err(|e| anyhow::anyhow!("faiss index type `{description}` on cuda:{n}: {e} (GPU faiss has Flat, IVF*,Flat, IVF*,PQ* and IVF*,SQ*; HNSW is CPU-only)"))?;
            gpu::train_add(&mut placed, vectors, description, rows)?;
            placed.into_cpu()
        }
    }
}

#[cfg(feature = "faiss-gpu")]
mod gpu {
    use super::*;
    use faiss::StandardGpuResources;

    /// One set of GPU resources (streams, cuBLAS handle, scratch memory) per device for the
    /// life of the process: faiss GPU indexes borrow it, so it is never freed.
    fn resources(device: u32) -> anyhow::Result<&'static StandardGpuResources> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        struct Leaked(&'static StandardGpuResources);
        // SAFETY: faiss's StandardGpuResources may be shared between indexes; gauge uses each
        // GPU index under one lock (the engine's mutex) or on one thread (the index stage).
        unsafe impl Send for Leaked {}
        static ALL: Mutex<Option<HashMap<u32, Leaked>>> = Mutex::new(None);
        let mut all = ALL.lock().expect("no panic while creating GPU resources");
        let all = all.get_or_insert_with(HashMap::new);
        if let Some(r) = all.get(&device) {
            return Ok(r.0);
        }
        let r: &'static StandardGpuResources = Box::leak(Box::new(StandardGpuResources::new().map_err(|e| anyhow::anyhow!("faiss GPU resources on cuda:{device}: {e} (is the NVIDIA driver ≥ 580 loaded? `nvidia-smi` tells)"))?));
        all.insert(device, Leaked(r));
        Ok(r)
    }

    pub(super) fn copy_to_gpu(index: &IndexImpl, device: u32) -> anyhow::Result<DenseIndex> {
        let res = resources(device)?;
        Ok(DenseIndex::Gpu { index: index.to_gpu(res, device as i32).map_err(faiss_err)?, device })
    }

    pub(super) fn train_add(index: &mut DenseIndex, vectors: &[f32], description: &str, rows: usize) -> anyhow::Result<()> {
        let DenseIndex::Gpu { index: i, .. } = index else { unreachable!("placed on the GPU") };
        if !i.is_trained() {
            i.train(vectors).map_err(|e| anyhow::anyhow!("training `{description}` on {rows} vectors (GPU) failed: {e}"))?;
        }
        i.add(vectors).map_err(faiss_err)
    }
}

#[cfg(not(feature = "faiss-gpu"))]
mod gpu {
    use super::*;

    fn unavailable(device: u32) -> anyhow::Error {
        anyhow::anyhow!("faiss device cuda:{device} needs a build with `--features faiss-gpu` (`just build-gpu`); this build has CPU faiss only (use --faiss-device cpu)")
    }

    pub(super) fn copy_to_gpu(_index: &IndexImpl, device: u32) -> anyhow::Result<DenseIndex> {
        Err(unavailable(device))
    }

    pub(super) fn train_add(_index: &mut DenseIndex, _vectors: &[f32], _description: &str, _rows: usize) -> anyhow::Result<()> {
        unreachable!("no GPU index exists in a build without faiss-gpu")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_print_and_refuse_unknown_names() {
        for (s, d) in [("cpu", FaissDevice::Cpu), ("cuda", FaissDevice::Cuda(0)), ("cuda:3", FaissDevice::Cuda(3))] {
            assert_eq!(s.parse::<FaissDevice>().unwrap(), d);
            assert_eq!(d.to_string().parse::<FaissDevice>().unwrap(), d);
        }
        assert!("tpu".parse::<FaissDevice>().unwrap_err().contains("expected cpu, cuda"));
        assert!("cuda:x".parse::<FaissDevice>().is_err());
        let json: FaissDevice = serde_json::from_str("\"cuda:1\"").unwrap();
        assert_eq!(json, FaissDevice::Cuda(1));
    }

    #[test]
    fn cpu_build_searches_exactly() {
        let dim = 8;
        let vectors: Vec<f32> = (0..64 * dim).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
        let mut index = DenseIndex::Cpu(build(&vectors, dim, "Flat", FaissDevice::Cpu).unwrap());
        assert_eq!(index.ntotal(), 64);
        let res = index.search(&vectors[5 * dim..6 * dim], 1).unwrap();
        let best = res.distances[0];
        let exact = (0..64).map(|r| vectors[r * dim..(r + 1) * dim].iter().zip(&vectors[5 * dim..6 * dim]).map(|(a, b)| a * b).sum::<f32>()).fold(f32::MIN, f32::max);
        assert!((best - exact).abs() < 1e-5);
    }

    #[cfg(not(feature = "faiss-gpu"))]
    #[test]
    fn cuda_without_the_feature_names_the_fix() {
        let err = build(&[0.0; 16], 8, "Flat", FaissDevice::Cuda(0)).unwrap_err().to_string();
        assert!(err.contains("--features faiss-gpu"), "{err}");
    }
}
