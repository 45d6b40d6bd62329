#!/usr/bin/env python3
"""The reference side of `bench-scale` (scripts/bench-scale.sh, gauge-bench): faiss's own Python
wheel (faiss-cpu) building and searching the same indexes over the same vectors as gauge's side
(`bench_scale side`, crates/index/examples/bench_scale.rs), one query at a time, k = 10.

Usage: bench_faiss_python.py DIR IVF_N  (DIR holds data.f32 and queries.f32 from
`bench_scale vectors`). Prints one flat JSON object of figures (the harness's `json` format)."""
import json
import os
import sys
import time

import faiss
import numpy as np

DIM, K = 384, 10


def top_k(index, queries):
    started = time.perf_counter()
    rows = [index.search(q.reshape(1, -1), K)[1][0] for q in queries]
    return np.array(rows), (time.perf_counter() - started) * 1e3 / len(queries)


def build(factory, rows):
    started = time.perf_counter()
    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        index.train(rows)
    index.add(rows)
    return index, time.perf_counter() - started


def recall(found, exact):
    return sum(len(set(f) & set(e)) for f, e in zip(found.tolist(), exact.tolist())) / (len(exact) * K)


def main():
    folder, ivf_n = sys.argv[1], int(sys.argv[2])
    data = np.fromfile(os.path.join(folder, "data.f32"), dtype="<f4").reshape(-1, DIM)
    queries = np.fromfile(os.path.join(folder, "queries.f32"), dtype="<f4").reshape(-1, DIM)
    n = len(data)
    ivf_n = min(ivf_n, n)
    flat, flat_build = build("Flat", data)
    exact, flat_ms = top_k(flat, queries)
    del flat
    hnsw, hnsw_build = build("HNSW32", data)
    faiss.ParameterSpace().set_index_parameter(hnsw, "efSearch", 64)
    found, hnsw_ms = top_k(hnsw, queries)
    del hnsw
    nlist = min(max(int(round(ivf_n ** 0.5)), 16), 4096)
    ivf, ivf_build = build(f"IVF{nlist},PQ48np", data[:ivf_n])
    faiss.ParameterSpace().set_index_parameter(ivf, "nprobe", min(16, nlist))
    ivf_found, ivf_ms = top_k(ivf, queries)
    ivf_exact, _ = top_k(build("Flat", data[:ivf_n])[0], queries)
    print(json.dumps({
        "vectors": n, "ivf_vectors": ivf_n, "queries": len(queries),
        "flat_build_s": flat_build, "flat_query_ms": flat_ms, "flat_top1_sum": int(exact[:, 0].sum()),
        "hnsw_build_s": hnsw_build, "hnsw_query_ms": hnsw_ms, "hnsw_recall_at_10": recall(found, exact),
        "ivfpq_build_s": ivf_build, "ivfpq_query_ms": ivf_ms, "ivfpq_recall_at_10": recall(ivf_found, ivf_exact),
        "threads": faiss.omp_get_max_threads(),
    }))


if __name__ == "__main__":
    main()
