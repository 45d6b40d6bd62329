#!/usr/bin/env bash
# bench-query: gauge's query path against rank_bm25 (Python; what the seeds used) on the FRA index
# and the 41 dev questions, in interleaved A/B pairs (gauge-bench, crates/bench) →
# bench/query.json. gauge's side (crates/engine/examples/bench_query.rs) times, per question,
# dense retrieval (embed the query + faiss search), BM25 (tantivy), RRF fusion and the three
# end-to-end searches over 10 passes after a warm-up pass, and builds the BM25 index 5 times;
# the reference (scripts/bench_rank_bm25.py) scores every chunk with rank_bm25 and takes the top
# 50, over the same passes, and builds its index 5 times.
# Usage: scripts/bench-query.sh INDEX_DIR [OUT]; PYTHON: a Python with rank_bm25 and pyarrow
# (`just bench-venv`).
set -euo pipefail
cd "$(dirname "$0")/.."
index="$1"
out="${2:-bench/query.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
rounds="${GAUGE_BENCH_ROUNDS:-10}"
py="${PYTHON:-python3}"
golden=../shared/golden/fra-dev.jsonl
"$py" -c "import rank_bm25, pyarrow" 2>/dev/null || { echo "bench-query: $py lacks rank_bm25/pyarrow; run \`just bench-venv\`" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/plan.json" "$target/release/examples/bench_query" "$py" "$index" "$golden" "$rounds" "$pairs" <<'PY'
import json, sys
plan_path, bin_, py, index, golden, rounds, pairs = sys.argv[1:]
plan = {
  "bench": "query", "reference": "rank_bm25 (Python)", "pairs": int(pairs),
  "title": "gauge's query path (dense, BM25, fusion, end to end) and BM25 index build against rank_bm25 on the FRA index and the 41 dev questions",
  "measures": {"crates": ["gauge-engine"], "paths": ["crates/engine/examples/bench_query.rs", "scripts/bench-query.sh", "scripts/bench_rank_bm25.py"]},
  "describe": [{"name": "reference_versions", "argv": [py, "-c", "import json, sys, importlib.metadata as m; print(json.dumps({'python': sys.version, 'rank_bm25': m.version('rank_bm25'), 'numpy': m.version('numpy'), 'pyarrow': m.version('pyarrow')}))"]}],
  "notes": [f"Both sides: a warm-up pass over every question, then {rounds} timed passes; p50 is the median over every timed query of a run, queries/s is timed queries over their summed time.",
            "rank_bm25 tokenises as the seeds did (lower-case, whitespace split) and scores every chunk per query; gauge's BM25 is tantivy (stemmed, on disk) returning the top 50. The two rank differently: this compares cost, not ranking.",
            "The BM25 index build: tantivy writes an on-disk index (gauge_index::write_bm25), rank_bm25 builds in memory; each the median of 5 builds per run.",
            "Dense, fusion and end-to-end figures are gauge's alone (no reference side measures them); the index is all-MiniLM-L6-v2 with faiss Flat, 50 candidates per retriever."],
  "comparisons": [{"name": "BM25, FRA index, 41 questions", "gauge": {"argv": [bin_, "side", index, golden, rounds]},
                   "reference": {"argv": [py, "scripts/bench_rank_bm25.py", f"{index}/chunks.parquet", golden, rounds], "format": "json"},
                   "ratios": [{"name": "query speed", "gauge": "bm25_queries_per_s", "reference": "bm25_queries_per_s", "unit": "queries/s"},
                              {"name": "index build", "gauge": "bm25_build_s", "reference": "bm25_build_s", "unit": "s", "better": "lower"}],
                   "equal": [{"gauge": "chunks", "reference": "chunks", "tolerance": 0}, {"gauge": "queries", "reference": "queries", "tolerance": 0}]}],
  "readme": [],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$target/release/gauge-bench" run "$tmp/plan.json" "$out"
