"""Constituency parsing: an encoder-decoder from a sentence's words to its linearized tree,
trained on a treebank (``prepare --trees``); chosen by labelled bracket F1 on the validation
trees, parsed with the constrained search."""

from __future__ import annotations

from .base import Metric, Task, encoder_decoder_family, tokens_model

# The paper's search for parsing (section 6.3): beam 21, alpha 0.3, output up to input + 300.
PARSING = {"beam": 21, "alpha": 0.3, "max_len_a": 1.0, "max_len_b": 300}


def _model(config, info) -> bool:
    return tokens_model(config, "encoder-decoder") and bool(info.get("trees"))


def _data(meta) -> bool:
    return meta.get("kind", "parallel") == "parallel" and bool(meta.get("trees"))


TASK = Task(
    name="parsing",
    what="a parser",
    model=_model,
    data=_data,
    data_kind="pairs",
    metric=Metric("f1", "F1"),
    validation="parsing",
    shown=(("ppl", "ppl", False), ("f1", "F1", False)),
    counted=("sentences", "sentences"),
    facade="Parser",
    verb="parse",
    commands=("parse", "parseval", "attention", "average", "info"),
    preset="base",
    holds="a treebank",
    prepare="transduce prepare --trees --train-prefix PREFIX --out DATA",
    search=PARSING,
    # the best tree of each sentence, whole: no sampling, n-best lists, minimum length or truncation
    family=encoder_decoder_family,
    flags=("beam", "alpha", "length_penalty", "stop", "max_len_a", "max_len_b", "max_tokens",
           "max_sentences"),
    losses=("tags",),  # with the model's tag_weight (none without a tagging head)
)
