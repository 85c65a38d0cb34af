#!/usr/bin/env bash
# What each change of the recipe buys on dev (eng.testa), 3 seeds each: `ner seeds` per step.
# A step is a file of configs/experiment/ (what differs from the offline default); `default` is
# the offline default itself. Tables in runs/exp/<step>/seeds.md and seeds.json; checkpoints in
# checkpoints/exp/<step>/seed-S/. Finished seeds run with the same options are read back, so the
# script resumes where it stopped.
# Usage: [SEEDS="1"] bash scripts/accuracy_ladder.sh [STEP...]   (default: every step)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
if [ ${#steps[@]} -eq 0 ]; then
  steps=(default)
  for f in configs/experiment/*.yaml; do steps+=("$(basename "$f" .yaml)"); done
fi
mkdir -p runs/exp
for step in "${steps[@]}"; do
  if [ "$step" = default ]; then which=(--run exp/default -c configs/conll2003-minilm.yaml); else which=(--experiment "$step"); fi
  # shellcheck disable=SC2086  # SEEDS holds words
  .venv/bin/ner seeds --seeds ${SEEDS:-1 2 3} "${which[@]}" --trainer.enable_progress_bar false \
    >"runs/exp/$step.log" 2>&1
  tail -n 6 "runs/exp/$step.log"
done
