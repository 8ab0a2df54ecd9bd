"""The fast decode step (``model/fast.py``) against the model's own ``decode``: the same logits for
every architecture option, the same search outputs, the captured (compiled) step, int8."""

import copy

import pytest
import torch
from torch import nn

from transduce import Transformer
from transduce.data.dataset import pad_sequences
from transduce.decoding import SearchOptions, beam_search, greedy_search, sample
from transduce.model.fast import FastDecoder, fast_decoder
from transduce.translator import compile_choice

from ..conftest import random_batch, tiny_config

ARCHITECTURES = [
    {},  # the paper's: post-LN, sinusoidal, ReLU, no tying
    {"positional": "sinusoidal_concat", "tying": "all"},
    {"positional": "learned", "tying": "decoder", "output_bias": True, "head_dim": 24},  # heads wider than D/h
    {"positional": "rope", "norm_position": "pre", "head_dim": 10},
    {"positional": "alibi", "norm_type": "rmsnorm", "activation": "swiglu", "attention_scale": "none"},
    {"positional": "none", "norm_position": "pre", "activation": "gelu", "scale_embedding": False},
]


def _ids(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items()) or "paper"


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
@pytest.mark.parametrize("batch, beam", [(1, 1), (3, 1), (2, 3), (20, 1)])
def test_fast_step_logits_equal_the_models_decode(arch, batch, beam, device):
    """Step by step, with beam reorders in between: one row (the split single-row product), a few
    rows, beams sharing cross keys, and more than 16 rows (the other operand layouts)."""
    model = Transformer(tiny_config(**arch)).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))).to(device) * 0.1)
    src, _ = random_batch(batch, 7, 40, device=device)
    fast = FastDecoder(model)
    with torch.no_grad():
        memory = model.encode(src)
        reference = model.start_decoding(src, memory, beam=beam)
        cache = fast.start(src, memory, beam, capacity=12)
        g = torch.Generator().manual_seed(3)
        tokens = torch.full((batch * beam,), model.config.start_id, device=device)
        for step in range(12):
            expected = model.decode(tokens[:, None], reference)[:, -1]
            got = fast.step(tokens, cache)
            torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
            rows = torch.randint(0, batch * beam, (batch * beam,), generator=g).to(device)
            reference.reorder(rows)
            cache.reorder(rows)
            tokens = torch.randint(4, 40, (batch * beam,), generator=g).to(device)
    assert cache.length == 12


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
def test_fast_encoder_equals_the_models_encode(arch, device):
    """The search's encoder pass (``FastEncoder``) against ``Transformer.encode``: one sentence, a
    few padded ones, more than 16 rows of products; and search uses it."""
    from transduce.model.fast_encoder import FastEncoder

    model = Transformer(tiny_config(**arch)).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))).to(device) * 0.1)
    fast = FastEncoder(model)
    for batch in (1, 3, 20):
        src, lengths = random_batch(batch, 7, 40, device=device)
        assert batch == 1 or (lengths < 7).any()  # padded sources among them
        with torch.no_grad():
            torch.testing.assert_close(fast(src), model.encode(src), atol=2e-5, rtol=1e-4)
    _forget_fast_snapshots(model)
    greedy_search(model, src, SearchOptions(1.0, 2))
    assert ("encoder", "fp32") in model._fast_snapshots.built


