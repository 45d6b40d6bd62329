#!/usr/bin/env bash
# Installs a CUDA 13.0 build toolkit (nvcc, NVVM, the CUDA runtime, cuBLAS, CCCL, cuRAND) from
# NVIDIA's PyPI wheels into a cache folder outside the clone, and prints its root (use it as
# CUDA_PATH). Idempotent: a finished install (marked by a stamp holding the pinned versions)
# is left alone. The CUDA 13 wheels are the first that ship nvcc on PyPI.
#
# A user with their own CUDA 13 installation does not need this: set CUDA_PATH (e.g.
# /usr/local/cuda-13.0) and CUDACXX=$CUDA_PATH/bin/nvcc before `just build-gpu`.
set -euo pipefail
venv="${GAUGE_CUDA_VENV:-$HOME/.cache/gauge-cuda13}"
pins=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cublas==13.0.2.14
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-profiler-api==13.0.85
  nvidia-curand==10.4.0.35
)
stamp="$venv/.gauge-cuda-toolkit"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ]; then
  cat "$venv/.gauge-cuda-root"
  exit 0
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
echo "cuda-toolkit: installing ${#pins[@]} CUDA 13.0 wheels into $venv (about 1.5 GB)" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
root="$site/nvidia/cu13"
[ -x "$root/bin/nvcc" ] || { echo "cuda-toolkit: $root/bin/nvcc is missing after the install (wheel layout changed?)" >&2; exit 1; }
# CMake and faiss-sys look for lib64/ and unversioned libraries, as in a /usr/local/cuda tree.
[ -e "$root/lib64" ] || ln -s lib "$root/lib64"
for lib in cudart cublas cublasLt curand; do
  if [ ! -e "$root/lib/lib$lib.so" ]; then
    versioned=$(ls "$root/lib/lib$lib.so."* 2>/dev/null | sort | head -n1 || true)
    [ -n "$versioned" ] || { echo "cuda-toolkit: no lib$lib.so.* under $root/lib" >&2; exit 1; }
    ln -s "$(basename "$versioned")" "$root/lib/lib$lib.so"
  fi
done
"$root/bin/nvcc" --version | tail -n1 >&2
echo "$root" > "$venv/.gauge-cuda-root"
echo "${pins[*]}" > "$stamp"
echo "$root"
