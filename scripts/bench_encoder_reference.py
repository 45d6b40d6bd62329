#!/usr/bin/env python3
"""The bench-train-encoder harness's reference side (scripts/bench-train-encoder.sh).

  bench_encoder_reference.py step MODEL_DIR IDS_JSON STEPS TUNING COLLATOR
      sentence-transformers' training step on the batch `bench_encoder` wrote (its token ids):
      MultipleNegativesRankingLoss (InfoNCE, scale = 1/temperature, dropout off) of the queries
      against their positives and two hard negatives each; TUNING `lora` (PEFT r 16 / alpha 16 on
      the six linear modules of every layer) or `full`; AdamW (lr 1e-4), clipping at 1.0; STEPS
      timed steps after an untimed first. COLLATOR:
        padded   — each column (anchors, positives, negatives 1, negatives 2) padded to its own
                   longest, as sentence-transformers' collator does;
        bucketed — each column's texts sorted by length and encoded in buckets of 4, each padded
                   to its own longest (the loss is the same function: the embeddings are put
                   back in order before it).
      Prints {"figures": …, "describe": …}: tokens/s (real tokens), the first step's loss,
      resident memory after imports and load (baseline), its peak and the peak above it, token
      slots encoded; torch's configuration, threads and versions as printed.
  bench_encoder_reference.py profile MODEL_DIR IDS_JSON
      torch.profiler over one LoRA step and one full step (padded), the top operators by self
      CPU time of each, as text: where PEFT's LoRA step spends the time its full step does not.
"""
import json
import os
import resource
import sys
import time


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup(model_dir, ids_json, tuning):
    import torch
    from sentence_transformers import SentenceTransformer
    batch = json.load(open(ids_json))
    model = SentenceTransformer(model_dir, device="cpu")
    if tuning == "lora":
        from peft import LoraConfig, get_peft_model
        target = r".*encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense|intermediate\.dense|output\.dense)"
        model[0].auto_model = get_peft_model(model[0].auto_model, LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, target_modules=target))
    # Dropout off, as gauge's trainer: the first step's loss is the same function of the same ids.
    model.eval()
    q, p = batch["queries"], batch["passages"]
    n = len(q)
    columns = [q, p[:n]] + [p[n + k * n:n + (k + 1) * n] for k in range((len(p) - n) // n)]
    return torch, model, batch, columns


def features(torch, seqs):
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def loss_of(torch, model, columns, scale, collator):
    """MultipleNegativesRankingLoss of the columns, encoded per `collator`."""
    from sentence_transformers import util
    slots = 0
    embeddings = []
    for col in columns:
        if collator == "padded":
            f = features(torch, col)
            slots += f["input_ids"].numel()
            embeddings.append(model(f)["sentence_embedding"])
        else:
            order = sorted(range(len(col)), key=lambda i: len(col[i]))
            parts = []
            for b in range(0, len(order), 4):
                f = features(torch, [col[i] for i in order[b:b + 4]])
                slots += f["input_ids"].numel()
                parts.append(model(f)["sentence_embedding"])
            e = torch.cat(parts)
            inverse = torch.empty(len(order), dtype=torch.long)
            inverse[torch.tensor(order)] = torch.arange(len(order))
            embeddings.append(e[inverse])
    scores = util.cos_sim(embeddings[0], torch.cat(embeddings[1:])) * scale
    labels = torch.arange(len(columns[0]))
    return torch.nn.functional.cross_entropy(scores, labels), slots


def step(model_dir, ids_json, steps, tuning, collator):
    torch, model, batch, columns = setup(model_dir, ids_json, tuning)
    import peft, sentence_transformers, transformers
    baseline = rss_mib()
    params = [x for x in model.parameters() if x.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, eps=1e-8, weight_decay=0.0)
    times, first, slots = [], None, 0
    for i in range(int(steps) + 1):
        t = time.perf_counter()
        loss, slots = loss_of(torch, model, columns, 1.0 / batch["temperature"], collator)
        if i == 0:
            first = loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i > 0:
            times.append(time.perf_counter() - t)
    s = sum(times) / len(times)
    tokens = sum(len(x) for c in columns for x in c)
    peak = peak_mib()
    print(json.dumps({"figures": {"tokens_per_s": tokens / s, "seconds_per_step": s, "first_step_loss": first, "tokens": tokens, "token_slots": slots,
                                  "baseline_rss_mib": baseline, "peak_rss_mib": peak, "above_baseline_mib": peak - baseline,
                                  "trainable_parameters": sum(x.numel() for x in params)},
                      "describe": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                                   "sentence_transformers": sentence_transformers.__version__, "threads": torch.get_num_threads(),
                                   "config": torch.__config__.show(), "parallel_info": torch.__config__.parallel_info()}}))


def profile(model_dir, ids_json):
    from torch.profiler import ProfilerActivity, profile as prof
    for tuning in ("lora", "full"):
        torch, model, batch, columns = setup(model_dir, ids_json, tuning)
        params = [x for x in model.parameters() if x.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4)
        for i in range(2):  # the first step warms up; the second is profiled
            if i == 1:
                ctx = prof(activities=[ProfilerActivity.CPU])
                ctx.__enter__()
            t = time.perf_counter()
            loss, _ = loss_of(torch, model, columns, 1.0 / batch["temperature"], "padded")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i == 1:
                ctx.__exit__(None, None, None)
                print(f"== {tuning}: one step, {time.perf_counter() - t:.2f} s (profiled), {sum(x.numel() for x in params)} trainable")
                print(ctx.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "step":
        step(*args)
    elif cmd == "profile":
        profile(*args)
    else:
        sys.exit(__doc__)
