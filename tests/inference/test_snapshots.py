"""Snapshots follow the model's weights: updated, replaced, loaded, or made under inference mode."""


import torch
from torch import nn

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, beam_search, greedy_search
from transduce.inference import fast_decoder

from ..conftest import random_batch, tiny_config


def test_snapshot_follows_the_weights():
    """``fast_decoder`` reuses its snapshot while the weights stay, and rebuilds it after an
    update."""
    model = Transformer(tiny_config()).eval()
    first = fast_decoder(model)
    assert fast_decoder(model) is first
    src, _ = random_batch(2, 5, 40)
    opts = DecodeConfig(max_len_a=1.0, max_len_b=5)
    with torch.no_grad():
        for p in model.decoder.parameters():
            p.mul_(-1.5)  # an in-place update, as an optimizer step
    second = fast_decoder(model)
    assert second is not first
    assert [h.tokens for h in greedy_search(model, src, opts)] == [
        h.tokens
        for h in greedy_search(
            model, src, DecodeConfig(max_len_a=1.0, max_len_b=5), SearchOptions(fast=False)
        )
    ]
    assert fast_decoder(model) is second
    # replaced, not updated: a new module, then new parameters loaded by assignment (the old
    # parameter objects, which the snapshot was checked against, are untouched); under inference
    # mode too, where tensors keep no version counter and only the replacement itself can be seen
    with torch.inference_mode():
        frozen = Transformer(tiny_config()).eval()
        before = fast_decoder(frozen)
        w1 = frozen.decoder[0].ffn.w1
        frozen.decoder[0].ffn.w1 = nn.Linear(w1.in_features, w1.out_features)
        replaced = fast_decoder(frozen)
        assert replaced is not before
        frozen.load_state_dict(
            {k: torch.randn_like(v) for k, v in frozen.state_dict().items()}, assign=True
        )
        assert fast_decoder(frozen) is not replaced
    old = model.decoder[0].ffn.w1
    model.decoder[0].ffn.w1 = nn.Linear(old.in_features, old.out_features)
    third = fast_decoder(model)
    assert third is not second
    state = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}
    model.load_state_dict(state, assign=True)
    assert fast_decoder(model) is not third
    assert [h.tokens for h in greedy_search(model, src, opts)] == [
        h.tokens
        for h in greedy_search(
            model, src, DecodeConfig(max_len_a=1.0, max_len_b=5), SearchOptions(fast=False)
        )
    ]


def test_a_model_made_under_inference_mode_decodes():
    """Inference tensors keep no version counter: the fast step's cache of decoders must not ask for
    it."""
    with torch.inference_mode():
        model = Transformer(tiny_config()).eval()
        src, _ = random_batch(3, 6, 40)
        assert len(greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=4))) == 3
        assert len(beam_search(model, src, DecodeConfig(beam=2, max_len_a=1.0, max_len_b=4))) == 3
