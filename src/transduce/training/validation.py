"""Validation during training: the task's scores of the validation set (``scorers``; for a
translation model also of a second set, ``--valid-extra``), ``best/`` kept by the task's metric
(``Task.metric``: BLEU, F1, accuracy, CER or perplexity) and the validations since it counted for
patience.

``Validation`` is the part of a ``Trainer`` that validates; only rank 0 validates.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from ..lora import merged
from . import distributed, scorers
from .scorers import empty_share

__all__ = ["Validation", "empty_share", "replaces_best"]


class Validation:
    """Validates a ``TrainingState``'s model on ``data``'s validation sets and tracks the best.

    ``folder``: the run's ``RunFolder`` (``best/`` and the metrics go there); ``checkpoint_info``:
    what a checkpoint says of the run; ``log``: where its lines go; ``on_validate`` (a plain
    callable) sees each result and may return a reason to stop training."""

    def __init__(self, model_config, train_config, data, device, precision: str, dist, folder,
                 checkpoint_info: Callable[[], dict], log: Callable[..., None],
                 on_validate: Optional[Callable[[dict], Optional[str]]] = None) -> None:
        self.cfg, self.tc, self.data = model_config, train_config, data
        self.task = data.task
        self.device, self.precision, self.dist = device, precision, dist
        self.folder, self.checkpoint_info = folder, checkpoint_info
        self.log, self.on_validate = log, on_validate
        # (the step of the last validation: ``Progress.validated_step``, saved with the run)
        self.stop_reason: Optional[str] = None  # what on_validate returned, if anything

    def track(self, state, scheduled: bool = True) -> None:
        """Validate (rank 0), keep ``best/``, and let ``on_validate`` stop the run.

        A scheduled validation is skipped while validation has already taken more than
        ``valid_share`` of the training time, so that it costs a bounded share of any budget.
        """
        p, tc, metric = state.progress, self.tc, self.task.metric
        if self.data.valid_set is None:
            return
        if (
            scheduled
            and tc.valid_share
            and p.best_step > 0
            and p.valid_seconds > tc.valid_share * p.elapsed
        ):
            return
        p.validated_step = p.step
        result = self.validate(state) if self.dist.is_main else None
        distributed.barrier(self.dist)
        if not self.dist.is_main:
            return
        value, tie = result[metric.key], result.get(metric.tie, 0.0) if metric.tie else 0.0
        # a record of another metric (a run of an older version validated otherwise) is beaten
        kept = p.best() if p.best_metric == metric.key else None
        silent = result.get("empty") == 1.0
        better = replaces_best(metric.better(value, tie, kept), silent, p)
        if better:
            p.best_metric, p.best_value, p.best_tie = metric.key, float(value), float(tie)
            p.best_silent = int(silent)
            p.best_step, p.validations_since_best = p.step, 0
            self.folder.save(state, self.checkpoint_info(), self.data.tokenizer_files, tc,
                             best=True)
        else:
            p.validations_since_best += 1
        extra = (f"; {self.data.extra_name}: BLEU {result['extra_bleu']:.2f}, chrF "
                 f"{result['extra_chrf']:.2f} ({result['extra_sentences']} "
                 "sentences)" if "extra_bleu" in result else "")
        self.log(f"valid at step {p.step}: {self.task.line(result)}{extra}")
        if silent:
            self.log(f"  every validation output at step {p.step} is empty: the model writes "
                     "nothing yet" + (" (kept as best/ until an update writes something)"
                                      if better else "; best/ stays an update that writes"))
        if self.on_validate is not None:
            self.stop_reason = self.on_validate(result) or self.stop_reason

    @torch.no_grad()
    def validate(self, state) -> dict:
        """The task's scores of the validation set (``scorers``), and of the second one
        (``--valid-extra``, translation) under ``extra_*`` keys, written to the metrics log."""
        start, p, model = time.time(), state.progress, state.model
        model.eval()
        score = getattr(scorers, self.task.validation)
        with merged(model):  # adapters in the weights, where the fast search reads them
            result = score(self, model)
            if self.data.extra_set is not None:
                scores = score(self, model, self.data.extra_set)
                result.update({f"extra_{key}": scores[key]
                               for key in ("loss", "ppl", "bleu", "chrf", "sentences")})
        seconds = time.time() - start
        p.valid_seconds += seconds
        result = {"type": "valid", "step": p.step, "epoch": p.epoch + 1, **result,
                  "seconds": round(seconds, 2), "elapsed": round(p.elapsed, 1)}
        self.folder.write_metrics(result)
        return result


def replaces_best(better_by_score: bool, silent: bool, progress) -> bool:
    """Whether a validation's update becomes best/: by its score, except that an update whose
    outputs are all empty (``silent``) never replaces one that writes, and one that writes always
    replaces one that writes nothing (an empty transcript's CER is 100%, below the CER of one that
    inserts words: the score alone would keep a model that writes nothing)."""
    if progress.best_step > 0 and silent != bool(progress.best_silent):
        return not silent
    return better_by_score
