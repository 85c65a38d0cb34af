#!/usr/bin/env bash
# The offline default end to end: set up .venv, train the bundled MiniLM encoder on CoNLL-2003
# (checkpoints/conll2003-minilm/{best,last}.ckpt), then evaluate best.ckpt on the test split.
# Extra arguments go to `ner fit`, e.g. `bash scripts/quickstart.sh --trainer.max_epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${NER_DATA:-../shared/data/conll2003}
if [ ! -f "$data/eng.train" ]; then
  echo "error: $data/eng.train: no CoNLL-2003 here; set NER_DATA=DIR or see README, 'Data'" >&2
  exit 2
fi
bash scripts/setup.sh
.venv/bin/ner fit -c configs/conll2003-minilm.yaml --data.data_dir "$data" "$@"
.venv/bin/ner test --ckpt_path checkpoints/conll2003-minilm/best.ckpt \
  --data.test_file "$data/eng.testb"
