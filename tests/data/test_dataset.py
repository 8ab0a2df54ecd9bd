"""A prepared dataset read back: its meta.json checked, batches padded with start and eos."""

from __future__ import annotations

import json

import pytest
import torch

from transduce.data.dataset import load_meta, pad_sequences
from transduce.errors import DataError


def test_pad_sequences_adds_start_and_end_and_pads_right():
    out = pad_sequences([[5, 6], [7]], pad_id=0, prefix=1, suffix=2)
    assert out.tolist() == [[1, 5, 6, 2], [1, 7, 2, 0]] and out.dtype == torch.long
    assert pad_sequences([[5], [6, 7]], pad_id=9).tolist() == [[5, 9], [6, 7]]
    assert pad_sequences([], pad_id=0, suffix=2).shape == (0, 1)


def test_a_folder_that_is_not_a_prepared_dataset_says_what_to_run(tmp_path):
    with pytest.raises(DataError, match="does not exist: give the folder `transduce prepare"):
        load_meta(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="is a file, not a prepared dataset folder"):
        load_meta(tmp_path / "file")
    with pytest.raises(DataError, match=r"is not a prepared dataset \(no meta.json\)"):
        load_meta(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"vocab_size": {"src": 1, "tgt": 1}}))
    with pytest.raises(DataError, match="damaged or from an incompatible version"):
        load_meta(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"splits": {}, "kind": "images"}))
    assert load_meta(tmp_path)["kind"] == "images"
