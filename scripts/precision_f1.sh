#!/usr/bin/env bash
# Dev F1 of the same recipe trained and evaluated in fp32 and in bf16-mixed (the README
# "bf16 vs fp32" line): the first 600 eng.train sentences, 3 epochs of the offline default,
# dev (eng.testa) once at the end. On a CPU without native bf16 the bf16 run is ~14x slower.
# Usage: bash scripts/precision_f1.sh [PRECISION...]   (default: 32-true bf16-mixed)
set -euo pipefail
cd "$(dirname "$0")/.."
data=../shared/data/conll2003
out=runs/precision
mkdir -p "$out"
.venv/bin/python - "$data/eng.train" "$out/train600.txt" <<'PY'
import sys
sys.path.insert(0, "tests")
from pathlib import Path
from test_integration import TRAIN_SENTENCES, first_sentences
first_sentences(Path(sys.argv[1]), Path(sys.argv[2]), TRAIN_SENTENCES)
PY
for p in "${@:-32-true bf16-mixed}"; do
  for precision in $p; do
    ckpt=checkpoints/precision-$precision
    rm -rf "$ckpt"
    start=$(date +%s)
    .venv/bin/ner fit -c configs/conll2003-minilm.yaml --trainer.precision "$precision" \
      --data.train_file "$out/train600.txt" --data.batch_size 16 --model.head_lr 3e-3 \
      --model.encoder_lr 1e-4 --trainer.max_epochs 3 --trainer.check_val_every_n_epoch 3 \
      --trainer.enable_progress_bar false --trainer.logger false >"$out/$precision.fit.log" 2>&1
    mv checkpoints/conll2003-minilm "$ckpt"
    .venv/bin/ner test --ckpt_path "$ckpt/best.ckpt" --data.test_file $data/eng.testa \
      --trainer.precision "$precision" --trainer.enable_progress_bar false --trainer.logger false \
      --output "$out/$precision" >"$out/$precision.test.log" 2>&1
    f1=$(.venv/bin/python -c "import json,sys; print(round(100*json.load(open(sys.argv[1]))['metrics']['f1'], 2))" "$out/$precision/best.test-report.json")
    echo "$precision dev_f1=$f1 seconds=$(( $(date +%s) - start ))" | tee -a "$out/summary.txt"
  done
done
