"""Small helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import math
from dataclasses import fields
from pathlib import Path
from typing import Optional, Sequence

from ..errors import TransduceError


def number(kind: type, low: Optional[float] = None, high: Optional[float] = None):
    """The type of a numeric option: a finite ``kind`` (int or float) within ``[low, high]``;
    argparse refuses anything else before any work, naming the option. Every numeric flag of every
    command is parsed by one of these (a test checks), so NaN, infinity and absurd sizes never get
    in."""
    from ..config.fields import MAX_INT

    high = MAX_INT if high is None else high

    def parse(text: str):
        try:
            value = int(text) if kind is int else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not "
                                             f"{'an integer' if kind is int else 'a number'}") \
                from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if (low is not None and value < low) or value > high:
            bounds = (f"at least {low}" if high == MAX_INT else f"from {low} to "
                                                                f"{high:,}") if low is not None \
                else f"at most {high:,}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: give a value {bounds}")
        return value

    parse.__name__ = "integer" if kind is int else "number"
    parse.bounds = (kind, low, high)  # for the tests
    return parse


def config_number(cls, name: str):
    """``number`` for the flag of a config field, with the field's own type and declared range."""
    from dataclasses import fields as config_fields

    f = next(f for f in config_fields(cls) if f.name == name)
    kind = {"int": int, "float": float}[f.type if isinstance(f.type, str) else f.type.__name__]
    return number(kind, f.metadata.get("low"), f.metadata.get("high"))


THREADS = number(int, 0, 1024)  # (0: the idle cores)


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


def add_decode_options(
    p, names: Optional[Sequence[str]] = None, defaults: Optional[dict] = None,
    where: Optional[bool] = None, task: Optional[str] = None,
) -> None:
    """The search options, generated from ``DecodeConfig``'s declarations (one flag per field, its
    help, default and choices; ``names``: only these fields; ``defaults``: a command's own;
    ``task``: the fields and defaults that task declares, ``Task.flags`` and ``Task.search``), then
    where the search runs (device, precision, threads, compilation; by default when every field is
    shown or a task is named)."""
    from ..config import DecodeConfig

    if task is not None:
        from ..tasks import task_named

        declared = task_named(task)
        names, defaults = declared.flags, {**declared.search, **(defaults or {})}
        where = True if where is None else where
    paper_search = task is None or declared.paper_search
    g = p.add_argument_group("search")
    for f in fields(DecodeConfig):
        if names is not None and f.name not in names:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = (defaults or {}).get(f.name, f.default)
        # the paper's translation setting means nothing to another task or beside its own default
        paper = paper_search and default == f.default
        words = f.metadata["help"] if paper else _without_paper(f.metadata["help"])
        if f.type in (bool, "bool"):
            g.add_argument(flag, action="store_true", help=words)
        elif "choices" in f.metadata:
            g.add_argument(flag, default=default, choices=f.metadata["choices"], help=words)
        else:
            g.add_argument(
                flag, type=config_number(DecodeConfig, f.name), default=default, help=words
            )
    if not (names is None if where is None else where):
        return
    g = p.add_argument_group("where it runs")
    g.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, cuda:1, ...")
    g.add_argument("--precision", choices=["fp32", "bf16", "fp16", "int8", "auto"], default="fp32",
                   help="fp32 (exact), bf16 autocast (on the CPU a batch may, rarely, translate "
                        "a sentence otherwise than alone), fp16 autocast (CUDA only), int8 "
                        "weights (CPU; faster, BLEU within a few tenths), or auto (fp32 or bf16, "
                        "whichever measured faster on this kind of device, said at the start)")
    g.add_argument("--threads", type=THREADS, default=0,
                   help="CPU threads (0: the cores other programs leave idle, measured at the "
                        "start)")
    g.add_argument(
        "--compile",
        nargs="?",
        choices=["auto", "on", "off"],
        default="auto",
        const="on",
        help="capture the decode step with torch.compile, CUDA graphs on a GPU (same "
        "outputs): auto = eager, which measured faster on the CPUs and on a GPU "
        "(docs/inference.md)",
    )


def add_task_search_options(p) -> None:
    """Every search option, unset: a command that runs a model of any task (``serve``,
    ``evaluate``) fills the ones left out with that task's defaults (``task_search``)."""
    from ..config import DecodeConfig

    add_decode_options(p, defaults={f.name: None for f in fields(DecodeConfig)}, where=True)


def task_search(args, task):
    """The search of ``task``: its defaults, then the options given (one the task does not take
    is an error naming it)."""
    from ..config import DecodeConfig

    given = {f.name: getattr(args, f.name) for f in fields(DecodeConfig)
             if getattr(args, f.name, None) not in (None, False)}
    foreign = [name for name in given if task.flags is not None and name not in task.flags]
    if foreign:
        flag = "--" + foreign[0].replace("_", "-")
        raise TransduceError(f"{flag} does not apply to {task.what}: `transduce {task.verb} "
                             "--help` lists the search options it takes")
    return _decode_of({**task.search, **given})


def add_draft_options(p) -> None:
    """``--draft`` and ``--draft-tokens``: speculative greedy search (``decoding.speculative``)."""
    g = p.add_argument_group("speculative search")
    g.add_argument("--draft", metavar="MODEL",
                   help="search greedily (beam 1) with a draft's proposals, each checked by the "
                        "model: the same translations as --beam 1, faster where the draft often "
                        "guesses right. A run or checkpoint trained on the same prepared data, "
                        "self:N (the model's own first N decoder layers) or self-int8 (the model "
                        "with int8 weights, CPU)")
    g.add_argument("--draft-tokens", type=number(int, 1, 64), default=4, metavar="K",
                   help="the most tokens the draft proposes at a time (one fewer after a proposal "
                        "the model cut, one more after one it kept whole)")


