#!/usr/bin/env bash
# What each change of the recipe buys on dev (eng.testa), 3 seeds each: `ner seeds` per step.
# Tables in runs/exp/<step>/seeds.md; checkpoints in checkpoints/exp/<step>/seed-S/.
# Usage: [SEEDS="1"] bash scripts/accuracy_ladder.sh [STEP...]   (default: all steps, seeds 1 2 3)
# Finished seeds run with the same options are read back, so the script resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
base=(-c configs/conll2003-minilm.yaml --trainer.enable_progress_bar false)
# Each step's options are relative to the current default (casing + character features, CRF,
# encoder lr 1e-4, 32 context pieces), so that each gives the run its table row came from.
at5e5="--model.encoder_lr 5e-5 --data.context_pieces 0"  # the recipe before lr, chars, context
declare -A steps=(
  [base]="$at5e5 --model.head.crf false --model.word_features null"
  [casing]="$at5e5 --model.head.crf false --model.word_features auto"
  [crf]="$at5e5 --model.word_features auto"
  [chars]="$at5e5"
  [context16]="--model.encoder_lr 5e-5 --model.word_features auto --data.context_pieces 16"
  [scalar_mix]="$at5e5 --model.word_features auto --model.combiner configs/combiner/scalar_mix.yaml"
  [lr1e-4]="--model.word_features auto --data.context_pieces 0"
  [lr2e-4]="--model.word_features auto --data.context_pieces 0 --model.encoder_lr 2e-4"
  [lr1e-4+chars]="--data.context_pieces 0"
  [lr1e-4+chars+context32]=""  # the default
  [context64]="--data.context_pieces 64"
  [concat_last4]="--model.combiner configs/combiner/concat_last4.yaml"
  [batch16]="--data.batch_size 16"
  [epochs5]="--trainer.max_epochs 5"
)
order=(base casing crf chars context16 context64 scalar_mix concat_last4 lr1e-4 lr2e-4 lr1e-4+chars lr1e-4+chars+context32 batch16 epochs5)
for step in "${@:-${order[@]}}"; do
  # shellcheck disable=SC2086  # the options are words
  .venv/bin/ner seeds --seeds ${SEEDS:-1 2 3} --run "exp/$step" "${base[@]}" ${steps[$step]} \
    >"runs/exp/$step.log" 2>&1
  tail -n 6 "runs/exp/$step.log"
done
