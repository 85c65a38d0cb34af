#!/usr/bin/env bash
# The GPU path in one command, for a machine with CUDA and no network (the bundled encoder
# only): the gpu-marked tests, a short bf16-mixed fit of the offline default with and without
# the frozen-feature cache, `ner test` and `ner tag` on the GPU, then one table of wall times
# and F1. Budget: under 8 minutes on one GPU (fits capped at 150 training batches).
# With 2 or more GPUs also: a bf16 DDP fit on 2 GPUs (NCCL), its `ner test` on 2 GPUs and on
# 1 (the same F1 and predictions file, checked), and the same test as two "machines" of one
# GPU each (torchrun --nnodes 2 on 127.0.0.1); about 3 minutes more.
# Usage: bash scripts/gpu_check.sh [DATA_DIR]   (default ../shared/data/conll2003)
set -uo pipefail
cd "$(dirname "$0")/.."
data=${1:-${NER_DATA:-../shared/data/conll2003}}
out=runs/gpu-check
mkdir -p "$out"
[ -x .venv/bin/ner ] || bash scripts/setup.sh >"$out/setup.log" 2>&1 || exit 2
py=.venv/bin/python
if ! $py -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "error: no CUDA device here; nothing to check" >&2
  exit 2
fi
$py -c "import torch; print('device:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
rows=()
step() {  # step NAME COMMAND...: run, time, keep the log, one table row
  local name=$1; shift
  local start=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then status=ok; else status="FAILED (see $out/$name.log)"; fi
  rows+=("| $name | $((SECONDS - start)) | $status |")
}
short=(--data.data_dir "$data" --trainer.max_epochs 1 --trainer.limit_train_batches 150
       --trainer.accelerator gpu --trainer.devices 1 --trainer.enable_progress_bar false)
step gpu-tests $py -m pytest -p no:cacheprovider -m gpu tests/test_gpu.py
step fit-bf16 .venv/bin/ner fit -c configs/conll2003-minilm.yaml "${short[@]}" --run gpu-check/fit
step fit-frozen-cache .venv/bin/ner fit -c configs/conll2003-minilm.yaml "${short[@]}" \
  --model.freeze_encoder true --model.combiner configs/combiner/scalar_mix.yaml \
  --run gpu-check/frozen
step fit-frozen-cached-again .venv/bin/ner fit -c configs/conll2003-minilm.yaml "${short[@]}" \
  --model.freeze_encoder true --model.combiner configs/combiner/scalar_mix.yaml \
  --run gpu-check/frozen2
step fit-frozen-no-cache .venv/bin/ner fit -c configs/conll2003-minilm.yaml "${short[@]}" \
  --model.freeze_encoder true --model.combiner configs/combiner/scalar_mix.yaml \
  --model.cache_features false --run gpu-check/nocache
step test .venv/bin/ner test --ckpt_path checkpoints/gpu-check/fit/best.ckpt \
  --data.test_file "$data/eng.testb" --trainer.accelerator gpu --trainer.devices 1 \
  --trainer.enable_progress_bar false --output "$out/test"
cut -d' ' -f1 "$data/eng.testb" | awk 'NF==0{if(l!="")print l; l=""; next} $1!="-DOCSTART-"{l=l?l" "$1:$1} END{if(l!="")print l}' >"$out/testb.txt"
step tag .venv/bin/ner tag --device cuda checkpoints/gpu-check/fit/best.ckpt \
  "$out/testb.txt" --output "$out/testb.jsonl"
ngpu=$($py -c "import torch; print(torch.cuda.device_count())")
if [ "$ngpu" -ge 2 ]; then
  ddp=(--trainer.devices 2 --trainer.strategy ddp --trainer.precision bf16-mixed)
  step fit-ddp-2gpu-bf16 .venv/bin/ner fit -c configs/conll2003-minilm.yaml "${short[@]}" \
    "${ddp[@]}" --run gpu-check/ddp
  best=checkpoints/gpu-check/ddp/best.ckpt
  evaluate=(--ckpt_path "$best" --data.test_file "$data/eng.testb" --trainer.accelerator gpu
            --trainer.enable_progress_bar false --trainer.precision bf16-mixed)
  step test-1gpu .venv/bin/ner test "${evaluate[@]}" --trainer.devices 1 --output "$out/test-1"
  step test-ddp-2gpu .venv/bin/ner test "${evaluate[@]}" "${ddp[@]}" --output "$out/test-2"
  port=$($py -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  two_machines() {  # node 0 on GPU 0, node 1 on GPU 1, NCCL over 127.0.0.1
    local pids=() node failed=0
    for node in 0 1; do
      CUDA_VISIBLE_DEVICES=$node $py -m torch.distributed.run --nnodes 2 --node_rank $node \
        --nproc_per_node 1 --master_addr 127.0.0.1 --master_port "$port" -m ner -- test \
        "${evaluate[@]}" --trainer.num_nodes 2 --trainer.devices 1 --trainer.strategy ddp \
        --output "$out/test-nodes" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    return $failed
  }
  step test-2-machines two_machines
  same() {  # the reports' figures and the predictions files of two test runs are equal
    $py -c "import json, sys; a, b = (json.load(open(f'$out/{d}/best.test-report.json'))['metrics'] for d in sys.argv[1:]); sys.exit(a != b)" "$1" "$2" &&
      cmp -s "$out/$1/best.test-predictions.txt" "$out/$2/best.test-predictions.txt"
  }
  step same-1gpu-2gpu same test-1 test-2
  step same-1gpu-2-machines same test-1 test-nodes
else
  echo "one GPU: the multi-GPU DDP steps are skipped"
fi
echo
echo "| step | seconds | result |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
f1=$($py -c "import json; print(round(100 * json.load(open('$out/test/best.test-report.json'))['metrics']['f1'], 2))" 2>/dev/null)
echo "test F1 after 150 bf16 steps on the GPU: ${f1:-n/a}"
echo "logs: $out/"
