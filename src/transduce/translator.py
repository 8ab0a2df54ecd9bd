"""Translating text: batching by a token budget, search, detokenization, input order kept.

``transduce.load(path).translate(["A man is sleeping."], beam=4)`` is the notebook entry point.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from .checkpoint import load_model_from, resolve
from .data.dataset import pad_sequences
from .data.tokenizer import Tokenizer
from .decoding import Hypothesis, SearchOptions, beam_search, greedy_search, sample
from .errors import TransduceError


@dataclass
class DecodeConfig:
    """How to search. beam: 1 = greedy; alpha and length_penalty: see ``decoding.beam``;
    sampling: draw instead of search (temperature, top_k, top_p, seed); max_tokens: the batch
    budget in source tokens; strict: refuse over-long inputs instead of truncating them."""

    beam: int = 4
    alpha: float = 0.6
    length_penalty: str = "gnmt"
    stop: str = "bound"
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 0
    nbest: int = 1
    sampling: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 4096
    max_sentences: int = 128
    strict: bool = False


def pick_device(name: str = "auto") -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision != "fp32":
        raise TransduceError(f"--precision {precision!r}: choose fp32 or bf16")
    return nullcontext()


def translate_ids(model, sources: Sequence[Sequence[int]], decode: DecodeConfig, prefixes=None,
                  precision: str = "fp32", progress: bool = False) -> list[list[Hypothesis]]:
    """Search for every source (token ids without eos); results in input order, n-best lists."""
    from tqdm.auto import tqdm

    config = model.config
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
    results: list[Optional[list[Hypothesis]]] = [None] * len(sources)
    generator = torch.Generator(device=device).manual_seed(decode.seed) if decode.sampling else None
    batches, current = [], []
    for i in order:  # longest first: a batch's width is its first sentence's
        width = len(sources[current[0]]) + 1 if current else len(sources[i]) + 1
        if current and ((len(current) + 1) * width > decode.max_tokens or len(current) >= decode.max_sentences):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    with tqdm(total=len(sources), desc="translating", unit=" sent", disable=not progress or None, leave=False) as bar:
        for batch in batches:
            src = pad_sequences([sources[i] for i in batch], config.pad_id, suffix=config.eos_id).to(device)
            options = SearchOptions(decode.max_len_a, decode.max_len_b, decode.min_len,
                                    [prefixes[i] for i in batch] if prefixes else None)
            with torch.inference_mode(), autocast(device, precision):
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


def tokenizer_from_info(folder: Path, info: dict) -> Tokenizer:
    """The tokenizer a checkpoint folder names in its model.json."""
    tok = info["tokenizer"]
    vocab = {k: folder / tok[k] for k in ("vocab", "tgt_vocab") if tok.get(k)}
    return Tokenizer(folder / tok["src"], folder / tok["tgt"], vocab.get("vocab"), vocab.get("tgt_vocab"),
                     unk_id=info["model"].get("unk_id", 3))


class Translator:
    """A model and its tokenizer, ready to translate text."""

    def __init__(self, model, tokenizer: Tokenizer, info: dict, device: torch.device, precision: str = "fp32"):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        self.precision = precision

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32") -> "Translator":
        folder = resolve(path)
        dev = pick_device(device)
        model, info = load_model_from(folder, dev)
        tokenizer = tokenizer_from_info(folder, info)
        return cls(model, tokenizer, info, dev, precision)

    @property
    def max_source_tokens(self) -> int:
        return self.model.config.max_positions - 1  # room for eos

    def encode(self, lines: Sequence[str], strict: bool = False) -> list[list[int]]:
        """Source ids for ``lines``; over-long lines are truncated with a warning (or refused)."""
        ids = self.tokenizer.encode_src(lines)
        limit = self.max_source_tokens
        for n, row in enumerate(ids):
            if len(row) > limit:
                message = f"input line {n + 1} has {len(row)} tokens, more than the model's {limit}"
                if strict:
                    raise TransduceError(message + "; shorten it, or drop --strict to truncate it")
                warnings.warn(message + "; it is truncated", stacklevel=2)
                ids[n] = row[:limit]
        return ids

    def translate(self, lines: Sequence[str], beam: int = 4, nbest: int = 1, progress: bool = False,
                  prefixes: Optional[Sequence[str]] = None, **options) -> list:
        """Translate ``lines``; returns strings (or, with ``nbest > 1``, lists of (string, score))."""
        decode = DecodeConfig(beam=beam, nbest=nbest, **options)
        lines = list(lines)
        results = ["" if nbest == 1 else [] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]  # empty lines stay empty
        sources = self.encode([lines[i] for i in todo], strict=decode.strict)
        prefix_ids = self.tokenizer.encode_tgt([prefixes[i] for i in todo]) if prefixes else None
        hyps = translate_ids(self.model, sources, decode, prefix_ids, self.precision, progress)
        for i, h in zip(todo, hyps):
            texts = [(self.tokenizer.decode_tgt(x.tokens), x.score) for x in h]
            results[i] = texts[0][0] if nbest == 1 else texts
        return results