def draft_search(args, decode):
    """The search with ``--draft`` in force, checked before any model loads: greedy (a beam other
    than the default's, ``--nbest`` or ``--sampling`` is an error)."""
    from ..config import DecodeConfig

    if getattr(args, "draft", None) is None:
        return decode
    if decode.beam not in (1, DecodeConfig().beam) or decode.sampling or decode.nbest > 1:
        raise TransduceError("--draft searches greedily: leave out --beam, --nbest and "
                             "--sampling (a draft's proposals are checked against the model's "
                             "greedy choice)")
    from dataclasses import replace

    return replace(decode, beam=1)


def say_draft(translator) -> None:
    """The draft's acceptance, on stderr, after a search that used one."""
    import sys

    draft = translator.draft
    if draft is not None and draft.proposed:
        print(f"draft: {draft.accepted:,} of {draft.proposed:,} proposed tokens kept "
              f"({100 * draft.rate:.1f}%)", file=sys.stderr)


def _without_paper(words: str) -> str:
    """A search option's help without its mention of the paper's translation setting."""
    import re

    return re.sub(r"\s*\(paper: [^)]*\)|;\s*paper: [^)]*", "", words)


def add_runtime_options(p, precisions: Sequence[str] = ("fp32", "bf16", "fp16", "auto")) -> None:
    """Where a model that is not searched with the translation options runs: --device,
    --precision, --threads."""
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, mps or auto")
    p.add_argument("--precision", default="fp32", choices=list(precisions))
    p.add_argument("--threads", type=THREADS, default=0,
                   help="CPU threads (0: the cores other programs leave idle, measured at the "
                        "start)")


def decode_config(args, **fixed):
    """The one ``DecodeConfig`` of the search options on the command line (``fixed`` overrides);
    a refused value names its flag."""
    from ..config import DecodeConfig

    values = {f.name: getattr(args, f.name) for f in fields(DecodeConfig) if hasattr(args, f.name)}
    return _decode_of({**values, **fixed})


def _decode_of(values: dict):
    """``DecodeConfig(**values)`` (sampling searches one row), or a message naming the flag of
    the refused value."""
    from ..config import DecodeConfig

    if values.get("sampling"):
        values = {**values, "beam": 1}
    try:
        return DecodeConfig(**values)
    except ValueError as error:
        flag = "--" + str(error).split(" ")[0].split("=")[0].replace("_", "-")
        raise TransduceError(f"{flag}: {error}") from None


def text_files(named: dict[str, Optional[str]]) -> dict[str, Path]:
    """The text files a command reads, by flag (``{"--src": path, ...}``; None: not given), each
    plain or, when only that exists, with ``.gz`` added; one message names every missing file."""
    from ..data.corpus import find_files

    given = {flag: path for flag, path in named.items() if path is not None}
    return dict(zip(given, find_files(given.items())))


def read_text_lines(path: str | Path, what: str = "") -> list[str]:
    """The lines of a UTF-8 text file (plain or .gz; ``path.gz`` when only that exists), split on
    newlines only, with errors that name the file (see ``data.corpus.decode_lines``)."""
    from ..data.corpus import read_lines
    from ..errors import DataError

    try:
        path = text_files({what: str(path)})[what]
        return list(read_lines(path, advice="convert the file to UTF-8 first (e.g. with iconv)"))
    except DataError as error:
        raise TransduceError(
            f"{what + ' ' if what and what not in str(error) else ''}{error}"
        ) from None


def model_inputs(model) -> list[Path]:
    """The folders a command reads a model (or an ensemble's models) from, for the
    outputs-never-inside-inputs rule: the checkpoint folder each run or checkpoint path resolves to
    (a run's other files may be written beside it; ``files.check_not_input`` guards the run's own
    checkpoints)."""
    if not model:
        return []
    if isinstance(model, (list, tuple)):
        return [folder for path in model for folder in model_inputs(path)]
    from ..choice import resolve

    try:
        return [resolve(model)]
    except TransduceError:
        return [Path(model)]  # (loading it says what is wrong)


def announce(model) -> None:
    """Say on stderr which checkpoint each run or checkpoint path resolves to, with its update and
    why it was chosen (``checkpoint.choose``, the one rule), after any warning about a derived
    checkpoint passed over or out of date. Called before loading, so a missing run is a message
    before any work."""
    import sys

    from ..choice import choose

    paths = model if isinstance(model, (list, tuple)) else [model]
    for path in paths:
        choice = choose(path)
        for warning in choice.warnings:
            print(warning, file=sys.stderr)
        print(f"using {choice.line()}", file=sys.stderr)
    if len(paths) > 1:
        print(f"searching with an ensemble of these {len(paths)} models (their probabilities "
              "averaged at every step)",
              file=sys.stderr)


def describe(translator) -> str:
    """The checkpoint a translator came from, or an ensemble's checkpoints."""
    folders = translator.info.get("ensemble")
    return f"an ensemble of {', '.join(folders)}" if folders else str(translator.folder)


def warn_if_silent(empty: int, total: int, what: str, folder) -> None:
    """Say on stderr when every output (``empty`` of ``total``) is empty: a score of a model that
    writes nothing (a CER of exactly 100%) is not a measure of what it learned."""
    import sys

    if total and empty == total:
        print(f"warning: every {what} is empty: {folder} writes nothing for these inputs (a model "
              "early in its training; `transduce info RUN` lists its checkpoints and their "
              "validation scores)", file=sys.stderr)
