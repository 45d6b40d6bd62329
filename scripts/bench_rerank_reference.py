"""The reference side of `just bench-rerank` (scripts/bench-rerank.sh, gauge-bench): the same
candidates scored in PyTorch on the CPU, the way a researcher would without gauge.

Usage: bench_rerank_reference.py cross|maxsim MODEL_DIR CANDIDATES_JSONL
- cross: sentence-transformers' CrossEncoder (its defaults: batches of 32, fp32), raw logits
  (activation_fn = identity, as gauge's reranker returns them), max_length 512;
- maxsim: sentence-transformers' token embeddings (encode(output_value="token_embeddings"), its
  defaults: length-sorted batches of 32, max_seq_length from the model folder), [CLS] and [SEP]
  dropped, L2-normalised, Σ over query tokens of the best cosine against the passage's tokens.
A warm-up on the first question, then every question's top 25 and top 50, one call per
question. Prints `{"figures": …, "describe": …}` with the figures gauge's side prints.
"""
import json
import os
import statistics
import sys
import time

import torch

kind, model_dir, candidates = sys.argv[1:4]
torch.set_num_threads(os.cpu_count() or 1)
rows = [json.loads(l) for l in open(candidates, encoding="utf-8") if l.strip()]
import sentence_transformers
import transformers

if kind == "cross":
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(model_dir, device="cpu", max_length=512)
    identity = torch.nn.Identity()

    def score(q, passages):
        return [float(x) for x in model.predict([(q, p) for p in passages], activation_fn=identity, show_progress_bar=False)]
elif kind == "maxsim":
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir, device="cpu")

    def score(q, passages):
        vectors = model.encode([q] + passages, output_value="token_embeddings", show_progress_bar=False, convert_to_numpy=False)
        inner = [torch.nn.functional.normalize(v[1:-1] if len(v) > 2 else v, dim=-1) for v in vectors]
        return [float((inner[0] @ p.T).max(dim=1).values.sum()) for p in inner[1:]]
else:
    sys.exit(f"reranker kind {kind!r}: expected cross or maxsim")

with torch.inference_mode():
    score(rows[0]["question"], rows[0]["passages"][:50])
    figures = {}
    for n in (25, 50):
        ms, total = [], 0.0
        for r in rows:
            t = time.perf_counter()
            scores = score(r["question"], r["passages"][:n])
            ms.append((time.perf_counter() - t) * 1000)
            total += sum(scores)
        figures[f"pairs_per_s_{n}"] = len(rows) * n / (sum(ms) / 1000)
        figures[f"p50_ms_{n}"] = statistics.median(ms)
        figures[f"score_sum_{n}"] = total
figures["questions"] = len(rows)
print(json.dumps({"figures": figures, "describe": {"torch": torch.__version__, "transformers": transformers.__version__,
                                                  "sentence_transformers": sentence_transformers.__version__, "threads": torch.get_num_threads(),
                                                  "config": torch.__config__.show(), "parallel_info": torch.__config__.parallel_info()}}))
