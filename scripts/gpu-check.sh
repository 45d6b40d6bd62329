#!/usr/bin/env bash
# The prepared GPU check: gauge's CUDA embedding and GPU faiss against gauge on the CPU and
# against PyTorch / sentence-transformers / faiss CPU on the same machine, in the same run.
#
#   scripts/gpu-check.sh [--cpu-only] OUT_DIR
#
# On a GPU machine (NVIDIA driver >= 580, CUDA 13 runtime libraries, Python with torch,
# transformers and sentence-transformers; no Rust, no network) it runs the binary that
# `just build-gpu` packed into dist/gpu-check.tar.xz (carried there with the repository),
# makes a BERT of all-MiniLM-L6-v2's shape with seeded random weights through transformers,
# and writes to OUT_DIR:
#   - parity: gauge CUDA vs gauge CPU vs PyTorch (sentence-transformers, fp32) vectors on the
#     fixture texts and 2,000 synthetic passages; each pair must reach cosine >= 0.9999;
#   - throughput: gauge CUDA on 20,000 synthetic passages of ~250 word pieces vs
#     sentence-transformers fp32, fp16 and bf16 on the same GPU, as ratios;
#   - faiss: Flat and IVF-PQ on 1M random 384-d vectors (around random centres), build and search time on the GPU vs
#     the CPU, recall@10 against exact search;
#   - training: train-lora's step (bench_train, also in the bundle) on a random-weight Llama of
#     SmolLM2-135M's shape made by transformers, LoRA r 16 on all seven projections, 2 × 512
#     tokens, gauge CUDA (NF4 base) vs PEFT + PyTorch fp32 and bf16 on the same shapes and token
#     ids; and PEFT loading gauge's saved adapter: its logits must match gauge's to 1e-3.
# With --cpu-only (no GPU: this is what runs here and in tests) it does the CPU half: gauge
# CPU vs the PyTorch fixture vectors of the real all-MiniLM-L6-v2 (when `just models` has run),
# gauge CPU vs a float64 numpy BERT on a random-weight model (numpy-made when torch is absent),
# gauge CPU throughput, faiss CPU on 100k vectors, and gauge's training step on the real SmolLM2
# GGUF (2 × 128 tokens); when the Python has torch, transformers and peft (`just check-peft`
# installs them, with sentence-transformers), also gauge CPU vs PyTorch CPU vectors on the
# random-weight BERT, and the training comparison above on the CPU: gauge CPU (NF4 base) vs PEFT +
# PyTorch CPU fp32, 2 × 512 tokens, and PEFT loading gauge's adapter.
# Results: OUT_DIR/gpu-check.json (everything), OUT_DIR/gpu-check.md (the tables), logs.
# Exit status 1 when a parity check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
cpu_only=0
if [ "${1:-}" = "--cpu-only" ]; then cpu_only=1; shift; fi
out=${1:?usage: scripts/gpu-check.sh [--cpu-only] OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "gpu-check: $*" >&2; }
started=$(date +%s)

if [ $cpu_only -eq 0 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no nvidia-smi on this machine; run with --cpu-only for the CPU half" >&2
  exit 2
fi

# --- the gauge binary: the packed bundle, else a local build --------------------------------
bundle=dist/gpu-check
if [ ! -x "$bundle/bin/gpu_check" ] && [ -f dist/gpu-check.tar.xz ]; then
  log "unpacking dist/gpu-check.tar.xz"
  mkdir -p dist && tar -xJf dist/gpu-check.tar.xz -C dist
fi
# The CPU half prefers a CPU build from this checkout (the bundle's binary needs CUDA 13's
# runtime libraries even for its CPU paths); the GPU half runs the bundle.
local_build=0
[ $cpu_only -eq 1 ] && command -v cargo >/dev/null 2>&1 && local_build=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gauge-target}"
if [ -n "${GAUGE_GPU_CHECK_BIN:-}" ]; then
  bin=$GAUGE_GPU_CHECK_BIN