def test_fast_encoder_int8_and_autocast():
    """int8: the snapshot quantizes the encoder as ``quantize_encoder`` does, and an encoder that
    ``quantize_encoder`` already converted keeps its own int8 layers; under autocast search encodes
    with the model's own pass (autocast's precision per operation), not the snapshot."""
    from transduce.model.fast import quantize_encoder
    from transduce.model.fast_encoder import FastEncoder, encode

    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(3, 7, 40)
    with torch.no_grad():
        exact = model.encode(src)
        low = FastEncoder(model, "int8")(src)
        error = (low - exact).abs().max() / exact.abs().max()
        assert 1e-4 < error < 0.05, error  # int8 rounding (fp32 would differ by ~1e-7), and only that
        quantized = copy.deepcopy(model)
        quantize_encoder(quantized)
        torch.testing.assert_close(FastEncoder(quantized)(src), quantized.encode(src), atol=2e-5, rtol=1e-4)
        _forget_fast_snapshots(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(encode(model, src), model.encode(src))
        assert not hasattr(model, "_fast_snapshots")
        torch.testing.assert_close(encode(model, src), exact, atol=2e-5, rtol=1e-4)
        assert ("encoder", "fp32") in model._fast_snapshots.built


def test_fast_step_refuses_a_position_past_its_capacity():
    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(1, 4, 40)
    fast = FastDecoder(model)
    cache = fast.start(src, model.encode(src), 1, capacity=2)
    token = torch.tensor([model.config.start_id])
    fast.step(token, cache)
    fast.step(token, cache)
    with pytest.raises(ValueError, match="does not fit"):
        fast.step(token, cache)
    with pytest.raises(ValueError, match="inference"):
        FastDecoder(model.train())


@pytest.mark.parametrize("arch", ARCHITECTURES[::2], ids=_ids)
def test_searches_give_the_same_outputs_fast_or_not(arch, device):
    """Greedy, beam (sentences finishing at different steps, so the cache drops sentences) and
    sampling: the same tokens with the fast step as with the model's own decode."""
    model = Transformer(tiny_config(**arch)).to(device).eval()
    src, _ = random_batch(6, 9, 40, device=device)
    fast, slow = SearchOptions(1.0, 6), SearchOptions(1.0, 6, fast=False)
    assert [h.tokens for h in greedy_search(model, src, fast)] == [h.tokens for h in greedy_search(model, src, slow)]
    for beam in (2, 4):
        a = beam_search(model, src, beam, options=fast, nbest=2)
        b = beam_search(model, src, beam, options=slow, nbest=2)
        assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]
        for x, y in zip(a, b):
            assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-4)
    g1, g2 = (torch.Generator(device=device).manual_seed(5) for _ in range(2))
    assert [h.tokens for h in sample(model, src, fast, generator=g1)] == \
        [h.tokens for h in sample(model, src, slow, generator=g2)]


def test_snapshot_follows_the_weights():
    """``fast_decoder`` reuses its snapshot while the weights stay, and rebuilds it after an update."""
    model = Transformer(tiny_config()).eval()
    first = fast_decoder(model)
    assert fast_decoder(model) is first
    src, _ = random_batch(2, 5, 40)
    opts = SearchOptions(1.0, 5)
    with torch.no_grad():
        for p in model.decoder.parameters():
            p.mul_(-1.5)  # an in-place update, as an optimizer step
    second = fast_decoder(model)
    assert second is not first
    assert [h.tokens for h in greedy_search(model, src, opts)] == \
        [h.tokens for h in greedy_search(model, src, SearchOptions(1.0, 5, fast=False))]
    assert fast_decoder(model) is second
    # replaced, not updated: a new module, then new parameters loaded by assignment (the old
    # parameter objects, which the snapshot was checked against, are untouched)
    old = model.decoder[0].ffn.w1
    model.decoder[0].ffn.w1 = nn.Linear(old.in_features, old.out_features)
    third = fast_decoder(model)
    assert third is not second
    state = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}
    model.load_state_dict(state, assign=True)
    assert fast_decoder(model) is not third
    assert [h.tokens for h in greedy_search(model, src, opts)] == \
        [h.tokens for h in greedy_search(model, src, SearchOptions(1.0, 5, fast=False))]


