#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server on a loopback port, serving SmolLM2-135M-Instruct (Q4_1 GGUF).
#   scripts/llm-server.sh start   builds llama-server once (scripts/llama-cpp.sh, cached outside the
#                                 clone), starts it in the background, waits for /health and prints the
#                                 base URL (http://127.0.0.1:PORT/v1); a server already up is reused
#   scripts/llm-server.sh stop    stops it
#   scripts/llm-server.sh status  prints the URL if it is up (exit 1 if not)
# PORT: $GAUGE_LLM_PORT (default 8765). Context: $GAUGE_LLM_CTX (default 16384, split by llama-server between its 4 parallel slots: 4096 tokens each). The pid file and the
# log live in the llama.cpp cache folder.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-start}
port=${GAUGE_LLM_PORT:-8765}
ctx=${GAUGE_LLM_CTX:-16384}
root="${GAUGE_LLAMACPP_DIR:-$HOME/.cache/gauge-llamacpp}"
pidfile="$root/llm-server-$port.pid"
log="$root/llm-server-$port.log"
url="http://127.0.0.1:$port/v1"
up() { curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; }
running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "$action" in
  start)
    if running && up; then python3 scripts/loopback_check.py "$(cat "$pidfile")" >&2; echo "$url"; exit 0; fi
    if up; then echo "llm-server: port $port is taken by another process; set GAUGE_LLM_PORT" >&2; exit 1; fi
    model=models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$model" ] || { echo "llm-server: $model missing; run \`just models\`" >&2; exit 1; }
    bin=$(scripts/llama-cpp.sh | tail -n1)
    mkdir -p "$root"
    nohup "$bin/llama-server" -m "$model" --host 127.0.0.1 --port "$port" -t "$(nproc)" -c "$ctx" --alias smollm2 > "$log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 120); do up && break; running || break; sleep 0.5; done
    if ! up; then
      echo "llm-server: did not start (log $log):" >&2
      tail -n 20 "$log" >&2
      kill "$(cat "$pidfile")" 2>/dev/null || true
      rm -f "$pidfile"
      exit 1
    fi
    # Loopback only: the server must not be reachable from, or announce itself on, another interface.
    python3 scripts/loopback_check.py "$(cat "$pidfile")" >&2 || { kill "$(cat "$pidfile")"; rm -f "$pidfile"; exit 1; }
    echo "$url"
    ;;
  stop)
    if running; then kill "$(cat "$pidfile")"; fi
    rm -f "$pidfile"
    ;;
  status)
    running && up && echo "$url"
    ;;
  *)
    echo "usage: scripts/llm-server.sh start|stop|status" >&2
    exit 2
    ;;
esac
