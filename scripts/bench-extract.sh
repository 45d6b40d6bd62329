#!/usr/bin/env bash
# bench-extract: gauge's whole extract stage against poppler's pdftotext on the same PDFs, in
# interleaved A/B pairs (gauge-bench, crates/bench) → bench/extract.json. gauge's side
# (crates/extract/examples/bench_vs_pdftotext.rs) times the stage (all cores, forced into a
# scratch artifact root) and, untimed, compares per page the words pdftotext produced with
# gauge's text; the reference (scripts/bench_pdftotext.py) runs pdftotext once per file, as many
# at a time as there are cores. Each side: a warm-up pass and the median of 3 timed passes.
# Usage: scripts/bench-extract.sh [CORPUS_DIR] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
corpus="${1:-../shared/corpora/fra}"
out="${2:-bench/extract.json}"
pairs="${GAUGE_BENCH_PAIRS:-5}"
command -v pdftotext > /dev/null || { echo "bench-extract: pdftotext missing (apt-get install poppler-utils)" >&2; exit 1; }
cargo build --release -q --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/plan.json" "$target/release/examples/bench_vs_pdftotext" "$corpus" "$pairs" <<'PY'
import json, sys
plan_path, bin_, corpus, pairs = sys.argv[1:]
plan = {
  "bench": "extract", "reference": "poppler's pdftotext", "pairs": int(pairs),
  "title": f"gauge's extract stage against pdftotext on {corpus}: pages per second, and the share of pdftotext's words gauge also produced",
  "measures": {"crates": ["gauge-extract"], "paths": ["crates/extract/examples/bench_vs_pdftotext.rs", "scripts/bench-extract.sh", "scripts/bench_pdftotext.py"]},
  "describe": [{"name": "pdftotext_version", "argv": ["pdftotext", "-v"]}],
  "notes": ["gauge: the whole stage (parse, lay out, clean; pages.parquet written), all cores; pdftotext: one process per file, as many at a time as there are cores. Each side's figure is the median of 3 timed passes after a warm-up pass.",
            "word_share: per page with ≥ 5 pdftotext words, the share of pdftotext's words (lower-cased alphanumeric runs, NFKC, with multiplicity) that gauge also produced; default cleaning removes running headers, footers and page labels that pdftotext keeps, so the headers_footers_kept figures are the like-for-like ones."],
  "comparisons": [{"name": "FRA corpus", "gauge": {"argv": [bin_, "side", corpus]},
                   "reference": {"argv": ["python3", "scripts/bench_pdftotext.py", corpus], "format": "json"},
                   "ratios": [{"name": "speed", "gauge": "pages_per_s", "reference": "pages_per_s", "unit": "pages/s"}],
                   "equal": [{"gauge": "pages", "reference": "pages", "tolerance": 0}]}],
  "readme": [],
}
json.dump(plan, open(plan_path, "w"), indent=1)
PY
"$target/release/gauge-bench" run "$tmp/plan.json" "$out"
