"""T5's span corruption: an encoder-decoder pretrained on monolingual text prepared with sentinels
(``prepare --monolingual --sentinels``), its spans replaced by sentinels in the source and written
out in the target. The model it makes is a translation model (it fills in spans with ``translate``,
and is fine-tuned on pairs); its training validates the objective's perplexity."""

from __future__ import annotations

from . import translation
from .base import Task, tokens_model
from .language import PERPLEXITY


def _model(config, info) -> bool:
    return tokens_model(config, "encoder-decoder") and bool(info.get("sentinel_ids"))


def _data(meta) -> bool:
    return meta.get("kind") == "monolingual" and bool(meta.get("sentinel_ids"))


TASK = Task(
    name="span-corruption",
    what="a translation model pretrained on spans (T5)",
    model=_model,
    data=_data,
    data_kind="stream",
    metric=PERPLEXITY,
    validation="language",
    shown=(("ppl", "ppl", False),),
    counted=("tokens", "tokens"),
    facade="Translator",
    verb="translate",
    commands=("translate", "evaluate", "serve", "attention", "export", "average", "info"),
    flags=translation.FLAGS,
    paper_search=True,
    family=lambda config, info: "T5",
    preset="t5-small",
    holds="monolingual text with sentinels",
    prepare="transduce prepare --monolingual --sentinels 100 --train FILE --out DATA",
)
