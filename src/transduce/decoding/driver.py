"""The search driver: sources (token ids) in, n-best lists out, in input order, batched by a
budget."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..config import DecodeConfig
from ..data.batching import budget_batches
from ..data.dataset import pad_sequences
from ..data.speech import pad_frames
from ..runtime import autocast, compile_choice, sampler
from .beam import beam_search
from .common import Hypothesis, SearchOptions
from .modifiers import ScoreModifier
from .greedy import greedy_search, sample
from .speculative import speculative_greedy


def search(model, src, decode: DecodeConfig, options: Optional[SearchOptions] = None,
           generator: Optional[torch.Generator] = None) -> list[list[Hypothesis]]:
    """The search ``decode`` asks for over ``src (B, S)``: sampling, greedy (beam 1, one best) or
    beam; n-best lists per sentence, in order."""
    if options is not None and options.draft is not None:
        return [[h] for h in speculative(model, src, decode, options)]
    if decode.sampling:
        return [[h] for h in sample(model, src, decode, options, generator)]
    if decode.greedy:
        return [[h] for h in greedy_search(model, src, decode, options)]
    return beam_search(model, src, decode, options)


def speculative(model, src, decode: DecodeConfig, options: SearchOptions) -> list[Hypothesis]:
    """Greedy search with ``options.draft``'s proposals checked by the model; a ValueError for
    what it does not serve."""
    refused = [what for what, asked in (
        ("sampling", decode.sampling), ("beam search", not decode.greedy),
        ("forced prefixes", options.prefix is not None), ("constraints", bool(options.modifiers)),
        ("the joint CTC search", bool(decode.ctc_weight)),
        # (an int8 check of k tokens quantizes their activations together, and the CPU's bf16
        # products are chosen by the number of rows, so the check's choices could differ from
        # greedy search's one token at a time; a draft's precision only changes the speed)
        (f"{options.precision} weights (draft with self-int8 instead)",
         options.precision == "int8" or options.precision == "bf16" and src.device.type == "cpu"),
        ("a captured step", options.compile)) if asked]
    if refused:
        raise ValueError(f"a draft serves greedy search alone (beam 1, fp32 weights): "
                         f"not {refused[0]}")
    return speculative_greedy(model, src, decode, options.draft, options.precision)


def search_precision(precision: str) -> tuple[str, str]:
    """A translator's precision as search runs it: the fast step's (int8 and CPU bf16 weights of its
    own, else fp32) and the autocast context's around it (fp32 for int8)."""
    return (precision if precision in ("int8", "bf16") else "fp32"), (
        "fp32" if precision == "int8" else precision
    )


def translate_ids(model, sources: Sequence[Sequence[int]], decode: DecodeConfig,
                  prefixes: Optional[Sequence[Sequence[int]]] = None, precision: str = "fp32",
                  progress: bool = False, compile: str | bool = False,
                  modifiers: Sequence[ScoreModifier] = (),
                  draft=None) -> list[list[Hypothesis]]:
    """Search for every source (token ids without eos, or a speech model's recordings: frames
    ``(T, n_mels)``); results in input order, n-best lists.

    Sources are sorted by length and cut into batches of ``decode.max_tokens`` source tokens and at
    most ``decode.max_sentences`` sentences. ``precision`` is fp32, bf16 or fp16 (autocast) or int8
    (quantized decoder step, CPU); ``compile`` is True/False or "auto"/"on"/"off"
    (``runtime.compile_choice``). ``modifiers``: score modifiers made for every source, in order
    (a parser's ``brackets.BracketRules``), cut into each batch's (``ScoreModifier.subset``).
    ``draft``: a ``speculative.Draft`` whose proposals greedy search checks.
    """
    from tqdm.auto import tqdm

    config = model.config
    device = next(model.parameters()).device
    compiled = compile_choice(compile, device, precision)
    # a speech model's sources are recordings' frames (T, n_mels): budgeted by encoder positions
    audio = bool(sources) and getattr(sources[0], "ndim", 1) == 2
    size = (lambda s: -(-len(s) // config.subsample)) if audio else len
    order = sorted(range(len(sources)), key=lambda i: size(sources[i]), reverse=True)
    results: list[Optional[list[Hypothesis]]] = [None] * len(sources)
    generator = sampler(device, decode.seed) if decode.sampling else None
    lengths = [size(sources[i]) for i in order]
    batches = [
        [order[n] for n in batch]
        for batch in budget_batches(lengths, decode.max_tokens, decode.max_sentences)
    ]
    engine, context = search_precision(precision)
    with tqdm(
        total=len(sources),
        desc="transcribing" if audio else "translating",
        unit=" sent",
        disable=not progress or None,
        leave=False,
    ) as bar:
        for batch in batches:
            src = pad_frames([sources[i] for i in batch], device) if audio else pad_sequences(
                [sources[i] for i in batch], config.pad_id, suffix=config.eos_id
            ).to(device)
            options = SearchOptions(
                prefix=[prefixes[i] for i in batch] if prefixes else None,
                precision=engine,
                compile=compiled,
                modifiers=[modifier.subset(batch) for modifier in modifiers],
                draft=draft,
            )
            with torch.inference_mode(), autocast(device, context):
                out = search(model, src, decode, options, generator)
            for i, hyps in zip(batch, out):
                results[i] = hyps
            bar.update(len(batch))
    return results  # type: ignore[return-value]
