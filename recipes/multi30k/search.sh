#!/usr/bin/env bash
# Beam size and length penalty on the validation set, for one candidate (a checkpoint folder):
#   bash recipes/multi30k/search.sh CANDIDATE [RAW_DIR]
# prints one line per setting: beam, alpha, validation BLEU, chrF. Choose here, never on the test set.
set -euo pipefail
C=$1
RAW=${2:-../shared/data/multi30k}
for setting in "1 0.6" "4 0.6" "4 1.0" "4 1.4" "6 0.6" "6 1.0" "8 1.0"; do
  set -- $setting
  scores=$(transduce evaluate "$C" --src "$RAW/val.en.gz" --ref "$RAW/val.de.gz" --beam "$1" --alpha "$2" --json \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.2f\t%.2f" % (r["bleu"], r["chrf"]))')
  printf 'beam %s alpha %s\t%s\n' "$1" "$2" "$scores"
done
