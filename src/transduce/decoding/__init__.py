"""Search strategies, each working on any ``transduce.Transformer`` through ``encode`` and the
incremental ``decode`` step: greedy, beam search, sampling; and forced-decoding scores."""

from .beam import beam_search, length_penalty, merge_finished, top_candidates
from .common import Hypothesis, SearchOptions
from .greedy import greedy_search
from .sampling import filter_logits, sample
from .scoring import score_targets

__all__ = ["beam_search", "greedy_search", "sample", "score_targets", "Hypothesis", "SearchOptions",
           "length_penalty", "merge_finished", "top_candidates", "filter_logits"]
