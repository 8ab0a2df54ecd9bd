"""sacreBLEU and chrF with their signatures, so that figures can be compared with others'."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import TransduceError


@dataclass
class Evaluation:
    """What every facade's ``evaluate`` returns, whatever the task: its metric's name (``bleu``,
    ``f1``, ``cer``, ``accuracy``) and value, the inputs scored, every score by name (the metric's
    too: ``evaluation["chrf"]``) and the outputs the model made, in input order."""

    metric: str
    value: float
    count: int
    scores: dict[str, Any] = field(default_factory=dict)
    outputs: list = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.scores[key]

    def to_dict(self) -> dict[str, Any]:
        """The scores as JSON takes them, with the metric's name and the count (not the
        outputs)."""
        return {"metric": self.metric, **self.scores, "count": self.count}


def score(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False,
          tokenize: str | None = None) -> dict:
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against one reference each.

    Returns ``{"bleu", "bleu_signature", "chrf", "chrf_signature", "sentences"}``.
    """
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise TransduceError(f"{len(hypotheses)} hypotheses but {len(references)} references; "
                             "they must match line by line")
    bleu = BLEU(lowercase=lowercase, tokenize=tokenize) if tokenize else BLEU(lowercase=lowercase)
    chrf = CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": round(b.score, 2), "bleu_signature": str(bleu.get_signature()),
            "chrf": round(c.score, 2), "chrf_signature": str(chrf.get_signature()),
            "sentences": len(hypotheses)}


PAPER_BLEU_NOTE = ("tokenized BLEU as the paper's numbers were computed (Moses tokenizer, "
                   "compound splitting for German, multi-bleu): NOT comparable with sacreBLEU")


def moses_tokenizer():
    """sacremoses' ``MosesTokenizer`` class, or a message saying how to install it."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise TransduceError("--paper-bleu needs the Moses tokenizer: pip install "
                             "'transduce[paper]' (sacremoses)") from None
    return MosesTokenizer


def paper_bleu(hypotheses: Sequence[str], references: Sequence[str], language: str) -> float:
    """BLEU the way the paper's EN-DE and EN-FR figures were computed (tensor2tensor's
    ``get_ende_bleu.sh``, fairseq's ``compound_split_bleu.sh``): both sides tokenized with the Moses
    tokenizer for ``language``; for German, each hyphen between two non-spaces becomes its own token
    (``Rad-Rennen`` -> ``Rad ##AT##-##AT## Rennen``), so that compounds count as several words; then
    case-sensitive corpus BLEU on those tokens without smoothing (multi-bleu.perl). Higher than
    sacreBLEU and not comparable with it; for comparing with the paper's tables only.

    The Moses tokenizer is ``sacremoses`` (the ``paper`` extra), imported only here.
    """
    import re

    from sacrebleu.metrics import BLEU

    MosesTokenizer = moses_tokenizer()

    if len(hypotheses) != len(references):
        raise TransduceError(f"{len(hypotheses)} hypotheses but {len(references)} references; "
                             "they must match line by line")
    moses = MosesTokenizer(lang=language)

    def tokens(line: str) -> str:
        text = moses.tokenize(line, return_str=True)
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text) if language == "de" else text

    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return round(
        bleu.corpus_score([tokens(h) for h in hypotheses], [[tokens(r) for r in references]]).score,
        2,
    )


def edit_distance(hypothesis: Sequence, reference: Sequence) -> int:
    """The fewest substitutions, insertions and deletions that turn ``hypothesis`` into
    ``reference`` (Levenshtein), by the usual dynamic programme, one row at a time."""
    previous = list(range(len(reference) + 1))
    for i, h in enumerate(hypothesis, start=1):
        current = [i]
        for j, r in enumerate(reference, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (h != r)))
        previous = current
    return previous[-1]


def error_rate(hypotheses: Sequence[str], references: Sequence[str], unit: str = "word") -> dict:
    """Speech recognition's error rates over a test set: the edit distance between each
    hypothesis and its reference, summed over the set, divided by the references' total length.

    ``unit="word"`` (WER): words split on whitespace. ``unit="char"`` (CER): characters, spaces
    between words included, runs of whitespace counted as one space and the ends stripped. Both can
    exceed 1 (a hypothesis longer than its reference). Written here rather than taken from jiwer:
    it is these few lines, and every definition is in them. Returns ``{"rate", "errors",
    "length"}``.
    """
    if unit not in ("word", "char"):
        raise ValueError(f"unit {unit!r}: choose word or char")
    if len(hypotheses) != len(references):
        raise TransduceError(f"{len(hypotheses)} hypotheses for {len(references)} references; "
                             "they must be aligned one to one")
    errors = length = 0
    for hypothesis, reference in zip(hypotheses, references):
        h, r = hypothesis.split(), reference.split()
        if unit == "char":
            h, r = list(" ".join(h)), list(" ".join(r))
        errors += edit_distance(h, r)
        length += len(r)
    if not length:
        raise TransduceError("the references are empty: an error rate needs at least one "
                             f"{unit} to compare with")
    return {"rate": errors / length, "errors": errors, "length": length}
