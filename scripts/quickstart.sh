#!/usr/bin/env bash
# The offline default end to end: set up .venv, train the bundled MiniLM encoder on CoNLL-2003
# (checkpoints/conll2003-minilm/{best,last}.ckpt), then evaluate best.ckpt on the test split.
#   bash scripts/quickstart.sh            the offline default (25 to 35 minutes on 2 CPU cores)
#   bash scripts/quickstart.sh --quick    the quick recipe (configs/experiment/quick.yaml, about
#                                         7 minutes), then tag a sentence with it
# Other arguments go to `ner fit`, e.g. `bash scripts/quickstart.sh --trainer.max_epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${NER_DATA:-../shared/data/conll2003}
if [ ! -f "$data/eng.train" ]; then
  echo "error: $data/eng.train: no CoNLL-2003 here; set NER_DATA=DIR or see README, 'Data'" >&2
  exit 2
fi
run=conll2003-minilm
recipe=()
if [ "${1:-}" = "--quick" ]; then
  shift
  run=conll2003-minilm-quick
  recipe=(-c configs/experiment/quick.yaml)
fi
bash scripts/setup.sh
.venv/bin/ner fit -c configs/conll2003-minilm.yaml "${recipe[@]}" --run "$run" \
  --data.data_dir "$data" "$@"
.venv/bin/ner test --ckpt_path "checkpoints/$run/best.ckpt" --data.test_file "$data/eng.testb"
if [ ${#recipe[@]} -gt 0 ]; then
  echo "EU rejects German call to boycott British lamb." |
    .venv/bin/ner tag "checkpoints/$run/best.ckpt" -
fi
