#!/usr/bin/env bash
# bench-scale: gauge's faiss (the `faiss` crate's static build of faiss, as `index` and `query` use
# it through gauge_index) against faiss's own Python wheel (faiss-cpu) on the same vectors, in
# interleaved A/B pairs (gauge-bench, crates/bench) → bench/scale-faiss.json. Both sides build
# Flat and HNSW32 (efSearch 64) over N synthetic 384-d vectors (the scale curve's cluster
# mixture, written once by `bench_scale vectors`) and IVF√n,PQ48 (nprobe 16) over the first
# IVF_N, and search 200 queries one at a time, k = 10 (crates/index/examples/bench_scale.rs side;
# scripts/bench_faiss_python.py). The scale curve itself (bench/scale.json) is gauge's alone.
# Usage: scripts/bench-scale.sh [N] [IVF_N] [OUT]; PYTHON: a Python with faiss-cpu and numpy
# (`just bench-venv`).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
ivf_n="${2:-10000}"
out="${3:-bench/scale-faiss.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
py="${PYTHON:-python3}"
"$py" -c "import faiss, numpy" 2>/dev/null || { echo "bench-scale: $py lacks faiss-cpu/numpy; run \`just bench-venv\`" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$target/release/examples/bench_scale" vectors "$tmp/vectors" "$n"
python3 - "$tmp/plan.json" "$target/release/examples/bench_scale" "$py" "$tmp/vectors" "$n" "$ivf_n" "$pairs" "$target" <<'PY'
import json, sys
plan_path, bin_, py, vectors, n, ivf_n, pairs, target = sys.argv[1:]
plan = {
  "bench": "scale-faiss", "reference": "faiss-cpu (faiss's Python wheel)", "pairs": int(pairs),
  "title": f"gauge's faiss (the faiss crate's static build) against faiss's Python wheel: Flat and HNSW32 over {int(n):,} synthetic 384-d vectors, IVF-PQ over {int(ivf_n):,}, 200 queries one at a time",
  "measures": {"crates": ["gauge-index"], "paths": ["crates/index/examples/bench_scale.rs", "scripts/bench-scale.sh", "scripts/bench_faiss_python.py"]},
  "describe": [
    {"name": "reference_versions", "argv": [py, "-c", "import json, sys, faiss, numpy; print(json.dumps({'python': sys.version, 'faiss': faiss.__version__, 'compile_options': faiss.get_compile_options(), 'numpy': numpy.__version__, 'omp_threads': faiss.omp_get_max_threads()}))"]},
    {"name": "gauge_faiss_build", "argv": ["sh", "-c", f"grep -h '^CMAKE_CXX_FLAGS:\\|^CMAKE_CXX_FLAGS_RELEASE:\\|^FAISS_OPT_LEVEL\\|^BLAS_\\|^CMAKE_PROJECT_VERSION:' {target}/release/build/faiss-sys-*/out/build/CMakeCache.txt; grep -A1 'name = \"faiss-sys\"' Cargo.lock"]},
  ],
  "notes": ["Both sides read the same vectors (raw f32 written once by `bench_scale vectors`), use inner product, the same factory strings and parameters, all cores (OpenMP), and time one query at a time; build times include training (IVF-PQ's k-means) and adding.",
            "flat_top1_sum (the sum of every query's exact top-1 id) is checked equal: both sides search the same vectors exactly. HNSW and IVF-PQ recall@10 (against Flat over the same vectors) may differ a little: HNSW's multi-threaded insertion order and the faiss versions' k-means differ."],
  "comparisons": [{"name": f"faiss, {int(n):,} vectors (IVF-PQ {int(ivf_n):,})",
                   "gauge": {"argv": [bin_, "side", vectors, ivf_n], "format": "json"},
                   "reference": {"argv": [py, "scripts/bench_faiss_python.py", vectors, ivf_n], "format": "json"},
                   "ratios": [{"name": "Flat query", "gauge": "flat_query_ms", "reference": "flat_query_ms", "unit": "ms", "better": "lower"},
                              {"name": "HNSW32 build", "gauge": "hnsw_build_s", "reference": "hnsw_build_s", "unit": "s", "better": "lower"},
                              {"name": "HNSW32 query", "gauge": "hnsw_query_ms", "reference": "hnsw_query_ms", "unit": "ms", "better": "lower"},
                              {"name": "IVF-PQ build", "gauge": "ivfpq_build_s", "reference": "ivfpq_build_s", "unit": "s", "better": "lower"},
                              {"name": "IVF-PQ query", "gauge": "ivfpq_query_ms", "reference": "ivfpq_query_ms", "unit": "ms", "better": "lower"}],
                   "equal": [{"gauge": "vectors", "reference": "vectors", "tolerance": 0},
                             {"gauge": "flat_top1_sum", "reference": "flat_top1_sum", "tolerance": 0},
                             {"gauge": "hnsw_recall_at_10", "reference": "hnsw_recall_at_10", "tolerance": 0.03},
                             {"gauge": "ivfpq_recall_at_10", "reference": "ivfpq_recall_at_10", "tolerance": 0.05}]}],
  "readme": [],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$target/release/gauge-bench" run "$tmp/plan.json" "$out"
