"""rank_bm25 (what the seeds used) over the same chunks and questions: the reference side of
`just bench-query` (scripts/bench-query.sh, gauge-bench).

Usage: bench_rank_bm25.py CHUNKS_PARQUET GOLDEN_JSONL [ROUNDS] [BUILDS]
Tokenises as the seeds did (lower-case, whitespace split); a warm-up pass over every question,
then ROUNDS timed passes (scoring every chunk and taking the top 50, per query); the index
built BUILDS times. Prints one flat JSON line: per-query median (ms), queries per second over
the timed passes, median build seconds.
"""
import json
import statistics
import sys
import time

import pyarrow.parquet as pq
from rank_bm25 import BM25Okapi

chunks, golden = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
builds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
texts = [t or "" for t in pq.read_table(chunks, columns=["text"]).column("text").to_pylist()]
questions = [json.loads(l)["question"] for l in open(golden, encoding="utf-8") if l.strip()]
build_s = []
for _ in range(builds):
    t = time.perf_counter()
    bm25 = BM25Okapi([x.lower().split() for x in texts])
    build_s.append(time.perf_counter() - t)
lat = []
for r in range(rounds + 1):
    for q in questions:
        t = time.perf_counter()
        scores = bm25.get_scores(q.lower().split())
        top = sorted(range(len(scores)), key=lambda i: -scores[i])[:50]
        if r > 0:
            lat.append((time.perf_counter() - t) * 1000)
print(json.dumps({
    "p50_bm25_ms": statistics.median(lat),
    "bm25_queries_per_s": len(lat) / (sum(lat) / 1000),
    "bm25_build_s": statistics.median(build_s),
    "chunks": len(texts),
    "queries": len(questions),
    "rounds": rounds,
}))
