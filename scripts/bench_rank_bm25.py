"""rank_bm25 (what the seeds used) over the same chunks and questions, for `just bench-query`.

Usage: bench_rank_bm25.py CHUNKS_PARQUET GOLDEN_JSONL
Prints one JSON line: build seconds and per-query latency (p50/p95, ms), tokenising as the
seeds did (lower-case, whitespace split).
"""
import json, sys, time

import pyarrow.parquet as pq
from rank_bm25 import BM25Okapi

texts = [t or "" for t in pq.read_table(sys.argv[1], columns=["text"]).column("text").to_pylist()]
questions = [json.loads(l)["question"] for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
t = time.perf_counter()
bm25 = BM25Okapi([x.lower().split() for x in texts])
build = time.perf_counter() - t
lat = []
for q in questions:
    t = time.perf_counter()
    scores = bm25.get_scores(q.lower().split())
    top = sorted(range(len(scores)), key=lambda i: -scores[i])[:50]
    lat.append((time.perf_counter() - t) * 1000)
lat.sort()
pick = lambda p: lat[min(len(lat) - 1, int(round(p * (len(lat) - 1))))]
print(json.dumps({"chunks": len(texts), "queries": len(lat), "build_seconds": build, "p50_ms": pick(0.5), "p95_ms": pick(0.95)}))
