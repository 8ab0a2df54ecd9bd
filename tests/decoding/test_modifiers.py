"""The score modifiers (``decoding/modifiers.py``): one interface through which everything that
changes a search's scores enters, a new one passed in without touching the loop, a batch-only one
refused by a running search by its name, and the ported ones scoring as before."""

from pathlib import Path

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, translate_ids
from transduce.decoding.brackets import BracketRules
from transduce.decoding.ctc import CTCPrefixScorer
from transduce.decoding.modifiers import (
    ForcedPrefix,
    LengthRules,
    SamplingFilters,
    ScoreModifier,
    Stateless,
    score_modifiers,
)
from transduce.decoding.running import RunningSearch, search_batch
from transduce.decoding.sampling import filter_logits

from ..conftest import tiny_config
from .test_running import sources

RUNNING = Path(__file__).resolve().parents[2] / "src" / "transduce" / "decoding" / "running.py"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(tiny_config()).eval()


class Ban(Stateless):
    """A modifier of the test's own: never the token ``banned`` (as a terminology or a
    vocabulary restriction would enter the search)."""

    name = "a ban"

    def __init__(self, banned: int, running: bool = True) -> None:
        self.banned, self.running, self.adjusted = banned, running, 0

    def adjust(self, logprobs, step):
        self.adjusted += 1
        logprobs[:, self.banned] = float("-inf")
        return logprobs


@pytest.mark.parametrize("beam", [1, 4])
def test_a_new_modifier_enters_through_the_options(model, beam):
    srcs = sources(6, seed=3)
    decode = DecodeConfig(beam=beam, max_len_b=10)
    free = translate_ids(model, srcs, decode)
    common = max({t for h in free for t in h[0].tokens}, key=lambda t: sum(
        h[0].tokens.count(t) for h in free))
    ban = Ban(common)
    banned = translate_ids(model, srcs, decode, modifiers=[ban])
    assert ban.adjusted > 0
    assert all(common not in h[0].tokens for h in banned)
    assert banned != free
    assert isinstance(ban, ScoreModifier)


def test_a_running_search_refuses_a_batch_only_modifier_by_name(model):
    search = RunningSearch(model, DecodeConfig(beam=2, max_len_b=6),
                           SearchOptions(modifiers=[Ban(5, running=False)]))
    with pytest.raises(ValueError, match="a ban is for a batch's sentences"):
        search.join([[4, 5, 6]], ["a"])
    running = RunningSearch(model, DecodeConfig(beam=2, max_len_b=6),
                            SearchOptions(modifiers=[Ban(5)]))
    running.join([[4, 5, 6]], ["a"])  # a modifier that keeps nothing per sentence is welcome
    running.step()
    running.join([[7, 8]], ["b"])


def test_the_ported_modifiers_declare_whether_they_run(model):
    assert LengthRules(model.config, 0, torch.device("cpu")).running
    assert not ForcedPrefix(torch.tensor([[4]])).running
    assert not CTCPrefixScorer(0.3, 2, 0, 2).running
    assert not BracketRules.running
    assert SamplingFilters(DecodeConfig(sampling=True, top_k=3)).running


def test_the_list_is_built_in_order_from_the_settings(model):
    cpu = torch.device("cpu")
    mine = Ban(7)
    built = score_modifiers(model.config, DecodeConfig(beam=1, sampling=True, top_p=0.9),
                            SearchOptions(prefix=[[4], []], modifiers=[mine]), 2, cpu)
    assert [type(m) for m in built] == [LengthRules, ForcedPrefix, Ban, SamplingFilters]
    plain = score_modifiers(model.config, DecodeConfig(beam=4), SearchOptions(), 3, cpu)
    assert [type(m) for m in plain] == [LengthRules]


def test_sampling_filters_then_the_draw_equal_the_filtered_draw(model):
    """The filters as a modifier and the temperature in the draw sample what filtering and drawing
    in one did: the same tokens for the same seed."""
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    decode = DecodeConfig(beam=1, sampling=True, temperature=0.7, top_k=5, top_p=0.8,
                          max_len_b=6, seed=3)
    got = search_batch(model, src, decode, generator=torch.Generator().manual_seed(3))
    logprobs = torch.randn(4, 40).log_softmax(-1)
    filtered = SamplingFilters(decode).adjust(logprobs.clone(), None)
    expected = filter_logits(logprobs, 0.7, 5, 0.8)
    assert torch.equal(filtered / 0.7, expected)
    assert all(len(h) == 1 and all(4 <= t < 40 for t in h[0].tokens) for h in got)


def test_the_loop_names_no_modifier():
    text = RUNNING.read_text(encoding="utf-8")
    for name in ("BracketRules", "CTCPrefixScorer", "constrain", "prefix_tensor", "LengthRules",
                 "ForcedPrefix", "SamplingFilters", "self.ctc", "self.rules", "self.prefix"):
        assert name not in text, f"running.py names {name}"