elif [ $local_build -eq 1 ]; then
  cargo build --release -q --workspace --example gpu_check
  bin=$CARGO_TARGET_DIR/release/examples/gpu_check
elif [ -x "$bundle/bin/gpu_check" ]; then
  bin=$bundle/bin/gpu_check
  export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "gpu-check: no gauge binary: run \`just build-gpu\` on the build machine and carry dist/gpu-check.tar.xz" >&2
  exit 2
fi
if [ $cpu_only -eq 0 ]; then
  # CUDA 13's cudart/cuBLAS (faiss GPU) and NVRTC (Burn's CUDA kernels) from the machine's toolkit.
  for d in "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-13.0; do
    [ -n "$d" ] && [ -d "$d/lib64" ] && export LD_LIBRARY_PATH="$d/lib64:${LD_LIBRARY_PATH:-}" && break
  done
  # Else the CUDA 13 libraries PyTorch's wheels brought (site-packages/nvidia/...).
  for lib in libcudart.so.13 libcublas.so.13 libnvrtc.so.13; do
    have=0
    ldconfig -p 2>/dev/null | grep -q "$lib" && have=1
    IFS=: read -ra dirs <<< "${LD_LIBRARY_PATH:-}"
    for d in "${dirs[@]}"; do [ -n "$d" ] && [ -e "$d/$lib" ] && have=1; done
    if [ $have -eq 0 ]; then
      found=$(find /usr/local /usr/lib $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) -name "$lib" 2>/dev/null | head -n1 || true)
      [ -n "$found" ] && export LD_LIBRARY_PATH="$(dirname "$found"):${LD_LIBRARY_PATH:-}"
    fi
  done
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
fi
if missing=$(ldd "$bin" 2>/dev/null | grep "not found"); [ -n "$missing" ]; then
  echo "gpu-check: $bin cannot load: $missing (set LD_LIBRARY_PATH to the CUDA 13 lib64 folder)" >&2
  exit 2
fi
log "binary $bin ($(du -h "$bin" | cut -f1))"

# --- Python ----------------------------------------------------------------------------------
py=python3
if [ $cpu_only -eq 1 ] && [ -x "${GAUGE_VENV:-$HOME/.cache/gauge-venv}/bin/python3" ]; then
  py=${GAUGE_VENV:-$HOME/.cache/gauge-venv}/bin/python3
fi
"$py" -c "import numpy, tokenizers" 2>/dev/null || { echo "gpu-check: $py needs numpy and tokenizers (just bench-venv)" >&2; exit 2; }
pyc() { "$py" scripts/gpu_check.py "$@"; }
has_torch=0
"$py" -c "import torch, transformers" 2>/dev/null && has_torch=1
has_peft=0
"$py" -c "import torch, transformers, peft" 2>/dev/null && has_peft=1
has_st=0
"$py" -c "import torch, sentence_transformers" 2>/dev/null && has_st=1
if [ $cpu_only -eq 0 ]; then
  "$py" -c "import torch, transformers, sentence_transformers; assert torch.cuda.is_available()" \
    || { echo "gpu-check: the GPU half needs torch (with CUDA), transformers and sentence-transformers" >&2; exit 2; }
fi

# --- inputs ----------------------------------------------------------------------------------
assets=$bundle/assets
[ -f "$assets/tokenizer.json" ] || assets=models/all-MiniLM-L6-v2
[ -f "$assets/tokenizer.json" ] || { echo "gpu-check: no tokenizer: run \`just models\` (or carry dist/gpu-check.tar.xz)" >&2; exit 2; }
fixture=../shared/fixtures/minilm-reference.jsonl
if [ -f "$bundle/fixture-texts.jsonl" ]; then cp "$bundle/fixture-texts.jsonl" "$work/fixture.jsonl"
elif [ -f "$fixture" ]; then pyc texts "$fixture" "$work/fixture.jsonl"
else echo "gpu-check: no fixture texts (../shared/fixtures or the bundle)" >&2; exit 2; fi
if [ $cpu_only -eq 1 ]; then n_passages=500; n_parity=64; n_faiss=20000; n_queries=200
else n_passages=20000; n_parity=2000; n_faiss=1000000; n_queries=1000; fi
pyc passages "$n_passages" "$work/passages.jsonl"
head -n "$n_parity" "$work/passages.jsonl" > "$work/parity.jsonl"

