#!/usr/bin/env bash
# bench-train-encoder: train-lora --target embedder's step on all-MiniLM-L6-v2 (InfoNCE, 16
# queries × their positives + 2 hard negatives = 48 FRA passages ≤ 256 tokens, AdamW, clipping)
# against sentence-transformers + PEFT (CPU fp32) on the same token ids, in interleaved A/B
# pairs (gauge-bench, crates/bench) → bench/train-encoder.json:
#   LoRA r 16 on the six linear modules of every layer, and full fine-tuning; each against the
#   reference with sentence-transformers' own collator (every column padded to its longest) and
#   with a length-bucketed one (each column's texts sorted by length, encoded 4 at a time);
#   the first step's loss must agree to 1e-4 in every pair (dropout off on both sides: the same
#   function of the same ids).
# A torch.profiler table of one PEFT LoRA step and one full step is stored with the file
# (`describe`): where the LoRA step spends the time the full step does not.
# Needs the torch venv (`just torch-venv`). Usage: scripts/bench-train-encoder.sh CHUNKS_PARQUET [OUT] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
chunks="$1"
out="${2:-bench/train-encoder.json}"
steps="${3:-2}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
model=models/all-MiniLM-L6-v2
py="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}/bin/python3"
"$py" -c "import torch, sentence_transformers, peft" 2>/dev/null || { echo "bench-train-encoder: $py lacks torch/sentence-transformers/peft; run \`just torch-venv\`" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
bin="$target/release/examples/bench_encoder"
harness="$target/release/gauge-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The step's token ids, written once by gauge's tokenizer for the reference to read.
"$bin" "$model" "$chunks" "$tmp/unused.json" 1 "$tmp/ids.json" lora_r16 > /dev/null 2>&1
python3 - "$tmp/plan.json" "$bin" "$py" "$model" "$chunks" "$tmp/ids.json" "$steps" "$pairs" <<'PY'
import json, sys
plan_path, bin_, py, model, chunks, ids, steps, pairs = sys.argv[1:]
ref = lambda tuning, collator: {"argv": [py, "scripts/bench_encoder_reference.py", "step", model, ids, steps, tuning, collator]}
gauge = lambda variant: {"argv": [bin_, "side", model, chunks, steps, variant]}
ratios = [
    {"name": "speed", "gauge": "tokens_per_s", "reference": "tokens_per_s", "unit": "tok/s"},
    {"name": "peak memory", "gauge": "peak_rss_mib", "reference": "peak_rss_mib", "unit": "MiB", "better": "lower"},
    {"name": "memory above baseline", "gauge": "above_baseline_mib", "reference": "above_baseline_mib", "unit": "MiB", "better": "lower"},
]
equal = [{"gauge": "first_step_loss", "reference": "first_step_loss", "tolerance": 1e-4}]
comparisons = []
for variant, tuning in (("lora_r16", "lora"), ("full", "full")):
    for collator in ("padded", "bucketed"):
        comparisons.append({"name": f"{tuning}, {collator} reference", "gauge": gauge(variant), "reference": ref(tuning, collator), "ratios": ratios, "equal": equal})
plan = {
  "bench": "train-encoder", "reference": "sentence-transformers + PEFT CPU fp32", "pairs": int(pairs),
  "title": "train-lora --target embedder's step on all-MiniLM-L6-v2 (16 queries × positive + 2 hard negatives, InfoNCE) against sentence-transformers + PEFT on the same token ids",
  "measures": {"crates": ["gauge-train"], "paths": ["crates/train/examples/bench_encoder.rs", "scripts/bench-train-encoder.sh", "scripts/bench_encoder_reference.py"]},
  "describe": [{"name": "profile_lora_and_full_step", "argv": [py, "scripts/bench_encoder_reference.py", "profile", model, ids]}],
  "notes": ["Token ids written by gauge's tokenizer (truncation keeps the final [SEP]) and read by the reference; tokens/s counts real tokens on both sides (the reference's token slots are in its figures).",
            "Both sides run with dropout off, so they compute the same function: the harness checks the first step's loss in every pair."],
  "comparisons": comparisons,
  "readme": [
    {"what": "embedder LoRA step, all-MiniLM-L6-v2, 16 queries × 48 passages (first-step loss equal to 1e-4), reference with a length-bucketed collator", "comparison": "lora, bucketed reference", "ratio": "speed"},
    {"what": "the same, against sentence-transformers' own padded collator", "comparison": "lora, padded reference", "ratio": "speed"},
    {"what": "the same, memory above the baseline after imports and load (bucketed reference)", "comparison": "lora, bucketed reference", "ratio": "memory above baseline"},
  ],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$harness" run "$tmp/plan.json" "$out"
