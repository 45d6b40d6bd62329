#!/usr/bin/env bash
# Packs the GPU check's bundle, dist/gpu-check.tar.xz, around a gpu_check binary (from
# `just build-gpu`): the binary (stripped), the shared libraries it links that a CUDA machine
# may lack (BLAS/LAPACK for faiss's CPU side, OpenMP, the Fortran runtime, libstdc++; never glibc or
# CUDA's own), MiniLM's tokenizer files and the fixture texts. scripts/gpu-check.sh unpacks it.
#   scripts/pack-gpu-check.sh GPU_CHECK_BINARY [BENCH_TRAIN_BINARY] [BENCH_GENERATE_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:?usage: scripts/pack-gpu-check.sh GPU_CHECK_BINARY}
[ -f models/all-MiniLM-L6-v2/tokenizer.json ] || { echo "pack-gpu-check: run \`just models\` first (the bundle carries MiniLM's tokenizer)" >&2; exit 1; }
[ -f ../shared/fixtures/minilm-reference.jsonl ] || { echo "pack-gpu-check: ../shared/fixtures/minilm-reference.jsonl is missing" >&2; exit 1; }
stage=dist/gpu-check.partial
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/assets"
strip -o "$stage/bin/gpu_check" "$binary"
if [ -n "${2:-}" ]; then strip -o "$stage/bin/bench_train" "$2"; fi
if [ -n "${3:-}" ]; then strip -o "$stage/bin/bench_generate" "$3"; fi
# The SmolLM2 fixture prompts (token ids) for the decode/prefill section.
cp ../shared/fixtures/smollm2/reference.jsonl "$stage/smollm2-reference.jsonl"
ldd "$binary" | awk '/=> \// {print $1, $3}' | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcudart.so*|libcublas*.so*|libcuda.so*|libnvrtc*.so*) ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
for f in tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
  cp "models/all-MiniLM-L6-v2/$f" "$stage/assets/"
done
python3 scripts/gpu_check.py texts ../shared/fixtures/minilm-reference.jsonl "$stage/fixture-texts.jsonl"
rm -rf dist/gpu-check && mv "$stage" dist/gpu-check
tar -C dist -cJf dist/gpu-check.tar.xz.partial gpu-check && mv dist/gpu-check.tar.xz.partial dist/gpu-check.tar.xz
{
  echo "pack-gpu-check: gpu_check $(du -m dist/gpu-check/bin/gpu_check | cut -f1) MiB stripped; bundled libraries: $(ls dist/gpu-check/lib | tr '\n' ' ')"
  echo "pack-gpu-check: dist/gpu-check.tar.xz $(du -m dist/gpu-check.tar.xz | cut -f1) MiB (carry it to the GPU machine beside the repository)"
} | tee dist/gpu-check.txt >&2
