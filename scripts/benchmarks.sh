#!/usr/bin/env bash
# The README "Performance" table: every benchmark, one after the other (never in parallel: on a
# 2-core machine a second job halves the first one's figures). Tables + JSON in runs/benchmarks/.
# Usage: bash scripts/benchmarks.sh [NAME...]   (default: train predict frozen encoder stream)
set -euo pipefail
cd "$(dirname "$0")/.."
names=("${@:-train predict frozen encoder stream}")
mkdir -p runs/benchmarks
for name in ${names[@]}; do
  .venv/bin/python -m benchmarks."$name" --json runs/benchmarks/"$name".json \
    2> runs/benchmarks/"$name".err | tee runs/benchmarks/"$name".md
done
