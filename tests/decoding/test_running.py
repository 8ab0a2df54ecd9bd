"""The running search (continuous batching): whatever joins or leaves around a sentence, its
output is the one it gets searched alone."""

import random

import pytest

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import Ensemble, SearchOptions, translate_ids
from transduce.decoding.running import RunningSearch

from ..conftest import tiny_config

SEARCHES = {
    "greedy": DecodeConfig(beam=1, max_len_b=8),
    "beam3-nbest2": DecodeConfig(beam=3, nbest=2, max_len_b=8),
    "beam4-k_finished": DecodeConfig(beam=4, stop="k_finished", max_len_b=8, min_len=2),
}


def sources(n: int, seed: int = 1, vocab: int = 40) -> list[list[int]]:
    g = random.Random(seed)
    return [[g.randrange(4, vocab) for _ in range(g.randrange(1, 14))] for _ in range(n)]


def run_staggered(
    search: RunningSearch, srcs, seed: int = 2, drop_every: int = 0
) -> tuple[list, dict]:
    """Sentences join in groups of 1-3 at random steps (sometimes while nothing is in flight);
    returns every sentence's hypotheses and what happened (steps, compactions seen)."""
    g = random.Random(seed)
    out: list = [None] * len(srcs)
    nxt, step, events = 0, 0, {"max_in_flight": 0, "steps": 0}
    while nxt < len(srcs) or len(search):
        if nxt < len(srcs) and g.random() < 0.4:
            k = min(g.randrange(1, 4), len(srcs) - nxt)
            search.join(srcs[nxt : nxt + k], range(nxt, nxt + k))
            nxt += k
        for key, hyps in search.step():
            assert out[key] is None
            out[key] = hyps
        step += 1
        events["max_in_flight"] = max(events["max_in_flight"], len(search))
    events["steps"] = step
    return out, events


def assert_same(alone, running, tolerance=1e-4):
    for number, (a, b) in enumerate(zip(alone, running)):
        assert [h.tokens for h in a] == [h.tokens for h in b], f"sentence {number}"
        for x, y in zip(a, b):
            assert (
                abs(x.score - y.score) <= tolerance and abs(x.logprob - y.logprob) <= tolerance
            ), f"sentence {number}"


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi", "relative"])
@pytest.mark.parametrize("name", list(SEARCHES))
@pytest.mark.parametrize("fast", [True, False], ids=["fast-step", "model-decode"])
def test_each_sentence_equals_its_search_alone(positional, name, fast, device):
    model = Transformer(tiny_config(positional=positional)).to(device).eval()
    decode = SEARCHES[name]
    srcs = sources(24)
    alone = [translate_ids(model, [s], decode)[0] for s in srcs]
    running = RunningSearch(model, decode, SearchOptions(fast=fast))
    out, events = run_staggered(running, srcs)
    assert events["max_in_flight"] >= 4  # (sentences did share steps)
    assert_same(alone, out)


def test_the_slots_run_out_and_the_rows_move_to_the_front(device):
    model = Transformer(tiny_config()).to(device).eval()
    decode = DecodeConfig(beam=2, max_len_b=4)
    srcs = sources(60, seed=3)
    alone = [translate_ids(model, [s], decode)[0] for s in srcs]
    running = RunningSearch(model, decode)
    seen = []  # (slot written, capacity) at each step
    original = running.state.logprobs

    def watched(last):
        # (make_room runs first: the slot written is length - 1 after the step)
        out = original(last)
        seen.append((running.state.cache.length - 1, running.state.cache.kv.size(4)))
        return out

    running.state.logprobs = watched
    out, _ = run_staggered(running, srcs, seed=4)
    # written slot went back: compacted
    moved = sum(1 for (a, _), (b, _) in zip(seen, seen[1:]) if 0 < b < a)
    assert moved >= 3
    assert_same(alone, out)


