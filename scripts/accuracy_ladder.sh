#!/usr/bin/env bash
# What each change of the recipe buys on dev (eng.testa), 3 seeds each: `ner seeds` per step.
# Tables in runs/exp/<step>/seeds.md; checkpoints in checkpoints/exp/<step>/seed-S/.
# Usage: bash scripts/accuracy_ladder.sh [STEP...]   (default: all, in order)
# Finished seeds are read back, so the script resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
base=(-c configs/conll2003-minilm.yaml --trainer.enable_progress_bar false)
declare -A steps=(
  [base]="--model.word_features null"
  [casing]=""
  [crf]="--model.head ner.heads.LinearHead --model.head.crf true"
  [chars]="--model.word_features ner.word_features.WordFeatures --model.word_features.char_dim 16"
  [context16]="--model.head ner.heads.LinearHead --model.head.crf true --data.context_pieces 16"
  [scalar_mix]="--model.head ner.heads.LinearHead --model.head.crf true --model.combiner configs/combiner/scalar_mix.yaml"
  [lr1e-4]="--model.head ner.heads.LinearHead --model.head.crf true --model.encoder_lr 1e-4"
  [epochs5]="--model.head ner.heads.LinearHead --model.head.crf true --trainer.max_epochs 5"
)
order=(base casing crf chars context16 scalar_mix lr1e-4 epochs5)
for step in "${@:-${order[@]}}"; do
  # shellcheck disable=SC2086  # the options are words
  .venv/bin/ner seeds --seeds 1 2 3 --run "exp/$step" "${base[@]}" ${steps[$step]} \
    >"runs/exp/$step.log" 2>&1
  tail -n 6 "runs/exp/$step.log"
done
