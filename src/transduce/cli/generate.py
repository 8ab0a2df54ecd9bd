"""``transduce generate``: continue a prompt with a decoder-only language model, streaming."""

from __future__ import annotations

import sys

from .common import THREADS, add_decode_options, number


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt with a decoder-only (GPT) model",
                       description="Prints the prompt and its continuation, token by token as "
                                   "they are decided (greedy and sampling; beam search prints at "
                                   "the end). A continuation ends at the end of a line (the "
                                   "model's eos) or after --max-new-tokens.")
    p.add_argument("model", help="a run directory or checkpoint folder of a decoder-only model")
    p.add_argument("--prompt", default="", help="the text to continue (empty: from the start of a "
                                                "line)")
    p.add_argument(
        "--max-new-tokens",
        type=number(int, 1, 1_000_000),
        default=100,
        help="at most this many new tokens",
    )
    add_decode_options(p, task="causal-lm", defaults={"beam": 1}, where=False)
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, ...")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16", "auto"], default="fp32")
    p.add_argument("--threads", type=THREADS, default=0, help="CPU threads (0: the idle cores)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TransduceError
    from ..lm import LanguageModel
    from .common import announce, decode_config, set_threads

    if args.max_new_tokens < 1:
        raise TransduceError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1")
    decode = decode_config(args)
    if args.min_len >= args.max_new_tokens:
        raise TransduceError(f"--min-len {args.min_len} leaves no room for the end within "
                             f"--max-new-tokens {args.max_new_tokens}")
    announce(args.model)
    set_threads(args.threads)
    lm = LanguageModel.load(args.model, "decoder-only", args.device, args.precision)

    def emit(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    lm.prompt_ids(args.prompt, args.max_new_tokens)  # refused before anything is printed
    sys.stdout.write(args.prompt)
    stream = decode.beam == 1
    text = lm.generate(args.prompt, decode, args.max_new_tokens, on_text=emit if stream else None)
    if not stream:
        sys.stdout.write(text)
    sys.stdout.write("\n")
    return 0
