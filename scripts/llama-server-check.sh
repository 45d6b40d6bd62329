#!/usr/bin/env bash
# The API paths against a real OpenAI-compatible server: llama.cpp's `llama-server` (built by
# scripts/llama-cpp.sh) serving SmolLM2; `answer` on two FRA dev questions and `synth-data
# --mode llm` on two chunks (300-token replies) go through it, and their artifacts are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
llama_bin=$(scripts/llama-cpp.sh | tail -n1)
bin="$CARGO_TARGET_DIR/release"
port=${LLAMA_PORT:-8765}
log=$(mktemp)
"$llama_bin/llama-server" -m "$model" --port "$port" -t "$(nproc)" -c 4096 > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llama-server did not start:" >&2; tail -n 20 "$log" >&2; exit 1; }
api=(--set generator.kind=api --set "generator.base_url=http://127.0.0.1:$port/v1" --set generator.model=smollm2 --set generator.api_key_env=GAUGE_NO_KEY)
index=$(just index | tail -n1)
dir=$("$bin/answer" --index "$index" --golden ../shared/golden/fra-dev.jsonl --limit 2 -k 3 --max-new-tokens 96 "${api[@]}" | tail -n1)
"$HOME/.cache/gauge-venv/bin/python3" - "$dir/answers.parquet" <<'PY'
import sys
import pyarrow.parquet as pq
rows = pq.read_table(sys.argv[1]).to_pylist()
assert len(rows) == 2 and all(r["answer"] and r["finish_reason"] == "api" for r in rows), rows
print("answer via llama-server:", [(r["qid"], r["n_citations"], r["n_verified"], r["completion_tokens"]) for r in rows])
PY
chunks=$(just chunk | tail -n1)
synth=$("$bin/synth-data" "$chunks" --mode llm --n 2 --base-url "http://127.0.0.1:$port/v1" --model smollm2 --api-key-env GAUGE_NO_KEY --set teacher.max_tokens=300 --concurrency 1 --force | tail -n1)
echo "synth-data via llama-server: $(wc -l < "$synth/golden.jsonl") kept, $(wc -l < "$synth/failures.jsonl") failed (a 135M model often breaks the JSON contract; failures are recorded with the reason)"
