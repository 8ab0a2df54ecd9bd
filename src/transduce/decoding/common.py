"""What every search strategy shares: its options, length limits, constraints, results (the
decoding state is ``state.py``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from ..config import DecodeConfig



@dataclass
class Hypothesis:
    """One output: target ids (without start and eos), the sum of their log-probabilities
    (eos included), and the score search ranked it by (length-normalized for beam search)."""

    tokens: list[int]
    logprob: float
    score: float


@dataclass
class SearchOptions:
    """How a search runs, beside what it searches for (``DecodeConfig``): per-call inputs and the
    engine's settings, none of which changes the outputs beyond float rounding except ``prefix``.

    prefix: per sentence, target ids the output must start with (forced decoding of a prefix).
    use_cache: False recomputes the whole prefix at each step (for tests). fast: decode with the
    ``FastDecoder`` step (``inference/decoder.py``); False uses the model's own
        ``decode`` with its growing cache (the reference the fast step is tested against).
    precision: "int8" quantizes the fast step's weights (CPU); "bf16" gives it bf16 copies of the
        weights on the CPU (``TunedLinear``); otherwise fp32, bf16 and fp16 come from the autocast
        context around the search.
    compile: capture the fast step with ``torch.compile`` (``inference.captured.CapturedDecoder``).
    on_step: greedy and sampling call it with each step's new tokens ``(B,)`` (streaming output).
    modifiers: score modifiers of the caller's (``modifiers.ScoreModifier``) for the batch's
        sentences, in order, applied after the length rules and forced prefixes (a parser's
        ``brackets.BracketRules``: linearized trees over each sentence's words).
    draft: a ``speculative.Draft``: greedy search checks its proposals (``speculative.py``)
        instead of stepping token by token; the same output.
    """

    prefix: Optional[Sequence[Sequence[int]]] = None
    use_cache: bool = True
    fast: bool = True
    precision: str = "fp32"
    compile: bool = False
    on_step: Optional[Callable[[Tensor], None]] = None
    modifiers: Sequence[Any] = ()  # (``modifiers.ScoreModifier``, which imports this module)
    draft: Optional[Any] = None  # (``speculative.Draft``)


def max_lengths(model, src: Tensor, decode: DecodeConfig) -> Tensor:
    """Per sentence, the most output tokens allowed (eos included): ``decode.max_len_a`` x the
    source length (real tokens with eos) + ``decode.max_len_b`` (the paper: input length + 50),
    capped by the model's positions (for a decoder-only model, those its start token and prompt
    leave)."""
    c = model.config
    # (B,) the source's positions: its tokens, or a recording's encoder positions
    real = src.ne(c.pad_id) if c.architecture == "decoder-only" else model.src_embed.real(src)
    src_len = real.sum(1).cpu()  # float64 on the CPU (MPS has none)
    limit = (decode.max_len_a * src_len.double() + decode.max_len_b).floor().long()
    # last input: start+prompt+L-1
    room = c.max_positions - (src.size(1) if c.architecture == "decoder-only" else 0)
    return limit.clamp(min=1, max=max(room, 1)).to(src.device)


def prefix_tensor(prefix: Optional[Sequence[Sequence[int]]], batch: int, pad_id: int,
                  device: torch.device | str = "cpu") -> Optional[Tensor]:
    """Per-sentence forced prefixes as ``(B, P)`` padded with -1 (no constraint), on ``device``."""
    if not prefix or not any(prefix):
        return None
    if len(prefix) != batch:
        raise ValueError(f"got {len(prefix)} prefixes for {batch} sentences")
    width = max(len(p) for p in prefix)
    out = torch.full((batch, width), -1, dtype=torch.long)
    for b, p in enumerate(prefix):
        out[b, : len(p)] = torch.as_tensor(list(p), dtype=torch.long)
    return out.to(device)


def banned_tokens(config, device: torch.device | str = "cpu") -> Tensor:
    """Tokens search never outputs: pad, bos and the decoder's start token (unless one is eos), as
    an index tensor on ``device`` (what ``constrain`` fills at every step)."""
    banned = sorted({config.pad_id, config.bos_id, config.start_id} - {config.eos_id})
    return torch.tensor(banned, dtype=torch.long, device=device)


def constrain(logprobs: Tensor, step: int | Tensor, config, max_len: Tensor, min_len: int,
              prefix: Optional[Tensor], per_row: int = 1, banned: Optional[Tensor] = None,
              may_end: bool = True) -> Tensor:
    """Apply the rules of search to ``logprobs (N, V)`` at output position ``step`` (0-based): an
    int for the whole batch, or a tensor ``(B,)`` of each sentence's own (a running search, whose
    sentences joined at different steps).

    Never pad or the start/bos tokens; no eos before ``min_len``; only eos at the last allowed
    position; only the prefix token while a forced prefix lasts (``prefix (B, P)``, -1 where a
    sentence has none). ``max_len`` and ``prefix`` are per sentence; each sentence owns ``per_row``
    consecutive rows (its beams). ``banned`` (``banned_tokens(config, device)``) may be passed in
    to save work per step, and ``may_end=False`` when no sentence can reach its last position yet.
    """
    neg_inf = float("-inf")
    logprobs.index_fill_(
        1, banned if banned is not None else banned_tokens(config, logprobs.device), neg_inf
    )
    if isinstance(step, Tensor):
        if min_len:
            logprobs[(step < min_len).repeat_interleave(per_row), config.eos_id] = neg_inf
    elif step < min_len:
        logprobs[:, config.eos_id] = neg_inf
    if may_end:  # some sentence may have to end now
        last = (max_len - 1 <= step).repeat_interleave(per_row)  # (N,) rows that must end now
        if last.any():
            eos = logprobs[last, config.eos_id].clone()
            logprobs[last] = neg_inf
            logprobs[last, config.eos_id] = eos
    forced = None if prefix is None else forced_tokens(prefix, step)
    if forced is not None:
        forced = forced.repeat_interleave(per_row)  # (N,)
        rows = (forced >= 0).nonzero().squeeze(1)
        if len(rows):
            keep = logprobs[rows, forced[rows]].clone()
            logprobs[rows] = neg_inf
            logprobs[rows, forced[rows]] = keep
    return logprobs


def forced_tokens(prefix: Tensor, step: int | Tensor) -> Optional[Tensor]:
    """Each sentence's forced token at ``step`` (its own, per sentence), -1 where none; None when
    every prefix is behind (``prefix (B, P)``, -1 past a sentence's own)."""
    width = prefix.size(1)
    if not isinstance(step, Tensor):
        return prefix[:, step] if step < width else None
    inside = step < width
    return prefix.gather(1, step.clamp(max=width - 1)[:, None]).squeeze(1).masked_fill(~inside, -1)
