"""The learning-rate schedules of §5.3."""

import pytest

from transduce.training import inverse_sqrt, inverse_sqrt_peak


def test_schedule_values():
    assert inverse_sqrt(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert inverse_sqrt(4000, 512, 4000) == pytest.approx(6.99e-4, rel=1e-3)
    assert inverse_sqrt(16000, 512, 4000) == pytest.approx(512**-0.5 * 16000**-0.5)
    assert inverse_sqrt(16000, 512, 4000) == pytest.approx(inverse_sqrt(4000, 512, 4000) / 2)
    assert inverse_sqrt_peak(4000, 7e-4, 4000) == pytest.approx(7e-4)
    assert inverse_sqrt_peak(16000, 7e-4, 4000) == pytest.approx(3.5e-4)
    assert inverse_sqrt_peak(2000, 7e-4, 4000) == pytest.approx(3.5e-4)
