"""Translation: an encoder-decoder from token ids to token ids, trained on pairs of sentences
(``prepare --src --tgt``), or on monolingual text with T5's span corruption (``prepare
--monolingual --sentinels``: spans are translation data); chosen by validation BLEU."""

from __future__ import annotations

from .base import Metric, Task


def _model(config, info) -> bool:
    return (config.input == "tokens" and config.architecture == "encoder-decoder"
            and not config.classes and not info.get("trees"))


def _data(meta) -> bool:
    kind = meta.get("kind", "parallel")
    return (kind == "parallel" and not meta.get("trees")
            or kind == "monolingual" and bool(meta.get("sentinel_ids")))


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
    prepare=("transduce prepare --src SRC --tgt TGT --train-prefix PREFIX --out DATA (or, to "
             "pretrain as T5 does, --monolingual --sentinels 100)"),
)
