#!/usr/bin/env bash
# bench-train: train-lora's training step (LoRA r 16 on all seven projections, 2 sequences of 512
# tokens, every position a target, AdamW with clipping, all cores) against its references in
# interleaved A/B pairs (gauge-bench, crates/bench) → bench/train.json:
#   1. like for like: gauge with the base in f32 against PEFT + PyTorch CPU fp32 on a random-weight
#      Llama of SmolLM2-135M's shape (scripts/gpu_check.py make-llama), the same token ids; the
#      first step's loss must agree to 1e-4 in every pair (LoRA B starts at zero: the base's loss);
#   2. gauge's default storage (the base NF4, 4 bits) against the same PEFT fp32 run — a different
#      base precision, labelled so;
#   3. gauge's step on the SmolLM2-135M-Instruct Q4_1 GGUF (blocks kept) against llama.cpp's
#      prefill of 512 tokens on the same file (a forward pass: the step does forward and backward).
# Memory: the peak resident set and the peak above a baseline taken after imports and the model's
# load, for both sides. Needs the torch venv (`just torch-venv`) and llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/train.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
py="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}/bin/python3"
seq=512 batch=2 steps=3
"$py" -c "import torch, transformers, peft" 2>/dev/null || { echo "bench-train: $py lacks torch/transformers/peft; run \`just torch-venv\`" >&2; exit 1; }
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
bin="$target/release/examples/bench_train"
harness="$target/release/gauge-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "bench-train: a random-weight Llama of SmolLM2-135M's shape" >&2
"$py" scripts/gpu_check.py make-llama "$tmp/llama" models/all-MiniLM-L6-v2
python3 - "$tmp/plan.json" "$bin" "$py" "$tmp/llama" "$model" "$llama_bin" "$(nproc)" "$pairs" "$seq" "$batch" "$steps" <<'PY'
import json, sys
plan_path, bin_, py, llama_dir, gguf, llama, threads, pairs, seq, batch, steps = sys.argv[1:]
peft = {"argv": [py, "scripts/gpu_check.py", "peft-side", llama_dir, seq, batch, steps]}
gauge = lambda *a: {"argv": [bin_, "side", *a]}
speed_and_memory = [
    {"name": "speed", "gauge": "tokens_per_s", "reference": "tokens_per_s", "unit": "tok/s"},
    {"name": "peak memory", "gauge": "peak_rss_mib", "reference": "peak_rss_mib", "unit": "MiB", "better": "lower"},
    {"name": "memory above baseline", "gauge": "above_baseline_mib", "reference": "above_baseline_mib", "unit": "MiB", "better": "lower"},
]
plan = {
  "bench": "train", "reference": "PEFT + PyTorch CPU fp32 (llama.cpp for the GGUF row)", "pairs": int(pairs),
  "title": f"train-lora's step (LoRA r 16, all seven projections, {batch} × {seq} tokens) against PEFT + PyTorch on the CPU, and on a GGUF against llama.cpp's prefill",
  "measures": {"crates": ["gauge-train"], "paths": ["crates/train/examples/bench_train.rs", "scripts/bench-train.sh", "scripts/gpu_check.py"]},
  "describe": [{"name": "llama_cpp_version", "argv": [f"{llama}/llama-bench", "--version"]}],
  "notes": [
    "Model of the PEFT rows: a random-weight Llama of SmolLM2-135M's shape (scripts/gpu_check.py make-llama, fp32 safetensors); token ids synthetic, the same on both sides.",
    "PEFT's peak includes its full fp32 logits (vocabulary 49,152 × 1,024 positions) and Python/torch; 'memory above baseline' subtracts the resident set after imports and the model's load on each side.",
    "The GGUF row's reference is a forward pass only (llama-bench -p 512): the ratio says how much of llama.cpp's prefill speed the training step (forward, backward, AdamW) keeps.",
  ],
  "comparisons": [
    {"name": "f32 base", "gauge": gauge(llama_dir, seq, batch, steps, "--base", "f32"), "reference": peft,
     "ratios": speed_and_memory, "equal": [{"gauge": "first_step_loss", "reference": "first_step_loss", "tolerance": 1e-4}]},
    {"name": "NF4 base", "gauge": gauge(llama_dir, seq, batch, steps), "reference": peft, "ratios": speed_and_memory},
    {"name": "Q4_1 GGUF", "gauge": gauge(gguf, seq, batch, steps),
     "reference": {"argv": [f"{llama}/llama-bench", "-m", gguf, "-p", seq, "-n", "0", "-t", threads, "-r", "1", "-o", "json"], "format": "llama-bench"},
     "ratios": [{"name": "step over prefill", "gauge": "tokens_per_s", "reference": f"pp{seq}", "unit": "tok/s"}]},
  ],
  "readme": [
    {"what": f"LoRA training step, r 16 on all projections, {batch} × {seq} tokens, base f32 on both sides (first-step loss equal to 1e-4)", "comparison": "f32 base", "ratio": "speed"},
    {"what": "the same, memory above the baseline after imports and load", "comparison": "f32 base", "ratio": "memory above baseline"},
    {"what": "the same with gauge's base in NF4 (its default; PEFT still fp32)", "comparison": "NF4 base", "ratio": "speed"},
    {"what": "the same, NF4, peak memory (PEFT's includes Python/torch and full fp32 logits)", "comparison": "NF4 base", "ratio": "peak memory"},
  ],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$harness" run "$tmp/plan.json" "$out"
