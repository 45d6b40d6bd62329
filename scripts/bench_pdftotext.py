"""The reference side of `just bench-extract` (scripts/bench-extract.sh, gauge-bench): poppler's
`pdftotext` over every PDF of a folder, one process per file, as many at a time as there are
cores; a warm-up pass, then PASSES timed passes (default 3).

Usage: bench_pdftotext.py CORPUS_DIR [PASSES]
Prints one flat JSON line: pages (form-feed separated, a trailing empty page dropped), the
median seconds of a pass, pages per second, and pdftotext's version line.
"""
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

corpus = sys.argv[1]
passes = int(sys.argv[2]) if len(sys.argv) > 2 else 3
pdfs = sorted(os.path.join(corpus, f) for f in os.listdir(corpus) if f.endswith(".pdf"))


def pages_of(path):
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", path, "-"], capture_output=True, check=True).stdout.decode("utf-8", "replace")
    pages = out.split("\f")
    if pages and not pages[-1].strip():
        pages.pop()
    return len(pages)


seconds, pages = [], 0
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
    for p in range(passes + 1):
        t = time.perf_counter()
        pages = sum(pool.map(pages_of, pdfs))
        if p > 0:
            seconds.append(time.perf_counter() - t)
s = statistics.median(seconds)
version = subprocess.run(["pdftotext", "-v"], capture_output=True).stderr.decode().splitlines()[0]
print(json.dumps({"pages": pages, "seconds": s, "pages_per_s": pages / s, "files": len(pdfs), "processes_at_once": os.cpu_count(), "pdftotext": version}))
