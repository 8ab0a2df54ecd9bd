#!/usr/bin/env bash
# The Multi30k English-German recipe, from raw files to BLEU on test_2016_flickr.
#   bash recipes/multi30k/run.sh [RAW_DIR] [MINUTES]
# RAW_DIR holds train/val/test_2016_flickr .en.gz/.de.gz (default: ../shared/data/multi30k, or
# downloaded into data/multi30k-raw when that is missing). Interrupt it at any time and run it
# again: training resumes from its last checkpoint and stops at MINUTES of training in all.
set -euo pipefail
RAW=${1:-../shared/data/multi30k}
MINUTES=${2:-60}
RUN=runs/multi30k-small
if [ ! -f "$RAW/train.en.gz" ]; then
  RAW=data/multi30k-raw
  transduce download multi30k "$RAW"
fi
transduce prepare --train-prefix "$RAW/train" --valid-prefix "$RAW/val" --test-prefix "$RAW/test_2016_flickr" \
  --src en --tgt de --out data/multi30k --vocab-size 8000
RESUME=""
[ -f "$RUN/config.json" ] && RESUME="--resume"
transduce train data/multi30k --out "$RUN" --config recipes/multi30k/small.toml --max-time "${MINUTES}m" $RESUME
transduce plot "$RUN"
# Choose how many checkpoints to average on the validation set, never on the test set.
best_n=1; best_bleu=-1
for n in 1 2 3 5; do
  transduce average "$RUN" --last "$n" --out "$RUN/avg$n" > /dev/null
  bleu=$(transduce evaluate "$RUN/avg$n" --src "$RAW/val.en.gz" --ref "$RAW/val.de.gz" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bleu"])')
  echo "valid BLEU, average of the last $n checkpoints: $bleu"
  if python3 -c "import sys; sys.exit(0 if $bleu > $best_bleu else 1)"; then best_n=$n; best_bleu=$bleu; fi
done
echo "chosen on validation: the average of the last $best_n"
names="avg1 avg$best_n"
if [ -d "$RUN/ema" ]; then  # the exponential moving average of the weights (small.toml: ema = 0.999)
  bleu=$(transduce evaluate "$RUN/ema" --src "$RAW/val.en.gz" --ref "$RAW/val.de.gz" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bleu"])')
  echo "valid BLEU, EMA of the weights: $bleu"
  names="$names ema"
fi
for name in $names; do
  transduce evaluate "$RUN/$name" --src "$RAW/test_2016_flickr.en.gz" --ref "$RAW/test_2016_flickr.de.gz" \
    --save-hyp "$RUN/$name.test.de"
  echo "lowercased, 13a-tokenized:"
  transduce evaluate --hyp "$RUN/$name.test.de" --ref "$RAW/test_2016_flickr.de.gz" --lowercase --tokenize 13a
done
