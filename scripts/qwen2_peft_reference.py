#!/usr/bin/env python3
"""The qwen2 PEFT reference: a tiny random Qwen2ForCausalLM of the 1.5B model's shape family
(q/k/v biases, grouped-query attention 6:1, tied embeddings, RoPE theta 1e6, RMSNorm eps 1e-6)
and what transformers + PEFT compute on it in float64 with a fixed LoRA adapter.

    qwen2_peft_reference.py OUT_DIR

writes OUT_DIR/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json, reference.json} (all but model.safetensors are committed). Everything is seeded: two runs write the same bytes
(`just check-peft` regenerates it and compares with the committed copy in
crates/train/tests/fixtures/tiny-qwen2/, which crates/train/tests/qwen2_peft.rs holds gauge's
trainer and decoder to).

The weights are not stored in the repository: tensor k of the sorted state-dict names (the tied
`lm_head` left out) takes SplitMix64(1000 + k)'s values u = (next >> 40) / 2^24, x = 2u − 1 (exact
in f32), as 1 + x/4 for the norms, x/2 for the q/k/v biases and x/8 for every matrix; the test
(crates/train/tests/qwen2_peft.rs) makes the same bytes and writes the same model.safetensors.

The adapter is the tiny-llama LoRA fixture's (../shared/fixtures/README.md): r 4, alpha 8 on all
seven projections of both layers, A[i][j] = 0.1 sin(1 + 7i + 3j + 11l + 13p),
B[i][j] = 0.02 cos(2 + 5i + 2j + 17l + 19p), p = q, k, v, o, gate, up, down = 0..6. The loss is
Hugging Face's (labels -100 off the target, logits[:-1] vs labels[1:]), a batch's loss is the sum
of the masked NLL over its sequences over their total targets (token-weighted). The weights are
stored in f32 and computed in f64, so the reference is exact for the stored weights.
"""
import json
import math
import os
import sys

CONFIG = dict(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
              num_key_value_heads=1, max_position_embeddings=512, rope_theta=1000000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0, hidden_act="silu",
              use_sliding_window=False, attention_dropout=0.0)
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA = 4, 8.0
# (length, first target position): the prompt is the tokens before it.
EXAMPLES = [(40, 25), (17, 6), (64, 30)]


def splitmix64(seed):
    state = seed
    while True:
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        yield z ^ (z >> 31)


def weights(k, name, n):
    """Tensor k's values (see the module docs): exact in f32, the same in the Rust test."""
    rng = splitmix64(1000 + k)
    xs = [2.0 * ((next(rng) >> 40) / 16777216.0) - 1.0 for _ in range(n)]
    if name.endswith("norm.weight"):
        return [1.0 + x / 4.0 for x in xs]
    if name.endswith(".bias"):
        # Qwen2's q/k/v biases are large in trained checkpoints; zero (the init) would hide them.
        return [x / 2.0 for x in xs]
    return [x / 8.0 for x in xs]


def module_path(layer, p):
    part = "self_attn" if p < 4 else "mlp"
    return f"model.layers.{layer}.{part}.{PROJECTIONS[p]}"


def fixed_ab(layer, p, d_in, d_out):
    a = [[0.1 * math.sin(1 + 7 * i + 3 * j + 11 * layer + 13 * p) for j in range(d_in)] for i in range(R)]
    b = [[0.02 * math.cos(2 + 5 * i + 2 * j + 17 * layer + 19 * p) for j in range(R)] for i in range(d_out)]
    return a, b


def example_ids(k, length, vocab):
    # Deterministic, spread over the vocabulary, no special ids (0-2) after the first.
    return [1] + [(k * 97 + i * 31 + (i * i) % 13) % (vocab - 3) + 3 for i in range(1, length)]


def tokenizer_json(vocab):
    # A WordLevel tokenizer over `<t0>` … `<tN>` split on whitespace: only the ids matter here.
    words = {"<pad>": 0, "<s>": 1, "</s>": 2}
    words.update({f"<t{i}>": i for i in range(3, vocab)})
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for w, i in list(words.items())[:3]],
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": words, "unk_token": "<pad>"}}


