"""Small helpers shared by the subcommands."""

from __future__ import annotations

from pathlib import Path

from ..errors import TransduceError


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` -> dict, with a clear error for a malformed item."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TransduceError(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def set_threads(threads) -> int:
    from ..runtime import set_threads as _set

    return _set(threads)


def add_decode_options(p) -> None:
    """The search options shared by translate, evaluate and attention."""
    g = p.add_argument_group("search")
    g.add_argument("--beam", type=int, default=4, help="beam size (1 = greedy; paper: 4)")
    g.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent (paper: 0.6)")
    g.add_argument("--length-penalty", choices=["gnmt", "power"], default="gnmt",
                   help="gnmt: ((5+|Y|)/6)^alpha (paper); power: |Y|^alpha (HF, CTranslate2)")
    g.add_argument("--stop", choices=["bound", "k_finished"], default="bound",
                   help="bound: stop when no live beam can win (exact); k_finished: at K finished (fairseq)")
    g.add_argument("--max-len-a", type=float, default=1.0, help="max output length = a * source length + b")
    g.add_argument("--max-len-b", type=int, default=50, help="see --max-len-a (paper: input length + 50)")
    g.add_argument("--min-len", type=int, default=0, help="forbid eos before this many tokens")
    g.add_argument("--nbest", type=int, default=1, help="output the n best hypotheses with their scores")
    add_sampling_options(g)
    g.add_argument("--max-tokens", type=int, default=4096, help="source tokens per batch")
    g.add_argument("--max-sentences", type=int, default=128, help="sentences per batch")
    g.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, ...")
    g.add_argument("--precision", choices=["fp32", "bf16", "fp16", "int8", "auto"], default="fp32",
                   help="fp32 (exact), bf16 autocast, fp16 autocast (CUDA only), int8 weights (CPU; "
                        "faster, BLEU within a few tenths), or auto (the device's float default)")
    g.add_argument("--threads", type=int, default=0,
                   help="CPU threads (0: the cores other programs leave idle, measured at the start)")
    g.add_argument("--compile", nargs="?", choices=["auto", "on", "off"], default="auto", const="on",
                   help="capture the decode step with torch.compile, CUDA graphs on a GPU (same outputs): auto = "
                        "eager, which measured faster on the CPUs and on an H200 (README: Fast translation)")


def add_sampling_options(g) -> None:
    """The sampling options (translate, evaluate, attention, generate)."""
    g.add_argument("--sampling", action="store_true", help="sample instead of searching")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling: divide the logits by this (> 0)")
    g.add_argument("--top-k", type=int, default=0, help="sampling: only the k most likely tokens (0: all)")
    g.add_argument("--top-p", type=float, default=1.0, help="sampling: the smallest set of tokens with this mass")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling")


def decode_config(args, **fixed):
    """The one ``DecodeConfig`` of the search options on the command line (``fixed`` overrides)."""
    from ..config import DecodeConfig

    values = dict(beam=args.beam, alpha=args.alpha, length_penalty=args.length_penalty, stop=args.stop,
                  max_len_a=args.max_len_a, max_len_b=args.max_len_b, min_len=args.min_len, nbest=args.nbest,
                  sampling=args.sampling, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                  seed=args.seed, max_tokens=args.max_tokens, max_sentences=args.max_sentences,
                  strict=getattr(args, "strict", False))
    if values["sampling"]:
        values["beam"] = 1
    values.update(fixed)
    try:
        return DecodeConfig(**values)
    except ValueError as error:
        flag = "--" + str(error).split(" ")[0].split("=")[0].replace("_", "-")
        raise TransduceError(f"{flag}: {error}") from None


def read_text_lines(path: str | Path, what: str = "") -> list[str]:
    """The lines of a UTF-8 text file (plain or .gz), split on newlines only, with errors that name
    the file (see ``data.corpus.decode_lines``)."""
    from ..data.corpus import read_lines
    from ..errors import DataError

    label = f"{what} {path}".strip()
    if not Path(path).is_file():
        raise TransduceError(f"{label}: no such file" if not Path(path).exists() else f"{label} is not a file")
    try:
        return list(read_lines(path, advice="convert the file to UTF-8 first (e.g. with iconv)"))
    except DataError as error:
        raise TransduceError(f"{what + ' ' if what else ''}{error}") from None