results=$work/results.jsonl
: > "$results"
# Results name the scratch folder's files as work/…, not by this machine's temporary path.
record() { echo "{\"name\": \"$1\", \"result\": ${2//"$work/"/"work/"}}" >> "$results"; }
embed() { # MODEL TEXTS DEVICE OUT → timing JSON
  "$bin" embed "$1" "$2" "$3" "$4" 256 2>> "$out/gpu_check.log"
}
compare() { pyc compare "$1" "$2" 384; }

# --- 1. parity with the real all-MiniLM-L6-v2 (CPU half, when the weights are here) ------------
if [ $cpu_only -eq 1 ] && [ -f models/all-MiniLM-L6-v2/model.safetensors ] && [ -f "$fixture" ]; then
  log "parity: real all-MiniLM-L6-v2, gauge CPU vs the PyTorch fixture vectors"
  embed models/all-MiniLM-L6-v2 "$work/fixture.jsonl" cpu "$work/real-cpu.f32" > /dev/null
  pyc fixture-vectors "$fixture" "$work/real-torch.f32"
  record "parity/minilm/fixture/gauge-cpu~pytorch" "$(compare "$work/real-cpu.f32" "$work/real-torch.f32")"
fi

# --- 2. a random-weight BERT of MiniLM's shape --------------------------------------------------
model=$work/bert-random
if [ $has_torch -eq 1 ]; then maker=transformers; else maker=numpy; fi
log "making a random-weight BERT (all-MiniLM-L6-v2 shape) with $maker"
pyc make-model "$model" "$assets" "$maker"
for set in fixture parity; do
  embed "$model" "$work/$set.jsonl" cpu "$work/$set-cpu.f32" > /dev/null
  if [ $cpu_only -eq 1 ]; then
    log "parity ($set): gauge CPU vs numpy float64"
    pyc reference "$model" "$work/$set.jsonl" "$work/$set-ref.f32" numpy
    record "parity/random/$set/gauge-cpu~numpy-f64" "$(compare "$work/$set-cpu.f32" "$work/$set-ref.f32")"
    if [ $has_st -eq 1 ]; then
      log "parity ($set): gauge CPU vs PyTorch CPU fp32 (sentence-transformers)"
      pyc reference "$model" "$work/$set.jsonl" "$work/$set-torch.f32" torch-cpu 2>> "$out/python.log"
      record "parity/random/$set/gauge-cpu~pytorch-cpu" "$(compare "$work/$set-cpu.f32" "$work/$set-torch.f32")"
    fi
  else
    log "parity ($set): gauge CUDA, gauge CPU, PyTorch CUDA fp32"
    embed "$model" "$work/$set.jsonl" cuda "$work/$set-cuda.f32" > /dev/null
    pyc reference "$model" "$work/$set.jsonl" "$work/$set-ref.f32" torch-cuda
    record "parity/random/$set/gauge-cuda~gauge-cpu" "$(compare "$work/$set-cuda.f32" "$work/$set-cpu.f32")"
    record "parity/random/$set/gauge-cuda~pytorch" "$(compare "$work/$set-cuda.f32" "$work/$set-ref.f32")"
    record "parity/random/$set/gauge-cpu~pytorch" "$(compare "$work/$set-cpu.f32" "$work/$set-ref.f32")"
  fi
done

# --- 3. throughput ---------------------------------------------------------------------------
if [ $cpu_only -eq 1 ]; then
  log "throughput: gauge CPU on $n_passages passages"
  record "throughput/gauge-cpu" "$(embed "$model" "$work/passages.jsonl" cpu "$work/passages-cpu.f32")"
