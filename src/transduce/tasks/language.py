"""The language models: a decoder-only model (GPT) predicts the next token, an encoder-only model
(BERT) the masked ones; both train on a token stream (``prepare --monolingual``) and are chosen by
validation perplexity."""

from __future__ import annotations

from dataclasses import replace

from .base import Metric, Task, tokens_model


def _monolingual(meta) -> bool:
    return meta.get("kind") == "monolingual"


def _architecture(name: str):
    return lambda config, info: tokens_model(config, name)


PERPLEXITY = Metric("ppl", "perplexity", higher=False)

CAUSAL = Task(
    name="causal-lm",
    what="a decoder-only language model",
    model=_architecture("decoder-only"),
    data=_monolingual,
    data_kind="stream",
    metric=PERPLEXITY,
    validation="language",
    shown=(("ppl", "ppl", False),),
    counted=("tokens", "tokens"),
    facade="LanguageModel",
    verb="generate",
    next=('transduce generate {run} --prompt "..."',),
    preset="gpt-small",
    holds="monolingual text",
    commands=("generate", "average", "export", "info"),
    family=lambda config, info: "GPT",
    flags=("beam", "alpha", "min_len", "sampling", "temperature", "top_k", "top_p", "seed"),
    prepare="transduce prepare --monolingual --train FILE --out DATA",
)

MASKED = replace(
    CAUSAL,
    name="masked-lm",
    what="an encoder-only language model",
    model=_architecture("encoder-only"),
    counted=("tokens", "tokens masked"),
    verb="fill-mask",
    next=('transduce fill-mask {run} "... <mask> ..."',),
    commands=("fill-mask", "average", "export", "info"),
    flags=(),
    family=lambda config, info: "BERT",
    preset="bert-small",
)
