"""The EMA of the weights as it stood at one checkpoint of a run, as a checkpoint of its own.

    python recipes/multi30k/ema_at.py RUN/checkpoints/step_00001601 OUT

Each checkpoint of a run trained with --ema keeps the average's state (ema.safetensors); RUN/ema
holds only the latest. This writes the average at that checkpoint (for scoring a budget's mark).
"""

from __future__ import annotations

import sys
from pathlib import Path

from safetensors.torch import load_file

from transduce.checkpoint import load_model_from, tokenizer_paths, upgrade_names, write_checkpoint
from transduce.training.ema import EMA_FILE, ExponentialAverage


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    if not (folder / EMA_FILE).is_file():
        print(f"ema_at: {folder} has no {EMA_FILE} (was the run trained with "
              "--ema?)", file=sys.stderr)
        return 2
    model, info = load_model_from(folder)
    ema = ExponentialAverage(model, 0.999)
    ema.load_state_dict(upgrade_names(load_file(str(folder / EMA_FILE))))
    tokenizer = list(dict.fromkeys(tokenizer_paths(folder, info).values()))
    with ema.applied(model):
        write_checkpoint(out, model, {**info, "ema_of": folder.name}, tokenizer, inputs=[folder])
    print(f"wrote the EMA at {folder.name} ({ema.updates} updates averaged) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