@pytest.fixture(scope="module")
def reverser():
    """A tiny model trained (full batch, bounded by steps) until it reverses 90% of its training
    sequences: confident outputs, as a trained model's. Returns the model and 60 of its sources."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Transformer(tiny_config(vocab_size=20, d_model=32, d_ff=64))
    seqs = [torch.randint(4, 20, (int(torch.randint(3, 7, (1,), generator=g)),), generator=g).tolist()
            for _ in range(200)]
    src = pad_sequences(seqs, 0, suffix=2)
    tgt_in = pad_sequences([s[::-1] for s in seqs], 0, prefix=1)
    tgt_out = pad_sequences([s[::-1] for s in seqs], 0, suffix=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(1, 401):
        model.train()
        loss = nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            model.eval()
            outputs = [h.tokens for h in greedy_search(model, src[:60], SearchOptions(0, 8))]
            if sum(o == t[::-1] for o, t in zip(outputs, seqs)) >= 54:
                return model, src[:60]
    pytest.fail("the reverser did not learn its task within the step budget")


def _forget_fast_snapshots(model) -> None:
    """Drop the fast snapshots (decoders, encoders) cached on the (module-scoped) model by other tests."""
    if hasattr(model, "_fast_snapshots"):
        object.__delattr__(model, "_fast_snapshots")


def _int8_everywhere(monkeypatch, kernel: str | None = None) -> None:
    """Every product int8 (the tiny models' products are small enough that fp32 would win them
    all when measured), with one of Int8Linear's kernels if given."""
    from transduce.model.fast import Dense, Int8Linear

    monkeypatch.setattr(Dense, "candidates", lambda self, rows: ["int8"] if self.int8 is not None else ["rows"])
    if kernel is not None:
        monkeypatch.setattr(Int8Linear, "_faster", lambda self, x: kernel)


@pytest.mark.parametrize("kernel", ["fbgemm", "onednn"])
def test_int8_agrees_with_fp32_on_a_trained_model(reverser, monkeypatch, kernel):
    """int8 weights change the numbers a little and the outputs rarely: at least 90% of the beam
    outputs of a trained model stay identical (the stated threshold), on both searches and with
    both int8 kernels."""
    if kernel not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this PyTorch build has no {kernel} engine")
    _int8_everywhere(monkeypatch, kernel)
    model, src = reverser
    _forget_fast_snapshots(model)
    fp32 = SearchOptions(0, 8)
    int8 = SearchOptions(0, 8, precision="int8")
    for search in (lambda o: [h.tokens for h in greedy_search(model, src, o)],
                   lambda o: [h[0].tokens for h in beam_search(model, src, 4, options=o)]):
        a, b = search(fp32), search(int8)
        assert sum(x == y for x, y in zip(a, b)) >= 0.9 * len(a)
    quantized = fast_decoder(model, "int8")
    assert quantized.output.int8 and all(layer.w1.int8 for layer in quantized.layers)
    # and the logits stay close: a few percent of their range (3.5% here)
    with torch.no_grad():
        memory = model.encode(src)
        logits = []
        for decoder in (fast_decoder(model), quantized):
            cache = decoder.start(src, memory, 1, capacity=2)
            logits.append(decoder.step(torch.full((len(src),), 1), cache))
    error = (logits[1] - logits[0]).abs().max() / logits[0].abs().max()
    assert error < 0.08, f"int8 logits differ from fp32 by {error:.3f} of their range"


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
def test_int8_runs_on_every_architecture(arch, monkeypatch):
    _int8_everywhere(monkeypatch)
    model = Transformer(tiny_config(**arch)).eval()
    src, _ = random_batch(3, 6, 40)
    for beam in (1, 3):
        out = beam_search(model, src, beam, options=SearchOptions(1.0, 4, precision="int8"))
        assert len(out) == 3 and all(hs for hs in out)


