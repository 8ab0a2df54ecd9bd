"""How to search: the rules that tie the search's options together, each a message."""

from __future__ import annotations

import re

import pytest

from transduce.config import DecodeConfig


def test_defaults_are_the_paper_s_search():
    cfg = DecodeConfig()
    assert (cfg.beam, cfg.alpha, cfg.length_penalty, cfg.max_len_b) == (4, 0.6, "gnmt", 50)
    assert not cfg.greedy


@pytest.mark.parametrize("kwargs, greedy", [
    (dict(beam=1), True), (dict(beam=2), False), (dict(beam=1, sampling=True), False),
])
def test_greedy_is_beam_one_without_sampling(kwargs, greedy):
    assert DecodeConfig(**kwargs).greedy is greedy


@pytest.mark.parametrize("kwargs, words", [
    (dict(nbest=5, beam=4), "nbest=5 is more than beam=4"),
    (dict(nbest=2, beam=2, sampling=True), "nbest > 1 is not supported with sampling"),
    (dict(temperature=0.0), "temperature must be positive"),
    (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(ctc_weight=0.3, sampling=True), "ctc_weight is for search"),
    (dict(max_len_a=0.0, max_len_b=0), "no output token would be allowed"),
    (dict(length_penalty="gnm"), "did you mean 'gnmt'"),
    (dict(stop="never"), "choose one of bound, k_finished"),
    (dict(beam=0), "beam must be at least 1"),
    (dict(top_p=1.5), "top_p must be at most 1"),
])
def test_each_rule_is_a_message_that_says_what_to_change(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        DecodeConfig(**kwargs)


def test_sampling_may_keep_one_hypothesis_of_a_wider_beam():
    assert DecodeConfig(sampling=True, beam=1, nbest=1, top_k=5, top_p=0.9).top_k == 5
