"""The six tasks one model runs, each declared in a module of its own (``translation``,
``parsing``, ``language``: causal and masked, ``images``, ``speech``), and T5's pretraining on
spans (``spans``, whose models translate): the model and the data each takes, the metric that
chooses ``best/``, its facade and commands.

This registry is the one place that tells tasks apart by a model's ``input`` and architecture or by
a prepared dataset's ``kind``: everything else asks ``task_of`` (a model) or ``data_tasks`` (a
dataset) and reads the task."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import images, language, parsing, spans, speech, translation
from .base import Metric, Task
from .best import best_of as _best_of, upgrade_best

# (in the order a dataset's tasks are listed: the first is the one a new run trains by default,
# a language model on monolingual text even where its sentinels allow T5's span corruption)
TASKS: dict[str, Task] = {t.name: t for t in (language.CAUSAL, language.MASKED, spans.TASK,
                                              translation.TASK, parsing.TASK, images.TASK,
                                              speech.TASK)}
METRICS: dict[str, Metric] = {t.metric.key: t.metric for t in TASKS.values()}
PARSING = parsing.PARSING

__all__ = ["Metric", "Task", "TASKS", "METRICS", "PARSING", "task_of", "data_tasks", "data_layout",
           "model_tasks", "task_named", "upgrade_best", "best_of"]


def task_of(config: Any, info: Optional[Mapping] = None) -> Task:
    """The task of a model of ``config`` (a ``ModelConfig``); ``info``: what its checkpoint (or the
    data it trains on) says besides (``trees`` makes an encoder-decoder a parser)."""
    info = info or {}
    for task in TASKS.values():
        if task.model(config, info):
            return task
    raise ValueError(f"no task runs a model of input={config.input!r}, "
                     f"architecture={config.architecture!r}, classes={config.classes}")


# what a checkpoint or a dataset may say besides a model's config that changes its task
_SAID = ({}, {"trees": True}, {"sentinel_ids": [0]})


def model_tasks(config: Any) -> list[Task]:
    """Every task a model of ``config`` could be trained for, by the data it trains on (an
    encoder-decoder of tokens: translation, parsing, T5's span corruption)."""
    return [t for t in TASKS.values() if any(t.model(config, said) for said in _SAID)]


def data_tasks(meta: Mapping) -> list[Task]:
    """The tasks a prepared dataset (its meta.json) trains, the default first: one, or for
    monolingual text each language model and, with sentinels, T5's span corruption."""
    return [task for task in TASKS.values() if task.data(meta)]


def best_of(progress: Mapping) -> Optional[tuple[Metric, float, int]]:
    """A progress record's best validation: (its metric, value, update), or None (``best``)."""
    return _best_of(progress, METRICS)


def data_layout(meta: Mapping) -> str:
    """How a prepared dataset is laid out (its default task's ``data_kind``: ``pairs``,
    ``stream``, ``images``, ``recordings``); ``pairs`` for a meta.json no task claims."""
    fits = data_tasks(meta)
    return fits[0].data_kind if fits else "pairs"


def task_named(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; the tasks are {', '.join(TASKS)}")
    return TASKS[name]
