#!/usr/bin/env bash
# The Vision Transformer on MNIST: the vit-tiny preset trained on the 60,000 training digits minus
# 5,000 held out for choices, for MINUTES of training (default 15); the weights with the best
# held-out accuracy score the 5,000 test digits once. Beside it, the classic baseline: a small
# convolutional network in plain PyTorch (cnn.py) on the same images, augmentation and budget.
#   bash recipes/mnist/run.sh [MNIST_DIR] [MINUTES]
# MNIST_DIR holds train.tar.gz and test.tar.gz (class folders of PNGs; default
# ../shared/data/mnist). Interrupt it at any time and run it again: training resumes.
set -euo pipefail
MNIST=${1:-../shared/data/mnist}
MINUTES=${2:-15}
RAW=data/mnist/raw
DATA=data/mnist/prepared
RUNS=runs/mnist
mkdir -p "$RAW" "$RUNS"
[ -d "$RAW/training" ] || tar -xzf "$MNIST/train.tar.gz" -C "$RAW"
[ -d "$RAW/testing" ] || tar -xzf "$MNIST/test.tar.gz" -C "$RAW"
transduce prepare --images "$RAW/training" --hold-out 5000 --out "$DATA"
RESUME=""
[ -f "$RUNS/vit/config.json" ] && RESUME="--resume"
# (fp32: at this size bf16 autocast trained slower on the CPUs we measured; docs/vit.md)
transduce train "$DATA" --out "$RUNS/vit" --config recipes/mnist/vit.toml --precision fp32 \
  --max-time "${MINUTES}m" $RESUME
echo "vit: the test digits, with the weights of the best held-out accuracy ($RUNS/vit/best)"
transduce evaluate "$RUNS/vit/best" --images "$RAW/testing" --confusion "$RUNS/vit/confusion.png" \
  --json > "$RUNS/vit/test.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print("vit test accuracy %.2f%% (%d images)" % (100 * r["accuracy"], r["images"]))' "$RUNS/vit/test.json"
python3 recipes/mnist/cnn.py "$DATA" "$RAW/testing" --minutes "$MINUTES" --out "$RUNS/cnn"
