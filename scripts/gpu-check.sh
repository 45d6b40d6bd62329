#!/usr/bin/env bash
# GPU check (run on a machine with an NVIDIA GPU and CUDA drivers): builds `embed` with the
# `cuda` feature, embeds the same chunks on the GPU and on the CPU, and requires every
# vector pair to agree to cosine >= 0.9999. Writes bench/gpu-check.json.
# Usage: scripts/gpu-check.sh [CHUNKS_DIR]   (default: chunks of the Track manual)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gauge-target}"
scripts/fetch-models.sh
cargo build --release --bins
bin="$CARGO_TARGET_DIR/release"
art=$(mktemp -d)
chunks=${1:-}
if [ -z "$chunks" ]; then
  docs="$art/docs"; mkdir -p "$docs"
  cp "../shared/corpora/fra/FRA-Track_Structures_CM_2026_Vol_III_Ch1_Railroad_Workplace_Safety_General.pdf" "$docs/"
  pages=$("$bin/extract" "$docs" --artifacts "$art" | tail -n1)
  chunks=$("$bin/chunk" "$pages" --artifacts "$art" | tail -n1)
fi
cpu=$("$bin/embed" "$chunks" --model models/all-MiniLM-L6-v2 --artifacts "$art/cpu" | tail -n1)
cargo build --release -p gauge-embed --features cuda --bin embed
gpu=$("$bin/embed" "$chunks" --model models/all-MiniLM-L6-v2 --artifacts "$art/gpu" --device cuda | tail -n1)
cargo build --release -p gauge-embed --bin embed   # back to the CPU build
py="${GAUGE_VENV:-$HOME/.cache/gauge-venv}/bin/python3"; [ -x "$py" ] || py=python3   # needs numpy, pyarrow (just bench-venv)
"$py" - "$cpu/embeddings.parquet" "$gpu/embeddings.parquet" <<'PY'
import json, sys
import numpy as np, pyarrow.parquet as pq
a = pq.read_table(sys.argv[1]); b = pq.read_table(sys.argv[2])
assert a.column("chunk_id").to_pylist() == b.column("chunk_id").to_pylist()
va = np.array(a.column("vector").to_pylist(), dtype=np.float64)
vb = np.array(b.column("vector").to_pylist(), dtype=np.float64)
cos = (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
out = {"chunks": len(cos), "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()), "pass": bool(cos.min() >= 0.9999)}
json.dump(out, open("bench/gpu-check.json", "w"), indent=2)
print(json.dumps(out))
sys.exit(0 if out["pass"] else 1)
PY
