#!/usr/bin/env bash
# The README results table: the offline default on full CoNLL-2003 once per combiner.
# Usage: bash scripts/combiner_runs.sh [EPOCHS] [COMBINER...]   (logs in runs/results/)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-1}; shift || true
combiners=("${@:-last concat_last4 scalar_mix}")
data=../shared/data/conll2003
mkdir -p runs/results
for c in ${combiners[@]}; do
  out=checkpoints/conll2003-minilm-$c
  rm -rf checkpoints/conll2003-minilm "$out"
  start=$(date +%s)
  .venv/bin/ner fit -c configs/conll2003-minilm.yaml --model.combiner configs/combiner/$c.yaml \
    --trainer.max_epochs "$epochs" --trainer.enable_progress_bar false >runs/results/$c.fit.log 2>&1
  fit_s=$(( $(date +%s) - start ))
  mv checkpoints/conll2003-minilm "$out"
  .venv/bin/ner test --ckpt_path "$out/best.ckpt" --data.test_file $data/eng.testa \
    --output "$out/dev" --trainer.enable_progress_bar false >runs/results/$c.dev.log 2>&1
  .venv/bin/ner test --ckpt_path "$out/best.ckpt" --data.test_file $data/eng.testb \
    --output "$out/test" --trainer.enable_progress_bar false >runs/results/$c.test.log 2>&1
  echo "$c fit_seconds=$fit_s $(date -u +%FT%TZ)" | tee -a runs/results/summary.txt
done
