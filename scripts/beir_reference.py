#!/usr/bin/env python3
"""The sentence-transformers + pytrec_eval reference gauge's dense SciFact rows are held to.

Usage: beir_reference.py SCIFACT_DIR OUT.json MODEL_DIR [MODEL_DIR ...]   (run in `just torch-venv`)

For each model (all-MiniLM-L6-v2, all-mpnet-base-v2): `SentenceTransformer.encode` (PyTorch CPU
fp32, the model's own max_seq_length, normalised) of every abstract as "title" + " " + "text"
(BEIR's own rule; gauge embeds "title", a blank line, "text": the same word pieces) and of
every test claim, exact inner-product search, then pytrec_eval's ndcg_cut_10, recip_rank over
the top 10 (MRR@10) and recall_100, averaged over the queries — on the full set (5,183
abstracts, 300 test claims) and on the CI subset, which this script defines and records: the
first 60 test claims (qrels order) with every abstract judged for them, plus the first
abstracts of corpus.jsonl judged for no test claim, 300 abstracts in all. tests/beir_reference.rs
rebuilds that subset from the recorded ids, runs gauge on it and compares within 0.002.
"""
import hashlib
import json
import sys

import numpy as np
import pytrec_eval
import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

SUBSET_QUERIES = 60
SUBSET_DOCS = 300


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path):
    qrels = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            cols = line.rstrip("\n").split("\t")
            if i == 0 and cols[0] == "query-id":
                continue
            q, d, g = cols
            if int(g) > 0:
                qrels.setdefault(q, {})[d] = int(g)
    return qrels


def evaluate(model, corpus, queries, qrels):
    ids = [d["_id"] for d in corpus]
    docs = model.encode([(d.get("title") or "") + " " + d["text"] for d in corpus], batch_size=32, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    qids = [q for q in qrels if q in queries]
    qv = model.encode([queries[q] for q in qids], batch_size=32, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    scores = qv @ docs.T
    run10, run100 = {}, {}
    for i, q in enumerate(qids):
        order = np.argsort(-scores[i], kind="stable")[:100]
        run100[q] = {ids[j]: float(scores[i, j]) for j in order}
        run10[q] = {ids[j]: float(scores[i, j]) for j in order[:10]}
    ev = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in qids}, {"ndcg_cut.10", "recip_rank", "recall.100"})
    r10, r100 = ev.evaluate(run10), ev.evaluate(run100)
    mean = lambda res, key: float(np.mean([res[q][key] for q in qids]))
    return {"ndcg@10": mean(r100, "ndcg_cut_10"), "mrr@10": mean(r10, "recip_rank"), "recall@100": mean(r100, "recall_100"), "queries": len(qids), "documents": len(ids)}


def main() -> None:
    scifact, out, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    corpus = read_jsonl(f"{scifact}/corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in read_jsonl(f"{scifact}/queries.jsonl")}
    qrels = read_qrels(f"{scifact}/qrels/test.tsv")
    # The CI subset: the first SUBSET_QUERIES judged claims, their abstracts, then unjudged ones.
    sub_q = list(qrels)[:SUBSET_QUERIES]
    judged_all = {d for q in qrels for d in qrels[q]}
    keep = {d for q in sub_q for d in qrels[q]}
    for d in corpus:
        if len(keep) >= SUBSET_DOCS:
            break
        if d["_id"] not in judged_all:
            keep.add(d["_id"])
    sub_corpus = [d for d in corpus if d["_id"] in keep]
    sub_qrels = {q: qrels[q] for q in sub_q}
    torch.set_num_threads(max(1, torch.get_num_threads()))
    result = {
        "versions": {"sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__, "pytrec_eval": "pytrec-eval-terrier"},
        "corpus_sha256": hashlib.sha256(open(f"{scifact}/corpus.jsonl", "rb").read()).hexdigest(),
        "subset": {"query_ids": sub_q, "doc_ids": [d["_id"] for d in sub_corpus]},
        "models": {},
    }
    for m in models:
        model = SentenceTransformer(m, device="cpu")
        name = m.rstrip("/").split("/")[-1]
        result["models"][name] = {
            "max_seq_length": model.max_seq_length,
            "full": evaluate(model, corpus, queries, qrels),
            "subset": evaluate(model, sub_corpus, queries, sub_qrels),
        }
        print(name, json.dumps(result["models"][name]), file=sys.stderr)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
