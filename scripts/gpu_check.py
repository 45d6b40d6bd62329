#!/usr/bin/env python3
"""The Python half of scripts/gpu-check.sh: random-weight models of a real shape, reference
vectors, vector comparison, sentence-transformers throughput, and the report.

Needs numpy and tokenizers; the GPU half also torch, transformers and sentence-transformers.

  gpu_check.py passages N OUT_JSONL             synthetic passages of ~250 word pieces (seeded)
  gpu_check.py texts FIXTURE_JSONL OUT_JSONL    the fixture's texts
  gpu_check.py make-model OUT_DIR ASSETS_DIR BACKEND
        BERT of all-MiniLM-L6-v2's shape (6 layers, 384 hidden, 12 heads, 1536 FFN), seeded
        random weights, saved as a Hugging Face / sentence-transformers folder (tokenizer and
        pooling files from ASSETS_DIR). BACKEND: transformers (torch) or numpy (no torch).
  gpu_check.py reference MODEL_DIR TEXTS_JSONL OUT_F32 BACKEND
        sentence embeddings (mean pooling, L2) by numpy (a float64 BERT forward written here),
        torch-cpu or torch-cuda (sentence-transformers, fp32).
  gpu_check.py compare A_F32 B_F32 DIM          cosine per row (raw and centred), as JSON
  gpu_check.py fixture-vectors FIXTURE_JSONL OUT_F32   the fixture's PyTorch vectors
  gpu_check.py st-throughput MODEL_DIR TEXTS_JSONL DTYPE   sentence-transformers on CUDA
  gpu_check.py make-llama OUT_DIR ASSETS_DIR
        a Llama of SmolLM2-135M's shape (30 layers, 576 hidden, 9/3 heads, 1536 FFN, 49152
        vocabulary, tied head), seeded random weights by transformers, fp32 safetensors (the
        tokenizer files from ASSETS_DIR: ids are synthetic, only the file is needed)
  gpu_check.py peft-step MODEL_DIR SEQ BATCH STEPS DTYPE [DEVICE: cuda (default) | cpu]
        PEFT LoRA (r 16, alpha 16, all seven projections) training steps on DEVICE on the same
        synthetic sequences as gauge's bench_train (AdamW, clipping), tokens/s as JSON
  gpu_check.py peft-side MODEL_DIR SEQ BATCH STEPS
        the bench-train harness's reference side: peft-step on the CPU in fp32, printed as
        {"figures": …, "describe": …} — tokens/s, the first step's loss, resident memory after
        imports and model load (the baseline), its peak, and the peak above the baseline;
        torch.__config__.show(), threads and versions as printed
  gpu_check.py st-step MODEL_DIR IDS_JSON STEPS TUNING [DEVICE: cpu (default) | cuda]
        sentence-transformers' training step (MultipleNegativesRankingLoss, AdamW) on the batch
        bench_encoder wrote (IDS_JSON: token ids, temperature); TUNING lora (PEFT r 16 on the six
        linear modules of every layer) or full; tokens/s as JSON
  gpu_check.py peft-embedder BASE_DIR ADAPTER_DIR CHUNKS_PARQUET EMBEDDINGS_PARQUET [N]
        PEFT loads an embedder adapter (train-lora --target embedder) onto transformers' AutoModel;
        its mean-pooled vectors of the first N (64) chunks vs gauge's `embed --adapter`, as JSON
  gpu_check.py hf-reranker QUERY_JSON MODEL_DIR
        transformers loads a reranker folder (train-lora --target reranker); its logits on the pairs
        of a `query --rerank MODEL_DIR --json` answer vs gauge's scores, as JSON
  gpu_check.py hf-generate MODEL_DIR REFERENCE_JSONL N_DECODE [DEVICE: cuda (default) | cpu]
        transformers (fp32) prefill and N_DECODE greedy steps with its KV cache on each fixture
        prompt (the SmolLM2 reference's token ids), tokens/s as JSON (as gauge's bench_generate)
  gpu_check.py peft-logits MODEL_DIR ADAPTER_DIR LOGITS_JSON
        PEFT loads gauge's adapter folder onto the fp32 model; its last-position logits vs
        gauge's (LOGITS_JSON from bench_train --check-dir), and the base's, as JSON
"""
import json
import math
import os
import struct
import sys
import time

