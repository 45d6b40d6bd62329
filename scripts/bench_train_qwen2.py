#!/usr/bin/env python3
"""The PyTorch side of `just bench-train-qwen` (scripts/bench-train-qwen.sh).

    bench_train_qwen2.py make-qwen2 OUT ASSETS   # a random-weight Qwen2 of Qwen2.5-1.5B's shape, fp32 safetensors
    bench_train_qwen2.py peft-side MODEL SEQ BATCH STEPS

`peft-side` is `scripts/gpu_check.py peft-side` for any architecture (AutoModelForCausalLM):
PEFT LoRA r 16 / alpha 16 on the seven projections, the same synthetic token ids as gauge's
`bench_train side`, STEPS timed steps (loss, backward, clipping at 1.0, AdamW) after an
untimed one, printed as {"figures": …, "describe": …} for gauge-bench.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check import current_rss_bytes, peak_rss_bytes, synthetic_ids, timed_steps  # noqa: E402

# Qwen2.5-1.5B(-Instruct / -Coder-Instruct): config.json's shape.
QWEN25_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
                  use_sliding_window=False)


def make_qwen2(out, assets):
    import shutil
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_15B)).to(torch.float32)
    # The q/k/v biases start at zero; give them values, as a trained checkpoint has.
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(assets, f)):
            shutil.copy(os.path.join(assets, f), os.path.join(out, f))


def peft_side(model_dir, seq, batch, steps):
    import torch
    import transformers
    import peft as peft_lib
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
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
                                   "architecture": model.config.model_type, "threads": torch.get_num_threads(),
                                   "interop_threads": torch.get_num_interop_threads(), "config": torch.__config__.show(),
                                   "parallel_info": torch.__config__.parallel_info()}}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make-qwen2":
        make_qwen2(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "peft-side":
        peft_side(*sys.argv[2:])
    else:
        sys.exit(__doc__)
