"""The sentence-transformers side of `just bench-embed`'s MPNet comparison (scripts/bench-embed.sh,
gauge-bench): the first N chunk texts embedded the way a researcher would without gauge.

Usage: bench_embed_reference.py MODEL_DIR CHUNKS_PARQUET N
`SentenceTransformer.encode` with its defaults (length-sorted batches of 32, max_seq_length from
the folder, mean pooling, L2 normalisation), PyTorch CPU fp32 on every core: a warm-up on 64
texts, then one timed pass over the N texts, tokenization included. Prints `{"figures": …,
"describe": …}` with the figures gauge's side prints; `vector_sum` (every component of every
vector summed) checks both sides embedded the same texts to the same vectors.
"""
import json
import os
import sys
import time

import pyarrow.parquet as pq
import torch

model_dir, chunks, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(os.cpu_count() or 1)
import sentence_transformers
import transformers
from sentence_transformers import SentenceTransformer

texts = [t or "" for t in pq.read_table(chunks, columns=["text"]).column("text").to_pylist()][:n]
model = SentenceTransformer(model_dir, device="cpu")
with torch.inference_mode():
    model.encode(texts[:64], show_progress_bar=False)
    started = time.perf_counter()
    vectors = model.encode(texts, show_progress_bar=False, convert_to_numpy=True)
    seconds = time.perf_counter() - started
tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"])
figures = {"tokens_per_s": tokens / seconds, "texts_per_s": len(texts) / seconds, "tokens": tokens, "texts": len(texts),
           "seconds": seconds, "vector_sum": float(vectors.astype("float64").sum())}
print(json.dumps({"figures": figures, "describe": {"torch": torch.__version__, "transformers": transformers.__version__,
                                                  "sentence_transformers": sentence_transformers.__version__, "threads": torch.get_num_threads()}}))
