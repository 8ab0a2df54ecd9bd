#!/usr/bin/env bash
# The paper's WMT14 English-German recipe on GPUs, from the official files to newstest2014 BLEU.
#   bash recipes/wmt14/run.sh [GPUS] [base|big] [MAX_TOKENS_PER_GPU]
# Downloads ~1.3 GB (statmt.org, sacreBLEU), prepares a 37k joint SentencePiece vocabulary, trains
# with ~25,000 target tokens an update (--update-freq from recipes/wmt14/plan.py), a checkpoint
# every 10 minutes; interrupt it and run it again to resume. Then averages the last 5 checkpoints
# (20 for big) and scores newstest2014 with sacreBLEU and with the paper's tokenized BLEU.
set -euo pipefail
GPUS=${1:-1}
MODEL=${2:-base}
MAX_TOKENS=${3:-4096}
RAW=data/wmt14-raw
TEXT=data/wmt14-text
DATA=data/wmt14
RUN=runs/wmt14-$MODEL
case "$MODEL" in
  base) LAST=5 ;;
  big) LAST=20 ;;
  *) echo "run.sh: the model is base or big, not $MODEL" >&2; exit 2 ;;
esac
[ -f "$TEXT/test.de" ] || python recipes/wmt14/prepare_wmt14.py "$RAW" "$TEXT"
transduce prepare --train-prefix "$TEXT/train" --valid-prefix "$TEXT/valid" --test-prefix "$TEXT/test" \
  --src en --tgt de --out "$DATA" --vocab-size 37000 --max-len 250 --max-ratio 1.5 --threads 8
UPDATE_FREQ=$(python recipes/wmt14/plan.py update-freq "$GPUS" "$MAX_TOKENS")
echo "$GPUS GPU(s) x $MAX_TOKENS tokens x update-freq $UPDATE_FREQ: ~25,000 target tokens an update"
python recipes/wmt14/plan.py estimate --model "$MODEL" --gpus "$GPUS" || true
RESUME=""
[ -f "$RUN/config.json" ] && RESUME="--resume"
torchrun --standalone --nproc_per_node "$GPUS" -m transduce train "$DATA" --out "$RUN" \
  --config "recipes/wmt14/$MODEL.toml" --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" \
  --precision auto $RESUME
transduce average "$RUN" --last "$LAST"
transduce evaluate "$RUN/averaged" --src "$TEXT/test.en" --ref "$TEXT/test.de" --paper-bleu de \
  --save-hyp "$RUN/newstest2014.hyp.de"
