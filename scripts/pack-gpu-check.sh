#!/usr/bin/env bash
# Packs the GPU check's bundle around the one `gauge-gpu-check` binary (from `just gpu-bundle`,
# or a CPU build for `just gpu-rehearse`): the binary (stripped), the shared libraries it links
# that a CUDA machine may lack (BLAS/LAPACK for faiss's CPU side, OpenMP, the Fortran runtime,
# libstdc++; never glibc or CUDA's own), MiniLM's tokenizer files, the fixture texts and the
# SmolLM2 fixture prompts. scripts/gpu-check.sh unpacks it.
#   scripts/pack-gpu-check.sh BINARY [DIST_DIR]   → DIST_DIR/gpu-check/ and DIST_DIR/gpu-check.tar.xz
# The packed size is printed, and refused above GAUGE_BUNDLE_LIMIT_MIB (default 56: a device
# run carries at most 64 MiB of untracked files, and the rest is kept for what else travels).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:?usage: scripts/pack-gpu-check.sh BINARY [DIST_DIR]}
dist=${2:-dist}
limit=${GAUGE_BUNDLE_LIMIT_MIB:-56}
[ -f models/all-MiniLM-L6-v2/tokenizer.json ] || { echo "pack-gpu-check: run \`just models\` first (the bundle carries MiniLM's tokenizer)" >&2; exit 1; }
[ -f ../shared/fixtures/minilm-reference.jsonl ] || { echo "pack-gpu-check: ../shared/fixtures/minilm-reference.jsonl is missing" >&2; exit 1; }
mkdir -p "$dist"
stage=$dist/gpu-check.partial
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/assets"
strip -o "$stage/bin/gauge-gpu-check" "$binary"
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
rm -rf "$dist/gpu-check" && mv "$stage" "$dist/gpu-check"
tar -C "$dist" -cJf "$dist/gpu-check.tar.xz.partial" gpu-check
bytes=$(stat -c %s "$dist/gpu-check.tar.xz.partial")
mib=$(( (bytes + 1048575) / 1048576 ))
if [ "$mib" -gt "$limit" ]; then
  rm -f "$dist/gpu-check.tar.xz.partial"
  echo "pack-gpu-check: the bundle is $mib MiB packed, over the $limit MiB limit (GAUGE_BUNDLE_LIMIT_MIB); leave a section's binary out or strip more" >&2
  exit 1
fi
mv "$dist/gpu-check.tar.xz.partial" "$dist/gpu-check.tar.xz"
{
  echo "pack-gpu-check: gauge-gpu-check $(du -m "$dist/gpu-check/bin/gauge-gpu-check" | cut -f1) MiB stripped; bundled libraries: $(ls "$dist/gpu-check/lib" | tr '\n' ' ')"
  echo "pack-gpu-check: $dist/gpu-check.tar.xz $mib MiB packed ($bytes bytes; limit $limit MiB); carry it to the GPU machine beside the repository"
} | tee "$dist/gpu-check.txt" >&2
