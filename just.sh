#!/usr/bin/env bash
# Runs `just` with the given arguments, installing it first when it is missing
# (cargo install, from crates.io), so `./just.sh test` works on a machine that has only
# the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v just >/dev/null 2>&1; then
  echo "just.sh: installing just (cargo install just --locked)…" >&2
  cargo install just --locked --quiet
fi
exec just "$@"
