"""What a task is: its name, the model it runs, the data it trains on, the metric that chooses
``best/``, the facade and the commands that run it. A task's module declares one ``Task``; the
registry (``__init__``) is the one place that tells them apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional


def encoder_decoder_family(config, info) -> str:
    """An encoder-decoder of tokens: T5 (relative positions), the paper's Transformer, or one of
    its variants."""
    if config.positional == "relative":
        return "T5"
    return "the paper's Transformer" if config.beyond_paper() is None else "a Transformer"


def tokens_model(config, architecture: str) -> bool:
    """Whether ``config`` is a model of token ids of ``architecture`` (not a classifier)."""
    return (config.input == "tokens" and config.architecture == architecture
            and not config.classes)


@dataclass(frozen=True)
class Metric:
    """A validation score: ``key`` in the validation record, ``label`` in messages, whether
    ``higher`` is better, whether it is shown as a percentage (a share kept as 0..1), and the key
    that breaks ties (``tie``, better in the same direction)."""

    key: str
    label: str
    higher: bool = True
    percent: bool = False
    tie: Optional[str] = None

    def format(self, value: float) -> str:
        return f"{100 * value:.2f}%" if self.percent else f"{value:.2f}"

    def better(self, value: float, tie: float, best: Optional[tuple[float, float]]) -> bool:
        """Whether ``(value, tie)`` beats ``best`` (None: nothing to beat)."""
        if best is None:
            return True
        new, old = (value, tie), tuple(best)
        return new > old if self.higher else new < old


@dataclass(frozen=True)
class Task:
    """One task kind. ``model`` and ``data``: whether a model's config (and its checkpoint's
    ``info``) and a prepared dataset's meta.json are this task's; ``data_kind``: what ``prepare``
    writes for it (the trainer reads batches of that layout: ``pairs``, ``stream``, ``images``,
    ``recordings``); ``validation``: which scorer of ``training.scorers`` validates it;
    ``shown``: the validation record's keys a log line shows, as (key, label, percent);
    ``counted``: the key and noun of what was validated; ``facade``: the class of the Python
    API that runs it (a name in ``transduce``); ``verb``: the command that runs it; ``commands``:
    every command that takes it; ``search``: its search's defaults (DecodeConfig fields);
    ``flags``: the search options (DecodeConfig fields) its commands take (None: every one);
    ``paper_search``: its search defaults are the paper's translation settings (the help names
    them); ``family``: which member of the family a model of it is, in words (``info``);
    ``losses``: the terms it adds to the label-smoothed cross-entropy, by name
    (``training.loss.EXTRAS``; a mixture of experts' balance is the model's, whatever the task);
    ``what``: the task's model in words; ``preset``: the preset that trains one; ``holds``: its
    prepared data in words; ``prepare``: the command that prepares it."""

    name: str
    what: str
    model: Callable[[Any, Mapping], bool]
    data: Callable[[Mapping], bool]
    data_kind: str
    metric: Metric
    validation: str
    shown: tuple[tuple[str, str, bool], ...]
    counted: tuple[str, str]
    facade: str
    verb: str
    commands: tuple[str, ...]
    preset: str
    holds: str
    prepare: str
    search: Mapping[str, Any] = field(default_factory=dict)
    flags: Optional[tuple[str, ...]] = None
    paper_search: bool = False
    family: Callable[[Any, Mapping], str] = lambda config, info: "a Transformer"
    losses: tuple[str, ...] = ()
    # the commands to run with a trained model ({run}: its folder); empty: ``train`` writes them
    # from the data (translation and parsing name the prepared test split)
    next: tuple[str, ...] = ()

    def line(self, result: Mapping[str, Any]) -> str:
        """A validation record in words: ``loss 1.234, BLEU 20.10, ... (500 sentences, 3.1 s)``."""
        parts = [f"loss {result['loss']:.3f}"] + [
            f"{label} {100 * result[key]:.2f}%" if percent else f"{label} {result[key]:.2f}"
            for key, label, percent in self.shown if key in result]
        key, noun = self.counted
        return (", ".join(parts) + f" ({result.get(key, 0):,} {noun}, "
                f"{result.get('seconds', 0):.1f} s)")
