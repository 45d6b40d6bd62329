#!/usr/bin/env bash
# The prepared GPU check: gauge's CUDA embedding, GPU faiss, train-lora's step and the decoder
# against gauge on the CPU and against PyTorch / sentence-transformers / PEFT / transformers /
# faiss CPU on the same machine, in the same run.
#
#   scripts/gpu-check.sh [--cpu-only | --rehearse] OUT_DIR
#
# GPU mode (the default; an NVIDIA GPU, CUDA 13 runtime, Python with torch, transformers,
# sentence-transformers and peft; no Rust, no network) runs the bundle `just gpu-bundle` packed
# (dist/gpu-check.tar.xz or its unpacked dist/gpu-check/, carried beside the repository): one
# binary, `gauge-gpu-check`, with its subcommands embed, faiss, train and generate.
# `--rehearse` runs the very same sections and bundle layout on a CPU machine at tiny sizes
# (device cpu wherever the GPU mode says cuda; `just gpu-rehearse` builds a CPU bundle and runs
# it), so a broken script is caught before a GPU is lent. `--cpu-only` is the older CPU half
# (the real MiniLM's fixture vectors, numpy float64, the real SmolLM2 GGUF) on a local build.
#
# Every section runs in its own shell under `timeout`; a failure or a time-out is logged and the
# others still run. Results are written to OUT_DIR as they come: results.jsonl (one valid JSON
# line per measurement or failure), sections.jsonl (each section's status and seconds), logs,
# and at the end gpu-check.json and gpu-check.md (always written, whatever failed).
# Sizes and time limits (GPU mode; the estimate of each section on an H200 with 16 cores):
#   env ~5 s; parity (fixture + 2,000 passages: gauge CUDA, gauge CPU, PyTorch strict fp32)
#   ~60 s, at most 100; throughput (20,000 passages: gauge CUDA vs sentence-transformers fp32,
#   TF32, fp16, bf16) ~70 s, at most 100; faiss (Flat and IVF-PQ on 200,000 × 384, GPU vs CPU)
#   ~40 s, at most 60; train (a random Llama of SmolLM2-135M's shape, 2 × 512 tokens: gauge CUDA
#   QLoRA-style on an NF4 base vs PEFT LoRA on an fp32 and a bf16 base; PEFT loading gauge's
#   adapter) ~90 s, at most 120; generate (the same model, fixture prompts, 32 greedy steps end
#   to end: gauge CUDA vs transformers' generate loop) ~40 s, at most 60. About 5 minutes in
#   all; the limits (with 10 s to kill each) add up to under 8 minutes, inside a 540 s command.
# GAUGE_GPU_CHECK_ONLY="env faiss" runs only the sections named; GAUGE_GPU_CHECK_BREAK=NAME runs
# that section with its gauge binary missing (scripts/gpu-rehearse.sh shows the rest survive).
# Exit status: 0 when every section ran and every parity check passed; 1 otherwise; 2 when the
# machine cannot run the check at all (no bundle, no Python).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=gpu
case "${1:-}" in
  --cpu-only) mode=cpu-only; shift ;;
  --rehearse) mode=rehearse; shift ;;
