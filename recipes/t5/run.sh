#!/usr/bin/env bash
# The T5 thesis at our scale: pretraining on unlabeled text, then fine-tuning, beats training on
# the labeled pairs alone. A T5 of the `small` shape pretrains with span corruption on the English
# and German sides of Multi30k's training text, as unpaired sentences; it is fine-tuned on the
# first PAIRS translation pairs (with T5's task prefix "translate English to German: ") for UPDATES
# updates, against the same model trained from random weights on those pairs for as many updates.
#   bash recipes/t5/run.sh [RAW_DIR] [PRETRAIN_MINUTES] [UPDATES] [PAIRS]
# RAW_DIR: Multi30k's files (default ../shared/data/multi30k). Interrupt it at any time and run it
# again: each run resumes. Each model's weights (its last checkpoint or the average of the last 3,
# and for the fine-tuning its peak learning rate) are chosen on the validation set (beam 4); the
# test set (test_2016_flickr) is scored once.
set -euo pipefail
RAW=${1:-../shared/data/multi30k}
MINUTES=${2:-40}
UPDATES=${3:-1500}
PAIRS=${4:-5000}
WORK=data/t5
RUNS=runs/t5
mkdir -p "$WORK"
# the monolingual text: every English and German training sentence, unpaired
zcat -f "$RAW/train.en.gz" "$RAW/train.de.gz" > "$WORK/mono.train.txt"
zcat -f "$RAW/val.en.gz" "$RAW/val.de.gz" > "$WORK/mono.valid.txt"
transduce prepare --monolingual --sentinels 100 --vocab-size 8000 \
  --train "$WORK/mono.train.txt" --valid "$WORK/mono.valid.txt" --out "$WORK/mono"
resume() { [ -f "$1/config.json" ] && echo "--resume" || true; }
# (fp32: at this size bf16 autocast trained slower on the CPUs we measured; docs/parsing.md)
transduce train "$WORK/mono" --out "$RUNS/pretrained" --config recipes/t5/pretrain.toml \
  --precision fp32 --max-time "${MINUTES}m" $(resume "$RUNS/pretrained")
# the first PAIRS pairs (sed reads to the end: head would cut zcat off, a pipe error)
for lang in en de; do zcat -f "$RAW/train.$lang.gz" | sed -n "1,${PAIRS}p" > "$WORK/pairs.$lang"; done
transduce prepare --tokenizer "$RUNS/pretrained" --task-prefix "translate English to German: " \
  --train-prefix "$WORK/pairs" --valid-prefix "$RAW/val" --test-prefix "$RAW/test_2016_flickr" \
  --src en --tgt de --out "$WORK/pairs"
# the fine-tuning's peak learning rate is chosen on the validation set: the recipe's and the
# from-scratch run's
for lr in 5e-4 1.5e-3; do
  transduce train "$WORK/pairs" --out "$RUNS/finetuned-$lr" --init-from "$RUNS/pretrained" \
    --config recipes/t5/finetune.toml --set peak_lr=$lr --precision fp32 --max-steps "$UPDATES" \
    $(resume "$RUNS/finetuned-$lr")
done
transduce train "$WORK/pairs" --out "$RUNS/scratch" --config recipes/t5/scratch.toml \
  --precision fp32 --max-steps "$UPDATES" $(resume "$RUNS/scratch")
valid_bleu() {
  transduce evaluate "$1" --src "$RAW/val.en.gz" --ref "$RAW/val.de.gz" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["bleu"])'
}
better() { python3 -c "import sys; sys.exit(0 if $1 > $2 else 1)"; }
candidates() {  # each run's last checkpoint and the average of its last 3
  for run in "$@"; do
    ls -d "$RUNS/$run"/checkpoints/step_* | tail -n 1
    if [ "$(ls -d "$RUNS/$run"/checkpoints/step_* | wc -l)" -ge 3 ]; then
      transduce average "$RUNS/$run" --last 3 --out "$RUNS/$run/avg3" > /dev/null
      echo "$RUNS/$run/avg3"
    fi
  done
}
for run in finetuned scratch; do
  if [ "$run" = finetuned ]; then runs="finetuned-5e-4 finetuned-1.5e-3"; else runs=scratch; fi
  best=""; best_bleu=-1
  candidates=$(candidates $runs)
  for candidate in $candidates; do
    bleu=$(valid_bleu "$candidate")
    echo "$run: valid BLEU (beam 4), $candidate: $bleu"
    if better "$bleu" "$best_bleu"; then best=$candidate; best_bleu=$bleu; fi
  done
  echo "$run: test_2016_flickr with $best"
  transduce evaluate "$best" --src "$RAW/test_2016_flickr.en.gz" \
    --ref "$RAW/test_2016_flickr.de.gz" --save-hyp "$RUNS/$run.test.de"
done