try:
    import numpy as np
except ImportError:  # `texts` (used when packing the bundle) needs no numpy
    np = None

SHAPE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
             intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2,
             layer_norm_eps=1e-12, pad_token_id=0)
# Larger than BERT's 0.02 so that different texts give clearly different vectors and a
# wrong kernel cannot hide behind near-identical outputs.
INIT_STD = 0.1
SEED = 1234

WORDS = ("track signal crossing inspection hazardous materials tank car placard railroad "
         "locomotive brake switch derailment employee bridge worker protection watchman flagman "
         "roadway maintenance defect gauge rail tie fastener ballast curve speed restriction "
         "section part subpart appendix compliance manual enforcement violation penalty "
         "carrier shipper packaging label marking emergency response notification incident "
         "report federal administration regulation requirement procedure training qualified "
         "person authority movement block interlocking wayside device circuit battery").split()


def passages(n, out):
    rng = np.random.default_rng(SEED)
    with open(out, "w") as f:
        for i in range(n):
            words = rng.choice(WORDS, size=int(rng.integers(150, 200)))
            number = f"§ {int(rng.integers(100, 300))}.{int(rng.integers(1, 999))}"
            f.write(json.dumps({"text": f"{number} " + " ".join(words) + "."}) + "\n")


def texts(fixture, out):
    with open(fixture) as src, open(out, "w") as dst:
        for line in src:
            dst.write(json.dumps({"text": json.loads(line)["text"]}) + "\n")


def read_texts(path):
    with open(path) as f:
        return [json.loads(line)["text"] for line in f]


def bert_names(cfg):
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    shapes = {
        "embeddings.word_embeddings.weight": (cfg["vocab_size"], h),
        "embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": (cfg["type_vocab_size"], h),
        "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,),
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{l}"
        dense = {f"attention.self.{n}": (h, h) for n in ("query", "key", "value")}
        dense.update({"attention.output.dense": (h, h), "intermediate.dense": (i, h), "output.dense": (h, i)})
        for name, (d_out, d_in) in dense.items():
            shapes[f"{p}.{name}.weight"] = (d_out, d_in)
            shapes[f"{p}.{name}.bias"] = (d_out,)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}.{norm}.weight"] = (h,)
            shapes[f"{p}.{norm}.bias"] = (h,)
    return shapes


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    meta = json.dumps(header, separators=(",", ":")).encode()
    meta += b" " * ((8 - len(meta) % 8) % 8)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(meta)))
        f.write(meta)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{name}: {t['dtype']} (the numpy reference reads F32)"
        a, b = t["data_offsets"]
        out[name.removeprefix("bert.")] = np.frombuffer(body[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


def copy_assets(assets, out):
    import shutil
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                 "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        if os.path.exists(os.path.join(assets, name)):
            shutil.copy(os.path.join(assets, name), os.path.join(out, name))
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": SHAPE["hidden_size"], "pooling_mode_mean_tokens": True}, f)
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], f)
    os.makedirs(os.path.join(out, "2_Normalize"), exist_ok=True)
    with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 256, "do_lower_case": False}, f)


def make_model(out, assets, backend):
    os.makedirs(out, exist_ok=True)
    if backend == "transformers":
        import torch
        from transformers import BertConfig, BertModel
        torch.manual_seed(SEED)
        cfg = BertConfig(**SHAPE, initializer_range=INIT_STD)
        model = BertModel(cfg, add_pooling_layer=False)
        with torch.no_grad():  # LayerNorms start at 1/0 in transformers: perturb them too
            for name, p in model.named_parameters():
                if "LayerNorm" in name:
                    p.add_(torch.randn_like(p) * INIT_STD)
        model.save_pretrained(out, safe_serialization=True)
    elif backend == "numpy":
        rng = np.random.default_rng(SEED)
        tensors = {}
        for name, shape in bert_names(SHAPE).items():
            base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
            tensors[name] = base + rng.normal(0.0, INIT_STD, size=shape)
        write_safetensors(os.path.join(out, "model.safetensors"), tensors)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump({"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
                       "initializer_range": INIT_STD, **SHAPE}, f, indent=1)
    else:
        sys.exit(f"make-model: unknown backend {backend} (transformers, numpy)")
    copy_assets(assets, out)


