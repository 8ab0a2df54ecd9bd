"""``transduce info``: a configuration and its parameter count per component."""

from __future__ import annotations

from ..config import ModelConfig
from .common import number, parse_sets


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="print a preset's configuration and parameter counts")
    p.add_argument("--preset", default="base", choices=ModelConfig.preset_names(), help="the preset to describe")
    p.add_argument("--vocab-size", type=number(int, 1, 10**8), default=None,
                   help="shared (or source) vocabulary size (default: the preset's; 37,000 for the paper's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a model option")
    p.set_defaults(run=run)


def run(args) -> int:
    import torch

    from ..model import Transformer

    sizes = {} if args.vocab_size is None else {"vocab_size": args.vocab_size}
    config = ModelConfig.preset(args.preset, **sizes).with_overrides(parse_sets(args.set))
    with torch.device("meta"):  # count without allocating
        counts = Transformer(config).num_parameters()
    print(f"preset {args.preset}")
    for key, value in config.to_dict().items():
        print(f"  {key:20s} {value}")
    print("parameters")
    for key, value in counts.items():
        if key == "active" and value == counts["total"]:
            continue  # (a dense model: every parameter meets every token)
        print(f"  {'active per token' if key == 'active' else key:20s} {value:,}")
    if config.has_decoder:
        with torch.device("meta"):
            per_token = Transformer(config).cache_bytes_per_token()
        print(f"decoding cache (self-attention keys and values, fp32): {per_token / 1024:,.1f} KiB per position of "
              f"each hypothesis ({config.kv_heads} key/value head{'s' if config.kv_heads > 1 else ''} of "
              f"{config.n_heads})" + (f", at most {config.attention_window} positions" if config.attention_window
                                      else ""))
    return 0
