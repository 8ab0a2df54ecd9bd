"""The decoding states: each computes the model's own next-token distribution for every row,
through joins, beam reorders and sentences leaving; and each refuses what it cannot do."""

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.decoding import Ensemble, SearchOptions
from transduce.decoding.state import (
    EnsembleState,
    FastState,
    ModelState,
    PrefixState,
    decoding_state,
    kept_order,
)

from transduce.inference.running import RunningCache

from ..conftest import random_batch, tiny_config

BEAM = 2


def reference(model, src, history):
    """The full forward pass: ``src (B, S)``, ``history (B*K, t)`` -> log-probabilities ``(B*K,
    V)``."""
    with torch.no_grad():
        logits = model(src.repeat_interleave(BEAM, dim=0), history)[:, -1]
    return torch.log_softmax(logits.float(), dim=-1)


def drive(state, model, first, later, device, atol=1e-4):
    """Three sentences join and step; a beam reorder; the first sentence leaves; two more join
    (when the state is joinable: with room for 2 slots, so the running cache must make room),
    another reorder, and the first ones leave (the later ones stay, all started at one later slot);
    every step's log-probabilities against the full pass over the same rows' histories."""
    c = model.config
    g = torch.Generator().manual_seed(0)
    state.join(first, capacity=2 if later is not None else 8)
    src = first
    history = torch.full((first.size(0) * BEAM, 1), c.start_id, device=device)
    joined_at = [0] * first.size(0)
    for step in range(4):
        if step == 2 and later is not None:
            state.join(later, capacity=2)
            src = torch.cat([pad_to(src, later.size(1)), pad_to(later, src.size(1))])
            history = torch.cat(
                [
                    history,
                    torch.full((later.size(0) * BEAM, history.size(1)), c.pad_id, device=device),
                ]
            )
            history[-later.size(0) * BEAM :, -1] = c.start_id
            joined_at += [step] * later.size(0)
        tokens = history if state.reads_prefix else history[:, -1]
        got = state.logprobs(tokens)
        for n in range(src.size(0)):  # each sentence against its own history since it joined
            rows = slice(n * BEAM, (n + 1) * BEAM)
            own = history[rows, joined_at[n] :]
            want = reference(model, src[n : n + 1], own)
            assert torch.allclose(got[rows], want, atol=atol), f"step {step}, sentence {n}"
        chosen = torch.randint(4, c.vocab_size, (history.size(0), 1), generator=g).to(device)
        history = torch.cat([history, chosen], dim=1)
        if step in (0, 2):  # each sentence's second beam continues its first
            rows = torch.arange(history.size(0), device=device) // BEAM * BEAM
            state.reorder(rows)
            history = history[rows]
        leaving = None
        if step == 1 and src.size(0) > 1:  # the first sentence leaves
            leaving = [n == 0 for n in range(src.size(0))]
        if (
            step == 2 and later is not None
        ):  # the first ones leave: the later ones, from slot 2, stay
            leaving = [n < src.size(0) - later.size(0) for n in range(src.size(0))]
        if leaving is not None:
            keep = kept_order(leaving, state.fill_from_end)
            sentences = torch.tensor(keep, device=device)
            state.select(sentences)
            src = src[sentences]
            history = history[
                (sentences[:, None] * BEAM + torch.arange(BEAM, device=device)).view(-1)
            ]
            joined_at = [joined_at[i] for i in keep]


def pad_to(src, width):
    return torch.nn.functional.pad(src, (0, max(0, width - src.size(1))))


@pytest.mark.parametrize(
    "kind",
    [
        "fast-one",
        "fast-batch",
        "fast-joinable",
        "int8-joinable",
        "model",
        "model-joinable",
        "no-cache",
        "ensemble",
    ],
)
def test_every_state_computes_the_models_own_distribution(kind, device):
    torch.manual_seed(0)
    model = Transformer(tiny_config()).to(device).eval()
    first = random_batch(3, 6, model.config.vocab_size, device=device)[0]
    later = random_batch(
        2, 7, model.config.vocab_size, generator=torch.Generator().manual_seed(2), device=device
    )[0]
    joinable = kind.endswith("joinable")
    if kind == "ensemble":
        state = decoding_state(Ensemble([model, model]), BEAM, SearchOptions())
        assert isinstance(state, EnsembleState) and isinstance(state.members[0], FastState)
    elif kind.startswith("model"):
        state = decoding_state(model, BEAM, SearchOptions(fast=False), joinable=joinable)
        assert isinstance(state, ModelState)
    elif kind == "no-cache":
        state = decoding_state(model, BEAM, SearchOptions(use_cache=False))
        assert isinstance(state, PrefixState)
    else:
        precision = "int8" if kind.startswith("int8") else "fp32"
        if precision == "int8" and device != "cpu":
            pytest.skip("int8 decoding is CPU-only")
        state = decoding_state(model, BEAM, SearchOptions(precision=precision), joinable=joinable)
        assert isinstance(state, FastState)
    if kind == "fast-one":  # one sentence: the plain cache (a batch of several: the running cache)
        first = first[:1]
    # int8: the same distribution within the weights' and activations' quantization error
    drive(
        state,
        model,
        first,
        later if joinable else None,
        device,
        atol=0.15 if kind.startswith("int8") else 1e-4,
    )
    if isinstance(state, FastState):
        assert isinstance(state.cache, RunningCache) == (kind != "fast-one") == state.fill_from_end


def test_what_a_state_refuses(device):
    model = Transformer(tiny_config()).to(device).eval()
    src = random_batch(2, 5, model.config.vocab_size, device=device)[0]
    for options in (SearchOptions(), SearchOptions(fast=False), SearchOptions(use_cache=False)):
        state = decoding_state(model, 1, options)
        state.join(src, capacity=4)
        if not isinstance(state, ModelState):  # (the model's cohorts accept any join)
            with pytest.raises(ValueError, match="join once"):
                state.join(src, capacity=4)
    with pytest.raises(ValueError, match="running search needs the decoding cache"):
        decoding_state(model, 1, SearchOptions(use_cache=False), joinable=True)
    lm = Transformer(ModelConfig.preset("gpt-tiny", vocab_size=40)).to(device).eval()
    with pytest.raises(ValueError, match="running search needs the decoding cache"):
        decoding_state(lm, 1, SearchOptions(), joinable=True)
    with pytest.raises(ValueError, match="steps eagerly"):
        decoding_state(model, 1, SearchOptions(compile=True), joinable=True)


def test_kept_order():
    assert kept_order([False, True, False, False], fill_from_end=False) == [0, 2, 3]
    assert kept_order([False, True, False, False], fill_from_end=True) == [0, 3, 2]
    assert kept_order([True, False, True, False, False], fill_from_end=True) == [4, 1, 3]
    assert kept_order([False, False, True], fill_from_end=True) == [0, 1]
