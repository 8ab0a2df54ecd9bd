"""Reading recordings and Whisper's log-mel features, against transformers' implementation
(computed here, on signals made here)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from transduce.data.audio import change_speed, log_mel, mel_filters, read_audio
from transduce.errors import DataError

transformers = pytest.importorskip("transformers", reason="the dev extra installs transformers")


def chirp(seconds: float, rate: int = 16_000, seed: int = 0) -> np.ndarray:
    """A rising tone with a little noise and a silent stretch: every filter and the floor used."""
    t = np.arange(int(seconds * rate)) / rate
    signal = 0.5 * np.sin(2 * np.pi * (100 + 3000 * t) * t)
    signal += 0.01 * np.random.default_rng(seed).standard_normal(len(t))
    signal[len(t) // 3 : len(t) // 2] = 0.0
    return signal.astype(np.float32)


@pytest.mark.parametrize("scale", ["slaney", "htk"])
def test_the_mel_filters_are_transformers(scale):
    from transformers.audio_utils import mel_filter_bank

    theirs = mel_filter_bank(num_frequency_bins=201, num_mel_filters=80, min_frequency=0.0,
                             max_frequency=8000.0, sampling_rate=16_000, norm="slaney",
                             mel_scale=scale)
    np.testing.assert_allclose(mel_filters(scale=scale).numpy(), theirs.T, atol=1e-8)


@pytest.mark.parametrize("seconds", [0.35, 1.0, 2.37])
def test_the_features_are_whispers(seconds):
    samples = chirp(seconds)
    extractor = transformers.WhisperFeatureExtractor()
    theirs = extractor._np_extract_fbank_features(samples[None], "cpu")[0]  # numpy, float64
    ours = log_mel(samples)
    assert ours.shape == (80, len(samples) // 160) == theirs.shape
    np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-6)
    assert ours.min() == pytest.approx(ours.max() - 2.0)  # the floor: 8 below the maximum, / 4


def test_recordings_are_read_as_mono_floats(tmp_path):
    samples = chirp(0.5)
    soundfile.write(tmp_path / "mono.flac", samples, 16_000)
    np.testing.assert_allclose(read_audio(tmp_path / "mono.flac"), samples, atol=1 / 2**15)
    stereo = np.stack([samples, -samples * 0.5], axis=1)
    soundfile.write(tmp_path / "stereo.wav", stereo, 16_000, subtype="FLOAT")
    np.testing.assert_allclose(read_audio(tmp_path / "stereo.wav"), samples * 0.25, atol=1e-6)


@pytest.mark.parametrize("rate", [8_000, 22_050, 44_100])
def test_other_sample_rates_are_resampled_to_16_khz(tmp_path, rate):
    # two tones under 4 kHz (below every rate's half), sampled at `rate`: read back, they are
    # the same tones sampled at 16 kHz, over the same time
    def tones(r: int, seconds: float = 0.5) -> np.ndarray:
        t = np.arange(round(seconds * r)) / r  # (not whole periods: the ends do not meet)
        return (0.4 * np.sin(2 * np.pi * 443.7 * t) + 0.2 * np.sin(2 * np.pi * 2999.3 * t + 1)
                ).astype(np.float32)

    soundfile.write(tmp_path / "x.wav", tones(rate), rate, subtype="FLOAT")
    read, expected = read_audio(tmp_path / "x.wav"), tones(16_000)
    assert read.dtype == np.float32 and len(read) == len(expected) == 8_000
    np.testing.assert_allclose(read[400:-400], expected[400:-400], atol=1e-4)  # 25 ms in
    if rate > 16_000:  # down to 16 kHz, the ends too (without the mirror image they ring: 0.2)
        np.testing.assert_allclose(read, expected, atol=0.05)
    # and a 16 kHz recording is read as it is
    soundfile.write(tmp_path / "y.wav", expected, 16_000, subtype="FLOAT")
    assert np.array_equal(read_audio(tmp_path / "y.wav"), expected)


@pytest.mark.parametrize("damage, message", [
    ("empty", r"the recording is empty"),
    ("silent", r"the recording is silent \(its loudest sample is below 0.0001"),
    ("text", r"not a readable recording"),
    ("missing", r"no such audio file"),
])
def test_bad_recordings_are_named(tmp_path, damage, message):
    path = tmp_path / "x.wav"
    if damage == "empty":
        soundfile.write(path, np.zeros(0, dtype=np.float32), 16_000)
    elif damage == "silent":
        soundfile.write(path, np.full(1600, 3e-5, dtype=np.float32), 16_000, subtype="FLOAT")
    elif damage == "text":
        path.write_text("not audio")
    with pytest.raises(DataError, match=f"x.wav: {message}"):
        read_audio(path)


def test_one_sample_is_too_short_for_features():
    with pytest.raises(ValueError, match="at least 2 samples"):
        log_mel(torch.zeros(1))


def test_a_table_lists_recordings_and_transcripts(tmp_path):
    from transduce.data.audio import read_table

    (tmp_path / "a").mkdir()
    soundfile.write(tmp_path / "a" / "one.flac", chirp(0.3), 16_000)
    (tmp_path / "t.tsv").write_text("path\tspeaker\ttranscript\na/one.flac\tx\tTWO SIX \n\n")
    assert read_table(tmp_path / "t.tsv") == [(tmp_path / "a" / "one.flac", "TWO SIX")]
    (tmp_path / "bad.tsv").write_text("path\ttranscript\na/one.flac\t\nb.flac\tYES\na/one.flac\n")
    with pytest.raises(DataError, match=r"(?s)3 row\(s\) cannot be used:.*line 2: the transcript "
                                        r"of a/one.flac is empty.*line 3: .*b.flac: no such audio "
                                        r"file.*line 4: 1 column\(s\), expected 2"):
        read_table(tmp_path / "bad.tsv")
    (tmp_path / "head.tsv").write_text("file\ttext\na/one.flac\tYES\n")
    with pytest.raises(DataError, match="line 1: .*missing path, transcript"):
        read_table(tmp_path / "head.tsv")


def test_the_an4_tables_read_if_present():
    from pathlib import Path

    from transduce.data.audio import read_table

    an4 = Path(__file__).resolve().parents[3] / "shared" / "data" / "an4"
    if not (an4 / "train.tsv").is_file():
        pytest.skip(f"AN4 is not at {an4} (the shared data beside the checkout)")
    assert len(read_table(an4 / "train.tsv")) == 948 and len(read_table(an4 / "test.tsv")) == 130


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_a_changed_speed_moves_pitch_and_length_together_without_folding(factor):
    rate = 16_000
    t = np.arange(rate) / rate
    low, high = np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 7_600 * t)
    played = change_speed((low + high).astype(np.float32), factor)
    assert len(played) == round(rate / factor)
    spectrum = np.abs(np.fft.rfft(played)) / len(played)
    hz = np.fft.rfftfreq(len(played), 1 / rate)
    # the tone at 440 Hz moves to 440 x factor, as long as it was
    assert abs(hz[spectrum.argmax()] - 440 * factor) < 2 and spectrum.max() == pytest.approx(
        0.5, rel=0.02)
    moved = 7_600 * factor
    if moved < rate / 2:  # slower: the high tone moves down and stays
        assert spectrum[np.abs(hz - moved) < 2].max() == pytest.approx(0.5, rel=0.02)
    else:  # faster: it would pass 8 kHz, so it is cut, not folded back to 16 kHz - 8,360 Hz
        assert spectrum[hz > 1_000].max() < 0.01
    assert change_speed(low, 1.0) is low