def test_int8_products_are_measured_against_fp32_and_between_kernels():
    """An int8 product is one more candidate of a Dense's measured choice (fp32 wins small products
    at a few rows, where int8's fixed cost per call dominates); an Int8Linear chooses between its
    kernels the same way. Every choice gives the product within int8's rounding; fp32 exactly."""
    from transduce.model.fast import Dense, Int8Linear

    weight, bias = torch.randn(96, 64), torch.randn(96)
    dense = Dense(weight, bias, int8=True)
    assert set(dense.int8.packs) >= {"fbgemm"}
    for rows in (1, 5, 40):
        x = torch.randn(rows, 64)
        exact = x @ weight.t() + bias
        assert dense.layout(x) in {"int8", "rows", "columns", "blocks"}
        assert dense.int8.kernels == {} or set(dense.int8.kernels.values()) <= set(dense.int8.packs)
        for kernel, packed in dense.int8.packs.items():
            dense.int8.kernels = {b: kernel for b in range(3)}
            dense.layouts = {b: "int8" for b in range(3)}
            low = dense(x)
            error = (low - exact).abs().max() / exact.abs().max()
            assert 0 < error < 0.03, f"{kernel}: {error}"  # int8 rounding, and only that
        dense.layouts = {b: "rows" for b in range(3)}
        torch.testing.assert_close(dense(x), exact, rtol=1e-5, atol=1e-4)
    layer = Int8Linear(weight, bias)
    y = layer(torch.randn(2, 3, 64))  # any leading shape, as nn.Linear
    assert y.shape == (2, 3, 96) and set(layer.kernels) == {1}


def test_compiled_step_equals_the_eager_step(reverser, device):
    """The captured step (static shapes: the position a tensor, the whole capacity attended under a
    mask; CUDA graphs on a GPU) gives the eager outputs, greedy and beam."""
    model, src = reverser
    model = copy.deepcopy(model).to(device)
    eager, compiled = SearchOptions(0, 8), SearchOptions(0, 8, compile=True)
    rows = src[:5].to(device)
    assert [h.tokens for h in greedy_search(model, rows, compiled)] == [h.tokens for h in greedy_search(model, rows, eager)]
    a = beam_search(model, rows, 3, options=compiled, nbest=2)
    b = beam_search(model, rows, 3, options=eager, nbest=2)
    assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]


def test_compile_auto_stays_eager_where_it_would_not_pay():
    """auto is eager on every device (the captured step measured slower on the CPUs and on an H200,
    compile_choice says how); on compiles, off never."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert compile_choice("auto", cpu) is False and compile_choice("auto", cuda) is False
    assert compile_choice("auto", cuda, "int8") is False
    assert compile_choice("on", cpu) is True and compile_choice("on", cuda) is True
    assert compile_choice("off", cuda) is False and compile_choice(True, cpu) is True


@pytest.mark.parametrize("arch", ARCHITECTURES[::2], ids=_ids)
def test_bf16_autocast_decodes_like_the_module_path(arch):
    """Under bf16 autocast (training's validation on bf16 CPUs) the fast step runs and agrees with
    the model's own decode on nearly every sentence (both round to bf16, at different places)."""
    model = Transformer(tiny_config(**arch)).eval()
    src, _ = random_batch(20, 6, 40)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        fast = greedy_search(model, src, SearchOptions(1.0, 5))
        slow = greedy_search(model, src, SearchOptions(1.0, 5, fast=False))
        assert beam_search(model, src[:2], 3, options=SearchOptions(1.0, 5))[0]
    assert sum(a.tokens == b.tokens for a, b in zip(fast, slow)) >= 18


def test_bf16_weights_agree_with_fp32_on_a_trained_model(reverser, monkeypatch):
    """precision="bf16" on the CPU: the step's products use bf16 copies of the weights (every
    product here: the threshold is lowered to 1 multiply-add, the tiny model's are all below the
    real one) and keep at least 90% of the trained model's outputs, greedy and beam."""
    import transduce.model.fast as fast

    monkeypatch.setattr(fast, "BF16_MIN_MACS", 1)
    model, src = reverser
    decoder = FastDecoder(model, "bf16")
    assert decoder.bf16 and decoder.output.uses_bf16(1) and all(layer.w2.uses_bf16(1) for layer in decoder.layers)
    for search in (lambda o: [h.tokens for h in greedy_search(model, src, o)],
                   lambda o: [h[0].tokens for h in beam_search(model, src, 4, options=o)]):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):  # as translate_ids runs it
            low = search(SearchOptions(0, 8, precision="bf16"))
        exact = search(SearchOptions(0, 8))
        assert sum(x == y for x, y in zip(exact, low)) >= 0.9 * len(exact)
    with torch.no_grad():  # the logits stay within a few percent of their range
        memory = model.encode(src)
        logits = []
        for d in (fast_decoder(model), decoder):
            logits.append(d.step(torch.full((len(src),), 1), d.start(src, memory, 1, capacity=2)))
    error = (logits[1] - logits[0]).abs().max() / logits[0].abs().max()
    assert logits[1].dtype == torch.float32 and error < 0.05, f"bf16 logits differ by {error:.3f} of their range"


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
def test_bf16_weights_run_on_every_architecture(arch, monkeypatch):
    import transduce.model.fast as fast

    monkeypatch.setattr(fast, "BF16_MIN_MACS", 1)
    model = Transformer(tiny_config(**arch)).eval()
    src, _ = random_batch(3, 6, 40)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        for beam in (1, 3):
            out = beam_search(model, src, beam, options=SearchOptions(1.0, 4, precision="bf16"))
            assert len(out) == 3 and all(hs for hs in out)
        greedy = greedy_search(model, src, SearchOptions(1.0, 4, precision="bf16"))
    assert fast_decoder(model, "bf16").bf16 and len(greedy) == 3