else
  log "throughput: gauge CUDA and sentence-transformers on $n_passages passages"
  record "throughput/gauge-cuda" "$(embed "$model" "$work/passages.jsonl" cuda "$work/passages-cuda.f32")"
  for dtype in fp32 fp16 bf16; do
    record "throughput/sentence-transformers-$dtype" "$(pyc st-throughput "$model" "$work/passages.jsonl" $dtype 2>> "$out/python.log")"
  done
fi

# --- 4. faiss --------------------------------------------------------------------------------
devices=cpu; [ $cpu_only -eq 0 ] && devices=cpu,cuda
log "faiss: Flat and IVF-PQ on $n_faiss × 384 on $devices"
"$bin" faiss "$n_faiss" 384 "$n_queries" "$devices" "$work/faiss.json" 2>> "$out/gpu_check.log"
record "faiss" "$("$py" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$work/faiss.json")"

# --- 5. LoRA training (train-lora's step) --------------------------------------------------------
compact() { "$py" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$1"; }
train_bin=${GAUGE_TRAIN_BIN:-}
if [ -z "$train_bin" ] && [ $local_build -eq 1 ]; then
  cargo build --release -q --workspace --example bench_train
  train_bin=$CARGO_TARGET_DIR/release/examples/bench_train
fi
if [ -z "$train_bin" ] && [ -x "$bundle/bin/bench_train" ]; then train_bin=$bundle/bin/bench_train; fi
if [ -n "$train_bin" ]; then
  if [ $cpu_only -eq 1 ]; then
    if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
      log "train: gauge CPU, SmolLM2-135M Q4_1, r 16 on all projections, 2 × 128 tokens"
      "$train_bin" models/SmolLM2-135M-Instruct.Q4_1.gguf 128 2 1 "$work/train-cpu.json" 2>> "$out/gpu_check.log" > /dev/null
      record "train/gauge-cpu" "$(compact "$work/train-cpu.json")"
    fi
    if [ $has_peft -eq 1 ]; then
      log "train: random-weight Llama of SmolLM2-135M's shape; gauge CPU (NF4 base) vs PEFT CPU (fp32), 2 × 512 tokens"
      pyc make-llama "$work/llama-random" "$assets"
      "$train_bin" "$work/llama-random" 512 2 2 "$work/train-cpu-random.json" --check-dir "$work/lora" 2>> "$out/gpu_check.log" > /dev/null
      record "train/gauge-cpu-random" "$(compact "$work/train-cpu-random.json")"
      record "train/peft-cpu-fp32" "$(pyc peft-step "$work/llama-random" 512 2 2 fp32 cpu 2>> "$out/python.log")"
      record "train-parity/peft-loads-gauge-adapter" "$(pyc peft-logits "$work/llama-random" "$work/lora/adapter" "$work/lora/logits.json" 2>> "$out/python.log")"
    fi
  else
    log "train: random-weight Llama of SmolLM2-135M's shape; gauge CUDA (NF4 base) vs PEFT (fp32, bf16), 2 × 512 tokens"
    pyc make-llama "$work/llama-random" "$assets"
    "$train_bin" "$work/llama-random" 512 2 3 "$work/train-cuda.json" --device cuda --check-dir "$work/lora" 2>> "$out/gpu_check.log" > /dev/null
    record "train/gauge-cuda" "$(compact "$work/train-cuda.json")"
    for dtype in fp32 bf16; do
      record "train/peft-$dtype" "$(pyc peft-step "$work/llama-random" 512 2 3 $dtype 2>> "$out/python.log")"
    done
    record "train-parity/peft-loads-gauge-adapter" "$(pyc peft-logits "$work/llama-random" "$work/lora/adapter" "$work/lora/logits.json" 2>> "$out/python.log")"
  fi
fi

# --- 6. Generation (decode/prefill) ---------------------------------------------------------------
# gauge's decoder (bench_generate) vs transformers on the same random-weight Llama of SmolLM2's
# shape, the SmolLM2 fixture prompts' token ids, prefill + 32 greedy steps with a KV cache: on the
# GPU, gauge CUDA (Burn) vs transformers CUDA fp32; with --cpu-only, gauge's host path vs
# transformers CPU. A failure here is logged and does not stop the check.
gen_bin=${GAUGE_GENERATE_BIN:-}
if [ -z "$gen_bin" ] && [ $local_build -eq 1 ]; then
  cargo build --release -q --workspace --examples
  gen_bin=$CARGO_TARGET_DIR/release/examples/bench_generate
fi
if [ -z "$gen_bin" ] && [ -x "$bundle/bin/bench_generate" ]; then gen_bin=$bundle/bin/bench_generate; fi
gen_ref=../shared/fixtures/smollm2/reference.jsonl
[ -f "$gen_ref" ] || gen_ref=$bundle/smollm2-reference.jsonl
if [ -n "$gen_bin" ] && [ $has_torch -eq 1 ] && [ -f "$gen_ref" ]; then
  gen_dev=cuda; [ $cpu_only -eq 1 ] && gen_dev=cpu
  log "generate: random-weight Llama of SmolLM2-135M's shape, gauge $gen_dev vs transformers $gen_dev (fp32), fixture prompts, 32 decode steps"
  [ -d "$work/llama-random" ] || pyc make-llama "$work/llama-random" "$assets"
  if "$gen_bin" "$work/llama-random" "$gen_ref" 32 "$work/generate-gauge.json" --device "$gen_dev" 2>> "$out/gpu_check.log" \
     && hf=$(pyc hf-generate "$work/llama-random" "$gen_ref" 32 "$gen_dev" 2>> "$out/python.log"); then
    record "generate/gauge-$gen_dev" "$(compact "$work/generate-gauge.json")"
    record "generate/transformers-$gen_dev" "$hf"
  else
    log "generate: failed (see gpu_check.log / python.log)"
  fi
fi

# --- report ----------------------------------------------------------------------------------
"$py" - "$results" "$out" "$cpu_only" "$bin" "$(( $(date +%s) - started ))" <<'PY'
import json, os, sys
results, out, cpu_only, binary, seconds = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4], int(sys.argv[5])
rows = [json.loads(l) for l in open(results)]
by = {r["name"]: r["result"] for r in rows}
parity = {k: v for k, v in by.items() if k.startswith("parity/")}
train = {k.split("/", 1)[1]: v for k, v in by.items() if k.startswith("train/")}
train_parity = by.get("train-parity/peft-loads-gauge-adapter")
# PEFT must load gauge's adapter and agree with gauge's logits far inside the adapter's effect.
# The adapter must also move the logits by far more than the disagreement (an adapter that PEFT
# silently dropped, or one still at B = 0, would leave nothing to agree on).
train_ok = train_parity is None or (train_parity["max_abs_diff_gauge_vs_peft"] <= 1e-3 and train_parity["argmax_equal"]
                                    and train_parity["max_abs_change_by_adapter"] >= 10 * train_parity["max_abs_diff_gauge_vs_peft"])