esac
out=${1:?usage: scripts/gpu-check.sh [--cpu-only | --rehearse] OUT_DIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$out/results.jsonl
: > "$results"
: > "$out/sections.jsonl"
: > "$out/sections.log"
started=$(date +%s)
log() { echo "gpu-check: $*" >&2; }
die() { echo "gpu-check: $*" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ "$mode" = gpu ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no nvidia-smi on this machine; --rehearse runs the same sections on the CPU"
fi

# --- Python ------------------------------------------------------------------------------------
py=python3
for v in "${GAUGE_VENV:-}" "$HOME/.cache/gauge-torch-venv" "$HOME/.cache/gauge-venv"; do
  if [ "$mode" != gpu ] && [ -n "$v" ] && [ -x "$v/bin/python3" ] && "$v/bin/python3" -c "import numpy, tokenizers" 2>/dev/null; then py=$v/bin/python3; break; fi
done
"$py" -c "import numpy, tokenizers" 2>/dev/null || die "$py needs numpy and tokenizers (just bench-venv)"
has() { "$py" -c "import $1" 2>/dev/null; }
has_torch=0; has torch && has transformers && has_torch=1
has_peft=0; [ $has_torch -eq 1 ] && has peft && has_peft=1
has_st=0; [ $has_torch -eq 1 ] && has sentence_transformers && has_st=1
if [ "$mode" = gpu ]; then
  "$py" -c "import torch, transformers, sentence_transformers, peft; assert torch.cuda.is_available()" \
    || die "the GPU mode needs $py with torch (CUDA available), transformers, sentence-transformers and peft"
elif [ "$mode" = rehearse ] && { [ $has_peft -eq 0 ] || [ $has_st -eq 0 ]; }; then
  die "the rehearsal runs every section: it needs a Python with torch, transformers, sentence-transformers and peft (just torch-venv; GAUGE_VENV names another)"
fi

# --- the gauge binary: the bundle (GPU mode, rehearsal) or a local build (--cpu-only) ----------
bundle=${GAUGE_GPU_BUNDLE:-dist/gpu-check}
unpack() { # ARCHIVE DEST_PARENT: tar with xz, else Python's tarfile
  if command -v xz >/dev/null 2>&1; then tar -xJf "$1" -C "$2"
  else "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; fi
}
if [ "$mode" = cpu-only ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gauge-target}"
  if [ -z "${GAUGE_GPU_CHECK_BIN:-}" ]; then
    cargo build --release -q --workspace --bins || die "cargo build failed"
  fi
  bin=${GAUGE_GPU_CHECK_BIN:-$CARGO_TARGET_DIR/release/gauge-gpu-check}
  bundle_lib=""
else
  if [ ! -x "$bundle/bin/gauge-gpu-check" ] && [ -f "$bundle.tar.xz" ]; then
    log "unpacking $bundle.tar.xz"
    unpack "$bundle.tar.xz" "$(dirname "$bundle")" || die "cannot unpack $bundle.tar.xz"
  fi
  [ -x "$bundle/bin/gauge-gpu-check" ] || die "no $bundle/bin/gauge-gpu-check: run \`just gpu-bundle\` on the build machine and carry dist/gpu-check.tar.xz"
  bundle=$(cd "$bundle" && pwd)
  bin=$bundle/bin/gauge-gpu-check
  bundle_lib=$bundle/lib
fi
[ -x "$bin" ] || die "no gauge binary at $bin"

# CUDA: the toolkit nvcc belongs to (cubecl reads CUDA headers from CUDA_PATH at run time), else
# /usr/local/cuda*; its lib64 and the CUDA 13 libraries PyTorch's wheels brought, for gauge's
# binary only (Python keeps its own library path).
gauge_ld=$bundle_lib
if [ "$mode" = gpu ]; then
  if [ -z "${CUDA_PATH:-}" ] && command -v nvcc >/dev/null 2>&1; then CUDA_PATH=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
  for d in "${CUDA_PATH:-}" /usr/local/cuda-13* /usr/local/cuda; do
    if [ -n "$d" ] && [ -d "$d/include" ]; then CUDA_PATH=$d; break; fi
  done
  export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
  [ -d "$CUDA_PATH/lib64" ] && gauge_ld="$gauge_ld:$CUDA_PATH/lib64"
  for lib in libcudart.so.13 libcublas.so.13 libnvrtc.so.13; do
    ldconfig -p 2>/dev/null | grep -q "$lib" && continue
    found=$(find "$CUDA_PATH" /usr/local /usr/lib $("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) -name "$lib" 2>/dev/null | head -n1 || true)
    [ -n "$found" ] && gauge_ld="$gauge_ld:$(dirname "$found")"
  done
fi
gauge() { local p=${gauge_ld#:}; [ -n "${LD_LIBRARY_PATH:-}" ] && p=${p:+$p:}$LD_LIBRARY_PATH; LD_LIBRARY_PATH="$p" "$bin" "$@"; }
{ echo "binary: $bin ($(du -h "$bin" | cut -f1))"; LD_LIBRARY_PATH="$gauge_ld" ldd "$bin" 2>&1; } > "$out/ldd.txt"
if grep -q "not found" "$out/ldd.txt"; then log "some libraries of $bin are not found (see ldd.txt); the sections that need them will fail"; fi

# --- sizes -------------------------------------------------------------------------------------
case $mode in
  gpu) dev=cuda; n_passages=20000; n_parity=2000; n_faiss=200000; n_queries=1000; t_seq=512; t_batch=2; t_steps=3; n_decode=32
       limits=(100 100 60 120 60) ;;
  rehearse) dev=cpu; n_passages=200; n_parity=32; n_faiss=5000; n_queries=50; t_seq=64; t_batch=1; t_steps=1; n_decode=4
       limits=(300 300 120 400 200) ;;
  cpu-only) dev=cpu; n_passages=500; n_parity=64; n_faiss=20000; n_queries=200; t_seq=512; t_batch=2; t_steps=2; n_decode=32
       limits=(600 600 300 900 300) ;;
esac

# --- helpers, exported for the sections' shells --------------------------------------------------
pyc() { "$py" scripts/gpu_check.py "$@"; }
json_str() { "$py" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
# record NAME JSON: one line in results.jsonl, only when JSON parses (an error line otherwise).
record() {
  local name=$1 json=${2//"$work/"/"work/"}
  if printf '%s' "$json" | "$py" -c 'import json,sys; json.loads(sys.stdin.read())' 2>/dev/null; then
    printf '{"name": %s, "result": %s}\n' "$(json_str "$name")" "$json" >> "$results"
  else
    printf '{"name": %s, "error": %s}\n' "$(json_str "$name")" "$(json_str "no valid JSON from the command: ${json:0:300}")" >> "$results"
    return 1
  fi
}
compact() { "$py" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$1"; }
embed() { gauge embed "$1" "$2" "$3" "$4" 256 2>> "$out/gauge.log"; }   # MODEL TEXTS DEVICE OUT_F32 → timing JSON
compare() { pyc compare "$1" "$2" 384; }
ref_backend=torch-$dev

# The random Llama, made once into a temporary name and renamed (a section killed half-way
# leaves no half-written model for the next one).
make_llama() {
  [ -d "$work/llama-random" ] && return 0
  rm -rf "$work/llama-random.partial"
  pyc make-llama "$work/llama-random.partial" "$assets" 2>> "$out/python.log"
  mv "$work/llama-random.partial" "$work/llama-random"
}

sec_env() {
  if [ "$mode" = gpu ]; then nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true; fi
  "$py" -c 'import json, platform, sys
info = {"python": sys.version.split()[0], "platform": platform.platform()}
try:
    import torch; info.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, tf32_matmul_default=torch.backends.cuda.matmul.allow_tf32)
except Exception as e: info["torch"] = None
print(json.dumps(info))' > "$work/env.json"
  record env "$(cat "$work/env.json")"
}

sec_parity() {
  if [ "$mode" = cpu-only ] && [ -f models/all-MiniLM-L6-v2/model.safetensors ] && [ -f "$fixture" ]; then
    embed models/all-MiniLM-L6-v2 "$work/fixture.jsonl" cpu "$work/real-cpu.f32" > /dev/null
    pyc fixture-vectors "$fixture" "$work/real-torch.f32"
    record "parity/minilm/fixture/gauge-cpu~pytorch" "$(compare "$work/real-cpu.f32" "$work/real-torch.f32")"
  fi
  for set in fixture parity; do
    embed "$model" "$work/$set.jsonl" cpu "$work/$set-cpu.f32" > /dev/null
    if [ "$mode" = cpu-only ]; then
      pyc reference "$model" "$work/$set.jsonl" "$work/$set-ref.f32" numpy
      record "parity/random/$set/gauge-cpu~numpy-f64" "$(compare "$work/$set-cpu.f32" "$work/$set-ref.f32")"
      [ $has_st -eq 1 ] || continue
    fi
    pyc reference "$model" "$work/$set.jsonl" "$work/$set-torch.f32" "$ref_backend" 2>> "$out/python.log"
    record "parity/random/$set/gauge-cpu~pytorch-$dev-fp32" "$(compare "$work/$set-cpu.f32" "$work/$set-torch.f32")"
    if [ "$mode" != cpu-only ]; then
      embed "$model" "$work/$set.jsonl" "$dev" "$work/$set-dev.f32" > /dev/null
      record "parity/random/$set/gauge-$dev~gauge-cpu" "$(compare "$work/$set-dev.f32" "$work/$set-cpu.f32")"
      record "parity/random/$set/gauge-$dev~pytorch-$dev-fp32" "$(compare "$work/$set-dev.f32" "$work/$set-torch.f32")"
    fi
  done
}

sec_throughput() {
  record "throughput/gauge-$dev" "$(embed "$model" "$work/passages.jsonl" "$dev" "$work/passages-dev.f32")"
  if [ $has_st -eq 1 ] && [ "$mode" != cpu-only ]; then
    local failed=0
    for dtype in fp32 tf32 fp16 bf16; do
      [ "$dev" = cpu ] && [ "$dtype" = fp16 ] && continue   # half precision is a GPU format
      record "throughput/sentence-transformers-$dtype" "$(pyc st-throughput "$model" "$work/passages.jsonl" $dtype "$dev" 2>> "$out/python.log")" || failed=1
    done
    return $failed
  fi
}

sec_faiss() {
  local devices=cpu; [ "$mode" = gpu ] && devices=cpu,cuda
  gauge faiss "$n_faiss" 384 "$n_queries" "$devices" "$work/faiss.json" 2>> "$out/gauge.log"
  record faiss "$(compact "$work/faiss.json")"
}

sec_train() {
  if [ "$mode" = cpu-only ] && [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
    gauge train models/SmolLM2-135M-Instruct.Q4_1.gguf 128 2 1 "$work/train-cpu.json" 2>> "$out/gauge.log" > /dev/null
    record "train/gauge-cpu-smollm2-q4_1" "$(compact "$work/train-cpu.json")"
  fi
  [ $has_peft -eq 1 ] || return 0
  make_llama
  gauge train "$work/llama-random" "$t_seq" "$t_batch" "$t_steps" "$work/train-gauge.json" --device "$dev" --check-dir "$work/lora" 2>> "$out/gauge.log" > /dev/null
  record "train/gauge-$dev-qlora-nf4-base" "$(compact "$work/train-gauge.json")"
  local dtypes="fp32 bf16"; [ "$dev" = cpu ] && dtypes=fp32
  for dtype in $dtypes; do
    record "train/peft-$dev-lora-$dtype-base" "$(pyc peft-step "$work/llama-random" "$t_seq" "$t_batch" "$t_steps" "$dtype" "$dev" 2>> "$out/python.log")"
  done
  record "train-parity/peft-loads-gauge-adapter" "$(pyc peft-logits "$work/llama-random" "$work/lora/adapter" "$work/lora/logits.json" 2>> "$out/python.log")"
}

sec_generate() {
  [ $has_torch -eq 1 ] && [ -f "$gen_ref" ] || return 0
  make_llama
  gauge generate "$work/llama-random" "$gen_ref" "$n_decode" "$work/generate-gauge.json" --device "$dev" 2>> "$out/gauge.log" > /dev/null
  record "generate/gauge-$dev-end-to-end" "$(compact "$work/generate-gauge.json")"
  record "generate/transformers-$dev-end-to-end" "$(pyc hf-generate "$work/llama-random" "$gen_ref" "$n_decode" "$dev" 2>> "$out/python.log")"
}

# section NAME LIMIT_S: runs sec_NAME in its own shell under `timeout`; logs and records its
# status; never stops the check.
section() {
  local name=$1 limit=$2 t0 status verdict
  t0=$(date +%s)
  log "$name (at most ${limit} s)"
  echo "=== $name" >> "$out/sections.log"
  if [ -n "${GAUGE_GPU_CHECK_ONLY:-}" ] && [[ " $GAUGE_GPU_CHECK_ONLY " != *" $name "* ]]; then return 0; fi
  # A section broken on purpose (GAUGE_GPU_CHECK_BREAK=NAME: its gauge binary is missing), to
  # show that the others' results survive it.
  local binary=$bin
  [ "$name" = "${GAUGE_GPU_CHECK_BREAK:-}" ] && binary=/nonexistent/gauge-gpu-check
  bin=$binary timeout --kill-after=10 "$limit" bash -c "set -euo pipefail; sec_$name" >> "$out/sections.log" 2>&1
  status=$?
  case $status in 0) verdict=ok ;; 124|137) verdict="timed out" ;; *) verdict=failed ;; esac
  [ $status -eq 0 ] || log "$name: $verdict (exit $status; see $out/sections.log)"
  printf '{"section": "%s", "status": "%s", "exit": %d, "seconds": %d, "limit_seconds": %d}\n' "$name" "$verdict" "$status" $(( $(date +%s) - t0 )) "$limit" >> "$out/sections.jsonl"
}

# --- inputs ------------------------------------------------------------------------------------
assets=$bundle/assets
[ -f "$assets/tokenizer.json" ] || assets=models/all-MiniLM-L6-v2
[ -f "$assets/tokenizer.json" ] || die "no tokenizer: run \`just models\` (or carry dist/gpu-check.tar.xz)"
fixture=../shared/fixtures/minilm-reference.jsonl
if [ -f "$bundle/fixture-texts.jsonl" ]; then cp "$bundle/fixture-texts.jsonl" "$work/fixture.jsonl"
elif [ -f "$fixture" ]; then pyc texts "$fixture" "$work/fixture.jsonl"
else die "no fixture texts (../shared/fixtures or the bundle)"; fi
gen_ref=../shared/fixtures/smollm2/reference.jsonl
[ -f "$gen_ref" ] || gen_ref=$bundle/smollm2-reference.jsonl
pyc passages "$n_passages" "$work/passages.jsonl" || die "cannot write the synthetic passages"
head -n "$n_parity" "$work/passages.jsonl" > "$work/parity.jsonl"
model=$work/bert-random
maker=numpy; [ $has_torch -eq 1 ] && maker=transformers
log "a random-weight BERT of all-MiniLM-L6-v2's shape ($maker); mode $mode, device $dev"
pyc make-model "$model" "$assets" "$maker" 2>> "$out/python.log" || die "cannot make the random-weight BERT (see python.log)"

export out work results py bin gauge_ld mode dev model assets fixture gen_ref has_torch has_peft has_st ref_backend \
  n_passages n_faiss n_queries t_seq t_batch t_steps n_decode
export -f log pyc json_str record compact embed compare gauge make_llama sec_env sec_parity sec_throughput sec_faiss sec_train sec_generate

section env 20
section parity "${limits[0]}"
section throughput "${limits[1]}"
section faiss "${limits[2]}"
section train "${limits[3]}"
section generate "${limits[4]}"

# --- report (always written) ---------------------------------------------------------------------
"$py" - "$results" "$out" "$mode" "$bin" "$(( $(date +%s) - started ))" <<'PY'
import json, os, sys
results, out, mode, binary, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
rows = []
for line in open(results):
    try:
        rows.append(json.loads(line))
    except ValueError:
        rows.append({"name": "?", "error": "an unreadable line in results.jsonl"})
sections = [json.loads(l) for l in open(os.path.join(out, "sections.jsonl"))]
by = {r["name"]: r["result"] for r in rows if "result" in r}
errors = {r["name"]: r["error"] for r in rows if "error" in r}
parity = {k: v for k, v in by.items() if k.startswith("parity/")}
train = {k.split("/", 1)[1]: v for k, v in by.items() if k.startswith("train/")}
train_parity = by.get("train-parity/peft-loads-gauge-adapter")
train_ok = train_parity is None or (train_parity["max_abs_diff_gauge_vs_peft"] <= 1e-3 and train_parity["argmax_equal"]
                                    and train_parity["max_abs_change_by_adapter"] >= 10 * train_parity["max_abs_diff_gauge_vs_peft"])
parity_ok = all(v["min_cosine"] >= 0.9999 for v in parity.values()) and train_ok
all_ran = all(s["status"] == "ok" for s in sections) and not errors
tp = {k.split("/", 1)[1]: v for k, v in by.items() if k.startswith("throughput/")}
gauge_tp = next((v for k, v in tp.items() if k.startswith("gauge-")), None)
ratios = {f"gauge / {k}": gauge_tp["tokens_per_second"] / v["tokens_per_second"] for k, v in tp.items() if gauge_tp and k.startswith("sentence-transformers")}
report = {"mode": mode, "pass": parity_ok and all_ran, "parity_pass": parity_ok, "all_sections_ran": all_ran, "seconds": seconds,
          "binary": {"name": os.path.basename(binary), "bytes": os.path.getsize(binary)}, "sections": sections, "errors": errors,
          "env": by.get("env"), "parity": parity, "throughput": tp, "throughput_ratios": ratios, "faiss": by.get("faiss"),
          "train": train, "train_parity": train_parity,
          "generate": {k.split("/", 1)[1]: v for k, v in by.items() if k.startswith("generate/")}}
json.dump(report, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
md = [f"# gpu-check ({mode}, {seconds} s) — {'PASS' if report['pass'] else 'FAIL'}", "",
      "| section | status | seconds (limit) |", "|---|---|---:|"]
md += [f"| {s['section']} | {s['status']} | {s['seconds']} ({s['limit_seconds']}) |" for s in sections]
md += [f"| error: {k} | {v} | |" for k, v in errors.items()]
md += ["", "| parity | rows | min cosine | min centred cosine | max abs diff |", "|---|---:|---:|---:|---:|"]
md += [f"| {k[7:]} | {v['rows']} | {v['min_cosine']:.6f} | {v['min_centred_cosine']:.6f} | {v['max_abs_diff']:.2e} |" for k, v in parity.items()]
md += ["", "| throughput (text in, vectors out: tokenisation timed on both sides) | texts | tokens | seconds | tokens/s |", "|---|---:|---:|---:|---:|"]
md += [f"| {k} ({v.get('math', v.get('dtype', ''))}) | {v['texts']} | {v['tokens']} | {v['seconds']:.2f} | {v['tokens_per_second']:,.0f} |" for k, v in tp.items()]
md += [f"| ratio {k} | | | | {v:.2f}× |" for k, v in ratios.items()]
if report["faiss"]:
    md += ["", "| faiss | device | vectors | build s | search s (queries) | recall@10 |", "|---|---|---:|---:|---:|---:|"]
    for r in report["faiss"]["runs"]:
        rec = "—" if r["recall_at_10"] is None else f"{r['recall_at_10']:.3f}"
        md.append(f"| {r['index']} | {r['device']} | {r['vectors']:,} | {r['build_seconds']:.2f} | {r['search_seconds']:.3f} ({r['queries']}) | {rec} |")
if train:
    md += ["", "| training step (LoRA r 16, all projections; QLoRA = NF4 base, LoRA = fp32/bf16 base) | tokens/step | s/step | tokens/s |", "|---|---:|---:|---:|"]
    for k, v in train.items():
        md.append(f"| {k} | {v['sequence_tokens'] * v['sequences_per_step']} | {v['seconds_per_step']:.3f} | {v['tokens_per_s']:,.0f} |")
    gauge_rows = [k for k in train if k.startswith("gauge-") and "random" not in k and "smollm2" not in k]
    for mine in gauge_rows:
        for theirs in (k for k in train if k.startswith("peft-")):
            md.append(f"| ratio {mine} / {theirs} (unlike bases: NF4 vs {theirs.rsplit('-', 2)[-2]}) | | | {train[mine]['tokens_per_s'] / train[theirs]['tokens_per_s']:.2f}× |")
if train_parity:
    md += ["", f"PEFT loads gauge's adapter: max |Δ logit| gauge vs PEFT {train_parity['max_abs_diff_gauge_vs_peft']:.2e} "
           f"(the adapter moves logits by up to {train_parity['max_abs_change_by_adapter']:.2e}); argmax equal: {train_parity['argmax_equal']}; "
           f"the base alone, gauge vs transformers: {train_parity['max_abs_diff_base_gauge_vs_transformers']:.2e}"]
gen = report["generate"]
if gen:
    md += ["", "| generation, end to end (fixture prompts) | prompt tokens | prefill tok/s | decode tok/s |", "|---|---:|---:|---:|"]
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
sys.exit(0 if report["pass"] else 1)
PY
