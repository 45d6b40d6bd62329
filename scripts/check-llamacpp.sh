#!/usr/bin/env bash
# gauge's reading of a GGUF file against llama.cpp's (llama-server, built by scripts/llama-cpp.sh) on
# the same file: token ids on every FRA page and golden question, the chat template, greedy
# continuations (scripts/llamacpp_agreement.py says how each is judged). Writes the report
# (eval/llamacpp/<model>.json) and the CI fixture the decoder's tests read without the model
# (crates/decoder/tests/fixtures/<model>.llamacpp.json). Exit 1 when a check fails.
# Usage: scripts/check-llamacpp.sh [MODEL.gguf] [N_TOKENS]   (default: the Qwen2.5-Coder-1.5B file, 32)
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}"
n_tokens="${2:-32}"
if [ ! -f "$model" ] && [ "$model" = models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf ]; then scripts/fetch-models.sh qwen2.5-1.5b; fi
[ -f "$model" ] || { echo "check-llamacpp: $model missing" >&2; exit 1; }
stem=$(basename "$model" .gguf)
py="${PYTHON:-$HOME/.cache/gauge-venv/bin/python3}"
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
bin="$target/release"
work=$(mktemp -d)
port=${GAUGE_CHECK_PORT:-8791}
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# The pages, and eight answer prompts (three passages each) as `answer` writes them, from its
# model-call cache (SmolLM2 answers in a few tokens: only the prompts are used).
pages="$(./just.sh extract | tail -n1)/pages.parquet"
index=$(./just.sh index | tail -n1)
"$bin/answer" --index "$index" --golden ../shared/golden/fra-dev.jsonl --limit 8 -k 3 --max-new-tokens 2 --artifacts "$work/artifacts" > /dev/null
"$llama_bin/llama-server" -m "$model" --host 127.0.0.1 --port "$port" -t "$(nproc)" -c 8192 -np 1 --jinja > "$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 240); do curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
curl -sf "http://127.0.0.1:$port/health" > /dev/null || { echo "check-llamacpp: llama-server did not start:" >&2; tail -n 20 "$work/server.log" >&2; exit 1; }
mkdir -p eval/llamacpp crates/decoder/tests/fixtures
"$py" scripts/llamacpp_agreement.py "$model" "$pages" ../shared/golden/fra-dev.jsonl "$work/artifacts/llm-cache" \
  "$bin/examples/llamacpp_agreement" "http://127.0.0.1:$port" "$n_tokens" "eval/llamacpp/$stem.json" "crates/decoder/tests/fixtures/$stem.llamacpp.json"
