# gauge — run `just --list` for the recipes. `./just.sh RECIPE` installs just first if needed.

set shell := ["bash", "-euo", "pipefail", "-c"]

# One shared target dir outside the clone, so CI and every checkout reuse the build.
export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") / ".cache/gauge-target")

bin := CARGO_TARGET_DIR / "release"
corpus := "../shared/corpora/fra"
artifacts := "artifacts"

# List the recipes.
default:
    @just --list

# Install missing system packages and build every stage binary (release).
setup:
    scripts/setup-system.sh
    cargo build --release --workspace --bins

# Run the whole test suite (unit, end-to-end over ../shared, bad input, crash safety).
test: setup
    cargo test --release --workspace

# extract: documents (PDF/Markdown/text/JSONL) → pages.parquet. Prints the artifact dir.
extract input=corpus *flags="": setup
    {{bin}}/extract {{input}} --artifacts {{artifacts}} {{flags}}

# chunk: extract the corpus, then cut it into chunks (e.g. `just chunk --strategy section`).
chunk *flags="": setup
    pages=$({{bin}}/extract {{corpus}} --artifacts {{artifacts}} | tail -n1); \
    {{bin}}/chunk "$pages" --artifacts {{artifacts}} {{flags}}

# Every benchmark; numbers go to bench/*.json.
bench: bench-extract

# Extraction speed and word-level quality against pdftotext → bench/extract.json.
bench-extract: setup
    cargo build --release --example bench_vs_pdftotext -p gauge-extract
    {{bin}}/examples/bench_vs_pdftotext {{corpus}} bench/extract.json

# Print the Parquet schema tables the README shows.
schemas:
    cargo run --release -q --example schemas -p gauge-core

# Remove artifacts (not the build cache).
clean:
    rm -rf {{artifacts}}/extract {{artifacts}}/chunk
