"""Several positions of one hypothesis in one pass of the fast step (``inference/positions.py``,
what a speculative search's check costs): the logits of the step called on each token in turn,
for every architecture option, and after the cache is rolled back."""

import pytest
import torch

from transduce import Transformer
from transduce.inference import FastDecoder
from transduce.inference.positions import read_positions, roll_back

from ..conftest import random_batch, tiny_config
from .conftest import ARCHITECTURES, _ids


def _model(arch: dict, device) -> Transformer:
    model = Transformer(tiny_config(**arch)).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                noise = torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name)))
                p.add_(noise.to(device) * 0.1)
    return model


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
def test_positions_read_at_once_equal_the_steps_one_by_one(arch, device):
    model = _model(arch, device)
    src, _ = random_batch(1, 7, 40, device=device)
    tokens = torch.randint(4, 40, (11,), generator=torch.Generator().manual_seed(5)).to(device)
    fast = FastDecoder(model)
    with torch.no_grad():
        memory = model.encode(src)
        steps = fast.start(src, memory, 1, capacity=16)
        expected = torch.stack([fast.step(token.view(1), steps)[0] for token in tokens])
        cache = fast.start(src, memory, 1, capacity=16)
        # in runs of 1, 4 and 3, then back to 5 read and the rest again: the rejected positions'
        # keys and values must be overwritten, never attended
        got = [read_positions(fast, tokens[a:b], cache) for a, b in ((0, 1), (1, 5), (5, 8))]
        assert cache.length == 8
        torch.testing.assert_close(torch.cat(got), expected[:8], atol=2e-5, rtol=1e-4)
        roll_back(cache, 5)
        wrong = read_positions(fast, torch.full((3,), 7, device=device), cache)
        assert not torch.allclose(wrong, expected[5:8])
        roll_back(cache, 5)
        again = read_positions(fast, tokens[5:], cache)
    torch.testing.assert_close(again, expected[5:], atol=2e-5, rtol=1e-4)
    assert cache.length == 11


def test_what_does_not_fit_is_refused():
    model = _model({}, "cpu")
    src, _ = random_batch(2, 4, 40)
    fast = FastDecoder(model)
    with torch.no_grad():
        memory = model.encode(src)
        with pytest.raises(ValueError, match="one hypothesis"):
            read_positions(fast, torch.tensor([5]), fast.start(src, memory, 1, capacity=4))
        cache = fast.start(src[:1], memory[:1], 1, capacity=4)
        with pytest.raises(ValueError, match="positions 0-4 do not fit"):
            read_positions(fast, torch.arange(5, 10), cache)
