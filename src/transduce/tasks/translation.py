"""Translation: an encoder-decoder from token ids to token ids, trained on pairs of sentences
(``prepare --src --tgt``) and chosen by validation BLEU (T5's pretraining on spans makes
translation models too: ``spans``)."""

from __future__ import annotations

from dataclasses import fields

from ..config import DecodeConfig
from .base import Metric, Task, encoder_decoder_family, tokens_model

# every search option but the joint CTC search of speech models
FLAGS = tuple(f.name for f in fields(DecodeConfig) if f.name != "ctc_weight")


def _model(config, info) -> bool:
    return (tokens_model(config, "encoder-decoder") and not info.get("trees")
            and not info.get("sentinel_ids"))


def _data(meta) -> bool:
    return meta.get("kind", "parallel") == "parallel" and not meta.get("trees")


TASK = Task(
    name="translation",
    what="a translation model",
    model=_model,
    data=_data,
    data_kind="pairs",
    metric=Metric("bleu", "BLEU", tie="chrf"),
    validation="translation",
    shown=(("ppl", "ppl", False), ("bleu", "BLEU", False), ("chrf", "chrF", False)),
    counted=("sentences", "sentences"),
    facade="Translator",
    verb="translate",
    commands=("translate", "evaluate", "serve", "attention", "export", "average", "info"),
    preset="base",
    holds="parallel text",
    prepare="transduce prepare --src SRC --tgt TGT --train-prefix PREFIX --out DATA",
    flags=FLAGS,
    paper_search=True,
    family=encoder_decoder_family,
)
