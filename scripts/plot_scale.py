#!/usr/bin/env python3
"""bench/scale.json → bench/scale.png and the README table (printed): build time, size and
query latency against corpus size for each index type, measured points as markers, the
power-law fit through them extended (dashed) to 10^8, and the 24 GiB line."""
import json
import math
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

src = sys.argv[1] if len(sys.argv) > 1 else "bench/scale.json"
out = sys.argv[2] if len(sys.argv) > 2 else "bench/scale.png"
report = json.load(open(src))
rows = report["rows"]
limit = report["machine"]["memory_limit_bytes"]
kinds = ["Flat", "HNSW32", "IVF-PQ", "BM25"]


def fit(xs, ys):
    """log-log least squares: y = a · x^b."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    n = len(xs)
    mx, my = sum(lx) / n, sum(ly) / n
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / max(sum((x - mx) ** 2 for x in lx), 1e-12) if n > 1 else 1.0
    a = math.exp(my - b * mx)
    return a, b


fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
grid = [10 ** e for e in range(4, 9)]
table = []
for kind in kinds:
    pts = sorted((r for r in rows if r["index"] == kind), key=lambda r: r["n"])
    if not pts:
        continue
    ns = [r["n"] for r in pts]
    for ax, key, scale in [(axes[0], "build_seconds", 1), (axes[1], "bytes", 1 / 2**30), (axes[2], "query_ms", 1)]:
        ys = [r[key] * scale for r in pts]
        line, = ax.plot(ns, ys, "o-", label=kind)
        if len(pts) > 1:
            a, b = fit(ns, ys)
            ax.plot(grid, [a * g ** b for g in grid], "--", color=line.get_color(), alpha=0.5)
    per = pts[-1]["bytes"] / pts[-1]["n"]
    a_b, b_b = fit(ns, [r["build_seconds"] for r in pts])
    a_q, b_q = fit(ns, [r["query_ms"] for r in pts])
    fits = int(limit / per)
    table.append((kind, pts, per, fits, a_b * 1e7 ** b_b, a_b * 1e8 ** b_b, a_q * 1e7 ** b_q, math.ceil(1e8 * per / (0.7 * limit))))
axes[0].set_title("build time (s)")
axes[1].set_title("index size (GiB)")
axes[1].axhline(limit / 2**30, color="red", lw=1)
axes[1].text(1.2e4, limit / 2**30 * 1.2, "24 GiB", color="red")
axes[2].set_title("query latency (ms, one query)")
for ax in axes:
    ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlabel("passages / vectors"); ax.grid(True, which="both", alpha=0.2)
axes[0].legend()
fig.suptitle("gauge indexes on this machine (2 cores): measured (markers), power-law fit extended (dashed)")
plt.tight_layout()
plt.savefig(out, dpi=110)

print("| Index | measured n | build s | size MiB | query ms | recall@10 | bytes / item | fits in 24 GiB | build 10⁷ (fit) | build 10⁸ (fit) | query 10⁷ (fit) | shards for 10⁸ (70 % of 24 GiB each) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for kind, pts, per, fits, b7, b8, q7, shards in table:
    for r in pts:
        rec = f"{r['recall_at_10']:.3f}" if "recall_at_10" in r else "–"
        last = r is pts[-1]
        print(f"| {kind} | {r['n']:,} | {r['build_seconds']:.2f} | {r['bytes'] / 2**20:.1f} | {r['query_ms']:.2f} | {rec} | "
              + (f"{per:,.0f} | {fits:,} | {b7:,.0f} s | {b8 / 3600:,.1f} h | {q7:.1f} ms | {shards} |" if last else "| | | | | |"))
