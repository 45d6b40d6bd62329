"""Writes tests/fixtures/langchain_recursive.json: LangChain RecursiveCharacterTextSplitter
outputs for seeded random texts, so gauge's `recursive` strategy is checked against the
real thing. Run: pip install langchain-text-splitters && python3 scripts/langchain_cases.py"""
import json
import random

from langchain_text_splitters import RecursiveCharacterTextSplitter
import langchain_text_splitters

SEPARATORS = ["\n\n", "\n", ". ", " ", ""]
WORDS = ["rail", "crossing", "highway-rail", "§", "174.63", "inspector", "shall", "défaut", "ünïcode",
         "ERA22LA175", "gate", "arm", "light", "a", "the", "of", "supercalifragilisticexpialidocious"]

rng = random.Random(7)
cases = []
for n in range(60):
    parts = []
    for _ in range(rng.randint(1, 120)):
        parts.append(rng.choice(WORDS))
        parts.append(rng.choice([" ", " ", " ", " ", ". ", "\n", "\n\n", "  ", " \n"]))
    text = "".join(parts)
    size = rng.choice([5, 10, 20, 40, 80, 200])
    overlap = rng.choice([0, 0, size // 5, size // 2])
    seps = SEPARATORS if n % 3 else ["\n\n", "\n", " ", ""]
    splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap, separators=seps)
    cases.append({"text": text, "size": size, "overlap": overlap, "separators": seps,
                  "chunks": splitter.split_text(text)})
out = {"langchain_text_splitters": langchain_text_splitters.__version__ if hasattr(langchain_text_splitters, "__version__") else "1.1.3",
       "cases": cases}
with open("tests/fixtures/langchain_recursive.json", "w") as f:
    json.dump(out, f, ensure_ascii=False, indent=0)
print(len(cases), "cases")
