"""T5's pretraining objective for an encoder-decoder on monolingual text: span corruption
(Raffel et al. 2020, §3.1.4).

A block of ``L`` tokens of the text stream loses ``round(L * noise_density)`` of them, in
``round(noise / mean_span)`` spans; each span becomes one sentinel in the input (the first span
``<extra_id_0>``, the next ``<extra_id_1>``, ...), and the target is each sentinel followed by the
tokens it replaced, then eos. The spans and the text between them are random partitions of the
noise and the rest into that many non-empty parts, alternating, text first (T5's
``random_spans_noise_mask``): how many tokens are dropped depends only on L, so every block of a
batch has inputs of one length and targets of one length, and no padding.
"""

from __future__ import annotations

import numpy as np
import torch

from .dataset import Batch

SENTINEL = "<extra_id_{}>"


def span_counts(length: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """``(noise tokens, spans)`` of a block of ``length`` tokens."""
    noise = min(max(round(length * noise_density), 1), length - 1)
    return noise, max(round(noise / mean_span), 1)


def _partition(items: int, parts: int, generator: np.random.Generator) -> np.ndarray:
    """``items`` split into ``parts`` non-empty runs at random: their lengths, in order."""
    cuts = np.sort(generator.permutation(np.arange(1, items))[: parts - 1])
    return np.diff(np.concatenate([[0], cuts, [items]]))


def noise_mask(length: int, noise_density: float, mean_span: float,
               generator: np.random.Generator) -> np.ndarray:
    """A boolean ``(length,)`` mask of the tokens to drop, in spans; the first token is kept."""
    noise, spans = span_counts(length, noise_density, mean_span)
    spans = min(spans, noise, length - noise)
    kept = _partition(length - noise, spans, generator)
    dropped = _partition(noise, spans, generator)
    runs = np.stack([kept, dropped], axis=1).reshape(-1)  # kept, dropped, kept, dropped, ...
    return np.repeat(np.tile([False, True], spans), runs)


def corrupt(row: np.ndarray, mask: np.ndarray, sentinels: list[int], eos_id: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """One block and its noise mask -> (input, target), both ending with eos."""
    starts = mask & ~np.concatenate([[False], mask[:-1]])  # the first token of each span
    ids = np.asarray(sentinels)[(np.cumsum(starts) - 1).clip(min=0)]  # (at starts: its sentinel)
    source = np.where(starts, ids, row)[~mask | starts]  # kept tokens, one sentinel a span
    # the target: the dropped tokens in order, each span's sentinel before its first
    first = starts[mask]
    place = np.arange(len(first)) + np.cumsum(first)  # (each sentinel so far shifts one place)
    target = np.empty(len(first) + int(first.sum()), dtype=row.dtype)
    target[place] = row[mask]
    target[place[first] - 1] = ids[starts]
    return np.append(source, eos_id), np.append(target, eos_id)


def collate_spans(stream, blocks, block_size: int, config, sentinels: list[int],
                  noise_density: float, mean_span: float, generator: np.random.Generator) -> Batch:
    """A batch of span corruption over the stream's ``blocks``: sources ``(B, S)``, decoder inputs
    and targets ``(B, T)``, all of one length (see the module docstring)."""
    pairs = []
    for i in blocks:
        row = stream.block(int(i), block_size, block_size)
        pairs.append(corrupt(row, noise_mask(len(row), noise_density, mean_span, generator),
                             sentinels, config.eos_id))
    src = torch.from_numpy(np.stack([s for s, _ in pairs]))
    tgt = torch.from_numpy(np.stack([t for _, t in pairs]))
    tgt_in = torch.cat([torch.full((len(pairs), 1), config.start_id), tgt[:, :-1]], dim=1)
    return Batch(src, tgt_in, tgt, torch.as_tensor(np.asarray(blocks, dtype=np.int64)),
                 config.pad_id)
