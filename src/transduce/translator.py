"""Translating text: batching by a token budget, search, detokenization, input order kept.

``transduce.load(path).translate(["A man is sleeping."], beam=4)`` is the notebook entry point.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional, Sequence

import torch

from .checkpoint import load_model_from, resolve, tokenizer_from_info
from .config import DecodeConfig
from .data.dataset import pad_sequences
from .data.tokenizer import Tokenizer
from .decoding import Hypothesis, SearchOptions, beam_search, greedy_search, sample
from .errors import TransduceError
from .runtime import autocast, pick_device

__all__ = ["DecodeConfig", "Translator", "autocast", "pick_device", "tokenizer_from_info", "translate_ids"]


def compile_choice(compile: str | bool, device: torch.device, precision: str = "fp32") -> bool:
    """Whether to capture the decode step: ``on``/``off``, or ``auto``, which is eager everywhere.

    Measured so far, the captured step never paid: on the project's 2-core CPUs it ran at 0.5-0.9x
    the eager step (``benchmarks/peers.py inference``), whose time is already in BLAS; on an H200
    (``benchmarks/gpu_translate.py``, 300 lines, beam 4) its steady state ran at 0.5x the eager
    step, after a minute of compilation (README "Fast translation"). ``on`` stays: the same
    outputs, for those who measure it faster on their machine.
    """
    if compile not in (True, False, "auto", "on", "off"):
        raise TransduceError(f"--compile {compile!r}: choose auto, on or off")
    if compile == "auto":
        return False
    chosen = compile in (True, "on")
    if chosen and precision == "int8":
        raise TransduceError("--compile on does not combine with --precision int8 (the quantized kernels are "
                             "opaque to torch.compile); use one or the other")
    if chosen and precision == "bf16" and device.type == "cpu":
        raise TransduceError("--compile on does not combine with --precision bf16 on the CPU (its step chooses "
                             "bf16 or fp32 per product, eagerly); use one or the other")
    return chosen


def budget_batches(lengths: Sequence[int], decode: DecodeConfig) -> list[list[int]]:
    """Positions of ``lengths`` (source lengths without eos, in the order given) cut into search
    batches: sentences x (longest + eos) <= ``decode.max_tokens``, at most ``decode.max_sentences``
    a batch; a sentence over the budget on its own gets a batch of its own."""
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for n, length in enumerate(lengths):
        wider = max(width, length + 1)
        if current and ((len(current) + 1) * wider > decode.max_tokens or len(current) >= decode.max_sentences):
            batches.append(current)
            current, wider = [], length + 1
        current.append(n)
        width = wider
    if current:
        batches.append(current)
    return batches


def translate_ids(model, sources: Sequence[Sequence[int]], decode: DecodeConfig, prefixes=None,
                  precision: str = "fp32", progress: bool = False, compile: str | bool = False
                  ) -> list[list[Hypothesis]]:
    """Search for every source (token ids without eos); results in input order, n-best lists.

    ``precision`` is fp32, bf16 or fp16 (autocast) or int8 (quantized decoder step, CPU);
    ``compile`` is True/False or "auto"/"on"/"off" (``compile_choice``).
    """
    from tqdm.auto import tqdm

    config = model.config
    device = next(model.parameters()).device
    compiled = compile_choice(compile, device, precision)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
    results: list[Optional[list[Hypothesis]]] = [None] * len(sources)
    generator = torch.Generator(device=device).manual_seed(decode.seed) if decode.sampling else None
    batches = [[order[n] for n in batch] for batch in budget_batches([len(sources[i]) for i in order], decode)]
    with tqdm(total=len(sources), desc="translating", unit=" sent", disable=not progress or None, leave=False) as bar:
        for batch in batches:
            src = pad_sequences([sources[i] for i in batch], config.pad_id, suffix=config.eos_id).to(device)
            options = SearchOptions(decode.max_len_a, decode.max_len_b, decode.min_len,
                                    [prefixes[i] for i in batch] if prefixes else None,
                                    precision=precision if precision in ("int8", "bf16") else "fp32", compile=compiled)
            with torch.inference_mode(), autocast(device, "fp32" if precision == "int8" else precision):
                if decode.sampling:
                    out = [[h] for h in sample(model, src, options, temperature=decode.temperature, top_k=decode.top_k,
                                               top_p=decode.top_p, generator=generator)]
                elif decode.beam == 1 and decode.nbest == 1:
                    out = [[h] for h in greedy_search(model, src, options)]
                else:
                    out = beam_search(model, src, decode.beam, decode.alpha, options, decode.nbest,
                                      decode.length_penalty, decode.stop)
            for i, hyps in zip(batch, out):
                results[i] = hyps
            bar.update(len(batch))
    return results  # type: ignore[return-value]


class Translator:
    """A model and its tokenizer, ready to translate text."""

    def __init__(self, model, tokenizer: Tokenizer, info: dict, device: torch.device, precision: str = "fp32",
                 folder: Optional[Path] = None, compile: str | bool = "auto"):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        self.precision = precision
        self.folder = folder  # the checkpoint folder the model came from
        self.compile = compile

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32",
             compile: str | bool = "auto") -> "Translator":
        """Load a checkpoint folder, or a run directory's preferred checkpoint (see ``checkpoint.resolve``).

        ``precision``: fp32 (exact), bf16 or fp16 (autocast), int8 (the Linear weights quantized to
        int8, CPU only), or auto (the device's default float precision).
        ``compile``: "on" captures the decode step with ``torch.compile`` (CUDA graphs on a GPU) and
        compiles the encoder; "auto" does so only where it pays (``compile_choice``); "off" never.
        The outputs are the same either way; a compilation takes seconds to tens of seconds.
        """
        from .runtime import resolve_precision

        folder = resolve(path)
        dev = pick_device(device)
        precision = resolve_precision(precision, dev, inference=True)
        compile_choice(compile, dev, precision)  # refuse a bad combination before loading
        model, info = load_model_from(folder, dev)
        if model.config.architecture != "encoder-decoder":
            from .lm import USE

            kind = model.config.architecture
            raise TransduceError(f"{path} is a {kind} language model, which does not translate; use `{USE[kind]}` "
                                 "with it")
        if precision == "int8":
            from .inference import quantize_encoder

            try:
                quantize_encoder(model)
            except ValueError as error:
                raise TransduceError(f"--precision int8: {error}") from None
        tokenizer = tokenizer_from_info(folder, info)
        return cls(model, tokenizer, info, dev, precision, folder, compile)

    def prepare_compile(self, compiled: bool) -> None:
        """Compile the encoder (once per process) when the decode step is to be captured too."""
        if compiled and not getattr(self.model, "_encoder_compiled", False):
            import sys

            slower = ("; on the CPU the captured step has measured slower than the eager one, up to several "
                      "times on large batches (README: Fast translation), so --compile off or auto is faster there"
                      if self.device.type == "cpu" else "")
            print("compiling the encoder and the decode step with torch.compile (once per process; the first "
                  f"batches take longer; torch keeps compiled kernels on disk for the next run){slower}",
                  file=sys.stderr)
            self.model.encode = torch.compile(self.model.encode, dynamic=True)
            object.__setattr__(self.model, "_encoder_compiled", True)

    @property
    def max_source_tokens(self) -> int:
        return self.model.config.max_positions - 1  # room for eos

    def encode(self, lines: Sequence[str], strict: bool = False,
               numbers: Optional[Sequence[int]] = None) -> list[list[int]]:
        """Source ids for ``lines``; over-long lines are truncated with a warning (or refused).

        ``numbers`` are the lines' numbers in the user's input, for messages (default 1, 2, ...).
        """
        ids = self.tokenizer.encode_src(lines)
        limit = self.max_source_tokens
        for n, row in enumerate(ids):
            if len(row) > limit:
                number = numbers[n] if numbers is not None else n + 1
                message = f"input line {number} has {len(row)} tokens, more than the model's {limit}"
                if strict:
                    raise TransduceError(message + "; shorten it, or drop --strict to truncate it")
                warnings.warn(message + "; it is truncated", stacklevel=2)
                ids[n] = row[:limit]
        return ids

    def _check_lengths(self, sources: Sequence[Sequence[int]], decode: DecodeConfig, numbers: Sequence[int]) -> None:
        """Refuse a --min-len that leaves no room for eos within a sentence's maximum length."""
        if not decode.min_len:
            return
        for ids, number in zip(sources, numbers):
            allowed = min(int(decode.max_len_a * (len(ids) + 1) + decode.max_len_b), self.model.config.max_positions)
            if decode.min_len > allowed - 1:
                raise TransduceError(f"input line {number}: --min-len {decode.min_len} leaves no room for the end of "
                                     f"the sentence: at most {allowed} output tokens (eos included) are allowed for "
                                     "it (--max-len-a x source length + --max-len-b, capped by the model's "
                                     f"max_positions {self.model.config.max_positions}); lower --min-len")

    def translate(self, lines: Sequence[str], beam: int = 4, nbest: int = 1, progress: bool = False,
                  prefixes: Optional[Sequence[str]] = None, decode: Optional[DecodeConfig] = None,
                  first_line: int = 1, **options) -> list:
        """Translate ``lines``; returns strings (or, with ``nbest > 1``, lists of (string, score)).

        ``decode`` gives every search option at once (then ``beam``, ``nbest`` and ``options`` are
        not used); ``first_line`` is the number of ``lines[0]`` in the user's input, for messages.
        """
        decode = decode or DecodeConfig(beam=beam, nbest=nbest, **options)
        nbest = decode.nbest
        lines = list(lines)
        results = ["" if nbest == 1 else [] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]  # empty lines stay empty
        numbers = [first_line + i for i in todo]
        sources = self.encode([lines[i] for i in todo], strict=decode.strict, numbers=numbers)
        self._check_lengths(sources, decode, numbers)
        prefix_ids = self.tokenizer.encode_tgt([prefixes[i] for i in todo]) if prefixes else None
        compiled = compile_choice(self.compile, self.device, self.precision)
        self.prepare_compile(compiled)
        hyps = translate_ids(self.model, sources, decode, prefix_ids, self.precision, progress, compiled)
        for i, h in zip(todo, hyps):
            texts = [(self.tokenizer.decode_tgt(x.tokens), x.score) for x in h]
            results[i] = texts[0][0] if nbest == 1 else texts
        return results
