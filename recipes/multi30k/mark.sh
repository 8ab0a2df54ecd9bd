#!/usr/bin/env bash
# Score a run of the Multi30k recipe at one budget's mark (an update count), as docs/experiments.md reports:
# the last checkpoint at that update, the average of the last 3 checkpoints up to it, and the EMA of
# the weights as it stood there; each on validation (to choose) and then on test_2016_flickr.
#   bash recipes/multi30k/mark.sh RUN STEP [RAW_DIR] [BEAM] [ALPHA]
# RUN must hold a checkpoint saved at exactly STEP (train with --max-steps STEP, then go on with
# --resume --max-steps LATER). Writes RUN/{avg3,ema}-at-STEP and RUN/mark-STEP.tsv:
#   candidate  valid_bleu  valid_chrf  test_bleu  test_chrf
set -euo pipefail
RUN=$1
STEP=$2
RAW=${3:-../shared/data/multi30k}
BEAM=${4:-4}
ALPHA=${5:-0.6}
LAST=$RUN/checkpoints/$(printf 'step_%08d' "$STEP")
[ -d "$LAST" ] || { echo "mark.sh: $LAST does not exist (no checkpoint at update $STEP)" >&2; exit 2; }
[ -d "$RUN/avg3-at-$STEP" ] || transduce average "$RUN" --last 3 --up-to-step "$STEP" --out "$RUN/avg3-at-$STEP" >&2
[ -d "$RUN/ema-at-$STEP" ] || python3 "$(dirname "$0")/ema_at.py" "$LAST" "$RUN/ema-at-$STEP" >&2
score() {  # candidate split -> "bleu<TAB>chrf"
  transduce evaluate "$1" --src "$RAW/$2.en.gz" --ref "$RAW/$2.de.gz" --beam "$BEAM" --alpha "$ALPHA" --json \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.2f\t%.2f" % (r["bleu"], r["chrf"]))'
}
TABLE=$RUN/mark-$STEP.tsv
printf 'candidate\tvalid_bleu\tvalid_chrf\ttest_bleu\ttest_chrf\n' > "$TABLE.tmp"
for name in last avg3 ema; do
  case $name in last) C=$LAST ;; *) C=$RUN/$name-at-$STEP ;; esac
  printf '%s\t%s\t%s\n' "$name" "$(score "$C" val)" "$(score "$C" test_2016_flickr)" >> "$TABLE.tmp"
done
mv "$TABLE.tmp" "$TABLE"
cat "$TABLE"
