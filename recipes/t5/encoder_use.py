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


def load_checked(script: str, model_path: str, data: str, check=None):
    """``(checkpoint folder, model, data's meta)``, or a message and exit 2: the model must be an
    encoder-decoder (and pass ``check``), the data prepared with sentinels."""
    try:
        folder = resolve(model_path)
        model, _ = load_model_from(folder)
        meta = load_meta(data)
        if model.config.architecture != "encoder-decoder" or not meta.get("sentinel_ids"):
            raise TransduceError("give an encoder-decoder trained with span corruption and its "
                                 "data (`transduce prepare --monolingual --sentinels 100`)")
        if check is not None:
            check(model.config)
    except TransduceError as error:
        print(f"{script}: error: {error}", file=sys.stderr)
        sys.exit(2)
    return folder, model, meta


def span_batch(stream, blocks, block_size: int, config, meta: dict, generator):
    """A batch of span corruption with the default noise density and mean span."""
    defaults = TrainConfig()
    return collate_spans(stream, blocks, block_size, config, meta["sentinel_ids"],
                         defaults.noise_density, defaults.mean_span, generator)


def span_nll(logits, batch, pad_id: int):
    """The mean negative log-likelihood of the batch's targets (pads left out)."""
    _, nll = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.0, pad_id)
    return nll / batch.target_tokens


def perplexities(logits_of, batch, pad_id: int) -> dict[str, float]:
    """The span perplexity with each block's own input and with the batch's inputs rotated by
    one; ``logits_of(src, tgt_in)`` is the model's forward pass."""
    with torch.no_grad():
        return {name: math.exp(float(span_nll(logits_of(src, batch.tgt_in), batch, pad_id)))
                for name, src in (("own input", batch.src),
                                  ("another block's", batch.src.roll(1, 0)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=TrainConfig().block_size,
                        help="the pretraining's block_size (default 128)")
    args = parser.parse_args()
    folder, model, meta = load_checked("encoder_use.py", args.model, args.data)
    stream = TokenStream(args.data, "valid")
    blocks = np.arange(min(args.blocks, stream.num_blocks(args.block_size, False)))
    batch = span_batch(stream, blocks, args.block_size, model.config, meta,
                       np.random.default_rng(0))
    result = {"checkpoint": str(folder), "blocks": len(blocks)}
    found = perplexities(model, batch, model.config.pad_id)
    result.update({name: round(value, 2) for name, value in found.items()})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
