"""Audio for the speech descendants: reading recordings, and the log-mel features an encoder reads.

Recordings are read with ``soundfile`` (FLAC, WAV, OGG and the other formats libsndfile reads; it
ships its own library, so nothing is installed beside it) as mono floats: several channels are
averaged. A recording at another sample rate than the one asked for is resampled to it through
its spectrum (band-limited: nothing above the lower rate's half folds back). An empty or silent
recording (no sample reaching -80 dB of full scale) is refused with a message.

The features are Whisper's (Radford et al. 2022), computed with ``torch.stft``: 25 ms Hann windows
(400 samples at 16 kHz) every 10 ms (160), centred (the signal reflected at its ends), the power
spectrum through 80 triangular mel filters from 0 to 8 kHz on the Slaney scale with Slaney's
area normalization (librosa's default, which Whisper uses; ``scale="htk"`` for HTK's scale), the
base-10 logarithm floored at 1e-10, values more than 8 below the recording's maximum raised to
it, then ``(x + 4) / 4``. The last frame is dropped, as Whisper does, so a recording of N samples
gives N // 160 frames.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import DataError

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
N_MELS = 80
SILENCE = 1e-4  # (-80 dB of full scale: about 3 steps of a 16-bit recording)


def read_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A recording as mono float32 samples in [-1, 1], or a DataError naming the file."""
    try:
        import soundfile
    except ImportError:
        raise DataError("reading audio needs the soundfile package: pip install soundfile"
                        ) from None
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such audio file")
    return decode_audio(str(path), sample_rate)


class TooLong(DataError):
    """A recording longer than a limit, found while decoding it."""


def decode_audio(source, sample_rate: int = SAMPLE_RATE, most: Optional[float] = None
                 ) -> np.ndarray:
    """``read_audio`` of a file name or an open binary file (named in messages by ``str``);
    ``most``: decode at most this many seconds and a sample, and raise ``TooLong`` when the file
    held more (whatever its header claimed)."""
    import soundfile

    path = source  # (a name, or a file object whose str is one: the messages' subject)
    try:
        with soundfile.SoundFile(source) as handle:
            rate = handle.samplerate
            frames = -1 if most is None else int(most * rate) + 1
            samples = handle.read(frames, dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError, OSError) as error:
        raise DataError(f"{path}: not a readable recording ({error})") from None
    if most is not None and len(samples) > int(most * rate):
        raise TooLong(f"{path} holds more than {most:g} s of sound")
    if not len(samples):
        raise DataError(f"{path}: the recording is empty (0 samples)")
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if not np.isfinite(mono).all():
        raise DataError(f"{path}: the recording holds samples that are not finite numbers")
    if np.abs(mono).max() < SILENCE:
        raise DataError(f"{path}: the recording is silent (its loudest sample is below "
                        f"{SILENCE:g} of full scale, -80 dB): nothing to transcribe")
    return mono if rate == sample_rate else resample(mono, round(len(mono) * sample_rate / rate))


def change_speed(samples: np.ndarray, factor: float) -> np.ndarray:
    """The recording played ``factor`` times as fast, pitch and tempo together (as sox's
    ``speed``; Ko et al. 2015's speed perturbation): resampled to ``len / factor`` samples."""
    return samples if factor == 1.0 else _spectral(samples, round(len(samples) / factor))


def resample(samples: np.ndarray, length: int) -> np.ndarray:
    """The recording as ``length`` samples over the same time (another sample rate). The
    recording and its mirror image go through the spectrum together, so that its end does not
    meet its start: the spectrum's wrap-around would ring there."""
    length = max(1, length)
    mirrored = np.concatenate([samples, samples[::-1]])
    return _spectral(mirrored, 2 * length)[:length]


