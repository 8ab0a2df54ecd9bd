"""Small helpers shared by the subcommands."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Optional, Sequence

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


def add_decode_options(p, names: Optional[Sequence[str]] = None, defaults: Optional[dict] = None) -> None:
    """The search options, generated from ``DecodeConfig``'s declarations (one flag per field, its
    help, default and choices; ``names``: only these fields; ``defaults``: a command's own), then
    where the search runs (device, precision, threads, compilation)."""
    from ..config import DecodeConfig

    g = p.add_argument_group("search")
    for f in fields(DecodeConfig):
        if names is not None and f.name not in names:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = (defaults or {}).get(f.name, f.default)
        if f.type in (bool, "bool"):
            g.add_argument(flag, action="store_true", help=f.metadata["help"])
        else:
            kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            g.add_argument(flag, type=kind, default=default, choices=f.metadata.get("choices"),
                           help=f.metadata["help"])
    if names is not None:
        return
    g = p.add_argument_group("where it runs")
    g.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, ...")
    g.add_argument("--precision", choices=["fp32", "bf16", "fp16", "int8", "auto"], default="fp32",
                   help="fp32 (exact), bf16 autocast, fp16 autocast (CUDA only), int8 weights (CPU; "
                        "faster, BLEU within a few tenths), or auto (the device's float default)")
    g.add_argument("--threads", type=int, default=0,
                   help="CPU threads (0: the cores other programs leave idle, measured at the start)")
    g.add_argument("--compile", nargs="?", choices=["auto", "on", "off"], default="auto", const="on",
                   help="capture the decode step with torch.compile, CUDA graphs on a GPU (same outputs): auto = "
                        "eager, which measured faster on the CPUs and on a GPU (docs/inference.md)")


SAMPLING_OPTIONS = ("sampling", "temperature", "top_k", "top_p", "seed")


def decode_config(args, **fixed):
    """The one ``DecodeConfig`` of the search options on the command line (``fixed`` overrides);
    a refused value names its flag."""
    from ..config import DecodeConfig

    values = {f.name: getattr(args, f.name) for f in fields(DecodeConfig) if hasattr(args, f.name)}
    if values.get("sampling"):
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
