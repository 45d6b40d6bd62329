#!/usr/bin/env bash
# bench-train-encoder: train-lora --target embedder's step on all-MiniLM-L6-v2 (InfoNCE, 16
# queries × their positives + 2 hard negatives = 48 FRA passages ≤ 256 tokens, AdamW) in one run,
# against two references on the same machine → bench/train-encoder.json:
#   1. sentence-transformers + PEFT (CPU fp32, torch's threads): MultipleNegativesRankingLoss
#      on the same token ids (scripts/gpu_check.py st-step), LoRA r 16 on the six linear modules
#      of every layer and full fine-tuning — tokens/s and peak resident memory as ratios;
#   2. gauge's inference encoder over the same texts (the `embed` stage's speed).
# gauge runs each variant in its own process (host kernels, the CPU default; and Burn's
# autodiff, the kernels before them), so each peak memory is that variant's.
# Needs the torch venv (`just torch-venv`).
set -euo pipefail
cd "$(dirname "$0")/.."
chunks="$1"
out="${2:-bench/train-encoder.json}"
steps="${3:-3}"
model=models/all-MiniLM-L6-v2
py="${GAUGE_VENV:-$HOME/.cache/gauge-torch-venv}/bin/python3"
"$py" -c "import torch, sentence_transformers, peft" 2>/dev/null || { echo "bench-train-encoder: $py lacks torch/sentence-transformers/peft; run \`just torch-venv\`" >&2; exit 1; }
bin="$CARGO_TARGET_DIR/release/examples/bench_encoder"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for variant in lora_r16 full lora_r16_burn full_burn; do
  echo "bench-train-encoder: gauge $variant" >&2
  ids=-; [ "$variant" = lora_r16 ] && ids="$tmp/ids.json"
  "$bin" "$model" "$chunks" "$tmp/gauge-$variant.json" "$steps" "$ids" "$variant" > /dev/null
done
for tuning in lora full; do
  echo "bench-train-encoder: sentence-transformers $tuning" >&2
  "$py" scripts/gpu_check.py st-step "$model" "$tmp/ids.json" "$steps" "$tuning" cpu 2> "$tmp/st-$tuning.err" > "$tmp/st-$tuning.json" || { cat "$tmp/st-$tuning.err" >&2; exit 1; }
done
python3 - "$tmp" "$out" <<'PY'
import json, sys
tmp, out = sys.argv[1], sys.argv[2]
load = lambda n: json.load(open(f"{tmp}/{n}.json"))
report = load("gauge-lora_r16")
for v in ("full", "lora_r16_burn", "full_burn"):
    report[v] = load(f"gauge-{v}")[v]
st = {"lora_r16": load("st-lora"), "full": load("st-full")}
report["sentence_transformers_cpu_fp32"] = st
report["ratios_over_sentence_transformers"] = {
    v: {"kernels": report[v]["kernels"],
        "tokens_per_s": report[v]["tokens_per_s"] / st[v.replace("_burn", "")]["tokens_per_s"],
        "peak_memory": report[v]["peak_rss_mib"] / (st[v.replace("_burn", "")]["peak_memory_bytes"] / 2**20),
        "first_step_loss_gauge": report[v]["first_step_loss"],
        "first_step_loss_sentence_transformers": st[v.replace("_burn", "")]["loss_first_step"]}
    for v in ("lora_r16", "full", "lora_r16_burn", "full_burn")}
report["host_over_burn"] = {v: report[v]["tokens_per_s"] / report[f"{v}_burn"]["tokens_per_s"] for v in ("lora_r16", "full")}
json.dump(report, open(out, "w"), indent=2)
print(json.dumps({"ratios_over_sentence_transformers": report["ratios_over_sentence_transformers"], "host_over_burn": report["host_over_burn"]}, indent=2))
PY
