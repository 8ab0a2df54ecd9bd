"""Search strategies, each working on any ``transduce.Transformer`` through ``encode`` and the
incremental ``decode`` step: greedy, beam search, sampling; forced-decoding scores; and the driver
that batches sources for them (``translate_ids``). An ``Ensemble`` of models searches as one. A
``RunningSearch`` takes new sentences and gives back finished ones at every step (continuous
batching). ``BracketRules`` constrains a search to linearized trees (a parser's)."""

from .beam import beam_search, length_penalty, merge_finished, top_candidates
from .brackets import BracketRules, BracketVocabulary
from .common import Hypothesis, SearchOptions
from .driver import search, translate_ids
from .ensemble import Ensemble
from .greedy import greedy_search, sample
from .running import RunningSearch
from .sampling import filter_logits
from .scoring import forced_attention, score_targets
from .speculative import Draft, shallow_copy

__all__ = [
    "Ensemble",
    "RunningSearch",
    "beam_search",
    "greedy_search",
    "sample",
    "search",
    "score_targets",
    "forced_attention",
    "translate_ids",
    "Hypothesis",
    "SearchOptions",
    "length_penalty",
    "merge_finished",
    "top_candidates",
    "filter_logits",
    "BracketRules",
    "BracketVocabulary",
    "Draft",
    "shallow_copy",
]
