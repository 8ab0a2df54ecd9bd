"""``transduce attention``: heatmaps of every layer and head for one sentence."""

from __future__ import annotations

from .common import add_decode_options, announce, decode_config


def add_parser(sub) -> None:
    p = sub.add_parser("attention", help="draw the attention weights of every layer and head for "
                                         "one sentence")
    p.add_argument("model", help="a run directory or checkpoint folder")
    p.add_argument("--src", required=True, help="the source sentence")
    p.add_argument("--tgt", help="the target sentence (default: the model's own beam-search "
                                 "translation)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--kinds", default="encoder,decoder,cross", help="which attention to draw "
                                                                    "(comma-separated)")
    add_decode_options(p, ("beam", "alpha"))  # for the model's own translation, without --tgt
    p.set_defaults(run=run)


def run(args) -> int:
    from .. import load
    from ..visualize import draw_attention

    announce(args.model)
    translator = load(args.model)
    path, tgt = draw_attention(
        translator,
        args.src,
        args.tgt,
        args.out,
        tuple(k.strip() for k in args.kinds.split(",")),
        decode_config(args),
    )
    print(f"wrote {path} (target: {tgt})")
    return 0
