#!/usr/bin/env bash
# Table 4's second row in its spirit: the parser of run.sh parses unlabeled English sentences, its
# most confident trees join the gold treebank, and a new parser trains on both for the same time.
#   bash recipes/parsing/semi.sh [CRAFT_DIR] [MINUTES] [BEAM] [UNLABELED] [SENTENCES] [KEEP]
# UNLABELED: English text, one sentence a line, plain or .gz (default: Multi30k's English
# training side, ../shared/data/multi30k/train.en.gz); SENTENCES of them are parsed greedily
# (default 10000) and the KEEP share with the highest length-normalized log-probability is kept
# (default 0.5). Run run.sh first: the parser it chose makes the silver trees (FIRST_RUN: its run,
# runs/craft-small by default; SILVER, DATA and RUN: where the silver trees, the new dataset and
# the new run go).
set -euo pipefail
CRAFT=${1:-../shared/data/craft}
MINUTES=${2:-55}
BEAM=${3:-4}
UNLABELED=${4:-../shared/data/multi30k/train.en.gz}
SENTENCES=${5:-10000}
KEEP=${6:-0.5}
FIRST=$(cat "${FIRST_RUN:-runs/craft-small}/eval/chosen")  # run.sh's choice
SILVER=${SILVER:-data/craft-silver}
mkdir -p "$SILVER"
python3 recipes/parsing/silver.py words "$UNLABELED" "$SENTENCES" > "$SILVER/unlabeled.words"
start=$(date +%s)
transduce parse "$FIRST" --input "$SILVER/unlabeled.words" \
  --output "$SILVER/unlabeled.scored" --beam 1 --scores
echo "parsed $(wc -l < "$SILVER/unlabeled.words")" \
  "unlabeled sentences in $(( $(date +%s) - start )) s"
zcat -f "$CRAFT/train.trees.gz" > "$SILVER/train.trees"
python3 recipes/parsing/silver.py keep "$SILVER/unlabeled.scored" "$KEEP" >> "$SILVER/train.trees"
TRAIN=$SILVER/train DATA=${DATA:-data/craft-semi} RUN=${RUN:-runs/craft-semi} \
  bash recipes/parsing/run.sh "$CRAFT" "$MINUTES" "$BEAM"
