"""Does a span-corruption model read its encoder? Its validation loss with each block's own
corrupted input, against the same targets with the inputs of other blocks (the batch rotated by
one). A model that fills spans from their context loses much more with the wrong input; one that
has learned only the decoder's language model loses nothing.

    python recipes/t5/encoder_use.py RUN_OR_CHECKPOINT DATA [--blocks 64] [--block-size 128]

DATA: the monolingual dataset the model was pretrained on (`prepare --monolingual --sentinels`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
import torch

from transduce.checkpoint import load_model_from
from transduce.choice import resolve
from transduce.config import TrainConfig
from transduce.data import TokenStream, load_meta
from transduce.data.spans import collate_spans
from transduce.errors import TransduceError
from transduce.training import label_smoothed_nll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=TrainConfig().block_size,
                        help="the pretraining's block_size (default 128)")
    args = parser.parse_args()
    try:
        folder = resolve(args.model)
        model, _ = load_model_from(folder)
        meta = load_meta(args.data)
        if model.config.architecture != "encoder-decoder" or not meta.get("sentinel_ids"):
            raise TransduceError("give an encoder-decoder trained with span corruption and its "
                                 "data (`transduce prepare --monolingual --sentinels 100`)")
    except TransduceError as error:
        print(f"encoder_use.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    config, defaults = model.config, TrainConfig()
    stream = TokenStream(args.data, "valid")
    blocks = np.arange(min(args.blocks, stream.num_blocks(args.block_size, False)))
    batch = collate_spans(stream, blocks, args.block_size, config, meta["sentinel_ids"],
                          defaults.noise_density, defaults.mean_span, np.random.default_rng(0))
    result = {"checkpoint": str(folder), "blocks": len(blocks)}
    with torch.no_grad():
        for name, src in (("own input", batch.src), ("another block's", batch.src.roll(1, 0))):
            logits = model(src, batch.tgt_in)
            _, nll = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.0,
                                        config.pad_id)
            result[name] = round(math.exp(float(nll) / batch.target_tokens), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
