"""``prepare --audio``: recordings and transcripts checked, features and character targets written
(recordings made here)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from transduce.data.audio import log_mel
from transduce.data.speech import prepare_speech
from transduce.errors import DataError

from .test_audio import chirp

WORDS = ["YES", "NO", "TWO SIX", "ERASE", "A B C", "ENTER"]


def recordings(root, count: int = 6, extra: str = "") -> object:
    (root / "wav").mkdir(parents=True, exist_ok=True)
    lines = ["path\ttranscript"]
    for i in range(count):
        soundfile.write(root / "wav" / f"{i}.flac", chirp(0.2 + 0.05 * i, seed=i), 16_000)
        lines.append(f"wav/{i}.flac\t{WORDS[i % len(WORDS)]}")
    (root / "table.tsv").write_text("\n".join(lines) + "\n" + extra)
    return root / "table.tsv"


def test_features_and_targets_are_written_as_read(tmp_path):
    table = recordings(tmp_path)
    meta = prepare_speech(table, tmp_path / "data", log=None)
    chars = json.loads((tmp_path / "data" / "chars.json").read_text())
    assert chars[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert chars[4:] == sorted(set("".join(WORDS)))
    frames = np.fromfile(tmp_path / "data" / "train.features.idx", dtype=np.int64)
    features = np.fromfile(tmp_path / "data" / "train.features.bin", dtype=np.float16)
    features = features.reshape(-1, 80)
    offsets = np.fromfile(tmp_path / "data" / "train.tgt.idx", dtype=np.int64)
    targets = np.fromfile(tmp_path / "data" / "train.tgt.bin", dtype=np.int32)
    for i in range(6):
        expected = log_mel(chirp(0.2 + 0.05 * i, seed=i)).T.numpy()
        stored = features[frames[i]:frames[i + 1]].astype(np.float32)
        # (FLAC keeps 16 bits: the recording read back differs from the float signal by 2^-16)
        np.testing.assert_allclose(stored, expected, atol=2e-2)
        assert "".join(chars[t] for t in targets[offsets[i]:offsets[i + 1]]) == WORDS[i]
    assert meta["splits"]["train"]["utterances"] == 6
    assert (tmp_path / "data" / "train.transcripts.txt").read_text().splitlines() == WORDS
    from transduce.data.audio import read_table  # the split as a table `evaluate --audio` reads

    assert read_table(tmp_path / "data" / "train.tsv") == [
        ((tmp_path / "wav" / f"{i}.flac").resolve(), WORDS[i]) for i in range(6)]


def test_a_held_out_part_and_unknown_characters(tmp_path):
    table = recordings(tmp_path)
    meta = prepare_speech(table, tmp_path / "a", hold_out=2, log=None)
    assert [meta["splits"][s]["utterances"] for s in ("train", "valid")] == [4, 2]
    again = prepare_speech(table, tmp_path / "b", hold_out=2, log=None)
    assert meta["splits"] == again["splits"]
    valid = tmp_path / "v"
    soundfile.write(tmp_path / "wav" / "q.flac", chirp(0.3), 16_000)
    (tmp_path / "valid.tsv").write_text("path\ttranscript\nwav/q.flac\tQUIT\n")
    meta = prepare_speech(table, valid, tmp_path / "valid.tsv", log=None)
    assert meta["splits"]["valid"]["unknown"] == len([c for c in "QUIT" if c not in "".join(WORDS)])


def test_every_bad_recording_is_named_and_nothing_written(tmp_path):
    table = recordings(tmp_path, extra="wav/silent.flac\tNO\nwav/text.flac\tYES\n")
    soundfile.write(tmp_path / "wav" / "silent.flac", np.zeros(1600, dtype=np.float32), 16_000)
    (tmp_path / "wav" / "text.flac").write_text("not a recording")
    with pytest.raises(DataError, match=r"(?s)2 recording\(s\) cannot be used:.*silent.flac: the "
                                        r"recording is silent.*text.flac: not a readable"):
        prepare_speech(table, tmp_path / "data", log=None)
    assert not (tmp_path / "data").exists()


def test_the_prepared_split_is_read_back_and_batched_with_nan_padding(tmp_path):
    from types import SimpleNamespace

    from transduce.data.speech import Characters, SpeechSet, collate_speech

    meta = prepare_speech(recordings(tmp_path), tmp_path / "out", log=None)
    ds = SpeechSet(tmp_path / "out", "train")
    assert len(ds) == 6 and ds.transcripts[2] == "TWO SIX"
    chars = Characters(meta["chars"])
    frames, ids = ds[2]
    assert chars.decode_tgt(ids) == "TWO SIX" and chars.encode("TWO SIX") == ids.tolist()
    assert frames.shape == (ds.src_lengths[2], 80)
    config = SimpleNamespace(pad_id=0, start_id=1, eos_id=2)
    batch = collate_speech(ds, [0, 5], config)
    T = int(max(ds.src_lengths[0], ds.src_lengths[5]))
    assert batch.src.shape == (2, T, 80)
    short = 0 if ds.src_lengths[0] < ds.src_lengths[5] else 1
    n = int(ds.src_lengths[[0, 5][short]])
    assert batch.src[short, n:].isnan().all() and not batch.src[:, :n].isnan().any()
    assert batch.tgt_in[0, 0] == 1 and batch.tgt_out[0, len(ds[0][1])] == 2


def test_spec_augment_masks_runs_of_frames_and_bands_of_bins():
    from transduce.data.speech import spec_augment

    frames = np.ones((200, 80), dtype=np.float16)
    rng = np.random.default_rng(0)
    masked = spec_augment(frames, 2, 2, 30, 20, rng)
    assert masked.dtype == np.float32 and frames.min() == 1  # a copy
    zero_rows = (masked == 0).all(1).sum()
    zero_cols = (masked == 0).all(0).sum()
    assert 0 < zero_rows <= 2 * 30 and 0 < zero_cols <= 2 * 20
    again = spec_augment(frames, 2, 2, 30, 20, np.random.default_rng(0))
    assert np.array_equal(masked, again)  # the same draws for the same seed


def test_speed_perturbation_writes_each_training_recording_at_each_speed(tmp_path):
    from transduce.data.audio import change_speed, read_audio, read_table
    from transduce.data.speech import SpeechSet

    table = recordings(tmp_path)
    meta = prepare_speech(table, tmp_path / "data", hold_out=2, speeds=(1.1, 0.9, 1.0), log=None)
    assert meta["speeds"] == [0.9, 1.0, 1.1]
    assert [meta["splits"][s]["utterances"] for s in ("train", "valid")] == [12, 2]
    train, valid = SpeechSet(tmp_path / "data", "train"), SpeechSet(tmp_path / "data", "valid")
    rows = read_table(tmp_path / "data" / "train.tsv")
    assert len(rows) == 4  # (the table lists each recording once, for `evaluate --audio`)
    for i, (path, text) in enumerate(rows):
        samples = read_audio(path)
        for j, factor in enumerate((0.9, 1.0, 1.1)):
            frames, _ = train[3 * i + j]
            expected = log_mel(change_speed(samples, factor)).T.numpy()
            np.testing.assert_allclose(frames.astype(np.float32), expected, atol=2e-2)
            assert train.transcripts[3 * i + j] == text
    assert valid.src_lengths.tolist() == [len(log_mel(read_audio(path)).T) for path, _ in
                                          read_table(tmp_path / "data" / "valid.tsv")]
    with pytest.raises(DataError, match="between 0.5 and 2"):
        prepare_speech(table, tmp_path / "bad", speeds=(3.0,), log=None)


def test_pieces_as_targets(tmp_path):
    from transduce.data.speech import Pieces, SpeechSet, target_vocabulary

    meta = prepare_speech(recordings(tmp_path), tmp_path / "data", vocab_size=24, log=None)
    assert meta["units"] == "pieces" and meta["vocab_size"] == 24
    pieces = target_vocabulary(tmp_path / "data", meta)
    assert isinstance(pieces, Pieces) and pieces.chars[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    ds = SpeechSet(tmp_path / "data", "train")
    for i, word in enumerate(WORDS):
        ids = ds[i][1].tolist()
        assert ids == pieces.encode(word) and pieces.decode_tgt(ids) == word
        assert "".join(pieces.label(t) for t in ids).strip() == word
    # (pieces, not characters: fewer ids than characters)
    assert len(ds.targets) < len("".join(WORDS))
    assert json.loads((tmp_path / "data" / "chars.json").read_text()) == pieces.chars
    again = prepare_speech(recordings(tmp_path), tmp_path / "data", log=None, force=True)
    assert again["units"] == "char" and not (tmp_path / "data" / "pieces.model").exists()
