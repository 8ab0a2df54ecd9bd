#!/usr/bin/env bash
# An ensemble of two models against one model trained for as many updates as the two together
# (the same compute), on Multi30k English-German with the `small` recipe.
#   bash recipes/multi30k/ensemble.sh [RAW_DIR] [UPDATES]
# Seed 1 trains for 2 x UPDATES updates, keeping its checkpoint at UPDATES: that checkpoint is
# exactly what a run of UPDATES updates with seed 1 gives (the schedule does not depend on where a
# run stops), so it is the first member; seed 2 trains for UPDATES and is the second. The two
# trainings run side by side on one thread each. Raw weights at the last update (no EMA, no
# averaging), beam 4, alpha 0.6; scored on the validation set and on test_2016_flickr.
# Run it again after an interruption: the trainings resume.
set -euo pipefail
RAW=${1:-../shared/data/multi30k}
N=${2:-800}
W=runs/ensemble
transduce prepare --train-prefix "$RAW/train" --valid-prefix "$RAW/val" --test-prefix "$RAW/test_2016_flickr" \
  --src en --tgt de --out data/multi30k --vocab-size 8000
resume() { [ -f "$1/config.json" ] && echo "--resume" || true; }
common=(--config recipes/multi30k/small.toml --set ema=0 --set keep_last=100 --threads 1 --quiet)
transduce train data/multi30k --out "$W/seed1" --max-steps $((2 * N)) --set save_every="$N" "${common[@]}" \
  $(resume "$W/seed1") > "$W.seed1.log" 2>&1 &
transduce train data/multi30k --out "$W/seed2" --max-steps "$N" --seed 2 "${common[@]}" \
  $(resume "$W/seed2") > "$W.seed2.log" 2>&1 &
wait
at() { printf "%s/checkpoints/step_%08d" "$1" "$2"; }
A=$(at "$W/seed1" "$N"); B=$(at "$W/seed2" "$N"); LONG=$(at "$W/seed1" $((2 * N)))
bleu() {  # split, models... -> BLEU (beam 4, alpha 0.6)
  local split=$1; shift
  transduce evaluate "$@" --src "$RAW/$split.en.gz" --ref "$RAW/$split.de.gz" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["bleu"])'
}
echo "| model | updates | val BLEU | test_2016_flickr BLEU |"
echo "|---|---|---|---|"
echo "| seed 1 | $N | $(bleu val "$A") | $(bleu test_2016_flickr "$A") |"
echo "| seed 2 | $N | $(bleu val "$B") | $(bleu test_2016_flickr "$B") |"
echo "| ensemble of both | 2 x $N | $(bleu val "$A" "$B") | $(bleu test_2016_flickr "$A" "$B") |"
echo "| seed 1, trained on | $((2 * N)) | $(bleu val "$LONG") | $(bleu test_2016_flickr "$LONG") |"
