"""Training (§5): the label-smoothed loss, the schedule, the recipes that fill in a new run's
schedule (``recipe``: auto, paper, finetune), and the ``Trainer`` in rooms: the loop (``trainer``),
the data setup (``data_setup``), validation (``validation``), the run folder with resume, lock,
signals and checkpoints (``run_folder``); EMA and distributed helpers.

The names below load on first use, so that ``transduce --help`` (which reads ``recipe``'s choices)
does not import torch."""

from __future__ import annotations

import importlib

_HOMES = {
    "label_smoothed_nll": "loss",
    "inverse_sqrt": "schedule",
    "inverse_sqrt_peak": "schedule",
    "learning_rate": "schedule",
    "Trainer": "trainer",
    "RunSettings": "trainer",
    "Progress": "trainer",
    "TrainingError": "trainer",
}

__all__ = list(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
