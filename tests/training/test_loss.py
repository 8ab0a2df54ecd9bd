"""Label smoothing (§5.4) against a hand computation."""

import pytest
import torch

from transduce.training import label_smoothed_nll


def test_label_smoothing_equals_hand_computation():
    # V = 4 with pad = 0; eps = 0.1 spread over the 3 non-pad classes.
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    target = torch.tensor([3, 1, 0])  # the last position is padding
    loss, nll = label_smoothed_nll(logits, target, 0.1, pad_id=0)
    lp = torch.log_softmax(logits, -1)
    by_hand = 0.0
    for row, t in ((0, 3), (1, 1)):
        q = {c: 0.1 / 3 for c in (1, 2, 3)}
        q[t] += 0.9
        by_hand += -sum(q[c] * lp[row, c].item() for c in q)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    assert nll.item() == pytest.approx(-(lp[0, 3] + lp[1, 1]).item(), rel=1e-6)
    loss0, nll0 = label_smoothed_nll(logits, target, 0.0, pad_id=0)
    assert loss0.item() == pytest.approx(nll0.item())


def test_the_task_declares_the_loss_terms_it_adds():
    from types import SimpleNamespace

    from transduce.tasks import TASKS
    from transduce.training.loss import task_loss

    def model():  # a speech model's last pass left its CTC predictions
        logits = torch.randn(1, 6, 5)
        return SimpleNamespace(config=SimpleNamespace(ctc_weight=0.5),
                               ctc_output=(logits, torch.tensor([6])))

    loss, tgt_out = torch.tensor(10.0), torch.tensor([[3, 4, 2]])
    assert TASKS["speech-recognition"].losses == ("ctc",)
    batch = SimpleNamespace(tgt_out=tgt_out, pad_id=0)
    assert task_loss(TASKS["translation"], model(), loss, batch) is loss
    joint = task_loss(TASKS["speech-recognition"], model(), loss, batch)
    assert joint != loss and joint > 0.5 * loss  # (1 - w) x loss + w x CTC
