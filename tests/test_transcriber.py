"""The speech recognizer's facade: recordings named every way the command takes them, checked
before any is transcribed, transcripts in order."""

from __future__ import annotations


import numpy as np
import pytest
import soundfile
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.data.speech import SPECIALS
from transduce.errors import TransduceError
from transduce.transcriber import Transcriber, audio_inputs

from .helpers import write_tone_recordings

CHARS = [*SPECIALS, " ", "A", "B", "C"]


@pytest.fixture()
def transcriber(device):
    torch.manual_seed(0)
    cfg = ModelConfig.preset("speech-small", encoder_layers=1, decoder_layers=1, d_model=32,
                             n_heads=2, d_ff=64, vocab_size=len(CHARS), source_positions=40,
                             max_positions=64, ctc_weight=0.0)
    model = Transformer(cfg).to(device).eval()
    decode = DecodeConfig(beam=1, max_len_a=0, max_len_b=6)
    return Transcriber(model, {"chars": CHARS}, torch.device(device), "fp32", decode)


def test_recordings_are_named_as_files_folders_or_tables(tmp_path):
    table = write_tone_recordings(tmp_path, count=3)
    from_table = audio_inputs([table])
    assert [p.name for p, _ in from_table] == ["0.flac", "1.flac", "2.flac"]
    assert all(text for _, text in from_table)  # a table brings its transcripts
    folder = audio_inputs([tmp_path / "table", tmp_path / "table" / "1.flac"])
    assert [(p.name, text) for p, text in folder] == [("0.flac", None), ("1.flac", None),
                                                      ("2.flac", None), ("1.flac", None)]
    (tmp_path / "quiet").mkdir()
    with pytest.raises(TransduceError, match="quiet: no recordings in this folder"):
        audio_inputs([tmp_path / "quiet"])
    with pytest.raises(TransduceError, match="gone.flac: no such file or folder"):
        audio_inputs([tmp_path / "gone.flac"])


def test_every_unusable_recording_is_named_before_any_is_transcribed(transcriber, tmp_path):
    write_tone_recordings(tmp_path, count=2)
    good = sorted((tmp_path / "table").glob("*.flac"))
    # 40 encoder positions x 4 (subsampling) x 10 ms: about 1.6 s
    soundfile.write(tmp_path / "long.flac", np.zeros(16_000 * 3, dtype=np.float32), 16_000)
    (tmp_path / "noise.flac").write_bytes(b"not a recording")
    with pytest.raises(TransduceError) as refused:
        transcriber.transcribe([*good, tmp_path / "long.flac", tmp_path / "noise.flac"])
    message = str(refused.value)
    assert "2 of 4 recordings cannot be transcribed" in message
    assert "long.flac: 3.0 s, longer than the about 2 s" in message
    assert "noise.flac: not a readable recording" in message


def test_transcripts_come_in_order_each_as_its_recording_alone(transcriber, tmp_path):
    write_tone_recordings(tmp_path, count=3)
    files = sorted((tmp_path / "table").glob("*.flac"))
    together = list(transcriber.transcribe(files, chunk=2))
    alone = [next(iter(transcriber.transcribe([f]))) for f in files]
    assert together == alone and len(together) == 3
    assert all(set(text) <= set(" ABC") for text in together)
    with pytest.raises(TransduceError, match="takes a list"):
        transcriber.transcribe(str(files[0]))


def test_evaluate_scores_the_transcripts_against_the_table(transcriber, tmp_path):
    table = write_tone_recordings(tmp_path, count=2)
    result = transcriber.evaluate(table)
    assert (result.metric, result.count, len(result.outputs)) == ("cer", 2, 2)
    assert result.outputs == list(transcriber.transcribe([table]))
    assert result["chars"] == sum(len(t) for _, t in audio_inputs([table]))
    assert result.value == result["cer"] == result["char_errors"] / result["chars"]


def test_the_facade_takes_folders_and_tables_as_the_command_does(transcriber, tmp_path):
    table = write_tone_recordings(tmp_path, count=3)
    files = sorted((tmp_path / "table").glob("*.flac"))
    by_file = list(transcriber.transcribe(files))
    assert list(transcriber.transcribe([tmp_path / "table"])) == by_file
    assert list(transcriber.transcribe([str(table)])) == by_file
