"""``transduce generate``: continue a prompt with a decoder-only language model, streaming."""

from __future__ import annotations

import sys


from .common import add_sampling_options


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt with a decoder-only (GPT) model",
                       description="Prints the prompt and its continuation, token by token as they are decided "
                                   "(greedy and sampling; beam search prints at the end). A continuation ends at "
                                   "the end of a line (the model's eos) or after --max-new-tokens.")
    p.add_argument("model", help="a run directory or checkpoint folder of a decoder-only model")
    p.add_argument("--prompt", default="", help="the text to continue (empty: from the start of a line)")
    p.add_argument("--max-new-tokens", type=int, default=100, help="at most this many new tokens")
    p.add_argument("--beam", type=int, default=1, help="1: greedy (or sampling); more: beam search")
    p.add_argument("--alpha", type=float, default=0.6, help="beam search: length penalty exponent")
    add_sampling_options(p)
    p.add_argument("--min-len", type=int, default=0, help="no end of line before this many new tokens")
    p.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, ...")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16", "auto"], default="fp32")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: the idle cores)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..config import DecodeConfig
    from ..errors import TransduceError
    from ..lm import LanguageModel
    from .common import set_threads

    if args.max_new_tokens < 1:
        raise TransduceError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1")
    try:
        decode = DecodeConfig(beam=1 if args.sampling else args.beam, alpha=args.alpha, sampling=args.sampling,
                              temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                              min_len=args.min_len)
    except ValueError as error:
        raise TransduceError(f"--{str(error).split(' ')[0].split('=')[0].replace('_', '-')}: {error}") from None
    if args.min_len >= args.max_new_tokens:
        raise TransduceError(f"--min-len {args.min_len} leaves no room for the end within --max-new-tokens "
                             f"{args.max_new_tokens}")
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
