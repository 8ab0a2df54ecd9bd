#!/usr/bin/env bash
# F1 against updates: every checkpoint of a parsing run, greedy, on the first 500 development
# sentences (the data and the run of run.sh by default).
#   bash recipes/parsing/curve.sh [RUN] [DATA] [CRAFT_DIR]
set -euo pipefail
RUN=${1:-runs/craft-small}
DATA=${2:-data/craft}
CRAFT=${3:-../shared/data/craft}
OUT=$RUN/eval
mkdir -p "$OUT"
head -n 500 "$DATA/valid.words.txt" > "$OUT/dev500.words"
zcat -f "$CRAFT/dev.trees.gz" > "$OUT/dev.trees"  # (whole: head would cut zcat off, a pipe error)
head -n 500 "$OUT/dev.trees" > "$OUT/dev500.trees"
echo "update dev_f1"
for checkpoint in "$RUN"/checkpoints/step_*; do
  transduce parse "$checkpoint" --input "$OUT/dev500.words" \
    --output "$OUT/curve.parsed" --beam 1 2> /dev/null
  f1=$(transduce parseval "$OUT/dev500.trees" "$OUT/curve.parsed" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["all"]["f1"])')
  echo "$((10#${checkpoint##*step_})) $f1"
done
