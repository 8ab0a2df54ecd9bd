"""The bookkeeping every search keeps (``Beams``): candidates, the finished list, the stop rule."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from transduce.config import DecodeConfig
from transduce.decoding.beams import Beams, length_penalty, merge_finished, top_candidates

PAD, BOS, EOS = 0, 1, 2
CONFIG = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, start_id=BOS)
NEG = float("-inf")


def test_length_penalties_by_hand():
    assert float(length_penalty(7, 1.0)) == pytest.approx(2.0)  # (5 + 7) / 6
    assert float(length_penalty(7, 0.0)) == 1.0
    assert float(length_penalty(4, 0.5, "power")) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="choose 'gnmt' or 'power'"):
        length_penalty(3, 1.0, "linear")


def test_top_candidates_rank_every_row_s_continuations_together():
    scores = torch.tensor([[-1.0, -2.0]])
    logprobs = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]]]))
    values, beams, tokens = top_candidates(scores, logprobs, 3)
    # -1 + log .5 = -1.69, then -2 + log .9 = -2.11 (the second row), then -1 + log .3 = -2.20
    assert beams.tolist() == [[0, 1, 0]] and tokens.tolist() == [[0, 0, 1]]
    assert values[0].tolist() == pytest.approx([-1 + math.log(0.5), -2 + math.log(0.9),
                                                -1 + math.log(0.3)])


def test_merge_finished_keeps_the_best_k_of_old_and_new():
    fin = torch.tensor([[-1.0, NEG]]), torch.full((1, 2, 2), PAD), torch.tensor([[-1.0, NEG]])
    new_tokens = torch.tensor([[[5, EOS], [6, EOS], [7, EOS]]])
    scores, tokens, logprob = merge_finished(*fin, torch.tensor([[-0.5, NEG, -3.0]]), new_tokens,
                                             torch.tensor([[-0.6, NEG, -3.5]]))
    assert scores.tolist() == [[-0.5, -1.0]]
    assert logprob[0].tolist() == pytest.approx([-0.6, -1.0])
    assert tokens[0, 0].tolist() == [5, EOS]


def _step(beams: Beams, table: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    return beams.advance(torch.log(torch.tensor(table)))


def test_a_beam_finishes_a_hypothesis_and_stops_when_no_live_row_can_beat_it():
    """Vocabulary (pad, bos, eos, a): beam 2, alpha 0. Step 0: eos .6 ends "" at .6, "a" .4 lives.
    Step 1 after "a": eos .5 -> "a" at .2, which cannot beat .6: done, "" first, then "a"."""
    decode = DecodeConfig(beam=2, nbest=2, alpha=0.0)
    beams = Beams(CONFIG, decode, beam=2, device="cpu")
    beams.join(torch.tensor([5]))
    done, _ = _step(beams, [[1e-9, 1e-9, 0.6, 0.4], [1e-9, 1e-9, 0.6, 0.4]])
    assert not done.any()  # only one hypothesis finished; nbest is 2
    done, _ = _step(beams, [[1e-9, 1e-9, 0.5, 0.5], [1e-9, 1e-9, 0.5, 0.5]])
    assert done.tolist() == [True]
    found = beams.finished(0)
    assert [h.tokens for h in found] == [[], [3]]
    assert [h.logprob for h in found] == pytest.approx([math.log(0.6), math.log(0.2)], abs=1e-5)


def test_walking_rows_end_at_eos_and_keep_moves_sentences():
    beams = Beams(CONFIG, DecodeConfig(beam=1), beam=1, device="cpu", walk=True)
    beams.join(torch.tensor([4, 4]))
    assert beams.advance_walk(torch.tensor([3, EOS]), torch.tensor([-0.1, -0.2])).tolist() == [
        False, True]
    assert beams.finished(1)[0].tokens == [] and beams.finished(0)[0].tokens == [3]
    beams.keep(torch.tensor([0]))
    assert len(beams) == 1 and beams.tokens(1).tolist() == [[BOS, 3]]
    beams.keep(torch.tensor([], dtype=torch.long))
    assert len(beams) == 0 and beams.width == 0