def numpy_reference(model_dir, texts_):
    from tokenizers import Tokenizer
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(256)
    tok.no_padding()
    h, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    hd = h // heads

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def dense(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    def erf(z):  # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), vectorised
        t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
        y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-z * z)
        return np.sign(z) * y

    out = []
    for text in texts_:
        ids = np.array(tok.encode(text).ids)
        n = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
        x = ln(x, "embeddings.LayerNorm")
        for l in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{l}"
            q, k, v = (dense(x, f"{p}.attention.self.{m}").reshape(n, heads, hd).transpose(1, 0, 2) for m in ("query", "key", "value"))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(1, 0, 2).reshape(n, h)
            x = ln(dense(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
            f = dense(x, f"{p}.intermediate.dense")
            f = 0.5 * f * (1.0 + erf(f / math.sqrt(2.0)))
            x = ln(dense(f, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        m = x.mean(0)
        out.append(m / max(np.linalg.norm(m), 1e-12))
    return np.array(out, dtype=np.float32)


def st_model(model_dir, device, dtype="fp32"):
    import torch
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(model_dir, device=device)
    model.max_seq_length = 256
    if dtype == "fp16":
        model = model.half()
    elif dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model


def reference(model_dir, texts_path, out, backend):
    t = read_texts(texts_path)
    if backend == "numpy":
        v = numpy_reference(model_dir, t)
    elif backend in ("torch-cpu", "torch-cuda"):
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 reference: no TF32 shortcuts
        torch.backends.cudnn.allow_tf32 = False
        model = st_model(model_dir, "cuda" if backend == "torch-cuda" else "cpu")
        v = model.encode(t, batch_size=64, convert_to_numpy=True, normalize_embeddings=True).astype(np.float32)
    else:
        sys.exit(f"reference: unknown backend {backend} (numpy, torch-cpu, torch-cuda)")
    v.astype("<f4").tofile(out)


def fixture_vectors(fixture, out):
    with open(fixture) as f:
        v = np.array([json.loads(line)["sentence_embedding"] for line in f], dtype="<f4")
    v.tofile(out)


def compare(a_path, b_path, dim):
    a = np.fromfile(a_path, dtype="<f4").reshape(-1, dim).astype(np.float64)
    b = np.fromfile(b_path, dtype="<f4").reshape(-1, dim).astype(np.float64)
    assert a.shape == b.shape, f"{a_path} has {a.shape[0]} rows, {b_path} {b.shape[0]}"

    def cos(x, y):
        return (x * y).sum(1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-300)

    raw = cos(a, b)
    # Centred: minus the mean vector of the reference, so a shared offset cannot carry the score.
    mean = b.mean(0)
    centred = cos(a - mean, b - mean) if len(a) > 1 else raw
    print(json.dumps({"rows": int(len(a)), "min_cosine": float(raw.min()), "mean_cosine": float(raw.mean()),
                      "min_centred_cosine": float(centred.min()), "max_abs_diff": float(np.abs(a - b).max())}))


def st_throughput(model_dir, texts_path, dtype, device="cuda"):
    """sentence-transformers' encode (tokenisation included) on DEVICE. dtype: fp32 (strict:
    TF32 off), tf32 (f32 storage, TF32 matmuls allowed), fp16, bf16."""
    import torch
    t = read_texts(texts_path)
    if dev_is_cuda(device):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    model = st_model(model_dir, device, "fp32" if dtype == "tf32" else dtype)
    sync = torch.cuda.synchronize if dev_is_cuda(device) else (lambda: None)
    model.encode(t[:512], batch_size=128)
    sync()
    tokens = sum(len(e) for e in model.tokenizer(t, truncation=True, max_length=256)["input_ids"])
    start = time.perf_counter()
    model.encode(t, batch_size=128, convert_to_numpy=True)
    sync()
    s = time.perf_counter() - start
    name = torch.cuda.get_device_name(0) if dev_is_cuda(device) else "cpu"
    print(json.dumps({"dtype": dtype, "texts": len(t), "tokens": tokens, "seconds": s, "tokens_per_second": tokens / s,
                      "timed": "tokenisation + embedding (encode)", "torch": torch.__version__, "device": name}))


def dev_is_cuda(device):
    return str(device).startswith("cuda")


SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


def make_llama(out, assets):
    import shutil
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(assets, f)):
            shutil.copy(os.path.join(assets, f), os.path.join(out, f))


def synthetic_ids(seq, batch, vocab):
    # The same formula as crates/train/examples/bench_train.rs.
    return [[(i * 7919 + b * 104729) % (vocab - 1) + 1 for i in range(seq)] for b in range(batch)]


def peft_step(model_dir, seq, batch, steps, dtype, device="cuda"):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=dt).to(device)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    ids = torch.tensor(synthetic_ids(int(seq), int(batch), model.config.vocab_size), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    params = [p for p in model.parameters() if p.requires_grad]
    s, _ = timed_steps(lambda: model(input_ids=ids, labels=ids).loss, params, 1e-3, steps, sync)
    print(json.dumps({"dtype": dtype, "sequence_tokens": int(seq), "sequences_per_step": int(batch), "seconds_per_step": s,
                      "tokens_per_s": int(seq) * int(batch) / s, "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else f"cpu ({torch.get_num_threads()} threads)",
                      "peak_memory_bytes": torch.cuda.max_memory_allocated() if device.startswith("cuda") else peak_rss_bytes()}))


def current_rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peft_side(model_dir, seq, batch, steps):
    import torch, transformers, peft as peft_lib
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    ids = torch.tensor(synthetic_ids(int(seq), int(batch), model.config.vocab_size))
    baseline = current_rss_bytes()
    params = [p for p in model.parameters() if p.requires_grad]
    s, first = timed_steps(lambda: model(input_ids=ids, labels=ids).loss, params, 1e-3, steps, lambda: None)
    peak = peak_rss_bytes()
    mib = 2 ** 20
    print(json.dumps({"figures": {"tokens_per_s": int(seq) * int(batch) / s, "seconds_per_step": s, "first_step_loss": first,
                                  "baseline_rss_mib": baseline / mib, "peak_rss_mib": peak / mib, "above_baseline_mib": (peak - baseline) / mib},
                      "describe": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft_lib.__version__,
                                   "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
                                   "config": torch.__config__.show(), "parallel_info": torch.__config__.parallel_info()}}))


def timed_steps(loss_of_batch, params, lr, steps, sync):
    """STEPS timed training steps after one untimed: loss, backward, clipping at 1.0, AdamW.
    Returns the mean seconds per timed step and the first step's loss."""
    import torch
    opt = torch.optim.AdamW(params, lr=lr, eps=1e-8, weight_decay=0.0)
    times, first = [], None
    for step in range(int(steps) + 1):
        sync()
        t = time.perf_counter()
        loss = loss_of_batch()
        if step == 0:
            first = loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step > 0:
            times.append(time.perf_counter() - t)
    return sum(times) / len(times), first


def st_step(model_dir, ids_json, steps, tuning, device="cpu"):
    """sentence-transformers' training step on the batch `bench_encoder` wrote (its token ids):
    MultipleNegativesRankingLoss (InfoNCE, scale = 1/temperature; dropout off) over the queries against their
    positives and two hard negatives each (columns anchor, positive, negative_1, negative_2, each
    padded to its own longest, as the library's collator does), with PEFT LoRA r 16 on the six
    linear modules of every layer or every weight trainable; AdamW, clipping at 1.0. The step is
    what `fit`/`SentenceTransformerTrainer` runs per batch, without the trainer's bookkeeping."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    batch = json.load(open(ids_json))
    model = SentenceTransformer(model_dir, device=device)
    if tuning == "lora":
        from peft import LoraConfig, get_peft_model
        target = r".*encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense|intermediate\.dense|output\.dense)"
        model[0].auto_model = get_peft_model(model[0].auto_model, LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, target_modules=target))
    loss_fn = MultipleNegativesRankingLoss(model, scale=1.0 / batch["temperature"])
    q, p = batch["queries"], batch["passages"]
    n = len(q)
    columns = [q, p[:n]] + [p[n + k * n:n + (k + 1) * n] for k in range((len(p) - n) // n)]

    def features(seqs):
        width = max(len(s) for s in seqs)
        ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs], device=device)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    feats = [features(c) for c in columns]
    params = [x for x in model.parameters() if x.requires_grad]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    # Dropout off, as gauge's trainer (eval mode changes nothing else for BERT): the first
    # step's loss is then the same function of the same ids on both sides.
    model.eval()
    s, first = timed_steps(lambda: loss_fn([dict(f) for f in feats], None), params, 1e-4, steps, sync)
    tokens = sum(len(x) for x in q + p)
    padded = sum(f["input_ids"].numel() for f in feats)
    import sentence_transformers
    print(json.dumps({"tuning": tuning, "tokens": tokens, "padded_tokens": padded, "seconds_per_step": s, "tokens_per_s": tokens / s,
                      "trainable_parameters": sum(x.numel() for x in params), "loss_first_step": first,
                      "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
                      "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else f"cpu ({torch.get_num_threads()} threads)",
                      "peak_memory_bytes": torch.cuda.max_memory_allocated() if device.startswith("cuda") else peak_rss_bytes()}))


def peak_rss_bytes():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peft_logits(model_dir, adapter_dir, logits_json):
    import torch
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    ref = json.load(open(logits_json))
    ids = torch.tensor([ref["input_ids"]])
    base = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits[0, -1].double().numpy()
    tuned = PeftModel.from_pretrained(base, adapter_dir)
    with torch.no_grad():
        peft_logits_ = tuned(input_ids=ids).logits[0, -1].double().numpy()
    gauge = np.array(ref["last_logits"], dtype=np.float64)
    # The base alone too, when bench_train wrote it (bundles built before it did lack the field).
    gauge_base = np.array(ref.get("base_last_logits", [np.nan] * len(base_logits)), dtype=np.float64)
    print(json.dumps({"max_abs_diff_gauge_vs_peft": float(np.abs(gauge - peft_logits_).max()),
                      "max_abs_diff_base_gauge_vs_transformers": float(np.abs(gauge_base - base_logits).max()),
                      "max_abs_change_by_adapter": float(np.abs(peft_logits_ - base_logits).max()),
                      "argmax_equal": int(gauge.argmax()) == int(peft_logits_.argmax())}))


def peft_embedder(base, adapter, chunks_parquet, embeddings_parquet, n=64):
    """PEFT loads a `train-lora --target embedder` adapter onto transformers' AutoModel; its
    mean-pooled, normalised vectors of the first chunks vs gauge's `embed --adapter` vectors."""
    import pyarrow.parquet as pq
    import torch
    from peft import PeftModel
    from transformers import AutoModel, AutoTokenizer
    n = int(n)
    chunks = pq.read_table(chunks_parquet, columns=["chunk_id", "text"]).to_pylist()[:n]
    gauge_vectors = {r["chunk_id"]: np.array(r["vector"], dtype=np.float64) for r in pq.read_table(embeddings_parquet).to_pylist()}
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModel.from_pretrained(base, dtype=torch.float32).eval()
    # gauge's embedder truncates at the folder's sentence-transformers max_seq_length (MiniLM
    # 256, MPNet 384), as sentence-transformers does.
    st_config = os.path.join(base, "sentence_bert_config.json")
    max_length = json.load(open(st_config)).get("max_seq_length", 256) if os.path.exists(st_config) else 256

    def embed(m):
        out = []
        for i in range(0, len(chunks), 16):
            b = tok([c["text"] for c in chunks[i:i + 16]], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            with torch.no_grad():
                h = m(**b).last_hidden_state
            mask = b["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1).double().numpy())
        return np.concatenate(out)

    plain = embed(model)
    peft = embed(PeftModel.from_pretrained(model, adapter).eval())
    gauge = np.stack([gauge_vectors[c["chunk_id"]] for c in chunks])
    moved = 1 - (plain * peft).sum(1)
    print(json.dumps({"rows": len(chunks), "min_cosine_gauge_vs_peft": float((gauge * peft).sum(1).min()),
                      "max_abs_diff_gauge_vs_peft": float(np.abs(gauge - peft).max()),
                      "mean_cosine_distance_moved_by_adapter": float(moved.mean()), "max_cosine_distance_moved_by_adapter": float(moved.max())}))


def hf_reranker(query_json, model_dir):
    """transformers' BertForSequenceClassification loads a `train-lora --target reranker` model
    folder; its logits on the (question, passage) pairs of a `query --rerank --json` answer vs
    the scores gauge's reranker gave them."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    r = json.load(open(query_json))
    passages = r["passages"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    b = tok([r["question"]] * len(passages), [p["text"] for p in passages], padding=True, truncation=True, max_length=512, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**b).logits[:, 0].double().numpy()
    ours = np.array([p["score"] for p in passages], dtype=np.float64)
    print(json.dumps({"pairs": len(passages), "max_abs_diff_gauge_vs_transformers": float(np.abs(ours - theirs).max()),
                      "score_range": float(ours.max() - ours.min()), "same_order": bool((np.argsort(-ours) == np.argsort(-theirs)).all())}))


def hf_generate(model_dir, reference, n_decode, device="cuda"):
    """transformers' prefill and greedy decoding (KV cache) on the fixture prompts, fp32:
    the same measurement as gauge's bench_generate, for the same random-weight model."""
    import time, torch
    from transformers import AutoModelForCausalLM
    dev = torch.device(device)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(dev).eval()
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    prompts = []
    with torch.no_grad():
        for line in open(reference):
            if not line.strip():
                continue
            r = json.loads(line)
            ids = torch.tensor([r["prompt_ids"]], device=dev)
            model(ids[:, :8])  # warm-up
            sync()
            t = time.time()
            out = model(ids, use_cache=True)
            sync()
            prefill = time.time() - t
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t = time.time()
            for _ in range(n_decode):
                out = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            decode = time.time() - t
            prompts.append({"name": r["name"], "prompt_tokens": ids.shape[1], "prefill_tokens_per_s": ids.shape[1] / prefill, "decode_tokens_per_s": n_decode / decode})
    return {"device": device, "dtype": "fp32", "decode_tokens": n_decode, "prompts": prompts}


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "passages":
        passages(int(args[0]), args[1])
    elif cmd == "texts":
        texts(args[0], args[1])
    elif cmd == "make-model":
        make_model(*args)
    elif cmd == "reference":
        reference(*args)
    elif cmd == "fixture-vectors":
        fixture_vectors(*args)
    elif cmd == "compare":
        compare(args[0], args[1], int(args[2]))
    elif cmd == "st-throughput":
        st_throughput(*args)
    elif cmd == "make-llama":
        make_llama(*args)
    elif cmd == "peft-step":
        peft_step(*args)
    elif cmd == "peft-side":
        peft_side(*args)
    elif cmd == "st-step":
        st_step(*argv[2:])
    elif cmd == "peft-logits":
        peft_logits(*args)
    elif cmd == "peft-embedder":
        peft_embedder(*args)
    elif cmd == "hf-reranker":
        hf_reranker(*args)
    elif cmd == "hf-generate":
        print(json.dumps(hf_generate(args[0], args[1], int(args[2]), *args[3:])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
