"""The search's encoder pass (``FastEncoder``) against ``Transformer.encode``."""

import copy

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import greedy_search
from transduce.inference import forget

from ..conftest import random_batch, tiny_config
from .conftest import ARCHITECTURES, _ids


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
def test_fast_encoder_equals_the_models_encode(arch, device):
    """The search's encoder pass (``FastEncoder``) against ``Transformer.encode``: one sentence, a
    few padded ones, more than 16 rows of products; and search uses it."""
    from transduce.inference import FastEncoder

    model = Transformer(tiny_config(**arch)).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(
                    torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))).to(
                        device
                    )
                    * 0.1
                )
    fast = FastEncoder(model)
    for batch in (1, 3, 20):
        src, lengths = random_batch(batch, 7, 40, device=device)
        assert batch == 1 or (lengths < 7).any()  # padded sources among them
        with torch.no_grad():
            torch.testing.assert_close(fast(src), model.encode(src), atol=2e-5, rtol=1e-4)
    forget(model)
    greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=2))
    assert ("encoder", "fp32") in model._fast_snapshots.built


def test_fast_encoder_int8_and_autocast():
    """int8: the snapshot quantizes the encoder as ``quantize_encoder`` does, and an encoder that
    ``quantize_encoder`` already converted keeps its own int8 layers; under autocast search encodes
    with the model's own pass (autocast's precision per operation), not the snapshot."""
    from transduce.inference import FastEncoder, encode, quantize_encoder

    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(3, 7, 40)
    with torch.no_grad():
        exact = model.encode(src)
        low = FastEncoder(model, "int8")(src)
        error = (low - exact).abs().max() / exact.abs().max()
        # int8 rounding (fp32 would differ by ~1e-7), and only that
        assert 1e-4 < error < 0.05, error
        quantized = copy.deepcopy(model)
        quantize_encoder(quantized)
        torch.testing.assert_close(
            FastEncoder(quantized)(src), quantized.encode(src), atol=2e-5, rtol=1e-4
        )
        forget(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(encode(model, src), model.encode(src))
        assert not hasattr(model, "_fast_snapshots")
        torch.testing.assert_close(encode(model, src), exact, atol=2e-5, rtol=1e-4)
        assert ("encoder", "fp32") in model._fast_snapshots.built