def test_bf16_weights_only_where_they_pay():
    """The bf16 copy is used from BF16_MIN_MACS multiply-adds per product: a one-row product of a
    small matrix stays fp32 (bf16's fixed cost per call would dominate), many rows switch."""
    from transduce.model.fast import BF16_MIN_MACS, Dense

    weight = torch.randn(1024, 256)
    dense = Dense(weight, torch.randn(1024), bf16=True)
    rows = -(-BF16_MIN_MACS // weight.numel())
    assert not dense.uses_bf16(1) and not dense.uses_bf16(rows - 1) and dense.uses_bf16(rows)
    x = torch.randn(rows, 256)
    assert dense(x).dtype == torch.float32
    torch.testing.assert_close(dense(x), x @ dense.weight.t() + dense.bias, rtol=0.02, atol=0.3)
    assert Dense(weight, None).low is None  # fp32: no copy


def test_compile_on_refuses_the_cpus_bf16_step():
    from transduce.errors import TransduceError

    with pytest.raises(TransduceError, match="bf16"):
        compile_choice("on", torch.device("cpu"), "bf16")
    assert compile_choice("on", torch.device("cuda"), "bf16") is True


def test_translate_ids_gives_bf16_to_the_fast_step(reverser):
    """``--precision bf16`` reaches the step as its own precision (bf16 weights), not only as the
    autocast around the search; int8 likewise, fp32 stays exact."""
    from transduce.config import DecodeConfig
    from transduce.translator import translate_ids

    model, src = reverser
    sources = [[int(t) for t in row if t > 2] for row in src[:4]]
    _forget_fast_snapshots(model)
    for precision in ("bf16", "int8", "fp32"):
        out = translate_ids(model, sources, DecodeConfig(beam=2, max_len_a=0, max_len_b=8), precision=precision)
        assert len(out) == 4 and all(out)
    built = {key[0] for key in model._fast_snapshots.built}
    assert {"bf16", "int8", "fp32"} <= built and fast_decoder(model, "bf16").bf16


@pytest.mark.parametrize("rows", [1, 4, 16, 40])
@pytest.mark.parametrize("bias", [True, False])
def test_every_dense_layout_gives_the_same_product(rows, bias):
    """The layouts a Dense chooses between by timing (rows, columns, blocks) all compute x W^T + b;
    the choice is made once per class of row counts and kept."""
    from transduce.model.fast import Dense, _bucket

    torch.manual_seed(0)
    weight, b = torch.randn(96, 40), torch.randn(96) if bias else None
    x = torch.randn(rows, 40)
    expected = x @ weight.t() + (b if bias else 0)
    dense = Dense(weight, b)
    chosen = dense.layout(x)
    assert chosen in (("rows", "columns", "blocks") if rows <= 16 else ("rows", "columns"))
    assert dense.layouts == {_bucket(rows): chosen}
    torch.testing.assert_close(dense(x), expected, rtol=1e-5, atol=1e-5)
    for layout in ("rows", "columns", "blocks", "linear"):
        torch.testing.assert_close(dense._multiply(x, layout), expected, rtol=1e-5, atol=1e-5)
    assert dense.layout(torch.randn(rows, 40)) == chosen  # measured once, then kept


def test_compiled_step_compiles_once_per_batch_shape(reverser, monkeypatch):
    """The captured step is compiled once for a whole search (not once per step or per length):
    counted with dynamo's test backend in place of inductor."""
    from torch._dynamo.testing import CompileCounter

    model, src = reverser
    counter = CompileCounter()
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real_compile(fn, backend=counter, dynamic=False))
    _forget_fast_snapshots(model)
    torch._dynamo.reset()
    options = SearchOptions(0, 8, min_len=7, compile=True)
    greedy_search(model, src[:3], options)  # 8 steps
    assert counter.frame_count == 1
    beam_search(model, src[:3], 2, options=options)  # a new batch shape (3 x 2 rows): one more
    assert counter.frame_count == 2
    # one sentence: its column of tokens is contiguous whatever its stride, which grows every step
    greedy_search(model, src[:1], options)
    assert counter.frame_count == 3
    torch._dynamo.reset()


