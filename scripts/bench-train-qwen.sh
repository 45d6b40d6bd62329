#!/usr/bin/env bash
# bench-train-qwen: train-lora's step at the 1.5B scale of `just train-sft-qwen` (LoRA r 16 on all
# seven projections, one sequence of 512 tokens, every position a target, AdamW with clipping, all
# cores, no layer recomputed — the setting train-sft-qwen's memory budget picks) against its
# references in interleaved A/B pairs (gauge-bench, crates/bench) → bench/train-qwen.json:
#   1. like for like: gauge with the base in f32 against PEFT + PyTorch CPU fp32 on a random-weight
#      Qwen2 of Qwen2.5-1.5B's shape (q/k/v biases, GQA 6:1, tied 151,936-token embeddings;
#      scripts/bench_train_qwen2.py make-qwen2), the same token ids; the first step's loss must
#      agree to 1e-3 in every pair (LoRA B starts at zero: the base's loss);
#   2. gauge's step on Qwen2.5-Coder-1.5B-Instruct Q4_K_M itself (Q4_K/Q6_K blocks frozen, dequantised
#      per layer as the step reads them: what train-sft-qwen runs) against llama.cpp's prefill of 512
#      tokens on the same file (a forward pass: the step does forward and backward).
# Memory: the peak resident set, and the peak above a baseline taken after imports and the model's
# load, for both sides. Needs the torch venv (`just torch-venv`), llama.cpp and ~7 GB of disk for the
# random fp32 model. GAUGE_BENCH_PAIRS (default 5, the harness's least: a pair takes ~6 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/train-qwen.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
model=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
py="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}/bin/python3"
seq=512 batch=1 steps=2
"$py" -c "import torch, transformers, peft" 2>/dev/null || { echo "bench-train-qwen: $py lacks torch/transformers/peft; run \`just torch-venv\`" >&2; exit 1; }
scripts/fetch-models.sh qwen2.5-1.5b >&2
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
bin="$target/release/examples/bench_train"
harness="$target/release/gauge-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "bench-train-qwen: a random-weight Qwen2 of Qwen2.5-1.5B's shape (fp32, ~6 GB)" >&2
"$py" scripts/bench_train_qwen2.py make-qwen2 "$tmp/qwen2" models/all-MiniLM-L6-v2
python3 - "$tmp/plan.json" "$bin" "$py" "$tmp/qwen2" "$model" "$llama_bin" "$(nproc)" "$pairs" "$seq" "$batch" "$steps" <<'PY'
import json, sys
plan_path, bin_, py, qwen_dir, gguf, llama, threads, pairs, seq, batch, steps = sys.argv[1:]
peft = {"argv": [py, "scripts/bench_train_qwen2.py", "peft-side", qwen_dir, seq, batch, steps]}
gauge = lambda *a: {"argv": [bin_, "side", *a, "--checkpointing", "none"]}
speed_and_memory = [
    {"name": "speed", "gauge": "tokens_per_s", "reference": "tokens_per_s", "unit": "tok/s"},
    {"name": "peak memory", "gauge": "peak_rss_mib", "reference": "peak_rss_mib", "unit": "MiB", "better": "lower"},
    {"name": "memory above baseline", "gauge": "above_baseline_mib", "reference": "above_baseline_mib", "unit": "MiB", "better": "lower"},
]
plan = {
  "bench": "train-qwen", "reference": "PEFT + PyTorch CPU fp32 (llama.cpp for the GGUF row)", "pairs": int(pairs),
  "title": f"train-lora's step at 1.5B (Qwen2 shape; LoRA r 16, all seven projections, {batch} × {seq} tokens) against PEFT + PyTorch on the CPU, and on Qwen2.5-Coder-1.5B Q4_K_M against llama.cpp's prefill",
  "measures": {"crates": ["gauge-train"], "paths": ["crates/train/examples/bench_train.rs", "scripts/bench-train-qwen.sh", "scripts/bench_train_qwen2.py", "scripts/gpu_check.py"]},
  "describe": [{"name": "llama_cpp_version", "argv": [f"{llama}/llama-bench", "--version"]}],
  "notes": [
    "Model of the PEFT rows: a random-weight Qwen2 of Qwen2.5-1.5B's shape (scripts/bench_train_qwen2.py make-qwen2, fp32 safetensors, q/k/v biases set); token ids synthetic, the same on both sides.",
    "gauge keeps every activation (checkpointing none, as train-sft-qwen's 12 GB budget picks); PEFT's peak includes its full fp32 logits (vocabulary 151,936 × 512 positions) and Python/torch; 'memory above baseline' subtracts the resident set after imports and the model's load on each side.",
    "The GGUF row's reference is a forward pass only (llama-bench -p 512): the ratio says how much of llama.cpp's prefill speed the training step (forward, backward, AdamW) keeps.",
  ],
  "comparisons": [
    {"name": "f32 base", "gauge": gauge(qwen_dir, seq, batch, steps, "--base", "f32"), "reference": peft,
     "ratios": speed_and_memory, "equal": [{"gauge": "first_step_loss", "reference": "first_step_loss", "tolerance": 1e-3}]},
    {"name": "Q4_K_M GGUF", "gauge": gauge(gguf, seq, batch, steps),
     "reference": {"argv": [f"{llama}/llama-bench", "-m", gguf, "-p", seq, "-n", "0", "-t", threads, "-r", "1", "-o", "json"], "format": "llama-bench"},
     "ratios": [{"name": "step over prefill", "gauge": "tokens_per_s", "reference": f"pp{seq}", "unit": "tok/s"}]},
  ],
  "readme": [],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$harness" run "$tmp/plan.json" "$out"
