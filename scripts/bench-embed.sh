#!/usr/bin/env bash
# bench-embed: gauge's embedder (burn-flex, the `embed` stage's backend) against the
# sentence-transformers-equivalent reference (../shared/reference/embed_throughput.py: ONNX
# Runtime, sentence-transformers' preprocessing and pooling, as many threads as cores) on every
# chunk of the FRA corpus (recursive 1000/150), tokenization included on both sides, in
# interleaved A/B pairs (gauge-bench, crates/bench) → bench/embed.json.
# Usage: scripts/bench-embed.sh CHUNKS_DIR [OUT] [MODEL]; PYTHON: a Python with onnxruntime,
# tokenizers, numpy and pyarrow (`just bench-venv`).
set -euo pipefail
cd "$(dirname "$0")/.."
chunks="$1"
out="${2:-bench/embed.json}"
model="${3:-models/all-MiniLM-L6-v2}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
py="${PYTHON:-python3}"
reference=../shared/reference/embed_throughput.py
"$py" -c "import onnxruntime, tokenizers, numpy, pyarrow" 2>/dev/null || { echo "bench-embed: $py lacks onnxruntime/tokenizers/numpy/pyarrow; run \`just bench-venv\`" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/plan.json" "$target/release/examples/bench_embed" "$py" "$reference" "$chunks" "$model" "$(nproc)" "$pairs" <<'PY'
import json, sys
plan_path, bin_, py, reference, chunks, model, threads, pairs = sys.argv[1:]
plan = {
  "bench": "embed", "reference": "ONNX Runtime (sentence-transformers' preprocessing and pooling)", "pairs": int(pairs),
  "title": "gauge's embedder against ../shared/reference/embed_throughput.py on every FRA chunk, tokenization included",
  "measures": {"crates": ["gauge-embed"], "paths": ["crates/embed/examples/bench_embed.rs", "scripts/bench-embed.sh"]},
  "describe": [{"name": "reference_versions", "argv": [py, "-c", "import json, onnxruntime as o, tokenizers, numpy; print(json.dumps({'onnxruntime': o.__version__, 'providers': o.get_available_providers(), 'device': o.get_device(), 'tokenizers': tokenizers.__version__, 'numpy': numpy.__version__}))"]}],
  "notes": [f"The reference is {reference} (outside the repository: not in the sources stamp), --threads {threads} --runs 1; it sorts texts by length into batches of 32, gauge batches by a token budget.",
            "Both sides: a warm-up, then one timed pass over every chunk's `text`, max length 256."],
  "comparisons": [{"name": "all-MiniLM-L6-v2, FRA chunks", "gauge": {"argv": [bin_, "side", chunks, model]},
                   "reference": {"argv": [py, reference, f"{chunks}/chunks.parquet", "--column", "text", "--threads", threads, "--runs", "1"], "format": "json"},
                   "ratios": [{"name": "speed", "gauge": "tokens_per_s", "reference": "tokens_per_s", "unit": "tok/s"}],
                   "equal": [{"gauge": "texts", "reference": "texts", "tolerance": 0}]}],
  "readme": [{"what": "embedding every FRA chunk (2,070, ≤ 256 tokens), all-MiniLM-L6-v2, tokenization included", "comparison": "all-MiniLM-L6-v2, FRA chunks", "ratio": "speed"}],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$target/release/gauge-bench" run "$tmp/plan.json" "$out"
