"""``DecodeConfig``: how to search (§6.1), each option declared once for the API, the CLI and the
server."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .fields import ConfigMixin, at_least, check_numbers, choice, option

LENGTH_PENALTIES = ("gnmt", "power")
STOPS = ("bound", "k_finished")


@dataclass(frozen=True)
class DecodeConfig(ConfigMixin):
    """How to search (§6.1), from the command line to ``beam_search`` in one typed object.

    Each field is declared once, with its help and choices (``fields.option``): ``translate``,
    ``evaluate`` and ``serve`` generate their flags from these declarations
    (``cli.common.add_decode_options``), and the searches take the config whole. Ranking:
    logprob / lp, lp = ((5+|Y|)/6)^alpha ("gnmt", the paper's) or |Y|^alpha ("power", HF and
    CTranslate2); see ``decoding.beam`` for ``stop``.
    """

    beam: int = option(4, "beam size (1 = greedy; paper: 4)", low=1, high=1024)
    alpha: float = option(0.6, "length penalty exponent (paper: 0.6)", low=0, high=100)
    length_penalty: str = option("gnmt", "gnmt: ((5+|Y|)/6)^alpha (paper); power: |Y|^alpha (HF, "
                                         "CTranslate2)",
                                  LENGTH_PENALTIES)
    stop: str = option("bound", "bound: stop when no live beam can win (exact); k_finished: at K "
                                "finished "
                                 "(fairseq)", STOPS)
    max_len_a: float = option(1.0, "max output length = a * source length + b", low=0, high=1000)
    max_len_b: int = option(50, "see --max-len-a (paper: input length + 50)", low=0, high=1_000_000)
    min_len: int = option(0, "forbid the end of the sentence before this many "
                             "tokens", low=0, high=1_000_000)
    nbest: int = option(1, "output the n best hypotheses with their scores", low=1, high=1024)
    sampling: bool = option(False, "sample instead of searching")
    temperature: float = option(1.0, "sampling: divide the logits by this (> 0)", low=0, high=1000)
    top_k: int = option(0, "sampling: only the k most likely tokens (0: all)", low=0)
    top_p: float = option(1.0, "sampling: the smallest set of tokens with this probability "
                               "mass", low=0, high=1)
    seed: int = option(0, "seed of the sampler", low=0)
    ctc_weight: float = option(0.0, "a speech model with a CTC head: joint CTC/attention search, "
                                    "(1 - w) x the decoder's score + w x CTC's prefix score (0: "
                                    "the decoder's alone)", low=0, high=1)
    max_tokens: int = option(4096, "source tokens per batch", low=1, high=10**9)
    max_sentences: int = option(128, "sentences per batch", low=1, high=1_000_000)
    strict: bool = option(False, "refuse lines longer than the model's maximum instead of "
                                 "truncating them")

    def __post_init__(self) -> None:
        check_numbers(self)
        for f in fields(self):
            if "choices" in f.metadata:
                choice(f.name, getattr(self, f.name), f.metadata["choices"])
        at_least(self, 1, "beam", "nbest", "max_tokens", "max_sentences")
        at_least(self, 0, "alpha", "max_len_a", "max_len_b", "min_len", "top_k")
        if self.nbest > self.beam and not self.sampling:
            raise ValueError(f"nbest={self.nbest} is more than beam={self.beam}; a beam search "
                             "keeps at most beam hypotheses: raise --beam or lower --nbest")
        if self.sampling and self.nbest > 1:
            raise ValueError("nbest > 1 is not supported with sampling; run the sampler several "
                             "times (--seed)")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature} (for the most "
                             "likely token, use --beam 1 without --sampling)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.ctc_weight and self.sampling:
            raise ValueError("ctc_weight is for search (greedy or beam), not sampling")
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise ValueError("max_len_a and max_len_b are both 0: no output token would be allowed")

    @property
    def greedy(self) -> bool:
        """One hypothesis, the most likely token at each step: what beam 1 computes, faster."""
        return not self.sampling and self.beam == 1 and self.nbest == 1
