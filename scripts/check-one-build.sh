#!/usr/bin/env bash
# After `just setup`: every build step the recipes run compiles no dependency again.
# Runs `cargo build --release --workspace --examples` and each `cargo build` line of the justfile
# and scripts/*.sh (the justfile's `{{build}}` expanded; skipped: lines that ask for other
# features on purpose — `--features`, the CUDA build of scripts/build-gpu.sh) and fails when
# one prints a `Compiling` line for a registry crate (a crate without a local path: one cargo
# compiled again because its features differ from the workspace build's).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gauge-target}"
build=$(sed -n 's/^build := "\(.*\)"$/\1/p' justfile)
[ -n "$build" ] || { echo "check-one-build: no \`build := \"…\"\` line in the justfile" >&2; exit 1; }
mapfile -t steps < <(
  { echo "cargo build --release --workspace --examples"
    grep -h '^\s*{{build}}\s*$' justfile | sed "s|{{build}}|$build|"
    ls justfile scripts/*.sh | grep -v '^scripts/build-gpu.sh$' | xargs grep -h -E '^\s*cargo build ' | grep -v -- '--features' | sed -e 's/\s*$//' -e 's/ -q / /'
  } | sed 's/^\s*//' | sort -u)
failed=0
for step in "${steps[@]}"; do
  out=$(eval "$step" 2>&1) || { echo "check-one-build: \`$step\` failed:"; echo "$out" | tail -n 20; exit 1; }
  registry=$(echo "$out" | grep -E '^\s*Compiling [^ ]+ v[^ ]+$' || true)
  if [ -n "$registry" ]; then
    echo "check-one-build: \`$step\` compiled dependencies again:"; echo "$registry" | head -n 10
    failed=1
  else
    echo "check-one-build: \`$step\`: no dependency compiled"
  fi
done
[ "$failed" = 0 ] || { echo "check-one-build: a recipe's build differs from \`just setup\`'s; build with \`{{build}}\` or \`--workspace --example NAME\`, not \`-p\`" >&2; exit 1; }
echo "check-one-build: ${#steps[@]} build steps, none compiled a dependency"
