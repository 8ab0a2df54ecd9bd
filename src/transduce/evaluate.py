"""sacreBLEU and chrF with their signatures, so that figures can be compared with others'."""

from __future__ import annotations

from typing import Sequence

from .errors import TransduceError


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
