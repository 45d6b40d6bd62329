#!/usr/bin/env bash
# bench-train: train-lora's training step (LoRA r 16 on all seven projections, 2 sequences of 512
# tokens per step, every position a target, all cores) in one run, each against a reference run
# on the same machine → bench/train.json:
#   1. against PEFT + PyTorch (CPU, fp32, 2 threads' worth: torch's own default) on a random-weight
#      Llama of SmolLM2-135M's shape with the same token ids (gauge holds the base NF4): gauge with
#      its default checkpointing (`auto`, max_memory_mib 1024), with checkpointing off (`none`),
#      recomputing every layer (`layers`), and Burn's ops (the kernels before the host ones);
#      tokens/s and peak resident memory as ratios over PEFT's;
#   2. on SmolLM2-135M-Instruct's Q4_1 GGUF (blocks kept 4-bit) against llama.cpp's prefill
#      (`llama-bench -p 512`) on the same file.
# Needs the torch venv (`just torch-venv`) and llama.cpp (`scripts/llama-cpp.sh`).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/train.json}"
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
py="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}/bin/python3"
seq=512 batch=2 steps=3
"$py" -c "import torch, transformers, peft" 2>/dev/null || { echo "bench-train: $py lacks torch/transformers/peft; run \`just torch-venv\`" >&2; exit 1; }
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
cargo build --release -q --workspace --example bench_train
bin="$CARGO_TARGET_DIR/release/examples/bench_train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
assets=models/all-MiniLM-L6-v2  # a tokenizer file for the random model's folder (the ids are synthetic)
echo "bench-train: a random-weight Llama of SmolLM2-135M's shape" >&2
"$py" scripts/gpu_check.py make-llama "$tmp/llama" "$assets"
for variant in auto none layers; do
  echo "bench-train: gauge, checkpointing $variant" >&2
  "$bin" "$tmp/llama" $seq $batch $steps "$tmp/gauge-$variant.json" --checkpointing $variant > /dev/null
done
echo "bench-train: gauge, Burn's ops" >&2
GAUGE_TRAIN_KERNELS=burn "$bin" "$tmp/llama" $seq $batch $steps "$tmp/gauge-burn.json" > /dev/null
echo "bench-train: PEFT + PyTorch, CPU fp32" >&2
"$py" scripts/gpu_check.py peft-step "$tmp/llama" $seq $batch $steps fp32 cpu > "$tmp/peft.json"
echo "bench-train: gauge on the Q4_1 GGUF, and llama.cpp's prefill" >&2
"$bin" "$model" $seq $batch $steps "$tmp/gguf.json" > /dev/null
"$llama_bin/llama-bench" -m "$model" -p "$seq" -n 0 -t "$(nproc)" -r 3 -o json > "$tmp/llama.json"
python3 - "$tmp" "$out" "$(nproc)" <<'PY'
import json, sys
tmp, out, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
load = lambda n: json.load(open(f"{tmp}/{n}.json"))
peft = load("peft")
peft_mib = peft["peak_memory_bytes"] / 2**20
variants = {v: load(f"gauge-{v}") for v in ("auto", "none", "layers", "burn")}
for g in variants.values():
    g["model"] = "random-llama (scripts/gpu_check.py make-llama, in a temporary folder)"
same = {"model": "random-weight Llama of SmolLM2-135M's shape (f32 folder; gauge holds the base NF4, PEFT fp32)",
        "sequence_tokens": peft["sequence_tokens"], "sequences_per_step": peft["sequences_per_step"],
        "peft_cpu_fp32": peft, "gauge": variants, "ratios_over_peft": {}}
for v, g in variants.items():
    same["ratios_over_peft"][v] = {"checkpointing": g["checkpointing"], "kernels": g["kernels"],
                                   "tokens_per_s": g["tokens_per_s"] / peft["tokens_per_s"],
                                   "peak_memory": g["memory"]["peak_rss_mib"] / peft_mib,
                                   "share_of_peak_useful": g["share_of_peak_useful"]}
g = load("gguf"); llama = load("llama")
pp = [t["avg_ts"] for t in llama if t["n_gen"] == 0][0]
fwd_flops = g["flops_per_token_useful"] / 2  # a forward pass is half the useful training FLOPs
g["llama_cpp"] = {"prefill_tokens_per_s": pp, "threads": threads, "build": llama[0].get("build_commit"),
                  "prefill_flops_per_s": pp * fwd_flops, "prefill_share_of_peak": pp * fwd_flops / g["machine"]["peak_f32_flops"]}
g["ratio_train_over_llama_cpp_prefill_tokens"] = g["tokens_per_s"] / pp
g["ratio_train_over_llama_cpp_prefill_flops"] = g["useful_flops_per_s"] / (pp * fwd_flops)
g["same_shapes_as_peft"] = same
json.dump(g, open(out, "w"), indent=2)
print(json.dumps({"gguf_tokens_per_s": g["tokens_per_s"], "gguf_share_of_peak_useful": g["share_of_peak_useful"],
                  "ratio_over_llama_cpp_prefill": g["ratio_train_over_llama_cpp_prefill_tokens"],
                  "over_peft": same["ratios_over_peft"]}, indent=1))
PY
