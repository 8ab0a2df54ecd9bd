"""A run's progress keeps one best (metric, value, tie, update); records of older versions, one
field per metric, load as that."""

import pytest

from transduce.tasks import best_of, upgrade_best
from transduce.training.progress import Progress


@pytest.mark.parametrize("old, best", [
    ({"best_bleu": 12.5, "best_chrf": 40.0, "best_ppl": 0.0, "best_accuracy": -1.0,
      "best_cer": -1.0, "best_step": 4}, ("bleu", 12.5, 40.0)),
    ({"best_bleu": -1.0, "best_chrf": -1.0, "best_ppl": 3.25, "best_step": 8}, ("ppl", 3.25, 0.0)),
    ({"best_bleu": -1.0, "best_accuracy": 0.75, "best_step": 2}, ("accuracy", 0.75, 0.0)),
    ({"best_bleu": -1.0, "best_ppl": 0.0, "best_cer": 0.3, "best_step": 2}, ("cer", 0.3, 0.0)),
    ({"best_bleu": -1.0, "best_ppl": 0.0, "best_step": 0}, ("", 0.0, 0.0)),  # none yet
    ({"best_bleu": -1.0, "best_ppl": 0.0, "best_step": 5}, ("", 0.0, 0.0)),  # none recorded
])
def test_an_older_record_loads_as_one_best(old, best):
    progress = Progress.from_dict({"step": 10, **old})
    assert (progress.best_metric, progress.best_value, progress.best_tie) == best
    assert progress.best() == (None if not best[0] else best[1:])
    found = best_of({"step": 10, **old})  # (as info and a checkpoint's description read it)
    assert (found[0].key, found[1]) == best[:2] if best[0] else found is None


def test_a_new_record_is_kept_as_written_and_a_wrong_type_refused():
    record = {"step": 3, "best_metric": "f1", "best_value": 70.5, "best_tie": 0.0, "best_step": 3}
    assert upgrade_best(record) is record
    assert Progress.from_dict(record).best() == (70.5, 0.0)
    with pytest.raises(ValueError, match="best_metric"):
        Progress.from_dict({**record, "best_metric": 3})
