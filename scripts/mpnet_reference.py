#!/usr/bin/env python3
"""Writes the all-mpnet-base-v2 reference fixture gauge's MPNet encoder is checked against.

Usage: mpnet_reference.py MODEL_DIR SHARED_DIR OUT.jsonl   (run in `just torch-venv`)

Texts: the 24 texts of ../shared/fixtures/minilm-reference.jsonl, the first 16 FRA dev
questions, and hand-written edge cases (empty, one character, non-ASCII in several scripts, a
literal `<pad>` and `</s>` in the text, identifiers such as `§ 174.63`), plus long texts built
from the dev set's reference answers: one just under and three over the 384-token limit. Per
line: `text`, `n_tokens` and `input_ids` after truncation to `max_seq_length` (384),
`sentence_embedding_f32le` (what `SentenceTransformer.encode` returns: mean pooling, then L2
normalisation; the 768 float32 values little-endian, hex: exact and half the size of decimal
JSON), each text encoded alone (batch size 1) in PyTorch CPU fp32. The first line is
a header with the versions and the model's weights hash.
"""
import hashlib
import json
import sys

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer


def main() -> None:
    model_dir, shared, out = sys.argv[1:4]
    texts = [json.loads(line)["text"] for line in open(f"{shared}/fixtures/minilm-reference.jsonl")]
    dev = [json.loads(line) for line in open(f"{shared}/golden/fra-dev.jsonl")]
    texts += [d["question"] for d in dev[:16]]
    texts += [
        "",
        "a",
        "?",
        "§ 174.63",
        "ERA22LA175 and 49 CFR 213.9(b)",
        "Les wagons-citernes doivent être inspectés avant le départ ; vérifiez les vannes.",
        "Güterzüge mit Gefahrgut müssen gekennzeichnet sein (ÄÖÜß).",
        "Τα εμπορευματικά τρένα μεταφέρουν επικίνδυνα υλικά.",
        "铁路危险品运输必须遵守安全规定。",
        "Caution ⚠️ — track speed 10 mph → 5 mph 🚆",
        "a literal <pad> token and a </s> inside the text",
        "   leading and trailing spaces   ",
    ]
    answers = " ".join(d.get("answer") or d.get("reference_answer") or "" for d in dev)
    words = answers.split()
    model = SentenceTransformer(model_dir, device="cpu")
    tokenizer = model.tokenizer
    limit = model.max_seq_length

    def n_tokens(text: str) -> int:
        return len(tokenizer(text, truncation=False)["input_ids"])

    # Long texts by word count: the longest prefix under the limit, then three past it.
    k = 1
    while n_tokens(" ".join(words[: k + 1])) < limit:
        k += 1
    texts += [" ".join(words[:k]), " ".join(words[: k + 40]), " ".join(words[:600]), " ".join(words[100:1400])]
    digest = hashlib.sha256(open(f"{model_dir}/model.safetensors", "rb").read()).hexdigest()
    with open(out, "w") as f:
        header = {
            "model": "sentence-transformers/all-mpnet-base-v2",
            "model_safetensors_sha256": digest,
            "max_seq_length": limit,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "texts": len(texts),
        }
        f.write(json.dumps(header) + "\n")
        for text in texts:
            ids = tokenizer(text, truncation=True, max_length=limit)["input_ids"]
            vector = model.encode([text], batch_size=1, convert_to_numpy=True, normalize_embeddings=False)[0]
            row = {"text": text, "n_tokens": len(ids), "input_ids": ids, "sentence_embedding_f32le": vector.astype("<f4").tobytes().hex()}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{out}: {len(texts)} texts, longest {max(n_tokens(t) for t in texts)} tokens before truncation", file=sys.stderr)


if __name__ == "__main__":
    main()
