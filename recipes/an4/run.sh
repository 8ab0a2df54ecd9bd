#!/usr/bin/env bash
# Speech recognition on AN4 (CMU's spelled letters, digits and command words): the speech-small
# preset trained on the 948 training recordings minus 48 held out for choices, for MINUTES of
# training (default 60); the weights with the best held-out character error rate transcribe the
# 130 test recordings once (beam 4, with the weight of CTC in the search that transcribed the
# held-out recordings best). Beside it, a peer trained on the same prepared features,
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
transduce prepare --audio "$AN4/train.tsv" --hold-out 48 --out "$DATA"
RESUME=""
[ -f "$RUNS/speech/config.json" ] && RESUME="--resume"
# (fp32: at this size bf16 autocast trains slower on the CPUs we measured)
transduce train "$DATA" --out "$RUNS/speech" --config recipes/an4/speech.toml --precision fp32 \
  --max-time "${MINUTES}m" $RESUME
# the search chosen on the held-out recordings: the decoder alone, or joint CTC/attention
for w in 0 0.3 0.5 0.7 0.9; do
  transduce evaluate "$RUNS/speech/best" --audio "$DATA/valid.tsv" --ctc-weight "$w" --json \
    > "$RUNS/speech/valid_ctc$w.json"
done
W=$(python3 -c 'import json, sys
scores = {w: json.load(open(f"{sys.argv[1]}/valid_ctc{w}.json"))["cer"]
          for w in ("0", "0.3", "0.5", "0.7", "0.9")}
for w, cer in scores.items():
    print(f"held-out CER with --ctc-weight {w}: {100 * cer:.2f}%", file=sys.stderr)
print(min(scores, key=scores.get))' "$RUNS/speech")
echo "speech: the test recordings, --ctc-weight $W, the best held-out weights ($RUNS/speech/best)"
transduce evaluate "$RUNS/speech/best" --audio "$AN4/test.tsv" --ctc-weight "$W" \
  --save-hyp "$RUNS/speech/test.hyp" --json > "$RUNS/speech/test.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print("speech test CER %.2f%%, WER %.2f%% (%d recordings)" % (100 * r["cer"], 100 * r["wer"],
      r["recordings"]))' "$RUNS/speech/test.json"
python3 recipes/an4/speech2text.py "$DATA" "$AN4/test.tsv" --minutes "$MINUTES" \
  --out "$RUNS/speech2text"
