#!/usr/bin/env bash
# The GPU check's rehearsal on a CPU machine (`just gpu-rehearse`): packs a CPU build of
# gauge-gpu-check with the bundle's layout (scripts/pack-gpu-check.sh), runs every section of
# scripts/gpu-check.sh --rehearse on it at tiny sizes (device cpu where the GPU mode says cuda)
# and requires a passing, complete gpu-check.json; then runs two sections again with one of them
# broken on purpose (its binary missing) and requires the other's results, a failed status for
# the broken one and a valid gpu-check.json. About 3 minutes on 2 cores.
#   scripts/gpu-rehearse.sh GAUGE_GPU_CHECK_BINARY OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:?usage: scripts/gpu-rehearse.sh GAUGE_GPU_CHECK_BINARY OUT_DIR}
out=${2:?usage: scripts/gpu-rehearse.sh GAUGE_GPU_CHECK_BINARY OUT_DIR}
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
started=$(date +%s)
scripts/pack-gpu-check.sh "$binary" "$dist"
rm -rf "$out" "$out-broken"
export GAUGE_GPU_BUNDLE=$dist/gpu-check
scripts/gpu-check.sh --rehearse "$out" > /dev/null || { echo "gpu-rehearse: the rehearsal failed: $out/gpu-check.md" >&2; cat "$out/gpu-check.md" >&2 2>/dev/null; exit 1; }
status=0
GAUGE_GPU_CHECK_ONLY="env faiss parity" GAUGE_GPU_CHECK_BREAK=faiss scripts/gpu-check.sh --rehearse "$out-broken" > /dev/null 2>&1 || status=$?
python3 - "$out" "$out-broken" "$status" <<'PY'
import json, sys
full, broken, status = json.load(open(sys.argv[1] + "/gpu-check.json")), json.load(open(sys.argv[2] + "/gpu-check.json")), int(sys.argv[3])
want = ["env", "parity", "throughput", "faiss", "train", "generate"]
assert [s["section"] for s in full["sections"]] == want and full["pass"], f"rehearsal incomplete: {full['sections']}"
by = {s["section"]: s["status"] for s in broken["sections"]}
assert by == {"env": "ok", "parity": "ok", "faiss": "failed"}, by
assert broken["parity"] and not broken["faiss"] and status == 1, (broken["parity"], broken["faiss"], status)
print(f"gpu-rehearse: every section ran ({full['seconds']} s, {len(full['parity'])} parity rows, PASS); "
      f"with faiss broken on purpose: exit {status}, parity's {len(broken['parity'])} rows kept, faiss failed")
PY
echo "gpu-rehearse: $(( $(date +%s) - started )) s in all; results in $out" >&2
