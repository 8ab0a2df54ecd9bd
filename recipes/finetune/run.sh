#!/usr/bin/env bash
# Fine-tuning, measured: a general model adapted to a new domain with a little data, against a model
# trained on that data alone, and what the general model forgets on the way.
#   bash recipes/finetune/run.sh [RAW_DIR] [PRETRAIN_STEPS] [FINETUNE_STEPS]
# The "new domain" is carved out of Multi30k English-German (RAW_DIR, default ../shared/data/multi30k):
# the training pairs whose English side mentions a dog (about 1,950; 250 of them held out for
# validation and 250 for test). The general model (the `small` recipe, recipes/multi30k/small.toml)
# trains on the other 27,000 pairs for PRETRAIN_STEPS updates. Then, on the dog pairs encoded with
# the general model's own tokenizer, for FINETUNE_STEPS updates each:
#   finetuned: --init-from the general model, --recipe finetune;
#   scratch:   the same data, the same updates, from random weights (the Multi30k recipe's options);
#   scratch-auto: the same, with the automatic schedule sized to the data (warmup 100, peak 1e-3).
# Every choice (early stopping, best/) is made on the validation pairs; the test pairs are scored
# once. Run it again after an interruption: each finished step is reused, training resumes.
set -euo pipefail
RAW=${1:-../shared/data/multi30k}
PRETRAIN=${2:-1500}
FINETUNE=${3:-300}
W=runs/finetune
mkdir -p "$W/raw"
python3 - "$RAW" "$W/raw" <<'PY'
import re, sys
from pathlib import Path
from transduce.data.corpus import read_lines  # (split on \n only, as prepare reads them)
raw, out = Path(sys.argv[1]), Path(sys.argv[2])
en, de = list(read_lines(raw / "train.en.gz")), list(read_lines(raw / "train.de.gz"))
dog = re.compile(r"\b(dog|dogs|puppy|puppies)\b", re.IGNORECASE)
general = [(e, d) for e, d in zip(en, de) if not dog.search(e)]
dogs = [(e, d) for e, d in zip(en, de) if dog.search(e)]
splits = {"general.train": general, "dogs.train": dogs[:-500], "dogs.valid": dogs[-500:-250], "dogs.test": dogs[-250:]}
for name, pairs in splits.items():
    for side, lang in ((0, "en"), (1, "de")):
        target = out / f"{name}.{lang}"
        text = "".join(p[side] + "\n" for p in pairs).encode("utf-8")
        if not target.is_file() or target.read_bytes() != text:
            target.write_bytes(text)
print(", ".join(f"{name} {len(pairs):,} pairs" for name, pairs in splits.items()))
PY
resume() { [ -f "$1/config.json" ] && echo "--resume" || true; }

# 1. the general model
transduce prepare --train-prefix "$W/raw/general.train" --valid-prefix "$RAW/val" --src en --tgt de \
  --out "$W/data/general" --vocab-size 8000
transduce train "$W/data/general" --out "$W/general" --config recipes/multi30k/small.toml --max-steps "$PRETRAIN" \
  --quiet $(resume "$W/general")

# 2. the new domain, encoded with the general model's tokenizer
transduce prepare --tokenizer "$W/general" --train-prefix "$W/raw/dogs.train" --valid-prefix "$W/raw/dogs.valid" \
  --test-prefix "$W/raw/dogs.test" --src en --tgt de --out "$W/data/dogs"

# 3. fine-tuned, and from scratch, for the same number of updates (validation every 50)
transduce train "$W/data/dogs" --out "$W/finetuned" --init-from "$W/general" --recipe finetune \
  --valid-extra "$RAW/val" --max-steps "$FINETUNE" --set valid_every=50 --quiet $(resume "$W/finetuned")
transduce train "$W/data/dogs" --out "$W/scratch" --config recipes/multi30k/small.toml --max-steps "$FINETUNE" \
  --set valid_every=50 --set ema=0 --valid-extra "$RAW/val" --quiet $(resume "$W/scratch")
transduce train "$W/data/dogs" --out "$W/scratch-auto" --preset small --max-steps "$FINETUNE" --set valid_every=50 \
  --valid-extra "$RAW/val" --quiet $(resume "$W/scratch-auto")
transduce plot "$W/finetuned"

# 4. scored once: BLEU (beam 4) on the new domain's test pairs and on Multi30k's test_2016_flickr
bleu() {
  transduce evaluate "$1" --src "$2.en${3:-}" --ref "$2.de${3:-}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bleu"])'
}
echo "| model | dog pairs (test, 250) | general (test_2016_flickr) |"
echo "|---|---|---|"
for run in general finetuned scratch scratch-auto; do
  echo "| $run | $(bleu "$W/$run" "$W/raw/dogs.test") | $(bleu "$W/$run" "$RAW/test_2016_flickr" .gz) |"
done