ok = all(v["min_cosine"] >= 0.9999 for v in parity.values()) and train_ok
tp = {k.split("/", 1)[1]: v for k, v in by.items() if k.startswith("throughput/")}
ratios = {}
if "gauge-cuda" in tp:
    for k, v in tp.items():
        if k.startswith("sentence-transformers"):
            ratios[f"gauge-cuda / {k}"] = tp["gauge-cuda"]["tokens_per_second"] / v["tokens_per_second"]
report = {"mode": "cpu-only" if cpu_only else "gpu", "pass": ok, "seconds": seconds,
          "binary": {"name": os.path.basename(binary), "bytes": os.path.getsize(binary)},
          "parity": parity, "throughput": tp, "throughput_ratios": ratios, "faiss": by.get("faiss"),
          "train": train, "train_parity": train_parity,
          "generate": {k.split("/", 1)[1]: v for k, v in by.items() if k.startswith("generate/")}}
json.dump(report, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
md = [f"# gpu-check ({report['mode']}, {seconds} s) — {'PASS' if ok else 'FAIL'}", "",
      "| parity | rows | min cosine | min centred cosine | max abs diff |", "|---|---:|---:|---:|---:|"]
md += [f"| {k[7:]} | {v['rows']} | {v['min_cosine']:.6f} | {v['min_centred_cosine']:.6f} | {v['max_abs_diff']:.2e} |" for k, v in parity.items()]
md += ["", "| throughput | texts | tokens | seconds | tokens/s |", "|---|---:|---:|---:|---:|"]
md += [f"| {k} | {v['texts']} | {v['tokens']} | {v['seconds']:.2f} | {v['tokens_per_second']:,.0f} |" for k, v in tp.items()]
md += [f"| ratio {k} | | | | {v:.2f}× |" for k, v in ratios.items()]
if report["faiss"]:
    md += ["", "| faiss | device | vectors | build s | search s (queries) | recall@10 |", "|---|---|---:|---:|---:|---:|"]
    for r in report["faiss"]["runs"]:
        rec = "—" if r["recall_at_10"] is None else f"{r['recall_at_10']:.3f}"
        md.append(f"| {r['index']} | {r['device']} | {r['vectors']:,} | {r['build_seconds']:.2f} | {r['search_seconds']:.3f} ({r['queries']}) | {rec} |")
if train:
    md += ["", "| training step (LoRA r 16, all projections) | device | tokens/step | s/step | tokens/s |", "|---|---|---:|---:|---:|"]
    for k, v in train.items():
        md.append(f"| {k} | {v.get('device', 'cuda')} | {v['sequence_tokens'] * v['sequences_per_step']} | {v['seconds_per_step']:.3f} | {v['tokens_per_s']:,.0f} |")
    # Each gauge row against the PEFT rows on the same device and shapes, in the same run.
    for mine, theirs in (("gauge-cuda", "peft-fp32"), ("gauge-cuda", "peft-bf16"), ("gauge-cpu-random", "peft-cpu-fp32")):
        if mine in train and theirs in train:
            md.append(f"| ratio {mine} / {theirs} | | | | {train[mine]['tokens_per_s'] / train[theirs]['tokens_per_s']:.2f}× |")
if train_parity:
    md += ["", f"PEFT loads gauge's adapter: max |Δ logit| gauge vs PEFT {train_parity['max_abs_diff_gauge_vs_peft']:.2e} "
           f"(the adapter moves logits by up to {train_parity['max_abs_change_by_adapter']:.2e}); argmax equal: {train_parity['argmax_equal']}; "
           f"the base alone, gauge vs transformers: {train_parity['max_abs_diff_base_gauge_vs_transformers']:.2e}"]
gen = report["generate"]
if gen:
    md += ["", "| generation (fixture prompts) | prompt tokens | prefill tok/s | decode tok/s |", "|---|---:|---:|---:|"]
    for k, v in gen.items():
        for p in v["prompts"]:
            md.append(f"| {k} {p['name']} | {p['prompt_tokens']} | {p['prefill_tokens_per_s']:,.0f} | {p['decode_tokens_per_s']:,.1f} |")
    names = list(gen)
    if len(names) == 2:
        a, b = gen[names[0]]["prompts"], gen[names[1]]["prompts"]
        dec = [x["decode_tokens_per_s"] / y["decode_tokens_per_s"] for x, y in zip(a, b)]
        pre = [x["prefill_tokens_per_s"] / y["prefill_tokens_per_s"] for x, y in zip(a, b)]
        md.append(f"| ratio {names[0]} / {names[1]} | | {min(pre):.2f}–{max(pre):.2f}× | {min(dec):.2f}–{max(dec):.2f}× |")
open(os.path.join(out, "gpu-check.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if ok else 1)
PY
