"""The best validation a run's progress record holds, read the same way wherever it is read
(training's resume, the checkpoint a command describes, ``info``): one (metric, value, tie,
update) since the task registry; one field per metric before it."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Metric


# the best-so-far fields a run kept before one best (metric, value, step): the field, its metric,
# and whether it was set (a language model's perplexity started at 0, the others at -1)
OLD_BEST = (("best_bleu", "bleu", lambda v: v >= 0),
            ("best_accuracy", "accuracy", lambda v: v >= 0),
            ("best_cer", "cer", lambda v: v >= 0), ("best_ppl", "ppl", lambda v: v > 0))


def upgrade_best(data: dict) -> dict:
    """A progress record written before one best: its set field becomes (metric, value, tie)."""
    if not any(name in data for name, *_ in OLD_BEST) and "best_chrf" not in data:
        return data
    data = dict(data)
    olds = {name: data.pop(name, None) for name in (*(n for n, *_ in OLD_BEST), "best_chrf")}
    for name, metric, is_set in OLD_BEST:
        value = olds[name]
        if isinstance(value, (int, float)) and is_set(value) and data.get("best_step", 0) > 0:
            chrf = olds["best_chrf"] if metric == "bleu" else 0.0
            data.update(best_metric=metric, best_value=float(value),
                        best_tie=float(chrf if isinstance(chrf, (int, float)) else 0.0))
            break
    return data


def best_of(progress: Mapping[str, Any], metrics: Mapping[str, Metric]) -> Optional[tuple]:
    """``(metric, value, update)`` of a progress record's best validation, or None before one."""
    record = upgrade_best(dict(progress))
    metric = metrics.get(record.get("best_metric", ""))
    step, value = record.get("best_step"), record.get("best_value")
    if metric is None or not isinstance(step, int) or step <= 0 or not isinstance(
            value, (int, float)):
        return None
    return metric, value, step
