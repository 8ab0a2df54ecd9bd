"""§5.3 The learning-rate schedule: linear warmup, then inverse square root decay."""

from __future__ import annotations


def inverse_sqrt(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); step counts updates from
    1.

    For d_model 512 and warmup 4000 the peak, at step 4000, is 6.99e-4.
    """
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_peak(step: int, peak_lr: float, warmup: int) -> float:
    """The same shape written with its peak: ``peak_lr * min(step / warmup, sqrt(warmup /
    step))``."""
    step = max(step, 1)
    return peak_lr * min(step / warmup, (warmup / step) ** 0.5)


def learning_rate(
    step: int, schedule: str, d_model: int, warmup: int, factor: float, peak_lr: float
) -> float:
    if schedule == "inverse_sqrt":
        return inverse_sqrt(step, d_model, warmup, factor)
    return inverse_sqrt_peak(step, peak_lr, warmup)
