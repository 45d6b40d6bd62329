#!/usr/bin/env bash
# bench-generate: prefill and decode tokens/s of gauge's Burn decoder and of llama.cpp
# (`llama-bench`, built by scripts/llama-cpp.sh) on the same GGUF, the same prompt lengths
# (the SmolLM2 fixture prompts), one stream, all cores, in the same run → bench/generate.json.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
out="${2:-bench/generate.json}"
decode=32
reference=../shared/fixtures/smollm2/reference.jsonl
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
cargo build --release -q --example bench_generate -p gauge-decoder
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$CARGO_TARGET_DIR/release/examples/bench_generate" "$model" "$reference" "$decode" "$tmp/gauge.json"
"$CARGO_TARGET_DIR/release/examples/bench_generate" "$model" "$reference" "$decode" "$tmp/gauge-q.json" --quantized
lengths=$(python3 -c "import json,sys; print(','.join(str(json.loads(l)['n_prompt_tokens']) for l in open(sys.argv[1]) if l.strip()))" "$reference")
threads=$(nproc)
"$llama_bin/llama-bench" -m "$model" -p "$lengths" -n "$decode" -t "$threads" -r 3 -o json > "$tmp/llama.json"
python3 - "$tmp/gauge.json" "$tmp/llama.json" "$out" "$threads" "$tmp/gauge-q.json" <<'PY'
import json, sys
gauge = json.load(open(sys.argv[1])); llama = json.load(open(sys.argv[2])); quant = json.load(open(sys.argv[5]))
qp = {p["name"]: p for p in quant["prompts"]}
pp = {t["n_prompt"]: t["avg_ts"] for t in llama if t["n_gen"] == 0}
tg = [t["avg_ts"] for t in llama if t["n_prompt"] == 0]
tg = tg[0] if tg else None
bw, peak = gauge["machine"]["read_bandwidth_bytes_per_s"], gauge["machine"]["peak_f32_flops"]
rows = []
for p in gauge["prompts"]:
    n = p["prompt_tokens"]
    lp = pp.get(n)
    q = qp[p["name"]]
    rows.append({**p, "quantized_prefill_tokens_per_s": q["prefill_tokens_per_s"], "quantized_decode_tokens_per_s": q["decode_tokens_per_s"],
                 "quantized_decode_share_of_memory_bandwidth": q["decode_share_of_memory_bandwidth"],
                 "llama_cpp_prefill_tokens_per_s": lp, "llama_cpp_decode_tokens_per_s": tg,
                 "prefill_ratio_gauge_over_llama_cpp": p["prefill_tokens_per_s"] / lp if lp else None,
                 "decode_ratio_gauge_over_llama_cpp": p["decode_tokens_per_s"] / tg if tg else None,
                 "llama_cpp_decode_share_of_memory_bandwidth": tg * quant["weight_bytes_read_per_token"] / bw if tg else None})
gauge["prompts"] = rows
gauge["quantized_weight_bytes_read_per_token"] = quant["weight_bytes_read_per_token"]
gauge["llama_cpp"] = {"build": llama[0].get("build_commit"), "threads": int(sys.argv[4]), "note": "llama-bench -r 3, same GGUF; its CPU kernels quantise activations to Q8 for the dot products"}
json.dump(gauge, open(sys.argv[3], "w"), indent=2)
print(json.dumps(rows, indent=1))
PY
