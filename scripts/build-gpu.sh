#!/usr/bin/env bash
# Builds gauge's GPU binaries (Burn CUDA: `--features cuda`; faiss on the GPU: `faiss-gpu`)
# into dist/gpu/bin (stripped), and packs the GPU check's bundle, dist/gpu-check.tar.xz
# (the one gauge-gpu-check binary, the shared libraries it needs that a CUDA machine may lack,
# tokenizer files, the fixture texts), its size printed and refused over the carry limit.
#
# CUDA: CUDA_PATH when set (a CUDA 13 installation; CUDACXX defaults to $CUDA_PATH/bin/nvcc),
# else the wheels of `just cuda-toolkit`. CUDAARCHS (default 90, Hopper) picks the GPU
# architectures faiss is compiled for, e.g. "80;86;89;90". The faiss GPU build is the long
# part: about 45 CPU-minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
# A target folder of its own: the CUDA features would otherwise rebuild the CPU build's crates
# (and back again at the next `just setup`).
export CARGO_TARGET_DIR="${GAUGE_CUDA_TARGET_DIR:-$HOME/.cache/gauge-target-cuda}"
if [ -z "${CUDA_PATH:-}" ]; then
  CUDA_PATH=$(scripts/cuda-toolkit.sh | tail -n1)
fi
export CUDA_PATH
export CUDACXX="${CUDACXX:-$CUDA_PATH/bin/nvcc}"
export CUDAARCHS="${CUDAARCHS:-90}"
# cudarc (under burn-cuda) picks its CUDA bindings from this instead of probing nvcc.
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"
export PATH="$CUDA_PATH/bin:$PATH"
[ -x "$CUDACXX" ] || { echo "build-gpu: no nvcc at $CUDACXX; set CUDA_PATH to a CUDA 13 installation or run \`just cuda-toolkit\`" >&2; exit 1; }
# Feature lists cargo accepts: each names features of the packages it builds (or of their
# dependencies). `cargo tree` checks them in a second, before the long build.
features="gauge-embed/cuda,gauge-rerank/cuda,gauge-engine/cuda,gauge-index/faiss-gpu,gauge-engine/faiss-gpu"
cargo tree -q -p gauge-embed -p gauge-index -p gauge-engine --features "$features" --depth 0 > /dev/null
cargo tree -q -p gauge-gpu-check --features cuda,faiss-gpu --depth 0 > /dev/null
started=$(date +%s)
echo "build-gpu: CUDA_PATH=$CUDA_PATH CUDAARCHS=$CUDAARCHS ($("$CUDACXX" --version | tail -n1))" >&2
cargo build --release -p gauge-embed -p gauge-index -p gauge-engine --bins --features "$features"
# The check's one binary: embedding, faiss, the training step and the decoder, Burn CUDA once.
cargo build --release -p gauge-gpu-check --features cuda,faiss-gpu
elapsed=$(( $(date +%s) - started ))

rel=$CARGO_TARGET_DIR/release
rm -rf dist/gpu.partial
mkdir -p dist/gpu.partial/bin
for b in embed index query; do strip -o "dist/gpu.partial/bin/$b" "$rel/$b"; done
rm -rf dist/gpu && mv dist/gpu.partial dist/gpu
scripts/pack-gpu-check.sh "$rel/gauge-gpu-check" dist
{
  echo "build-gpu: cargo build took ${elapsed} s on $(nproc) cores"
  echo "build-gpu: dist/gpu/bin (stripped):"; ls -l dist/gpu/bin | awk 'NR>1 {printf "  %-8s %6.1f MiB\n", $9, $5/1048576}'
  cat dist/gpu-check.txt
  echo "build-gpu: run time needs libcudart.so.13, libcublas.so.13 (CUDA 13) and libnvrtc for the Burn kernels; driver >= 580"
} | tee dist/build-gpu.txt >&2
