#!/usr/bin/env bash
# bench-train: tokens/s of train-lora's training step (SmolLM2-135M Q4_1, LoRA r 16 on all seven
# projections, sequences of 512 tokens, 2 per step, all cores) and, in the same run on the same
# GGUF and length, llama.cpp's prefill (`llama-bench -p 512`) as the reference → bench/train.json.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
out="${2:-bench/train.json}"
seq=512
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
cargo build --release -q --workspace --example bench_train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$CARGO_TARGET_DIR/release/examples/bench_train" "$model" "$seq" 2 3 "$tmp/gauge.json"
threads=$(nproc)
"$llama_bin/llama-bench" -m "$model" -p "$seq" -n 0 -t "$threads" -r 3 -o json > "$tmp/llama.json"
python3 - "$tmp/gauge.json" "$tmp/llama.json" "$out" "$threads" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); llama = json.load(open(sys.argv[2]))
pp = [t["avg_ts"] for t in llama if t["n_gen"] == 0][0]
fwd_flops = g["flops_per_token_useful"] / 2  # a forward pass is half the useful training FLOPs
g["llama_cpp"] = {"prefill_tokens_per_s": pp, "threads": int(sys.argv[4]), "build": llama[0].get("build_commit"),
                  "prefill_flops_per_s": pp * fwd_flops, "prefill_share_of_peak": pp * fwd_flops / g["machine"]["peak_f32_flops"]}
g["ratio_train_over_llama_cpp_prefill_tokens"] = g["tokens_per_s"] / pp
g["ratio_train_over_llama_cpp_prefill_flops"] = g["useful_flops_per_s"] / (pp * fwd_flops)
json.dump(g, open(sys.argv[3], "w"), indent=2)
print(json.dumps({k: g[k] for k in ("tokens_per_s", "share_of_peak_useful", "ratio_train_over_llama_cpp_prefill_tokens", "ratio_train_over_llama_cpp_prefill_flops")}, indent=1))
PY
