"""Per-question trec_eval measures of every TREC run in an evaluation folder, computed by
pytrec_eval on the run and qrels files gauge wrote: {run stem: {qid: {measure: value}}} as JSON
on stdout. A run `<config>.run` is scored against `<config>.qrels` (chunks judged on their own);
a gold-item run `<config>.items.run` against `items.qrels` (its stem keeps `.items`). The measures are the second argument, comma-separated (default
`recip_rank,success`; e.g. `recip_rank,success,ndcg_cut,recall`). Used by
tests/pytrec_reference.rs and tests/formats.rs (`just refs-venv` installs pytrec-eval-terrier)."""
import json
import pathlib
import sys

import pytrec_eval

ev = pathlib.Path(sys.argv[1])
measures = set((sys.argv[2] if len(sys.argv) > 2 else "recip_rank,success").split(","))
out = {}
for run_file in sorted((ev / "trec").glob("*.run")):
    items = run_file.name.endswith(".items.run")
    qrels = {}
    for line in open(ev / "trec" / "items.qrels" if items else run_file.with_suffix(".qrels"), encoding="utf-8"):
        q, _, d, r = line.split()
        qrels.setdefault(q, {})[d] = int(r)
    run = {}
    for line in open(run_file, encoding="utf-8"):
        q, _, d, _rank, score, _tag = line.split()
        if d in run.setdefault(q, {}):
            sys.exit(f"{run_file}: {q} ranks {d} twice")
        run[q][d] = float(score)
    out[run_file.stem] = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
json.dump(out, sys.stdout)
