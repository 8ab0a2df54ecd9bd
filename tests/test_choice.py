"""``choice.py``: the one rule for the checkpoint of a run a command uses, and what it says of
it."""

from __future__ import annotations

import json

import pytest

from transduce import Transformer
from transduce.checkpoint import list_checkpoints, write_checkpoint
from transduce.choice import choose, describe_checkpoint, resolve
from transduce.errors import TransduceError

from .conftest import tiny_config


@pytest.fixture
def model():
    return Transformer(tiny_config()).eval()


def _write(folder, model, tmp_path, step, **extra):
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"not read by these tests")
    info = {
        "model": model.config.to_dict(),
        "src": "en",
        "tgt": "de",
        "tokenizer": {"src": spm.name, "tgt": spm.name},
        "step": step,
        **extra,
    }
    return write_checkpoint(folder, model, info, [spm])


def _run(tmp_path, model, steps, best=None):
    run = tmp_path / "run"
    for step in steps:
        folder = _write(run / "checkpoints" / f"step_{step:08d}", model, tmp_path, step)
        progress = {"step": step, "best_step": best or 0, "best_bleu": 12.5 if best else -1.0}
        (folder / "trainer.json").write_text(json.dumps({"progress": progress}))
    (run / "config.json").write_text("{}")
    if best:
        _write(run / "best", model, tmp_path, best)
    return run


def test_averaged_while_up_to_date_then_best_then_the_newest(tmp_path, model):
    run = _run(tmp_path, model, (2, 10))  # numeric order, not the names' order
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000010"]
    assert (
        choose(run).line()
        == f"{run}/checkpoints/step_00000010: update 10, the newest checkpoint (no best/: not "
        "validated)"
    )
    _write(run / "best", model, tmp_path, 2)
    assert resolve(run).name == "best"
    _write(run / "averaged", model, tmp_path, 10, averaged_from=["step_00000002", "step_00000010"])
    chosen = choose(run)
    assert chosen.folder.name == "averaged" and not chosen.warnings
    assert chosen.what == "the average of 2 checkpoints (updates 2-10)"
    assert resolve(run / "best").name == "best"
    with pytest.raises(TransduceError, match="does not exist"):
        resolve(tmp_path / "nowhere")


def test_an_average_older_than_the_newest_checkpoint_is_passed_over_and_said(tmp_path, model):
    run = _run(tmp_path, model, (10, 20, 30), best=20)
    _write(run / "averaged", model, tmp_path, 20, averaged_from=["step_00000010", "step_00000020"])
    chosen = choose(run)
    assert chosen.line() == f"{run}/best: update 20, the best validation BLEU (12.50)"
    assert chosen.warnings == [
        f"warning: {run}/averaged was made at update 20, before the run's newest checkpoint "
        f"(update 30): not used; `transduce average {run} --last 2` refreshes it"
    ]
    named = choose(run / "averaged")
    assert named.folder == run / "averaged" and "used as named" in named.warnings[0]


def test_the_ema_is_used_only_when_named_and_said_when_old(tmp_path, model):
    run = _run(tmp_path, model, (10, 20))
    _write(run / "ema", model, tmp_path, 10, ema=0.999)
    assert resolve(run).name == "step_00000020"  # never chosen for a run
    named = choose(run / "ema")
    assert named.what == "the exponential moving average of the weights (decay 0.999) at update 10"
    assert "before the run's newest checkpoint (update 20): used as named" in named.warnings[0]
    assert "--resume --ema 0.999" in named.warnings[0]


def test_an_imported_model_says_where_it_came_from(tmp_path, model):
    folder = _write(tmp_path / "opus", model, tmp_path, 0, imported_from="opus-mt-en-de")
    assert describe_checkpoint(folder) == "imported from opus-mt-en-de"
    assert choose(folder).warnings == []
