"""Word alignments from the cross-attention: which source word each target word was produced
looking at, in the Pharaoh (Moses) format ``i-j`` (source word i, target word j, both from 0).

The rule: one teacher-forced pass over the source and the translation (``forced_attention``);
the weights of one decoder layer's encoder-decoder attention, its heads averaged (or one head);
row j of that matrix is the step that produced target piece j. Pieces are merged into words at
SentencePiece's word-start mark (a word is what whitespace separates in the text): a target word's
row is the mean of its pieces' rows, a source word's column the sum of its pieces' columns (the
eos column dropped). Each target word is linked to the source word it attends to most. The layer:
the last by default, which linked copied words best on every model measured (docs/inference.md,
"Word alignments"; Garg et al. (2019) found the second to last best in their 6-layer models, so
``layer`` and ``head`` choose another).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from .scoring import forced_attention

WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word


def default_layer(decoder_layers: int) -> int:
    """The decoder layer whose cross-attention aligns by default (from 0): the last."""
    return decoder_layers - 1


def check_rule(config, layer: Optional[int], head: Optional[int]) -> None:
    """A ValueError naming the range when ``layer`` or ``head`` is not one of the model's."""
    if layer is not None and not 0 <= layer < config.decoder_layers:
        raise ValueError(f"alignment layer {layer}: the model's decoder layers are 0 to "
                         f"{config.decoder_layers - 1}")
    if head is not None and not 0 <= head < config.n_heads:
        raise ValueError(f"alignment head {head}: the model's heads are 0 to "
                         f"{config.n_heads - 1}")


def words_of(pieces: Sequence[str]) -> list[int]:
    """Each piece's word index: a new word at every piece that begins with the word-start mark
    (the first piece always begins one)."""
    index, words = -1, []
    for n, piece in enumerate(pieces):
        if n == 0 or piece.startswith(WORD_START):
            index += 1
        words.append(index)
    return words


def word_links(weights: Tensor, src_words: Sequence[int], tgt_words: Sequence[int]
               ) -> list[tuple[int, int]]:
    """``weights (T, S)`` over target and source pieces -> each target word's ``(source word,
    target word)`` link, sorted by source then target word."""
    if not len(tgt_words) or not len(src_words):
        return []
    weights = weights.float()
    src_index = torch.tensor(src_words)
    tgt_index = torch.tensor(tgt_words)
    by_source = torch.zeros(weights.size(0), src_index.max() + 1).index_add_(1, src_index, weights)
    pieces = torch.zeros(tgt_index.max() + 1).index_add_(0, tgt_index, torch.ones(len(tgt_words)))
    by_word = torch.zeros(len(pieces), by_source.size(1)).index_add_(0, tgt_index, by_source)
    best = (by_word / pieces[:, None]).argmax(1).tolist()
    return sorted((s, t) for t, s in enumerate(best))


def pharaoh(links: Sequence[tuple[int, int]]) -> str:
    """Links as Pharaoh's ``i-j`` pairs separated by spaces."""
    return " ".join(f"{s}-{t}" for s, t in links)


def align_ids(model, tokenizer, sources: Sequence[Sequence[int]],
              targets: Sequence[Sequence[int]], layer: Optional[int] = None,
              head: Optional[int] = None, precision: str = "fp32", skip: int = 0
              ) -> list[list[tuple[int, int]]]:
    """Each pair's word links (source ids without eos, target ids without start and eos).
    ``skip``: how many first pieces of every source are not the user's words (a task prefix,
    ``prefix_pieces``): their columns are dropped and the words counted after them."""
    links: list[list[tuple[int, int]]] = [[] for _ in sources]
    todo = [i for i, target in enumerate(targets) if len(target) and len(sources[i])]
    if not todo:
        return links
    layer = default_layer(model.config.decoder_layers) if layer is None else layer
    attention = forced_attention(model, [sources[i] for i in todo], [targets[i] for i in todo],
                                 precision)
    cross = attention.cross[layer]  # (B, H, T + 1, S + 1 + padding)
    cross = cross.mean(1) if head is None else cross[:, head]
    for row, i in enumerate(todo):
        links[i] = sentence_links(cross[row], tokenizer, sources[i], targets[i], skip)
    return links


def sentence_links(weights: Tensor, tokenizer, source: Sequence[int], target: Sequence[int],
                   skip: int = 0) -> list[tuple[int, int]]:
    """One pair's word links from its cross-attention ``weights (rows, columns)``, rows from the
    first target piece and columns from the first source piece (eos and padding beyond them)."""
    src, tgt = list(source)[skip:], list(target)
    weights = torch.as_tensor(weights)[: len(tgt), skip: skip + len(src)]
    return word_links(weights, words_of(tokenizer.src_pieces(src)),
                      words_of(tokenizer.tgt_pieces(tgt)))


def prefix_pieces(translator) -> int:
    """How many pieces the translator's task prefix puts before every source (0 for none)."""
    prefix = translator.task_prefix
    return len(translator.tokenizer.encode_src([prefix])[0]) if prefix else 0


def align_lines(translator, lines: Sequence[str], decode, layer: Optional[int] = None,
                head: Optional[int] = None, prefixes=None, first_line: int = 1,
                constraints=None) -> list[tuple[str, str]]:
    """Each line's best translation and its word alignment in Pharaoh's format (``""`` for an
    empty line), through ``translator``'s search (a ``Translator``)."""
    found = translator.search_lines(lines, decode, prefixes=prefixes, first_line=first_line,
                                    constraints=constraints)
    targets = [hyps[0].tokens if hyps else [] for _, hyps in found]
    links = align_ids(translator.model, translator.tokenizer, [ids for ids, _ in found], targets,
                      layer, head, translator.precision, prefix_pieces(translator))
    return [(translator.tokenizer.decode_tgt(target) if target else "", pharaoh(pairs))
            for target, pairs in zip(targets, links)]
