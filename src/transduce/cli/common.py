"""Small helpers shared by the subcommands."""

from __future__ import annotations

import os
import tempfile
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


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file so that it is either complete or absent (temporary file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    g.add_argument("--max-len-b", type=int, default=50)
    g.add_argument("--min-len", type=int, default=0, help="forbid eos before this many tokens")
    g.add_argument("--nbest", type=int, default=1, help="output the n best hypotheses with their scores")
    g.add_argument("--sampling", action="store_true", help="sample instead of searching")
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0, help="seed for sampling")
    g.add_argument("--max-tokens", type=int, default=4096, help="source tokens per batch")
    g.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, ...")
    g.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    g.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")


def decode_options(args) -> dict:
    return dict(alpha=args.alpha, length_penalty=args.length_penalty, stop=args.stop, max_len_a=args.max_len_a,
                max_len_b=args.max_len_b, min_len=args.min_len, sampling=args.sampling,
                temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                max_tokens=args.max_tokens)


def split_lines(text: str) -> list[str]:
    """Lines of a text, without the empty string after a final newline."""
    if not text:
        return []
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def read_text_lines(path: str | Path, what: str = "") -> list[str]:
    """The lines of a UTF-8 text file (plain or .gz), with errors that name the file."""
    import gzip

    p = Path(path)
    label = f"{what} {path}".strip()
    if not p.is_file():
        raise TransduceError(f"{label}: no such file")
    try:
        text = gzip.open(p, "rt", encoding="utf-8").read() if p.suffix == ".gz" else p.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise TransduceError(f"{label}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    return split_lines(text)
