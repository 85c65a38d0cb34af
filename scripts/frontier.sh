#!/usr/bin/env bash
# The depth frontier: the quick recipe (configs/experiment/quick.yaml) fine-tuned on the first K
# of MiniLM's 6 layers (configs/experiment/depthK.yaml; K=6 is the quick recipe itself), scored
# on dev and test by `ner seeds`, then tagged by `benchmarks.predict` (torch bf16, onnx int8 and
# the HF pipeline beside them). Then `scripts/frontier.py` writes the table into
# docs/results.md and the plot to docs/frontier.png. Finished seeds are read back, so the script
# resumes where it stopped. Run it with nothing else busy: the speed figures need a quiet machine.
# Usage: [SEEDS="1"] bash scripts/frontier.sh [K...]   (default: 2 3 4 5 6)
set -euo pipefail
cd "$(dirname "$0")/.."
depths=("$@")
[ ${#depths[@]} -eq 0 ] && depths=(2 3 4 5 6)
for k in "${depths[@]}"; do
  out="runs/frontier/depth$k"
  mkdir -p "$out"
  experiment=()
  [ "$k" != 6 ] && experiment=(-c "configs/experiment/depth$k.yaml")
  # shellcheck disable=SC2086  # SEEDS holds words
  .venv/bin/ner seeds --seeds ${SEEDS:-1} --test --run "frontier/depth$k" \
    -c configs/conll2003-minilm.yaml -c configs/experiment/quick.yaml "${experiment[@]}" \
    --trainer.enable_progress_bar false >"$out/seeds.log" 2>&1
  tail -n 4 "$out/seeds.log"
  first=${SEEDS:-1}; first=${first%% *}
  .venv/bin/python -m benchmarks.predict --ckpt "checkpoints/frontier/depth$k/seed-$first/best.ckpt" \
    --json "$out/predict.json" >"$out/predict.log" 2>&1
  grep -E "^\| ours, (bf16|onnx int8)|^\| HF" "$out/predict.log"
done
.venv/bin/python scripts/frontier.py --results docs/results.md --plot docs/frontier.png
