#!/usr/bin/env bash
# The paper's Table 4 at our scale: English constituency parsing as transduction on the CRAFT
# treebank, from its split files to labeled F1 on its test set.
#   bash recipes/parsing/run.sh [CRAFT_DIR] [MINUTES] [BEAM]
# CRAFT_DIR holds train/dev/test.trees.gz (default: ../shared/data/craft). Interrupt it at any
# time and run it again: training resumes from its last checkpoint and stops at MINUTES of
# training in all (default 55). The weights are best/, the update with the best F1 that training
# measured on 200 development sentences (small.toml); the length penalty is chosen on the first
# 500 development sentences; the test set is parsed
# once, with the choice, and scored beside two baselines that need no model. BEAM: 4 by default
# (the paper's 21 takes five times as long on a CPU). semi.sh runs it again with TRAIN (another
# training treebank), DATA and RUN set.
set -euo pipefail
CRAFT=${1:-../shared/data/craft}
MINUTES=${2:-55}
BEAM=${3:-4}
TRAIN=${TRAIN:-$CRAFT/train}
DATA=${DATA:-data/craft}
RUN=${RUN:-runs/craft-small}
OUT=$RUN/eval
# Words in (a vocabulary of the 16,000 most frequent), tagged brackets out (--tags: each word's
# part-of-speech tag where the placeholder would be): chosen on the development set, where it
# parsed with more than half again the F1 of subword pieces in and placeholders out at the same
# number of updates (docs/parsing.md).
transduce prepare --trees --tags --train-prefix "$TRAIN" \
  --valid-prefix "$CRAFT/dev" --test-prefix "$CRAFT/test" \
  --model-type word --vocab-size 16000 --max-len 400 --out "$DATA"
RESUME=""
[ -f "$RUN/config.json" ] && RESUME="--resume"
transduce train "$DATA" --out "$RUN" \
  --config recipes/parsing/small.toml --precision fp32 --max-time "${MINUTES}m" \
  $RESUME
mkdir -p "$OUT"
head -n 500 "$DATA/valid.words.txt" > "$OUT/dev500.words"
zcat -f "$CRAFT/dev.trees.gz" > "$OUT/dev.trees"  # (whole: head would cut zcat off, a pipe error)
head -n 500 "$OUT/dev.trees" > "$OUT/dev500.trees"
dev_f1() {  # weights, alpha -> F1 on the 500 development sentences
  transduce parse "$1" --input "$OUT/dev500.words" \
    --output "$OUT/dev500.parsed" --beam "$BEAM" --alpha "$2" \
    2> /dev/null
  transduce parseval "$OUT/dev500.trees" "$OUT/dev500.parsed" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["all"]["f1"])'
}
better() { python3 -c "import sys; sys.exit(0 if $1 > $2 else 1)"; }
best="$RUN/best"  # (chosen by train's own validation F1)
alpha=0.3
best_f1=$(dev_f1 "$best" "$alpha")
echo "dev F1 (500 sentences, beam $BEAM, alpha $alpha), $best: $best_f1"
for a in 0.6 1.0; do
  f1=$(dev_f1 "$best" "$a")
  echo "dev F1 (500 sentences, beam $BEAM, alpha $a), $best: $f1"
  if better "$f1" "$best_f1"; then alpha=$a; best_f1=$f1; fi
done
echo "chosen on the development set: $best, alpha $alpha ($best_f1)"
echo "$best" > "$OUT/chosen"  # (semi.sh parses with it)
start=$(date +%s)
transduce parse "$best" --input "$DATA/test.words.txt" \
  --output "$OUT/test.parsed" --beam "$BEAM" --alpha "$alpha"
echo "parsed the test set in $(( $(date +%s) - start )) s"
echo "test, transduce (beam $BEAM, alpha $alpha):"
transduce parseval "$CRAFT/test.trees.gz" "$OUT/test.parsed" | head -n 8
python3 recipes/parsing/baselines.py "$CRAFT/train.trees.gz" "$CRAFT/test.trees.gz" "$OUT/test"
for kind in right flat; do
  echo "test, $kind baseline:"
  transduce parseval "$CRAFT/test.trees.gz" "$OUT/test.$kind" | sed -n 3,5p
done
