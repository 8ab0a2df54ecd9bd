"""int8 weights: products within int8's rounding, trained outputs kept, measured against fp32."""


from dataclasses import replace

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, beam_search, greedy_search
from transduce.inference import fast_decoder, forget

from ..conftest import random_batch, tiny_config
from .conftest import ARCHITECTURES, _ids, _int8_everywhere


@pytest.mark.parametrize("kernel", ["fbgemm", "onednn"])
def test_int8_agrees_with_fp32_on_a_trained_model(reverser, monkeypatch, kernel):
    """int8 weights change the numbers a little and the outputs rarely: at least 90% of the beam
    outputs of a trained model stay identical (the stated threshold), on both searches and with both
    int8 kernels."""
    if kernel not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this PyTorch build has no {kernel} engine")
    _int8_everywhere(monkeypatch, kernel)
    model, src = reverser
    forget(model)
    limits, fp32, int8 = (
        DecodeConfig(max_len_a=0, max_len_b=8),
        SearchOptions(),
        SearchOptions(precision="int8"),
    )
    for search in (
        lambda o: [h.tokens for h in greedy_search(model, src, limits, o)],
        lambda o: [h[0].tokens for h in beam_search(model, src, replace(limits, beam=4), o)],
    ):
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
        out = beam_search(
            model,
            src,
            DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=4),
            SearchOptions(precision="int8"),
        )
        assert len(out) == 3 and all(hs for hs in out)


def test_int8_products_are_measured_against_fp32_and_between_kernels():
    """An int8 product is one more candidate of a Dense's measured choice (fp32 wins small products
    at a few rows, where int8's fixed cost per call dominates); an Int8Linear chooses between its
    kernels the same way. Every choice gives the product within int8's rounding; fp32 exactly."""
    from transduce.inference.int8 import Int8Linear
    from transduce.inference.tuned_linear import TunedLinear as Dense

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


def test_int8_lets_fp32_compete_only_while_the_decoder_stays_in_cache(monkeypatch):
    """A product's timing reads its weight from cache: true through a whole step for a small
    decoder, not for a large one (whose int8 weights, 4x smaller, then win in the step although
    fp32 wins the product's own timing). Over INT8_FLOAT_MAX_BYTES every product is int8."""
    import transduce.inference.decoder as fast

    model = Transformer(tiny_config()).eval()
    x = torch.randn(1, model.config.d_model)
    small = fast.FastDecoder(model, "int8")
    assert (
        all(d.float_candidates for layer in small.layers for d in layer.denses())
        and small.output.float_candidates
    )
    monkeypatch.setattr(fast, "INT8_FLOAT_MAX_BYTES", 1000)
    large = fast.FastDecoder(model, "int8")
    denses = [large.output, *(d for layer in large.layers for d in layer.denses())]
    assert not any(d.float_candidates for d in denses)
    assert all(d.layout(x) == "int8" for d in denses if d.weight.size(1) == x.size(1))
