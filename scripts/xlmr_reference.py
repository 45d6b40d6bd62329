#!/usr/bin/env python3
"""Builds a tiny XLM-RoBERTa cross-encoder reference, the way ../shared/fixtures/tiny-bert-
cross-encoder was built, but with transformers' Flax implementation (PyTorch wheels are not
reachable here): random weights (biases and LayerNorm perturbed too), saved as a Hugging Face
folder with PyTorch tensor names (model.safetensors), a RoBERTa-style pair tokenizer
(MiniLM's vocabulary with `[CLS] q [SEP] [SEP] p [SEP]`, the structure of `<s> q </s></s> p </s>`),
pad id 1 (so positions start at 2, as in XLM-R), one token type; and reference.jsonl with the
pair ids (`only_second` truncation at 128) and the logits.

usage: xlmr_reference.py OUT_DIR MINILM_DIR PAIRS_JSONL
"""
import json
import os
import sys

import numpy as np
from flax.traverse_util import flatten_dict
from safetensors.numpy import save_file
from tokenizers import Tokenizer, processors
from transformers import FlaxXLMRobertaForSequenceClassification, XLMRobertaConfig

out, minilm, pairs_path = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
config = XLMRobertaConfig(
    vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
    max_position_embeddings=160, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    num_labels=1, layer_norm_eps=1e-5, hidden_act="gelu",
)
config.architectures = ["XLMRobertaForSequenceClassification"]
model = FlaxXLMRobertaForSequenceClassification(config, seed=0)
rng = np.random.default_rng(7)
flat = {k: np.asarray(v, dtype=np.float32) for k, v in flatten_dict(model.params).items()}
for k, v in flat.items():
    # Random biases and LayerNorm shifts, scales around 1, larger weights: every parameter matters.
    if k[-1] in ("bias",):
        flat[k] = (rng.standard_normal(v.shape) * 0.1).astype(np.float32)
    elif k[-1] == "scale":
        flat[k] = (1.0 + rng.standard_normal(v.shape) * 0.1).astype(np.float32)
    else:
        flat[k] = (rng.standard_normal(v.shape) * 0.1).astype(np.float32)
from flax.traverse_util import unflatten_dict
model.params = unflatten_dict({k: v for k, v in flat.items()})

torch_names = {}
for k, v in flat.items():
    name = ".".join(k[:-1])
    leaf = k[-1]
    if leaf == "embedding":
        torch_names[f"{name}.weight"] = v
    elif leaf == "scale":
        torch_names[f"{name}.weight"] = v
    elif leaf == "kernel":
        torch_names[f"{name}.weight"] = np.ascontiguousarray(v.T)
    else:
        torch_names[f"{name}.{leaf}"] = v
save_file(torch_names, os.path.join(out, "model.safetensors"))
cfg = config.to_dict()
cfg["model_type"] = "xlm-roberta"
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)

tok = Tokenizer.from_file(os.path.join(minilm, "tokenizer.json"))
tok.post_processor = processors.RobertaProcessing(sep=("[SEP]", 102), cls=("[CLS]", 101), add_prefix_space=False, trim_offsets=False)
tok.no_padding()
tok.enable_truncation(max_length=128, strategy="only_second")
tok.save(os.path.join(out, "tokenizer.json"))

rows = []
pairs = [json.loads(l) for l in open(pairs_path) if l.strip()]
pairs.append({"query": "Which rule covers the inspection of switch heaters?", "passage": " ".join(["the switch heater must be inspected monthly"] * 60)})
for p in pairs:
    enc = tok.encode(p["query"], p["passage"])
    ids = np.array([enc.ids], dtype=np.int32)
    logits = model(input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=np.zeros_like(ids)).logits
    rows.append({"query": p["query"], "passage": p["passage"], "max_length": 128, "input_ids": enc.ids, "logit": float(np.asarray(logits)[0, 0])})
with open(os.path.join(out, "reference.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(f"{len(rows)} pairs → {out}")
