#!/usr/bin/env bash
# Speech recognition on AN4 (CMU's spelled letters, digits and command words): the speech-small
# preset trained on the 948 training recordings minus 48 held out for choices (each at speeds 0.9,
# 1.0 and 1.1), for MINUTES of training (default 60); the weights (best/, the lowest held-out
# character error rate, or the average of the last five checkpoints) and the weight of CTC in the
# search (beam 4) that transcribe the held-out recordings best transcribe the 130 test recordings
# once. Beside it, a peer trained on the same prepared features,
# batches and budget: Hugging Face's Speech2TextForConditionalGeneration from random weights
# (speech2text.py).
#   bash recipes/an4/run.sh [AN4_DIR] [MINUTES]
# AN4_DIR holds train.tsv, test.tsv and the recordings (default ../shared/data/an4). Interrupt it
# at any time and run it again: training resumes.
set -euo pipefail
AN4=${1:-../shared/data/an4}
MINUTES=${2:-60}
DATA=data/an4/prepared
RUNS=runs/an4
mkdir -p "$RUNS"
transduce prepare --audio "$AN4/train.tsv" --hold-out 48 --speeds 0.9,1.0,1.1 --out "$DATA"
RESUME=""
[ -f "$RUNS/speech/config.json" ] && RESUME="--resume"
# (fp32: at this size bf16 autocast trains slower on the CPUs we measured)
transduce train "$DATA" --out "$RUNS/speech" --config recipes/an4/speech.toml --precision fp32 \
  --max-time "${MINUTES}m" $RESUME
transduce average "$RUNS/speech" --last 5 --out "$RUNS/speech/averaged"
# the weights and the search chosen on the held-out recordings: the decoder alone, or joint
# CTC/attention
for m in best averaged; do
  for w in 0 0.3 0.5 0.7 0.9; do
    transduce evaluate "$RUNS/speech/$m" --audio "$DATA/valid.tsv" --ctc-weight "$w" --json \
      > "$RUNS/speech/valid_${m}_ctc$w.json"
  done
done
read -r M W < <(python3 -c 'import json, sys
scores = {(m, w): json.load(open(f"{sys.argv[1]}/valid_{m}_ctc{w}.json"))["cer"]
          for m in ("best", "averaged") for w in ("0", "0.3", "0.5", "0.7", "0.9")}
for (m, w), cer in scores.items():
    print(f"held-out CER of {m}/ with --ctc-weight {w}: {100 * cer:.2f}%", file=sys.stderr)
print(*min(scores, key=scores.get))' "$RUNS/speech")
echo "speech: the test recordings, $RUNS/speech/$M with --ctc-weight $W"
transduce evaluate "$RUNS/speech/$M" --audio "$AN4/test.tsv" --ctc-weight "$W" \
  --save-hyp "$RUNS/speech/test.hyp" --json > "$RUNS/speech/test.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print("speech test CER %.2f%%, WER %.2f%% (%d recordings)" % (100 * r["cer"], 100 * r["wer"],
      r["recordings"]))' "$RUNS/speech/test.json"
python3 recipes/an4/speech2text.py "$DATA" "$AN4/test.tsv" --minutes "$MINUTES" \
  --out "$RUNS/speech2text"
