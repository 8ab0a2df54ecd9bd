"""``transduce info``: a configuration and its parameter count per component."""

from __future__ import annotations

from ..config import ModelConfig
from .common import parse_sets


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="print a preset's configuration and parameter counts")
    p.add_argument("--preset", default="base", choices=ModelConfig.preset_names(), help="the preset to describe")
    p.add_argument("--vocab-size", type=int, default=37000, help="shared (or source) vocabulary size")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a model option")
    p.set_defaults(run=run)


def run(args) -> int:
    import torch

    from ..model import Transformer

    config = ModelConfig.preset(args.preset, vocab_size=args.vocab_size).with_overrides(parse_sets(args.set))
    with torch.device("meta"):  # count without allocating
        counts = Transformer(config).num_parameters()
    print(f"preset {args.preset}")
    for key, value in config.to_dict().items():
        print(f"  {key:20s} {value}")
    print("parameters")
    for key, value in counts.items():
        print(f"  {key:20s} {value:,}")
    return 0
