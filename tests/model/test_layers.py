"""The layers of the stacks (§3.1): the residual around each sub-layer, post-LN and pre-LN."""

import torch

from transduce import ModelConfig
from transduce.model.layers import EncoderLayer, Residual


def _sublayer(x):
    return 2 * x + 1, None


def test_post_norm_is_the_paper_s_layernorm_of_x_plus_the_sublayer():
    residual = Residual(ModelConfig.preset("tiny", dropout=0.0))
    x = torch.randn(2, 3, 64)
    out, _ = residual(x, _sublayer)
    torch.testing.assert_close(out, residual.norm(x + 2 * x + 1))


def test_pre_norm_adds_the_sublayer_of_the_normed_input():
    residual = Residual(ModelConfig.preset("tiny", dropout=0.0, norm_position="pre"))
    x = torch.randn(2, 3, 64)
    out, _ = residual(x, _sublayer)
    torch.testing.assert_close(out, x + 2 * residual.norm(x) + 1)


def test_dropout_acts_on_the_sublayer_s_output_only_in_training():
    residual = Residual(ModelConfig.preset("tiny", dropout=0.5, norm_position="pre"))
    x = torch.ones(1, 4, 64)
    residual.eval()
    torch.testing.assert_close(residual(x, lambda h: (torch.zeros_like(h), None))[0], x)
    residual.train()
    torch.manual_seed(0)
    out, _ = residual(x, lambda h: (torch.ones_like(h), None))
    assert set(out.unique().tolist()) == {1.0, 3.0}  # x + 0 or x + 1 / (1 - p)


def test_an_encoder_layer_keeps_the_shape_and_ignores_padded_keys():
    torch.manual_seed(0)
    layer = EncoderLayer(ModelConfig.preset("tiny", dropout=0.0)).eval()
    x = torch.randn(1, 4, 64)
    mask = torch.tensor([True, True, True, False])[None, None, None, :]
    out, _ = layer(x, mask)
    changed = x.clone()
    changed[0, 3] = 100.0  # what a padded position holds does not reach the others
    again, _ = layer(changed, mask)
    assert out.shape == x.shape
    torch.testing.assert_close(out[:, :3], again[:, :3])
