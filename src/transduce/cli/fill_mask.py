"""``transduce fill-mask``: the most probable tokens for each <mask>, from an encoder-only model."""

from __future__ import annotations

from .common import THREADS, number


def add_parser(sub) -> None:
    p = sub.add_parser("fill-mask", help="fill in <mask> tokens with an encoder-only (BERT) model",
                       description='e.g. transduce fill-mask RUN "A man is riding a <mask> ." '
                                   'prints, for each '
                                   "<mask>, the most probable tokens with their probabilities.")
    p.add_argument("model", help="a run directory or checkpoint folder of an encoder-only model")
    p.add_argument("text", help="text with one or more <mask>")
    p.add_argument("--top-k", type=number(int, 1, 1_000_000), default=5, help="how many "
                                                                              "candidates per "
                                                                              "<mask>")
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, ...")
    p.add_argument("--threads", type=THREADS, default=0, help="CPU threads (0: the idle cores)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TransduceError
    from ..lm import LanguageModel
    from .common import announce, set_threads

    if args.top_k < 1:
        raise TransduceError(f"--top-k {args.top_k}: must be at least 1")
    if "<mask>" not in args.text:
        raise TransduceError(f"no <mask> in {args.text!r}: write <mask> where a token is to be "
                             "filled in")
    announce(args.model)
    set_threads(args.threads)
    lm = LanguageModel.load(args.model, "encoder-only", args.device)
    results = lm.fill_mask(args.text, args.top_k)
    for n, candidates in enumerate(results, start=1):
        if len(results) > 1:
            print(f"<mask> {n}:")
        for piece, prob in candidates:
            word = piece.replace("\u2581", " ").strip() or piece
            filled = args.text.replace("<mask>", word, 1) if len(results) == 1 else ""
            print(f"  {prob:6.1%}  {word:<16} {filled}".rstrip())
    return 0