def test_a_captured_search_encodes_with_the_models_own_pass(reverser, monkeypatch):
    """``translate --compile on`` compiles ``model.encode`` as well as the step: a captured search must
    encode through it, not through the ``FastEncoder`` snapshot (which an eager search uses). The
    capture is replaced by the function itself (no compilation)."""
    model, src = reverser
    model = copy.deepcopy(model)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    calls = []
    own = model.encode
    object.__setattr__(model, "encode", lambda src: calls.append(len(src)) or own(src))
    captured = greedy_search(model, src[:3], SearchOptions(0, 6, compile=True))
    assert calls == [3]
    eager = greedy_search(model, src[:3], SearchOptions(0, 6))
    assert calls == [3] and [h.tokens for h in captured] == [h.tokens for h in eager]


def test_compiled_search_pads_shrinking_batches_to_powers_of_two(reverser, monkeypatch):
    """As sentences finish, beam search shrinks the batch; the captured step keeps every tensor at
    the next power of two of the sentences left (zero rows nobody reads), so a search compiles once
    per class (8, 4, 2, 1 sentences), not once per count, and gives the eager outputs. The capture
    is replaced by a recorder of the batch shapes it is called with."""
    from transduce.model.fast import padded_sentences

    assert [padded_sentences(n) for n in (1, 2, 3, 4, 5, 7, 8, 9)] == [1, 2, 4, 4, 8, 8, 8, 16]
    model, src = reverser
    lengths = (src != 0).sum(1)
    rows = torch.cat([(lengths == n).nonzero()[:2, 0] for n in sorted(set(lengths.tolist()))])[:7]
    assert len(set(lengths[rows].tolist())) >= 3  # sources of several lengths: they end at different steps
    seen, widths = [], set()

    def recorder(fn, **kwargs):
        def step(tokens, position, kv, cross_k, cross_v, cross_bias):
            seen.append(tokens.size(0))
            widths.add((kv.size(4), cross_k[0].size(-1), cross_v[0].size(1), cross_bias.size(-1)))
            return fn(tokens, position, kv, cross_k, cross_v, cross_bias)
        return step

    monkeypatch.setattr(torch, "compile", recorder)
    _forget_fast_snapshots(model)
    beam = 3
    compiled = beam_search(model, src[rows], beam, options=SearchOptions(1.0, 2, compile=True), nbest=2)
    eager = beam_search(model, src[rows], beam, options=SearchOptions(1.0, 2), nbest=2)
    assert [[h.tokens for h in hs] for hs in compiled] == [[h.tokens for h in hs] for hs in eager]
    classes = {n // beam for n in seen}
    assert len(classes) >= 2 and classes <= {8, 4, 2, 1}, classes  # it shrank, and only by classes
    # capacity and source length are classes too: powers of two (the added positions masked)
    assert all(c >= 16 and s >= 8 and c & (c - 1) == 0 and s & (s - 1) == 0 and s == v == b
               for c, s, v, b in widths), widths


def test_a_model_made_under_inference_mode_decodes():
    """Inference tensors keep no version counter: the fast step's cache of decoders must not ask for it."""
    with torch.inference_mode():
        model = Transformer(tiny_config()).eval()
        src, _ = random_batch(3, 6, 40)
        assert len(greedy_search(model, src, SearchOptions(1.0, 4))) == 3
        assert len(beam_search(model, src, 2, options=SearchOptions(1.0, 4))) == 3


def test_the_fastest_call_survives_a_burst_on_a_busy_machine(monkeypatch):
    """Measured choices (layouts, int8 kernels) time candidates in interleaved rounds and keep each
    one's shortest call: another program's burst during one call of the fastest candidate does not
    hand the choice to a slower one (a clock the test drives; no real timing)."""
    import transduce.model.fast as fast

    clock = [0.0]
    monkeypatch.setattr(fast.time, "perf_counter", lambda: clock[0])
    costs = {"quick": [1.0, 50.0, 1.0, 1.0, 1.0, 1.0], "steady": [2.0] * 6}  # quick's 1st timed call: a burst

    def call(name):
        def run():
            clock[0] += costs[name].pop(0) if costs[name] else 0.0
        return run

    assert fast._fastest_call({"quick": call("quick"), "steady": call("steady")}) == "quick"


def test_int8_lets_fp32_compete_only_while_the_decoder_stays_in_cache(monkeypatch):
    """A product's timing reads its weight from cache: true through a whole step for a small
    decoder, not for a large one (whose int8 weights, 4x smaller, then win in the step although
    fp32 wins the product's own timing). Over INT8_FLOAT_MAX_BYTES every product is int8."""
    import transduce.model.fast as fast

    model = Transformer(tiny_config()).eval()
    x = torch.randn(1, model.config.d_model)
    small = fast.FastDecoder(model, "int8")
    assert all(d.float_candidates for layer in small.layers for d in layer.denses()) and small.output.float_candidates
    monkeypatch.setattr(fast, "INT8_FLOAT_MAX_BYTES", 1000)
    large = fast.FastDecoder(model, "int8")
    denses = [large.output, *(d for layer in large.layers for d in layer.denses())]
    assert not any(d.float_candidates for d in denses)
    assert all(d.layout(x) == "int8" for d in denses if d.weight.size(1) == x.size(1))


def test_greedy_drops_finished_sentences_and_keeps_their_outputs(reverser, monkeypatch):
    """Greedy and sampling drop a sentence's row once it ends (the rest of the batch steps on
    without it) and give what the full batch gives; with on_step (a caller following every row)
    the rows stay. The step is wrapped to record its batch sizes."""
    model, src = reverser
    lengths = (src != 0).sum(1)
    rows = torch.cat([(lengths == n).nonzero()[:3, 0] for n in sorted(set(lengths.tolist()))])
    sizes = []
    original = FastDecoder.step

    def recording(self, tokens, cache):
        sizes.append(tokens.size(0))
        return original(self, tokens, cache)

    monkeypatch.setattr(FastDecoder, "step", recording)
    shrinking = greedy_search(model, src[rows], SearchOptions(1.0, 4))
    shrunk = list(sizes)
    sizes.clear()
    full = greedy_search(model, src[rows], SearchOptions(1.0, 4, on_step=lambda tokens: None))
    assert set(sizes) == {len(rows)} and shrunk[0] == len(rows) and shrunk[-1] < len(rows)
    assert [h.tokens for h in shrinking] == [h.tokens for h in full]
    assert [h.logprob for h in shrinking] == pytest.approx([h.logprob for h in full], abs=1e-4)


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
    _forget_fast_snapshots(model)
    assert greedy_search(model, src[:2], SearchOptions(0, 4, compile=True))
    assert seen and min(seen) >= 64 and getattr(config, name) == before