def _spectral(samples: np.ndarray, length: int) -> np.ndarray:
    """``samples`` as ``length`` samples over the same time, through their spectrum (band-limited:
    what rises above half the new rate is cut, not folded back)."""
    n, m = len(samples), max(2, length)
    spectrum = np.fft.rfft(np.asarray(samples, dtype=np.float64))[: m // 2 + 1]
    return (np.fft.irfft(spectrum, n=m) * (m / n)).astype(np.float32)


def _hz_to_mel(hz: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + hz / 700.0)
    # Slaney: linear below 1 kHz (3 mels every 200 Hz), logarithmic above (27 mels an octave of 6.4)
    step = math.log(6.4) / 27.0
    return np.where(hz < 1000.0, 3.0 * hz / 200.0,
                    15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / step)


def _mel_to_hz(mel: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)
    step = math.log(6.4) / 27.0
    return np.where(mel < 15.0, 200.0 * mel / 3.0, 1000.0 * np.exp(step * (mel - 15.0)))


def mel_filters(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS,
                low: float = 0.0, high: float | None = None, scale: str = "slaney") -> torch.Tensor:
    """Triangular mel filters ``(n_mels, n_fft // 2 + 1)`` over the power spectrum's bins, each
    normalized to unit area in Hz (Slaney's normalization)."""
    if scale not in ("slaney", "htk"):
        raise ValueError(f"mel scale {scale!r}: choose slaney or htk")
    high = sample_rate / 2 if high is None else high
    bins = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(low), scale),
                                   _hz_to_mel(np.array(high), scale), n_mels + 2), scale)
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins - left) / (centre - left)
    falling = (right - bins) / (right - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (right - left))
    return torch.from_numpy(weights).float()


def log_mel(samples: torch.Tensor | np.ndarray, n_mels: int = N_MELS, n_fft: int = N_FFT,
            hop: int = HOP, sample_rate: int = SAMPLE_RATE, scale: str = "slaney") -> torch.Tensor:
    """Whisper's log-mel features of one recording ``(N,)`` -> ``(n_mels, N // hop)``."""
    # (in float64: the quietest filters' logarithms keep their digits)
    samples = torch.as_tensor(samples).to(torch.float64)
    if samples.dim() != 1 or len(samples) < 2:
        raise ValueError(f"log_mel reads one recording of at least 2 samples, got shape "
                         f"{tuple(samples.shape)}")
    window = torch.hann_window(n_fft, dtype=torch.float64)
    spectrum = torch.stft(samples, n_fft, hop, window=window, center=True, pad_mode="reflect",
                          return_complex=True)
    power = spectrum[:, :-1].abs() ** 2  # (F, frames), the last frame dropped
    mel = mel_filters(sample_rate, n_fft, n_mels, scale=scale).double() @ power
    logs = torch.clamp(mel, min=1e-10).log10()
    logs = torch.maximum(logs, logs.max() - 8.0)
    return ((logs + 4.0) / 4.0).float()


def read_table(path: str | Path) -> list[tuple[Path, str]]:
    """A table of recordings: a tab-separated file whose first line names its columns, among them
    ``path`` (relative to the table's folder, or absolute) and ``transcript`` (others ignored).
    Returns ``[(audio file, transcript)]``; every missing file, empty transcript or short line is
    named with its line number (the first ten) in one DataError, after all are read."""
    import csv

    from .corpus import read_lines, unusable

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such table (a TSV with columns path and transcript)")
    lines = iter(read_lines(path))
    header = next(lines, "").split("\t")
    missing = [name for name in ("path", "transcript") if name not in header]
    if missing:
        raise DataError(f"{path}, line 1: the header names columns {header}; expected path and "
                        f"transcript (tab-separated) among them, missing {', '.join(missing)}")
    where, what = header.index("path"), header.index("transcript")
    rows, problems = [], []
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        fields = next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_NONE))
        if len(fields) <= max(where, what):
            problems.append(f"line {number}: {len(fields)} column(s), expected {len(header)}")
            continue
        audio, transcript = path.parent / fields[where], fields[what].strip()
        if not audio.is_file():
            problems.append(f"line {number}: {audio}: no such audio file")
        elif not transcript:
            problems.append(f"line {number}: the transcript of {fields[where]} is empty")
        else:
            rows.append((audio, transcript))
    if problems:
        raise unusable(f"{path}: {len(problems)} row(s) cannot be used", problems)
    if not rows:
        raise DataError(f"{path}: no recordings listed below the header")
    return rows
