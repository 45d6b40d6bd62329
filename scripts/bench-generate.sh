#!/usr/bin/env bash
# bench-generate: gauge's decoder against llama.cpp on the same GGUF files, the same threads, in
# interleaved A/B pairs (gauge-bench, crates/bench) → bench/generate.json. Per format (Q4_0,
# Q4_1, Q8_0, Q4_K_M of one model):
# - decode: 128 single-token steps from an empty cache (llama-bench -n 128), and after 600
#   positions (-d 600);
# - prefill: one 512-token pass (llama-bench -p 512);
# - batched: 1, 4 and 8 sequences of 128-token prompts, 128 lock-step tokens each
#   (llama-batched-bench -npp 128 -ntg 128 -npl 1,4,8), against llama-batched-bench at the same
#   batch and against llama-bench's single stream.
# The shipped file is SmolLM2-135M-Instruct Q4_1; the other formats are made from it by
# llama-quantize --allow-requantize (speed only: requantising a Q4_1 loses quality that a file
# made from the f16 checkpoint keeps; the bytes read per token, which set the speed, are the
# format's). Then the larger local model, Qwen2.5-Coder-1.5B-Instruct Q4_K_M as Qwen publishes it
# (fetched by `just models qwen2.5-1.5b` on first use; $GAUGE_BENCH_LARGE names another, "none"
# skips it): decode 128, prefill 512, batched 1/4/8 — llama.cpp repacks its Q4_K weights for AVX2,
# its best CPU path; and what a LoRA adapter costs it (r 16 on all seven projections, seeded, its
# pairs beside the 4-bit blocks as `answer --adapter` runs one): decode 128 and batch 4 against
# the same model without it. Usage: scripts/bench-generate.sh [MODEL.gguf] [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
out="${2:-bench/generate.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
[ -f "$src" ] || { echo "bench-generate: $src missing (run \`just models\`)" >&2; exit 1; }
large="${GAUGE_BENCH_LARGE:-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}"
if [ "$large" = models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf ] && [ ! -f "$large" ]; then scripts/fetch-models.sh qwen2.5-1.5b; fi
[ "$large" = none ] || [ -f "$large" ] || { echo "bench-generate: $large missing" >&2; exit 1; }
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
# A workspace build (the same features as `just test`: nothing of Burn is rebuilt).
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
bench="$target/release/examples/bench_generate"
harness="$target/release/gauge-bench"
dir="${GAUGE_BENCH_MODELS:-$HOME/.cache/gauge-bench-models}"
mkdir -p "$dir"
base=$(basename "$src" .gguf)
stem=${base%.*}
have=${base##*.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
for t in Q4_0 Q4_1 Q8_0 Q4_K_M; do
  if [ "$t" = "$have" ]; then files+=("$t=$src"); continue; fi
  f="$dir/$stem.$t.gguf"
  if [ ! -f "$f" ] || [ ! -f "$f.log" ]; then
    echo "bench-generate: llama-quantize --allow-requantize $src → $f" >&2
    "$llama_bin/llama-quantize" --allow-requantize "$src" "$f.partial" "$t" > "$f.log.partial" 2>&1
    mv "$f.partial" "$f"
    mv "$f.log.partial" "$f.log"
  fi
  files+=("$t=$f")
done
python3 - "$tmp/plan.json" "$bench" "$llama_bin" "$(nproc)" "$pairs" "$src" "$dir" "$large" "${files[@]}" <<'PY'
import json, sys, re, os
plan_path, bench, llama, threads, pairs, src, qdir, large, *files = sys.argv[1:]
formats = [f.split("=", 1) for f in files]
lb = lambda m, *a: {"argv": [f"{llama}/llama-bench", "-m", m, "-t", threads, "-r", "1", "-o", "json", *a], "format": "llama-bench"}
notes = [f"Formats made from {src} by llama-quantize --allow-requantize (speed only; a format's bytes per token set its speed)."]
for t, f in formats:
    log = f + ".log"
    if os.path.exists(log):
        text = open(log).read()
        census = {}
        for m in re.finditer(r"falling back to\s+(\w+)", text):
            census[m.group(1)] = census.get(m.group(1), 0) + 1
        if census:
            notes.append(f"{t}: llama-quantize fell back for rows whose length (576) is no multiple of 256: " + ", ".join(f"{n} tensors to {k}" for k, n in sorted(census.items())) + "; gauge runs Q5_0/Q5_1 with their generic integer body (no repacked kernel), the K-quants repacked (crates/decoder/src/repack_k.rs).")
comparisons, readme = [], []
for t, f in formats:
    ratio = lambda name, g, r, **k: {"name": name, "gauge": g, "reference": r, "unit": "tok/s", **k}
    comparisons += [
        {"name": f"{t} decode", "gauge": {"argv": [bench, "side", "decode", f, "128"]}, "reference": lb(f, "-p", "0", "-n", "128"),
         "ratios": [ratio("decode", "decode_tokens_per_s", "tg128")]},
        {"name": f"{t} prefill", "gauge": {"argv": [bench, "side", "prefill", f, "512"]}, "reference": lb(f, "-p", "512", "-n", "0"),
         "ratios": [ratio("prefill", "prefill_tokens_per_s", "pp512")]},
        {"name": f"{t} decode after 600", "gauge": {"argv": [bench, "side", "decode", f, "128", "600"]}, "reference": lb(f, "-p", "0", "-n", "128", "-d", "600"),
         "ratios": [ratio("decode", "decode_tokens_per_s", "tg128@d600")]},
        {"name": f"{t} batched", "gauge": {"argv": [bench, "side", "batched", f, "128", "128", "1", "4", "8"]},
         "reference": {"argv": [f"{llama}/llama-batched-bench", "-m", f, "-c", "2048", "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "128", "-npl", "1,4,8", "-t", threads, "-tb", threads, "--output-format", "jsonl"], "format": "llama-batched-bench"},
         "ratios": [ratio(f"batch {b}", f"tg_pl{b}", f"tg_pl{b}") for b in (1, 4, 8)]
                   + [ratio("batch 8 over single stream", "tg_pl8", "tg128", reference_comparison=f"{t} decode")]},
    ]
    readme.append({"what": f"decoding one sequence, SmolLM2-135M {t}, 128 tokens", "comparison": f"{t} decode", "ratio": "decode"})
for t, _ in formats:
    readme.append({"what": f"prefill, SmolLM2-135M {t}, 512 tokens", "comparison": f"{t} prefill", "ratio": "prefill"})
if large != "none":
    name = "Qwen2.5-1.5B Q4_K_M"
    comparisons += [
        {"name": f"{name} decode", "gauge": {"argv": [bench, "side", "decode", large, "128"]}, "reference": lb(large, "-p", "0", "-n", "128"),
         "ratios": [ratio("decode", "decode_tokens_per_s", "tg128")]},
        {"name": f"{name} prefill", "gauge": {"argv": [bench, "side", "prefill", large, "512"]}, "reference": lb(large, "-p", "512", "-n", "0"),
         "ratios": [ratio("prefill", "prefill_tokens_per_s", "pp512")]},
        {"name": f"{name} batched", "gauge": {"argv": [bench, "side", "batched", large, "128", "128", "1", "4", "8"]},
         "reference": {"argv": [f"{llama}/llama-batched-bench", "-m", large, "-c", "2048", "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "128", "-npl", "1,4,8", "-t", threads, "-tb", threads, "--output-format", "jsonl"], "format": "llama-batched-bench"},
         "ratios": [ratio(f"batch {b}", f"tg_pl{b}", f"tg_pl{b}") for b in (1, 4, 8)]},
        {"name": f"{name} + adapter decode", "gauge": {"argv": [bench, "side", "decode", large, "128", "--seeded-adapter", "16"]}, "reference": {"argv": [bench, "side", "decode", large, "128"]},
         "ratios": [ratio("decode", "decode_tokens_per_s", "decode_tokens_per_s")]},
        {"name": f"{name} + adapter batched", "gauge": {"argv": [bench, "side", "batched", large, "128", "128", "4", "--seeded-adapter", "16"]}, "reference": {"argv": [bench, "side", "batched", large, "128", "128", "4"]},
         "ratios": [ratio("batch 4", "tg_pl4", "tg_pl4")]},
    ]
    readme += [{"what": f"decoding one sequence, {name} (Qwen's file), 128 tokens", "comparison": f"{name} decode", "ratio": "decode"},
               {"what": f"prefill, {name}, 512 tokens", "comparison": f"{name} prefill", "ratio": "prefill"},
               {"what": f"decoding 4 sequences in lock-step, {name}, against llama-batched-bench at 4", "comparison": f"{name} batched", "ratio": "batch 4"},
               {"what": f"decoding 8 sequences in lock-step, {name}, against llama-batched-bench at 8", "comparison": f"{name} batched", "ratio": "batch 8"}]
readme.append({"what": "decoding 8 sequences in lock-step, Q4_0, against llama-batched-bench at 8", "comparison": "Q4_0 batched", "ratio": "batch 8"})
readme.append({"what": "the same, against llama-bench's single stream (Q4_0 decode)", "comparison": "Q4_0 batched", "ratio": "batch 8 over single stream"})
plan = {"bench": "generate", "title": "gauge's decoder against llama.cpp (llama-bench, llama-batched-bench) on the same GGUF files, threads and machine",
        "pairs": int(pairs), "reference": "llama.cpp",
        "measures": {"crates": ["gauge-decoder"], "paths": ["crates/decoder/examples/bench_generate.rs", "scripts/bench-generate.sh"]},
        "describe": [{"name": "llama_cpp_version", "argv": [f"{llama}/llama-bench", "--version"]}],
        "notes": notes, "comparisons": comparisons, "readme": readme}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$harness" run "$tmp/plan.json" "$out"
