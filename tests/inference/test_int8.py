"""int8 weights: products within int8's rounding, trained outputs kept, measured against fp32."""


from dataclasses import replace

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, beam_search, greedy_search
from transduce.inference import fast_decoder, forget

from ..conftest import random_batch, tiny_config
from .conftest import ARCHITECTURES, _ids


def test_int8_agrees_with_fp32_on_a_trained_model(reverser):
    """int8 weights change the numbers a little and the outputs rarely: at least 90% of the beam
    outputs of a trained model stay identical (the stated threshold), on both searches."""
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
def test_int8_runs_on_every_architecture(arch):
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


def test_int8_products_are_every_rows_own():
    """An int8 layer's product is within int8's rounding of fp32's at every row count, for any
    leading shape, with or without bias; and each row's output is bitwise the one it gets alone:
    the activations are quantized over each row's own range (not the call's), whatever the other
    rows hold (a row a thousand times larger, padding of zeros, rows of one sign)."""
    from transduce.inference.int8 import Int8Linear
    from transduce.inference.tuned_linear import TunedLinear as Dense

    torch.manual_seed(0)
    weight, bias = torch.randn(96, 64), torch.randn(96)
    for b in (bias, None):
        layer = Int8Linear(weight, b)
        for rows in (1, 5, 40):
            x = torch.randn(rows, 64) * torch.rand(rows, 1) * 3
            x[0] = x[0].relu()  # a row of one sign (a ReLU's output) keeps its resolution
            x[-1] = -x[-1].abs() - 0.1  # and one of the other sign
            x[rows // 2] = x[rows // 2].abs() + 0.5  # and one far from zero
            exact = x @ weight.t() + (0 if b is None else b)
            low = layer(x)
            error = (low - exact).abs().amax(dim=1) / exact.abs().amax(dim=1)
            assert (error > 0).all() and (error < 0.03).all(), error  # int8 rounding, and only that
            others = torch.cat([x, 1000 * torch.randn(3, 64), torch.zeros(2, 64)])
            among = layer(others)[:rows]
            for row in range(rows):
                assert torch.equal(layer(x[row : row + 1]), low[row : row + 1])
                assert torch.equal(among[row], low[row])
    assert Int8Linear(weight, bias)(torch.randn(2, 3, 64)).shape == (2, 3, 96)
    dense = Dense(weight, bias, int8=True)  # a decoder's product: int8 at every row count
    for rows in (1, 5, 40):
        assert dense.layout(torch.randn(rows, 64)) == "int8"


def test_a_folded_scale_keeps_the_models_integers():
    """The fast step folds 1/sqrt(d_k) into the queries' weights; int8 quantizes the model's own
    weights and applies the scale after: the same integers as the unscaled layer, though scaled
    weights would round otherwise where a weight lies halfway between two steps (here each does)."""
    from transduce.inference.int8 import Int8Linear
    from transduce.inference.tuned_linear import TunedLinear as Dense

    halves = torch.cat([torch.tensor([127.0]), torch.arange(126) + 0.5])  # one step is 1
    weight = halves[None] * torch.tensor([[1.0], [0.25], [4.0]])

    def integers(layer):
        return torch.ops.quantized.linear_unpack(layer.packed)[0].int_repr()

    own = integers(Int8Linear(weight, None))
    for factor in (6**-0.5, 10**-0.5, 0.3, torch.tensor([0.3, 6**-0.5, 1.0])):
        assert torch.equal(integers(Dense(weight, None, int8=True, scale=factor).int8), own)
    x = torch.randn(4, 127)
    folded = Int8Linear(weight, torch.ones(3), 0.3)(x)
    assert torch.allclose(folded, 0.3 * Int8Linear(weight, torch.ones(3))(x), atol=1e-4)
