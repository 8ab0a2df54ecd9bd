"""Monolingual data for the language models: the prepared stream, its blocks, and the objectives."""

import gzip

import numpy as np
import pytest
import torch

from transduce import ModelConfig
from transduce.data import (
    BlockSampler,
    Tokenizer,
    TokenStream,
    collate_next_token,
    prepare_monolingual,
)
from transduce.data.monolingual import MASK_ID, mask_tokens
from transduce.errors import DataError
from transduce.training.data_setup import TrainingError, check_model_against_data

from ..helpers import prepare_reverse_task

LINES = ["the cat sat on the "
         "mat", "", "a dog ran after the cat", "the mat was red", "dogs and cats"] * 40


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mono")
    (root / "train.txt").write_text("\n".join(LINES) + "\n")
    with gzip.open(root / "valid.txt.gz", "wt") as f:
        f.write("the dog sat on the mat\nred cats\n")
    meta = prepare_monolingual(
        root / "train.txt", root / "data", root / "valid.txt.gz", vocab_size=60, log=None
    )
    return root, meta


def test_the_stream_is_every_line_then_eos(data):
    root, meta = data
    assert meta["kind"] == "monolingual" and meta["special_ids"]["mask_id"] == MASK_ID
    tok = Tokenizer(root / "data" / "spm.model")
    assert (
        tok.src.id_to_piece(MASK_ID) == "<mask>"
        and tok.encode_src(["a <mask> sat"])[0].count(MASK_ID) == 1
    )
    stream = TokenStream(root / "data", "train")
    expected = [t for line in LINES if line for t in tok.encode_src([line])[0] + [2]]
    assert stream.tokens.tolist() == expected
    assert meta["splits"]["train"] == {"lines": 200, "empty": 40, "tokens": len(expected)}
    offsets = np.fromfile(root / "data" / "train.text.idx", dtype=np.int64)
    assert len(offsets) == 161 and offsets[-1] == len(expected)
    valid = TokenStream(root / "data", "valid")
    assert valid.tokens.tolist() == [t for line in ("the dog sat on the mat", "red cats")
                                     for t in tok.encode_src([line])[0] + [2]]
    again = prepare_monolingual(
        root / "train.txt", root / "data", root / "valid.txt.gz", vocab_size=60, log=None
    )
    assert again["fingerprint"] == meta["fingerprint"]  # reused, not redone


def test_next_token_blocks_and_their_order(data):
    root, _ = data
    stream = TokenStream(root / "data", "train")
    n = stream.num_blocks(16, shifted=True)
    assert n == (len(stream) - 1) // 16
    batch = collate_next_token(stream, [0, 3], 16)
    flat = torch.as_tensor(np.asarray(stream.tokens, dtype=np.int64))
    assert torch.equal(batch.tgt_in[1], flat[48:64]) and torch.equal(batch.tgt_out[1], flat[49:65])
    assert batch.src is None and batch.inputs == (batch.tgt_in,)
    sampler = BlockSampler(n, 4, seed=3)
    epoch = sampler.batches(0)
    assert sorted(np.concatenate(epoch).tolist()) == list(range(n))  # every block once
    assert [b.tolist() for b in epoch] == [
        b.tolist() for b in BlockSampler(n, 4, seed=3).batches(0)
    ]
    assert [b.tolist() for b in epoch] != [b.tolist() for b in sampler.batches(1)]
    assert [b.tolist() for b in sampler.batches(0, start=2)] == [b.tolist() for b in epoch[2:]]
    ranks = [BlockSampler(n, 4, seed=3, world_size=2, rank=r).batches(0) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])
    seen = np.concatenate(ranks[0] + ranks[1]).tolist()
    assert len(seen) == len(set(seen))  # disjoint shards


def test_masking_follows_berts_proportions():
    config = ModelConfig.preset("bert-tiny", vocab_size=1000)
    rng = np.random.default_rng(0)
    rows = rng.integers(5, 1000, size=(400, 500))
    rows[:, 450:] = 0  # padding is never chosen
    inputs, targets = mask_tokens(rows, config, 0.15, np.random.default_rng(1))
    chosen = targets != 0
    real = rows != 0
    assert not (chosen & ~real).any() and (targets[chosen] == rows[chosen]).all()
    share = chosen.sum() / real.sum()
    assert abs(share - 0.15) < 0.005
    masked = (inputs == MASK_ID) & chosen
    kept = (inputs == rows) & chosen
    replaced = chosen & ~masked & ~kept
    n = chosen.sum()
    assert abs(masked.sum() / n - 0.8) < 0.01
    # (a random token equal to the original counts as kept)
    assert abs(kept.sum() / n - 0.1) < 0.01 + 0.001
    assert abs(replaced.sum() / n - 0.1) < 0.01
    assert inputs[replaced].min() >= 5  # random tokens are ordinary ones, never specials
    assert (inputs[~chosen] == rows[~chosen]).all()
    one = mask_tokens(np.array([[7, 8, 9]]), config, 0.01, np.random.default_rng(5))[1]
    assert (one != 0).sum() == 1  # a block always predicts something


def test_model_and_data_kinds_must_agree(data):
    root, meta = data
    with pytest.raises(TrainingError, match="trains on monolingual text"):
        check_model_against_data(
            ModelConfig.preset("gpt-tiny", vocab_size=60), {**meta, "kind": "parallel"}, "D"
        )
    with pytest.raises(TrainingError, match="holds monolingual text"):
        check_model_against_data(ModelConfig.preset("tiny", vocab_size=60), meta, "D")
    check_model_against_data(ModelConfig.preset("bert-tiny", vocab_size=60), meta, "D")
    check_model_against_data(ModelConfig.preset("gpt-tiny", vocab_size=60, mask_id=4), meta, "D")
    with pytest.raises(DataError, match="holds parallel text"):
        TokenStream(prepare_reverse_task(root / "parallel", valid=False), "train")
