"""``TunedLinear``: every layout it times computes the same product; bf16 only where it pays."""


import pytest
import torch


@pytest.mark.parametrize("rows", [1, 4, 16, 40])
@pytest.mark.parametrize("bias", [True, False])
def test_every_dense_layout_gives_the_same_product(rows, bias):
    """The layouts a TunedLinear chooses between by timing (rows, columns, blocks) all compute
    x W^T + b; the choice is made once per class of row counts and kept."""
    from transduce.inference.timing import row_class as _bucket
    from transduce.inference.tuned_linear import TunedLinear

    torch.manual_seed(0)
    weight, b = torch.randn(96, 40), torch.randn(96) if bias else None
    x = torch.randn(rows, 40)
    expected = x @ weight.t() + (b if bias else 0)
    dense = TunedLinear(weight, b)
    chosen = dense.layout(x)
    assert chosen in (("rows", "columns", "blocks") if rows <= 16 else ("rows", "columns"))
    assert dense.layouts == {_bucket(rows): chosen}
    torch.testing.assert_close(dense(x), expected, rtol=1e-5, atol=1e-5)
    for layout in ("rows", "columns", "blocks", "linear"):
        torch.testing.assert_close(dense._multiply(x, layout), expected, rtol=1e-5, atol=1e-5)
    assert dense.layout(torch.randn(rows, 40)) == chosen  # measured once, then kept


def test_bf16_weights_only_where_they_pay():
    """The bf16 copy is used from BF16_MIN_MACS multiply-adds per product: a one-row product of a
    small matrix stays fp32 (bf16's fixed cost per call would dominate), many rows switch."""
    from transduce.inference.tuned_linear import BF16_MIN_MACS
    from transduce.inference.tuned_linear import TunedLinear

    weight = torch.randn(1024, 256)
    dense = TunedLinear(weight, torch.randn(1024), bf16=True)
    rows = -(-BF16_MIN_MACS // weight.numel())
    assert not dense.uses_bf16(1) and not dense.uses_bf16(rows - 1) and dense.uses_bf16(rows)
    x = torch.randn(rows, 256)
    assert dense(x).dtype == torch.float32
    torch.testing.assert_close(dense(x), x @ dense.weight.t() + dense.bias, rtol=0.02, atol=0.3)
    assert TunedLinear(weight, None).low is None  # fp32: no copy
