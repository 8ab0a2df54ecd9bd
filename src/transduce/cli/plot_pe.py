"""``transduce plot-pe``: the sinusoidal positional encoding of §3.5 as a picture."""

from __future__ import annotations

from .common import number


def add_parser(sub) -> None:
    p = sub.add_parser("plot-pe", help="draw the sinusoidal positional encoding")
    p.add_argument("--d-model", type=number(int, 2, 65_536), default=512, help="model width (the "
                                                                               "number of "
                                                                               "encoding "
                                                                               "dimensions)")
    p.add_argument("--positions", type=number(int, 1, 1_000_000), default=100, help="positions to "
                                                                                    "draw")
    p.add_argument("--layout", choices=["interleaved", "concat"], default="interleaved",
                   help="interleaved sin/cos (the paper) or [sin | cos] (fairseq, Marian)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..visualize import plot_positional_encoding

    print(f"wrote {plot_positional_encoding(args.d_model, args.positions, args.out, args.layout)}")
    return 0
