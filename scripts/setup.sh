#!/usr/bin/env bash
# Create .venv and install ner with its dev tools. The CPU build of torch goes first: a plain
# `torch` requirement could otherwise resolve to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
fi
.venv/bin/python -m pip install --quiet -e ".[all,dev]"
