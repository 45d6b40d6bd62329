#!/usr/bin/env bash
# bench-rerank: gauge's rerankers against PyTorch on the same candidates, in interleaved A/B pairs
# (gauge-bench, crates/bench) → bench/rerank.json. The candidates are the hybrid top 50 of the
# first 10 FRA dev questions (FRA chunks, recursive 1000/150), written once; each run scores
# every question's top 25 and top 50, one call per question:
# - a cross-encoder of the ms-marco-MiniLM-L-6-v2 shape with seeded random weights (timing
#   only; both sides read the same folder) against sentence-transformers' CrossEncoder;
# - MaxSim over all-MiniLM-L6-v2's token vectors against sentence-transformers' token
#   embeddings and a PyTorch MaxSim (scripts/bench_rerank_reference.py).
# Both sides must agree on the sum of their scores in every pair.
# Needs the torch venv (`just torch-venv`). Usage: scripts/bench-rerank.sh INDEX_DIR [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
index="$1"
out="${2:-bench/rerank.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
questions="${GAUGE_BENCH_QUESTIONS:-10}"
model=models/all-MiniLM-L6-v2
py="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}/bin/python3"
"$py" -c "import torch, sentence_transformers" 2>/dev/null || { echo "bench-rerank: $py lacks torch/sentence-transformers; run \`just torch-venv\`" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
bin="$target/release/examples/bench_rerank"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" prepare "$index" ../shared/golden/fra-dev.jsonl "$model" "$tmp" "$questions"
python3 - "$tmp/plan.json" "$bin" "$py" "$model" "$tmp" "$questions" "$pairs" <<'PY'
import json, sys
plan_path, bin_, py, model, tmp, questions, pairs = sys.argv[1:]
cands = f"{tmp}/candidates.jsonl"
def comparison(name, kind, folder, tolerance):
    return {"name": name, "gauge": {"argv": [bin_, "side", kind, folder, cands]},
            "reference": {"argv": [py, "scripts/bench_rerank_reference.py", kind, folder, cands]},
            "ratios": [{"name": f"speed, top {n}", "gauge": f"pairs_per_s_{n}", "reference": f"pairs_per_s_{n}", "unit": "pairs/s"} for n in (25, 50)],
            "equal": [{"gauge": f"score_sum_{n}", "reference": f"score_sum_{n}", "tolerance": tolerance} for n in (25, 50)]}
plan = {
  "bench": "rerank", "reference": "sentence-transformers + PyTorch CPU fp32", "pairs": int(pairs),
  "title": f"gauge's cross-encoder and MaxSim rerankers against sentence-transformers on the hybrid top 25 and top 50 of {questions} FRA dev questions",
  "measures": {"crates": ["gauge-rerank", "gauge-engine"], "paths": ["crates/engine/examples/bench_rerank.rs", "scripts/bench-rerank.sh", "scripts/bench_rerank_reference.py"]},
  "notes": [f"Candidates: the hybrid top 50 (all-MiniLM-L6-v2 + BM25, RRF) of the first {questions} questions of ../shared/golden/fra-dev.jsonl, written once by `bench_rerank prepare`; both sides read the same file and score one question per call.",
            "The cross-encoder has the ms-marco-MiniLM-L-6-v2 shape (6 layers, 384 hidden, 12 heads) with seeded random weights: its speed is the trained model's, its scores mean nothing. gauge batches pairs by a token budget; sentence-transformers by 32 pairs (its default).",
            "pairs/s is a run's scored pairs over the summed time of its calls; p50_ms_N is the median time of one question's call. The sum of every score must agree in every pair (1e-4 for the cross-encoder's logits, 1e-2 for MaxSim's sums of up to ~30 cosines per passage)."],
  "comparisons": [comparison("cross-encoder, ms-marco-MiniLM-L-6-v2 shape", "cross", f"{tmp}/ms-marco-shape", 1e-4),
                  comparison("MaxSim, all-MiniLM-L6-v2", "maxsim", model, 1e-2)],
  "readme": [],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$target/release/gauge-bench" run "$tmp/plan.json" "$out"
