#!/usr/bin/env bash
# The Multi30k recipe, English-German (the default) or English-French, from raw files to BLEU on
# test_2016_flickr.
#   bash recipes/multi30k/run.sh [RAW_DIR] [MINUTES] [TGT] [PRESET]
# RAW_DIR holds train/val/test_2016_flickr .en.gz/.TGT.gz (default: ../shared/data/multi30k, or
# downloaded into data/multi30k-raw when that is missing); TGT is de (default) or fr. Interrupt it
# at any time and run it again: training resumes from its last checkpoint and stops at MINUTES of
# training in all. Everything is chosen on the validation set (which weights: the last checkpoint,
# the average of the last 3 or the EMA; then the length penalty); the test set is scored once, with
# the choice (skipped, with a message, when RAW_DIR has no test file for TGT). PRESET is small (the
# default) or small-deep (6 encoder layers and 1 decoder layer, about small's parameters: faster
# to decode at batch 1), with the same schedule; its run is runs/multi30k-small-deep.
set -euo pipefail
RAW=${1:-../shared/data/multi30k}
MINUTES=${2:-60}
TGT=${3:-de}
PRESET=${4:-small}
RUN=runs/multi30k-$PRESET
DATA=data/multi30k
if [ "$TGT" != de ]; then RUN=$RUN-$TGT; DATA=$DATA-en$TGT; fi
if [ ! -f "$RAW/train.en.gz" ] || [ ! -f "$RAW/train.$TGT.gz" ]; then
  RAW=data/multi30k-raw
  transduce download multi30k "$RAW" --tgt "$TGT"
fi
TEST=""
if [ -f "$RAW/test_2016_flickr.$TGT.gz" ]; then TEST="--test-prefix $RAW/test_2016_flickr"; fi
transduce prepare --train-prefix "$RAW/train" --valid-prefix "$RAW/val" $TEST \
  --src en --tgt "$TGT" --out "$DATA" --vocab-size 8000
RESUME=""
[ -f "$RUN/config.json" ] && RESUME="--resume"
transduce train "$DATA" --out "$RUN" --config recipes/multi30k/small.toml \
  --preset "$PRESET" --max-time "${MINUTES}m" $RESUME
transduce plot "$RUN"
valid_bleu() {  # candidate alpha -> validation BLEU (beam 4)
  transduce evaluate "$1" --src "$RAW/val.en.gz" --ref "$RAW/val.$TGT.gz" --alpha "$2" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["bleu"])'
}
better() { python3 -c "import sys; sys.exit(0 if $1 > $2 else 1)"; }
transduce average "$RUN" --last 3 --out "$RUN/avg3" > /dev/null
LAST=$(ls -d "$RUN"/checkpoints/step_* | tail -n 1)
best=""; best_bleu=-1
for candidate in "$LAST" "$RUN/avg3" "$RUN/ema"; do
  [ -d "$candidate" ] || continue  # no ema/ when the recipe trains without --ema
  bleu=$(valid_bleu "$candidate" 0.6)
  echo "valid BLEU (beam 4, alpha 0.6), $candidate: $bleu"
  if better "$bleu" "$best_bleu"; then best=$candidate; best_bleu=$bleu; fi
done
alpha=0.6
for a in 1.0 1.4; do
  bleu=$(valid_bleu "$best" "$a")
  echo "valid BLEU (beam 4, alpha $a), $best: $bleu"
  if better "$bleu" "$best_bleu"; then alpha=$a; best_bleu=$bleu; fi
done
echo "chosen on validation: $best, alpha $alpha ($best_bleu)"
if [ -z "$TEST" ]; then
  echo "no test set for $TGT in $RAW: run \`transduce download multi30k DIR --tgt $TGT\` on a machine with a network, then"
  echo "  bash recipes/multi30k/run.sh DIR $MINUTES $TGT"
  exit 0
fi
transduce evaluate "$best" --src "$RAW/test_2016_flickr.en.gz" --ref "$RAW/test_2016_flickr.$TGT.gz" --alpha "$alpha" \
  --save-hyp "$RUN/test.$TGT"
echo "lowercased, 13a-tokenized:"
transduce evaluate --hyp "$RUN/test.$TGT" --ref "$RAW/test_2016_flickr.$TGT.gz" --lowercase --tokenize 13a