def main(out):
    import numpy as np
    import torch
    import transformers
    import peft as peft_lib
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    cfg = Qwen2Config(**CONFIG)
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != "lm_head.weight"}
    tensors = {name: torch.tensor(weights(k, name, math.prod(shape)), dtype=torch.float32).reshape(shape) for k, (name, shape) in enumerate(sorted(shapes.items()))}
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config_json = dict(CONFIG, architectures=["Qwen2ForCausalLM"], model_type="qwen2", torch_dtype="float32",
                       num_key_value_heads=CONFIG["num_key_value_heads"])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(CONFIG["vocab_size"]), f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "tokenizer_class": "PreTrainedTokenizerFast"},
                  f, indent=2, sort_keys=True)
        f.write("\n")

    # The reference in float64 from the stored f32 weights.
    model = Qwen2ForCausalLM.from_pretrained(out, torch_dtype=torch.float64, attn_implementation="eager")
    model.eval()
    base_logits = {}
    seqs = [example_ids(k, n, CONFIG["vocab_size"]) for k, (n, _) in enumerate(EXAMPLES)]
    with torch.no_grad():
        for k, ids in enumerate(seqs):
            base_logits[k] = model(input_ids=torch.tensor([ids])).logits[0, -1].tolist()
    tuned = get_peft_model(model, LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=PROJECTIONS, task_type="CAUSAL_LM"))
    tuned.eval()
    order = []
    with torch.no_grad():
        for layer in range(CONFIG["num_hidden_layers"]):
            for p in range(7):
                mod = tuned.base_model.model.get_submodule(module_path(layer, p))
                a, b = fixed_ab(layer, p, mod.in_features, mod.out_features)
                mod.lora_A["default"].weight.copy_(torch.tensor(a, dtype=torch.float64))
                mod.lora_B["default"].weight.copy_(torch.tensor(b, dtype=torch.float64))
                order.append((module_path(layer, p), mod))
    params = [t for _, m in order for t in (m.lora_A["default"].weight, m.lora_B["default"].weight)]

    def masked_nll(ids, first_target):
        x = torch.tensor([ids])
        logits = tuned(input_ids=x).logits[0]
        logp = torch.log_softmax(logits[:-1], dim=-1)
        nxt = x[0, 1:]
        nll = -logp.gather(1, nxt[:, None])[:, 0]
        mask = torch.tensor([1.0 if t + 1 >= first_target else 0.0 for t in range(len(ids) - 1)], dtype=torch.float64)
        return (nll * mask).sum(), int(mask.sum().item())

    def grads_record(parts):
        for t in params:
            t.grad = None
        total, n = 0.0, 0
        for ids, first in parts:
            s, c = masked_nll(ids, first)
            total = total + s
            n += c
        loss = total / n
        loss.backward()
        grads = {}
        for path, m in order:
            for which, t in (("A", m.lora_A["default"].weight), ("B", m.lora_B["default"].weight)):
                grads[f"{path}.lora_{which}"] = [float(x) for x in t.grad.flatten().tolist()]
        norm = math.sqrt(sum(float((t.grad ** 2).sum()) for t in params))
        return {"loss": float(loss), "n_targets": n, "grad_global_norm": norm, "grads": grads}

    train = []
    for k, (ids, (_, first)) in enumerate(zip(seqs, EXAMPLES)):
        rec = grads_record([(ids, first)])
        rec.update(name=f"example_{k}", input_ids=ids, first_target=first)
        train.append(rec)
    rec = grads_record([(ids, first) for ids, (_, first) in zip(seqs, EXAMPLES)])
    rec.update(name="batch_of_3", examples=[0, 1, 2])
    train.append(rec)
    adapter_logits = {}
    with torch.no_grad():
        for k, ids in enumerate(seqs):
            adapter_logits[k] = tuned(input_ids=torch.tensor([ids])).logits[0, -1].tolist()
    ref = {
        "about": "tiny random Qwen2 (q/k/v biases, GQA 6:1, tied embeddings) with a fixed LoRA adapter: "
                 "transformers + PEFT in float64 from the stored f32 weights (scripts/qwen2_peft_reference.py)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft_lib.__version__,
                     "numpy": np.__version__},
        "lora": {"r": R, "alpha": ALPHA, "target_modules": PROJECTIONS},
        "tensor_order": [f"{p}.lora_{w}" for p, _ in order for w in ("A", "B")],
        "train": train,
        "inference": [{"input_ids": ids, "last_logits_base": base_logits[k], "last_logits_adapter": adapter_logits[k]}
                      for k, ids in enumerate(seqs)],
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, sort_keys=True)
        f.write("\n")


def compare(a_dir, b_dir):
    """Exit non-zero unless two reference folders agree: config and tokenizer byte for byte, every
    number of reference.json within 1e-9 relative (other torch builds may round the last float64
    bits). The weights are not compared: both sides make them from the same generator."""
    import hashlib
    for name in ("config.json", "tokenizer.json"):
        ha = hashlib.sha256(open(os.path.join(a_dir, name), "rb").read()).hexdigest()
        hb = hashlib.sha256(open(os.path.join(b_dir, name), "rb").read()).hexdigest()
        if ha != hb:
            sys.exit(f"qwen2 PEFT reference: {name} differs between {a_dir} and {b_dir}")
    ra = json.load(open(os.path.join(a_dir, "reference.json")))
    rb = json.load(open(os.path.join(b_dir, "reference.json")))
    worst = [0.0]

    def walk(x, y, where):
        if isinstance(x, dict):
            if set(x) != set(y):
                sys.exit(f"qwen2 PEFT reference: keys differ at {where}")
            for k in x:
                if k != "versions":
                    walk(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, list):
            if len(x) != len(y):
                sys.exit(f"qwen2 PEFT reference: lengths differ at {where}")
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{where}[{i}]")
        elif isinstance(x, float):
            d = abs(x - y) / max(1.0, abs(x))
            worst[0] = max(worst[0], d)
            if d > 1e-9:
                sys.exit(f"qwen2 PEFT reference: {where} is {x} in {a_dir}, {y} in {b_dir}")
        elif x != y:
            sys.exit(f"qwen2 PEFT reference: {where} differs")

    walk(ra, rb, "reference")
    print(json.dumps({"same_config_and_tokenizer": True, "max_relative_diff": worst[0], "versions_committed": ra["versions"], "versions_now": rb["versions"]}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: qwen2_peft_reference.py OUT_DIR | qwen2_peft_reference.py compare COMMITTED_DIR NEW_DIR")
