#!/usr/bin/env bash
# "From raw text to BLEU" on a few thousand pairs in five minutes, as a new user would run it:
# the first N pairs of Multi30k, `prepare`, `train --preset small --max-time 5m` with the automatic
# schedule (and, for comparison, --recipe paper), then greedy sacreBLEU/chrF on test_2016_flickr.
#   bash benchmarks/small_data.sh [N=5000] [MINUTES=5] [BUSY=0] [RECIPES="auto paper"]
# BUSY=1 keeps a second CPU-bound process running throughout, as on a user's busy machine.
# Writes into benchmarks/results/small_data/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000}; MINUTES=${2:-5}; BUSY=${3:-0}; RECIPES=${4:-auto paper}
RAW=../shared/data/multi30k
OUT=benchmarks/results/small_data
mkdir -p "$OUT/raw"
for lang in en de; do
  python3 -c "import gzip,sys; sys.stdout.buffer.writelines(l for i, l in zip(range($N), gzip.open('$RAW/train.$lang.gz')))" > "$OUT/raw/train.$lang"
  cp "$RAW/val.$lang.gz" "$OUT/raw/val.$lang.gz"
  cp "$RAW/test_2016_flickr.$lang.gz" "$OUT/raw/test.$lang.gz"
done
transduce prepare --train-prefix "$OUT/raw/train" --valid-prefix "$OUT/raw/val" --test-prefix "$OUT/raw/test" \
  --src en --tgt de --out "$OUT/data" --vocab-size 4000
if [ "$BUSY" = 1 ]; then python3 -c "while True: pass" & HOG=$!; trap 'kill $HOG' EXIT; sleep 20; fi
for recipe in $RECIPES; do
  run="$OUT/run-$recipe-busy$BUSY"
  [ -e "$run" ] && { echo "$run exists; move it away to measure again"; exit 2; }
  transduce train "$OUT/data" --out "$run" --preset small --max-time "${MINUTES}m" --recipe "$recipe" --quiet
  echo "recipe $recipe:"
  transduce evaluate "$run" --src "$OUT/raw/test.en.gz" --ref "$OUT/raw/test.de.gz" --beam 1
done
