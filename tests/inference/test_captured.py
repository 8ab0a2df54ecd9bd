"""The captured (``torch.compile``) step: the same outputs as the eager step, compiled once per
shape class."""

import copy
from dataclasses import replace

import pytest
import torch

from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, beam_search, greedy_search
from transduce.inference import forget
from transduce.runtime import compile_choice


def test_compiled_step_equals_the_eager_step(reverser, device):
    """The captured step (static shapes: the position a tensor, the whole capacity attended under a
    mask; CUDA graphs on a GPU) gives the eager outputs, greedy and beam."""
    model, src = reverser
    model = copy.deepcopy(model).to(device)
    limits, eager, compiled = (
        DecodeConfig(max_len_a=0, max_len_b=8),
        SearchOptions(),
        SearchOptions(compile=True),
    )
    rows = src[:5].to(device)
    assert [h.tokens for h in greedy_search(model, rows, limits, compiled)] == \
        [h.tokens for h in greedy_search(model, rows, limits, eager)]
    a = beam_search(model, rows, replace(limits, beam=3, nbest=2), compiled)
    b = beam_search(model, rows, replace(limits, beam=3, nbest=2), eager)
    assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]


def test_compile_auto_stays_eager_where_it_would_not_pay():
    """auto is eager on every device (the captured step measured slower on the CPUs and on an H200,
    compile_choice says how); on compiles, off never."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert compile_choice("auto", cpu) is False and compile_choice("auto", cuda) is False
    assert compile_choice("auto", cuda, "int8") is False
    assert compile_choice("on", cpu) is True and compile_choice("on", cuda) is True
    assert compile_choice("off", cuda) is False and compile_choice(True, cpu) is True


def test_compile_on_refuses_the_cpus_bf16_step():
    from transduce.errors import TransduceError

    with pytest.raises(TransduceError, match="bf16"):
        compile_choice("on", torch.device("cpu"), "bf16")
    assert compile_choice("on", torch.device("cuda"), "bf16") is True


def test_compiled_step_compiles_once_per_batch_shape(reverser, monkeypatch):
    """The captured step is compiled once for a whole search (not once per step or per length):
    counted with dynamo's test backend in place of inductor."""
    from torch._dynamo.testing import CompileCounter

    model, src = reverser
    counter = CompileCounter()
    real_compile = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: real_compile(fn, backend=counter, dynamic=False)
    )
    forget(model)
    torch._dynamo.reset()
    limits, options = DecodeConfig(max_len_a=0, max_len_b=8, min_len=7), SearchOptions(compile=True)
    greedy_search(model, src[:3], limits, options)  # 8 steps
    assert counter.frame_count == 1
    # a new batch shape (3 x 2 rows): one more
    beam_search(model, src[:3], replace(limits, beam=2), options)
    assert counter.frame_count == 2
    # one sentence: its column of tokens is contiguous whatever its stride, which grows every step
    greedy_search(model, src[:1], limits, options)
    assert counter.frame_count == 3
    torch._dynamo.reset()


def test_a_captured_search_encodes_with_the_models_own_pass(reverser, monkeypatch):
    """``translate --compile on`` compiles ``model.encode`` as well as the step: a captured search
    must encode through it, not through the ``FastEncoder`` snapshot (which an eager search uses).
    The capture is replaced by the function itself (no compilation)."""
    model, src = reverser
    model = copy.deepcopy(model)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    calls = []
    own = model.encode
    object.__setattr__(model, "encode", lambda src: calls.append(len(src)) or own(src))
    captured = greedy_search(
        model, src[:3], DecodeConfig(max_len_a=0, max_len_b=6), SearchOptions(compile=True)
    )
    assert calls == [3]
    eager = greedy_search(model, src[:3], DecodeConfig(max_len_a=0, max_len_b=6))
    assert calls == [3] and [h.tokens for h in captured] == [h.tokens for h in eager]


def test_compiled_search_pads_shrinking_batches_to_powers_of_two(reverser, monkeypatch):
    """As sentences finish, beam search shrinks the batch; the captured step keeps every tensor at
    the next power of two of the sentences left (zero rows nobody reads), so a search compiles once
    per class (8, 4, 2, 1 sentences), not once per count, and gives the eager outputs. The capture
    is replaced by a recorder of the batch shapes it is called with."""
    from transduce.inference.cache import padded_sentences

    assert [padded_sentences(n) for n in (1, 2, 3, 4, 5, 7, 8, 9)] == [1, 2, 4, 4, 8, 8, 8, 16]
    model, src = reverser
    lengths = (src != 0).sum(1)
    rows = torch.cat([(lengths == n).nonzero()[:2, 0] for n in sorted(set(lengths.tolist()))])[:7]
    # sources of several lengths: they end at different steps
    assert len(set(lengths[rows].tolist())) >= 3
    seen, widths = [], set()

    def recorder(fn, **kwargs):
        def step(tokens, position, kv, cross_k, cross_v, cross_bias):
            seen.append(tokens.size(0))
            widths.add((kv.size(4), cross_k[0].size(-1), cross_v[0].size(1), cross_bias.size(-1)))
            return fn(tokens, position, kv, cross_k, cross_v, cross_bias)
        return step

    monkeypatch.setattr(torch, "compile", recorder)
    forget(model)
    beam = 3
    compiled = beam_search(
        model,
        src[rows],
        DecodeConfig(beam=beam, nbest=2, max_len_a=1.0, max_len_b=2),
        SearchOptions(compile=True),
    )
    eager = beam_search(
        model, src[rows], DecodeConfig(beam=beam, nbest=2, max_len_a=1.0, max_len_b=2)
    )
    assert [[h.tokens for h in hs] for hs in compiled] == [[h.tokens for h in hs] for hs in eager]
    classes = {n // beam for n in seen}
    assert len(classes) >= 2 and classes <= {8, 4, 2, 1}, classes  # it shrank, and only by classes
    # capacity and source length are classes too: powers of two (the added positions masked)
    assert all(c >= 16 and s >= 8 and c & (c - 1) == 0 and s & (s - 1) == 0 and s == v == b
               for c, s, v, b in widths), widths


def test_compiling_the_step_leaves_dynamos_limits_alone(reverser, monkeypatch):
    """The captured step needs more recompilations than dynamo's default (one per shape class); it
    raises the limit around its own calls only, never for the rest of the user's process. The
    capture is replaced by a recorder of the limit in force when the step is called."""
    import torch._dynamo

    model, src = reverser
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    before, seen = getattr(config, name), []

    def recorder(fn, **kwargs):
        def step(*args):
            seen.append(getattr(config, name))
            return fn(*args)
        return step

    monkeypatch.setattr(torch, "compile", recorder)
    forget(model)
    assert greedy_search(
        model, src[:2], DecodeConfig(max_len_a=0, max_len_b=4), SearchOptions(compile=True)
    )
    assert seen and min(seen) >= 64 and getattr(config, name) == before
