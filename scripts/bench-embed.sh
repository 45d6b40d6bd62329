#!/usr/bin/env bash
# bench-embed: gauge's embedder (burn-flex, the `embed` stage's backend) against the
# sentence-transformers-equivalent reference (../shared/reference/embed_throughput.py: ONNX
# Runtime, sentence-transformers' preprocessing and pooling, as many threads as cores) on every
# chunk of the FRA corpus (recursive 1000/150), tokenization included on both sides, in
# interleaved A/B pairs (gauge-bench, crates/bench) → bench/embed.json. Then all-mpnet-base-v2 on
# the first $GAUGE_BENCH_MPNET_TEXTS (128) chunks against sentence-transformers on PyTorch
# (scripts/bench_embed_reference.py), the vectors' sums checked equal.
# Usage: scripts/bench-embed.sh CHUNKS_DIR [OUT] [MODEL]; PYTHON: a Python with onnxruntime,
# tokenizers, numpy and pyarrow (`just bench-venv`); GAUGE_VENV: one with torch and
# sentence-transformers (`just torch-venv`; "none" leaves MPNet out).
set -euo pipefail
cd "$(dirname "$0")/.."
chunks="$1"
out="${2:-bench/embed.json}"
model="${3:-models/all-MiniLM-L6-v2}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
py="${PYTHON:-python3}"
torch_venv="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}"
mpnet_texts="${GAUGE_BENCH_MPNET_TEXTS:-128}"
torch_py=none
if [ "$torch_venv" != none ]; then
  torch_py="$torch_venv/bin/python3"
  "$torch_py" -c "import torch, sentence_transformers, pyarrow" 2>/dev/null || { echo "bench-embed: $torch_py lacks torch/sentence-transformers/pyarrow; run \`just torch-venv\` (or GAUGE_VENV=none to leave MPNet out)" >&2; exit 1; }
  [ -f models/all-mpnet-base-v2/model.safetensors ] || scripts/fetch-models.sh all-mpnet-base-v2
fi
reference=../shared/reference/embed_throughput.py
"$py" -c "import onnxruntime, tokenizers, numpy, pyarrow" 2>/dev/null || { echo "bench-embed: $py lacks onnxruntime/tokenizers/numpy/pyarrow; run \`just bench-venv\`" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/plan.json" "$target/release/examples/bench_embed" "$py" "$reference" "$chunks" "$model" "$(nproc)" "$pairs" "$torch_py" "$mpnet_texts" <<'PY'
import json, sys
plan_path, bin_, py, reference, chunks, model, threads, pairs, torch_py, mpnet_texts = sys.argv[1:]
plan = {
  "bench": "embed", "reference": "ONNX Runtime (sentence-transformers' preprocessing and pooling)", "pairs": int(pairs),
  "title": "gauge's embedder against ../shared/reference/embed_throughput.py on every FRA chunk, tokenization included",
  "measures": {"crates": ["gauge-embed"], "paths": ["crates/embed/examples/bench_embed.rs", "scripts/bench-embed.sh", "scripts/bench_embed_reference.py"]},
  "describe": [{"name": "reference_versions", "argv": [py, "-c", "import json, onnxruntime as o, tokenizers, numpy; print(json.dumps({'onnxruntime': o.__version__, 'providers': o.get_available_providers(), 'device': o.get_device(), 'tokenizers': tokenizers.__version__, 'numpy': numpy.__version__}))"]}],
  "notes": [f"The reference is {reference} (outside the repository: not in the sources stamp), --threads {threads} --runs 1; it sorts texts by length into batches of 32, gauge batches by a token budget.",
            "Both sides: a warm-up, then one timed pass over every chunk's `text`, max length 256."],
  "comparisons": [{"name": "all-MiniLM-L6-v2, FRA chunks", "gauge": {"argv": [bin_, "side", chunks, model]},
                   "reference": {"argv": [py, reference, f"{chunks}/chunks.parquet", "--column", "text", "--threads", threads, "--runs", "1"], "format": "json"},
                   "ratios": [{"name": "speed", "gauge": "tokens_per_s", "reference": "tokens_per_s", "unit": "tok/s"}],
                   "equal": [{"gauge": "texts", "reference": "texts", "tolerance": 0}]}],
  "readme": [{"what": "embedding every FRA chunk (2,070, ≤ 256 tokens), all-MiniLM-L6-v2, tokenization included", "comparison": "all-MiniLM-L6-v2, FRA chunks", "ratio": "speed"}],
}
if torch_py != "none":
    mpnet = "models/all-mpnet-base-v2"
    plan["notes"].append(f"all-mpnet-base-v2 (12 layers, 768 hidden, max length 384) on the first {mpnet_texts} chunks against sentence-transformers' encode on PyTorch CPU fp32 (scripts/bench_embed_reference.py: its defaults, batches of 32, every core); the sums of every vector component must agree within 0.05 in every pair.")
    plan["comparisons"].append({"name": f"all-mpnet-base-v2, first {mpnet_texts} FRA chunks", "reference_name": "sentence-transformers (PyTorch CPU fp32)",
                                "gauge": {"argv": [bin_, "side", chunks, mpnet, mpnet_texts]},
                                "reference": {"argv": [torch_py, "scripts/bench_embed_reference.py", mpnet, f"{chunks}/chunks.parquet", mpnet_texts]},
                                "ratios": [{"name": "speed", "gauge": "tokens_per_s", "reference": "tokens_per_s", "unit": "tok/s"}],
                                "equal": [{"gauge": "texts", "reference": "texts", "tolerance": 0}, {"gauge": "vector_sum", "reference": "vector_sum", "tolerance": 0.05}]})
    plan["describe"].append({"name": "mpnet_reference_versions", "argv": [torch_py, "-c", "import json, torch, sentence_transformers, transformers; print(json.dumps({'torch': torch.__version__, 'sentence_transformers': sentence_transformers.__version__, 'transformers': transformers.__version__, 'threads': torch.get_num_threads()}))"]})
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$target/release/gauge-bench" run "$tmp/plan.json" "$out"
