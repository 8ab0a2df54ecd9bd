"""The search driver: which search runs, in what precision, batched by a budget, results in input
order whatever the batches."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import driver
from transduce.decoding.driver import search_precision, translate_ids

from ..conftest import tiny_config


@pytest.mark.parametrize("precision, engine, context", [
    ("fp32", "fp32", "fp32"), ("bf16", "bf16", "bf16"), ("fp16", "fp32", "fp16"),
    ("int8", "int8", "fp32"),
])
def test_a_precision_is_a_fast_step_and_an_autocast_context(precision, engine, context):
    assert search_precision(precision) == (engine, context)


@pytest.mark.parametrize("kwargs, chosen", [
    (dict(beam=1), "greedy_search"), (dict(beam=3), "beam_search"),
    (dict(beam=1, sampling=True), "sample"),
])
def test_search_runs_the_search_the_config_asks_for(kwargs, chosen, monkeypatch):
    called = []
    for name in ("greedy_search", "beam_search", "sample"):
        monkeypatch.setattr(driver, name, lambda *a, name=name, **k: called.append(name) or [])
    driver.search(None, None, DecodeConfig(**kwargs))
    assert called == [chosen]


def test_results_come_back_in_input_order_whatever_the_batches(monkeypatch):
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    sources = [[5] * n for n in (3, 9, 1, 6, 6, 2)]
    decode = DecodeConfig(beam=2, max_len_a=0, max_len_b=5)
    batches = []
    search = driver.search
    monkeypatch.setattr(driver, "search",
                        lambda model, src, *a: batches.append(src.size(0)) or search(model, src,
                                                                                     *a))
    one = translate_ids(model, sources, decode)
    assert batches == [6]
    batches.clear()
    small = translate_ids(model, sources, replace(decode, max_tokens=10, max_sentences=2))
    assert len(batches) > 2 and max(batches) <= 2
    assert [[h.tokens for h in n] for n in one] == [[h.tokens for h in n] for n in small]
    # each result is its own source's: the same source alone gives it
    alone = translate_ids(model, [sources[1]], decode)[0]
    assert [h.tokens for h in alone] == [h.tokens for h in one[1]]


def test_a_seeded_sampler_gives_the_same_outputs_on_every_call():
    model = Transformer(tiny_config()).eval()
    decode = DecodeConfig(sampling=True, beam=1, seed=7, max_len_a=0, max_len_b=6)
    first = translate_ids(model, [[5, 6], [7]], decode)
    assert [h[0].tokens for h in first] == [h[0].tokens for h in translate_ids(
        model, [[5, 6], [7]], decode)]
