"""The position-wise feed-forward networks (§3.3), gated variants, the norms."""

import pytest
import torch
import torch.nn.functional as F

from transduce import ModelConfig
from transduce.model.feed_forward import (FeedForward, MixtureOfExperts, RMSNorm, make_ffn,
                                          make_norm)


@pytest.mark.parametrize("activation, gate", [("swiglu", F.silu),
                                              ("geglu", lambda x: F.gelu(x, approximate="tanh"))])
def test_a_gated_network_is_w2_of_the_gate_times_the_third_matrix(activation, gate):
    torch.manual_seed(0)
    ffn = FeedForward(ModelConfig.preset("tiny", activation=activation)).eval()
    x = torch.randn(2, 3, 64)
    expected = ffn.w2(gate(ffn.w1(x)) * ffn.w3(x))
    torch.testing.assert_close(ffn(x), expected)
    assert FeedForward(ModelConfig.preset("tiny")).w3 is None  # the paper's has two matrices


def test_rms_norm_is_x_over_its_root_mean_square_times_the_gain():
    norm = RMSNorm(4, eps=0.0)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 1.0, 1.0]))
    x = torch.tensor([[3.0, 4.0, 0.0, 0.0]])  # rms = sqrt(25 / 4) = 2.5
    torch.testing.assert_close(norm(x), torch.tensor([[1.2, 3.2, 0.0, 0.0]]))
    # a bf16 model: computed in fp32, returned in bf16
    assert norm.bfloat16()(x.bfloat16()).dtype == torch.bfloat16


def test_the_config_chooses_the_network_and_the_norm():
    assert isinstance(make_ffn(ModelConfig.preset("tiny")), FeedForward)
    assert isinstance(make_ffn(ModelConfig.preset("tiny", ffn="moe")), MixtureOfExperts)
    assert isinstance(make_norm(ModelConfig.preset("tiny", norm_type="rmsnorm")), RMSNorm)
    norm = make_norm(ModelConfig.preset("tiny", norm_eps=1e-3))
    assert isinstance(norm, torch.nn.LayerNorm) and norm.eps == 1e-3
