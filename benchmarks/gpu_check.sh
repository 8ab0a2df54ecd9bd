#!/usr/bin/env bash
# The GPU checks, as one prepared script (~8-9 minutes on one GPU; never run in CI):
#   1. the test suite's device-parametrized tests on CUDA (pytest --device cuda),
#   2. a 1-GPU training from the command line, and a 2-GPU torchrun training if 2 GPUs exist,
#   3. translation with the captured decode step (torch.compile, CUDA graphs) equal to eager decoding,
#      and both timed, in batches and one line at a time (benchmarks/gpu_translate.py; STREAM=N lines),
#   3b. continuous batching's running search against batches (benchmarks/continuous_search.py),
#   4. bf16 and fp16 training throughput of `base` (target tokens/s, MFU) and translation throughput.
# Usage: bash benchmarks/gpu_check.sh   (from the repository root; writes a summary at the end)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
LOG=${OUT:-/tmp}/gpu_check.log
: > "$LOG"
summary=()
step() {  # step NAME COMMAND...: run, log, remember the outcome
  local name=$1; shift
  echo "=== $name" | tee -a "$LOG"
  local start=$SECONDS
  if "$@" 2>&1 | tee -a "$LOG"; then summary+=("ok    $name ($((SECONDS - start)) s)")
  else summary+=("FAIL  $name ($((SECONDS - start)) s)"); fi
}
# Keep the machine's own CUDA build of torch and install nothing (such machines may have no
# network): the package runs from src/, its dependencies are the machine's own.
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
shim=$(mktemp -d)  # the `transduce` command, as an install would make it (recipes' scripts call it)
printf '#!/bin/sh\nexec python3 -m transduce "$@"\n' > "$shim/transduce" && chmod +x "$shim/transduce"
export PATH="$shim:$PATH"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print(torch.__version__, torch.cuda.get_device_name())" || exit 1
python3 -c "import sentencepiece, sacrebleu, safetensors, tqdm, matplotlib, pytest" || { echo "missing a dependency"; exit 1; }
GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
# The files holding the device-parametrized tests (the others may import the optional extras,
# fastapi or ctranslate2, which a GPU machine's image need not have); every failure is listed.
# TESTS_K=EXPR runs only the tests it selects (pytest -k), to recheck a few within a short lease.
step "tests on CUDA" timeout 240 python3 -m pytest -q -rfE tests/decoding tests/inference tests/model tests/training \
  tests/integration/test_training.py tests/integration/test_training_paths.py --device cuda -p no:cacheprovider \
  ${TESTS_K:+-k "$TESTS_K"}
work=$(mktemp -d)
python3 - "$work" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, ".")
from tests.helpers import prepare_reverse_task
prepare_reverse_task(Path(sys.argv[1]), n_train=4000, n_valid=100)
PY
step "train on 1 GPU (bf16)" timeout 120 python3 -m transduce train "$work/data" --out "$work/run1" --preset small \
  --device cuda --precision bf16 --max-steps 300 --set valid_every=100 --quiet
step "train on 1 GPU (fp16, resume)" timeout 120 python3 -m transduce train "$work/data" --out "$work/run1" \
  --resume --device cuda --precision fp16 --max-steps 400 --quiet
step "translate on the GPU" bash -c "head -3 $work/raw/valid.en | python3 -m transduce translate $work/run1 --device cuda"
for _ in 1 2 3; do cat "$work/raw/valid.en"; done > "$work/lines.txt"  # 300 lines
# then STREAM lines one at a time (batch 1, a server's case: where capture could pay on a GPU)
step "captured decode step (CUDA graphs) equals eager" timeout 300 python3 benchmarks/gpu_translate.py "$work/run1" \
  "$work/lines.txt" --refs "$work/raw/valid.de" --stream "${STREAM:-10}"
# continuous batching's search against batches, where a step's time hardly grows with its rows
step "running search against batches (continuous batching)" timeout 120 python3 benchmarks/continuous_search.py \
  --run "$work/run1" --device cuda --source "$work/lines.txt" --sentences 300 --in-flight 16 64
if [ "$GPUS" -ge 2 ]; then
  step "torchrun on 2 GPUs" timeout 180 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    -m transduce train "$work/data" --out "$work/run2" --preset small --device cuda --max-steps 100 --quiet
else
  summary+=("--    torchrun on 2 GPUs: this machine has $GPUS GPU")
fi
step "torchrun with more processes than GPUs: a message" bash -c "python3 -m torch.distributed.run --standalone \
  --nproc_per_node=$((GPUS + 1)) -m transduce train $work/data --out $work/run3 --preset small --device cuda \
  --max-steps 10 --quiet 2>&1 | grep 'one process per GPU'"
step "throughput" timeout 150 python3 benchmarks/gpu_check.py --device cuda --steps 10
[ -n "${OUT:-}" ] && cp benchmarks/results/gpu_check.json benchmarks/results/gpu_translate.json "$OUT/" 2>/dev/null
echo; echo "=== summary"; printf '%s\n' "${summary[@]}"
