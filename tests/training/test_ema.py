"""The exponential moving average of the weights: its arithmetic, its state, its swap."""

import pytest
import torch
from torch import nn

from transduce.training.ema import ExponentialAverage


def test_the_average_follows_the_warmed_up_decay():
    model = nn.Linear(3, 2)
    ema = ExponentialAverage(model, 0.9)
    expected = [p.detach().clone() for p in model.parameters()]
    for n in range(30):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        d = min(0.9, (1 + n) / (10 + n))
        expected = [d * e + (1 - d) * p.detach() for e, p in zip(expected, model.parameters())]
        ema.update(model)
    for mine, theirs in zip(ema.shadow, expected):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-6)
    assert ema.current_decay() == pytest.approx(31 / 40) and ema.updates == 30  # still warming up


def test_tied_weights_are_averaged_once_and_applied_then_restored():
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight  # tied
    ema = ExponentialAverage(model, 0.5)
    assert len(ema.shadow) == 1
    before = model[0].weight.detach().clone()
    ema.shadow[0].fill_(7.0)
    with ema.applied(model):
        assert torch.all(model[1].weight == 7.0)
    assert torch.equal(model[0].weight, before)


def test_state_round_trip_and_bad_decays():
    model = nn.Linear(3, 2)
    ema = ExponentialAverage(model, 0.99)
    ema.update(model)
    other = ExponentialAverage(nn.Linear(3, 2), 0.99)
    other.load_state_dict(ema.state_dict())
    assert other.updates == 1 and all(torch.equal(a, b) for a, b in zip(ema.shadow, other.shadow))
    with pytest.raises(ValueError, match="lacks"):
        other.load_state_dict({"weight": ema.shadow[0]})
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="ema must be in"):
            ExponentialAverage(model, bad)