def test_an_ensemble_runs_as_it_searches_alone(device):
    models = [
        Transformer(tiny_config(positional=p)).to(device).eval() for p in ("sinusoidal", "rope")
    ]
    ensemble = Ensemble(models)
    decode = DecodeConfig(beam=3, max_len_b=6)
    srcs = sources(12, seed=5)
    alone = [translate_ids(ensemble, [s], decode)[0] for s in srcs]
    out, _ = run_staggered(RunningSearch(ensemble, decode), srcs)
    assert_same(alone, out)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_int8_and_bf16_steps_run_as_they_search_alone(precision):
    model = Transformer(tiny_config()).eval()
    decode = DecodeConfig(beam=2, max_len_b=6)
    srcs = sources(10, seed=6)
    alone = [translate_ids(model, [s], decode, precision=precision)[0] for s in srcs]
    out, _ = run_staggered(RunningSearch(model, decode, SearchOptions(precision=precision)), srcs)
    # the rows' products run at other batch sizes than alone: low precision rounds differently
    for a, b in zip(alone, out):
        assert a[0].tokens == b[0].tokens or abs(a[0].score - b[0].score) < 0.05


def test_dropped_sentences_leave_and_the_others_are_unchanged(device):
    model = Transformer(tiny_config()).to(device).eval()
    decode = DecodeConfig(beam=2, max_len_b=8)
    srcs = sources(8, seed=7)
    alone = [translate_ids(model, [s], decode)[0] for s in srcs]
    running = RunningSearch(model, decode)
    running.join(srcs[:4], range(4))
    running.step()
    running.drop({1, 2})
    running.join(srcs[4:], range(4, 8))
    out = {}
    while len(running):
        out.update(running.step())
    assert set(out) == {0, 3, 4, 5, 6, 7}
    assert_same([alone[i] for i in sorted(out)], [out[i] for i in sorted(out)])
    running.drop({0})  # (nothing in flight: nothing to do)
    assert len(running) == 0 and running.step() == []


def test_a_running_search_does_not_sample():
    with pytest.raises(ValueError, match="does not sample"):
        RunningSearch(Transformer(tiny_config()).eval(), DecodeConfig(sampling=True, beam=1))


@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
@pytest.mark.parametrize("beam", [1, 4], ids=["greedy", "beam4"])
def test_on_a_trained_model_each_sentence_equals_its_search_alone(reverse_run, precision, beam):
    """The trained reversal model ends its sentences on eos, and beam search stops them by the score
    bound, well before the length limit (which the untrained models above reach): the same tokens
    and scores as alone, at every precision of the fast step."""
    import torch

    from transduce import load
    from transduce.decoding.driver import search_precision
    from transduce.runtime import autocast

    translator = load(reverse_run / "run", device="cpu")
    from transduce.data.corpus import read_lines

    lines = list(read_lines(reverse_run / "raw" / "valid.en"))[:24]
    srcs = translator.encode(lines)
    decode = DecodeConfig(beam=beam)  # the defaults: the paper's limit of source length + 50
    alone = [translate_ids(translator.model, [s], decode, precision=precision)[0] for s in srcs]
    engine, context = search_precision(precision)
    with torch.inference_mode(), autocast(torch.device("cpu"), context):
        out, events = run_staggered(RunningSearch(translator.model, decode,
                                                  SearchOptions(precision=engine)), srcs)
    assert events["max_in_flight"] >= 4
    # ended by eos, not the limit
    assert all(len(h[0].tokens) < len(s) + 10 for h, s in zip(alone, srcs))
    right = sum(translator.tokenizer.decode_tgt(h[0].tokens) == " ".join(reversed(line.split()))
                for h, line in zip(alone, lines))
    assert right >= 0.6 * len(lines)  # (a trained model: it does the task)
    # int8 quantizes the activations with one scale per product, so a row's rounding depends on
    # the rows beside it: alone and in company its log-probability differs by tenths, not less
    assert_same(alone, out, tolerance={"fp32": 1e-4, "bf16": 2e-2, "int8": 0.3}[precision])
