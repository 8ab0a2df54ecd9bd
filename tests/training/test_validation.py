"""Validation during training: best/ kept by the task's metric, ties, silence and patience."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from transduce.config import TrainConfig
from transduce.tasks import language, translation
from transduce.training.progress import Progress
from transduce.training.validation import Validation, replaces_best


class Folder:
    def __init__(self):
        self.best, self.metrics = [], []

    def save(self, state, info, tokenizer_files, tc, best=False):
        assert best
        self.best.append(state.progress.step)

    def write_metrics(self, record):
        self.metrics.append(record)


class Scripted(Validation):
    """A validation whose scores are given: the scorers have tests of their own."""

    def __init__(self, task, results, tc=None):
        data = SimpleNamespace(task=task, valid_set=[1], extra_set=None, tokenizer_files=[])
        self.lines = []
        super().__init__(None, tc or TrainConfig(), data, "cpu", "fp32",
                         SimpleNamespace(is_main=True, enabled=False), Folder(), dict,
                         self.lines.append)
        self.results = iter(results)

    def validate(self, state):
        return {"loss": 1.0, "sentences": 5, **next(self.results)}


def _run(validation, steps):
    state = SimpleNamespace(progress=Progress(elapsed=100.0))
    for step in steps:
        state.progress.step = step
        validation.track(state)
    return state.progress


def test_best_follows_the_metric_s_direction_and_patience_counts_the_others():
    bleu = Scripted(translation.TASK, [{"bleu": 10.0, "chrf": 30.0}, {"bleu": 12.0, "chrf": 1.0},
                                       {"bleu": 11.0, "chrf": 99.0}])
    p = _run(bleu, [100, 200, 300])
    assert bleu.folder.best == [100, 200] and (p.best_metric, p.best_value) == ("bleu", 12.0)
    assert p.validations_since_best == 1 and p.best_step == 200
    assert bleu.lines[0].startswith("valid at step 100: loss 1.000, BLEU 10.00")
    ppl = Scripted(language.CAUSAL, [{"ppl": 9.0}, {"ppl": 7.0}, {"ppl": 8.0}])
    p = _run(ppl, [1, 2, 3])
    assert ppl.folder.best == [1, 2] and p.best_value == 7.0  # lower is better


def test_chrf_breaks_a_bleu_tie():
    tied = Scripted(translation.TASK, [{"bleu": 10.0, "chrf": 30.0}, {"bleu": 10.0, "chrf": 31.0},
                                       {"bleu": 10.0, "chrf": 30.5}])
    assert _run(tied, [1, 2, 3]).best_step == 2


def test_a_model_that_writes_nothing_never_replaces_one_that_writes():
    runs = Scripted(translation.TASK, [{"bleu": 0.0, "chrf": 0.0, "empty": 1.0},
                                       {"bleu": 0.0, "chrf": 0.0, "empty": 0.9},
                                       {"bleu": 5.0, "chrf": 9.0, "empty": 1.0}])
    p = _run(runs, [1, 2, 3])
    assert runs.folder.best == [1, 2] and not p.best_silent
    assert "best/ stays an update that writes" in runs.lines[-1]


@pytest.mark.parametrize("silent, best_silent, by_score, expected", [
    (False, False, True, True), (False, False, False, False), (True, False, True, False),
    (False, True, False, True), (True, True, True, True),
])
def test_replaces_best_by_score_unless_silence_decides(silent, best_silent, by_score, expected):
    progress = Progress(best_step=10, best_silent=int(best_silent))
    assert replaces_best(by_score, silent, progress) is expected


def test_a_record_of_another_metric_is_beaten_and_validation_keeps_to_its_share():
    older = Scripted(translation.TASK, [{"bleu": 1.0, "chrf": 1.0}],
                     tc=TrainConfig(valid_share=0.1))
    state = SimpleNamespace(progress=Progress(step=5, elapsed=100.0, best_metric="ppl",
                                              best_value=50.0, best_step=3))  # a perplexity
    older.track(state)
    assert older.folder.best == [5] and state.progress.best_metric == "bleu"
    state.progress.valid_seconds = 11.0  # more than 10% of the 100 s trained
    state.progress.step = 6
    older.track(state)  # skipped: the scripted results would run out
    assert state.progress.validated_step == 5
