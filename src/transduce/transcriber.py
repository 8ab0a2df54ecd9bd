"""Using a trained speech model: ``Transcriber`` transcribes recordings (files, folders of them, or
a recordings table), scores a table (character and word error rates) and gives the decoder's
attention over a recording's frames for the picture ``transduce attention --audio`` draws.

A recording is read, resampled to 16 kHz and turned into the log-mel frames the model was trained
on (``data.audio``); recordings are transcribed in batches of similar length with the same search
as translation (``decoding.translate_ids``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from .config import DecodeConfig
from .data.audio import HOP, SAMPLE_RATE, log_mel, read_audio, read_table
from .data.speech import pad_frames, target_vocabulary
from .decoding import translate_ids
from .errors import DataError, TransduceError, listed
from .evaluate import Evaluation, error_rate
from .loading import load_checked
from .runtime import autocast

AUDIO_SUFFIXES = (".flac", ".wav", ".ogg", ".aiff", ".aif", ".au")


def audio_inputs(paths: Sequence[str | Path]) -> list[tuple[Path, Optional[str]]]:
    """The recordings named: audio files, folders (their audio files, sorted) and recordings tables
    (``.tsv``: path and transcript columns), as ``(file, transcript or None)``; every missing file
    is an error before anything is transcribed."""
    found: list[tuple[Path, Optional[str]]] = []
    for path in map(Path, paths):
        if path.is_file() and path.suffix.lower() == ".tsv":
            found += [(audio, text) for audio, text in read_table(path)]
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
            if not files:
                raise TransduceError(f"{path}: no recordings in this folder "
                                     f"({', '.join(AUDIO_SUFFIXES)})")
            found += [(p, None) for p in files]
        elif path.is_file():
            found.append((path, None))
        else:
            raise TransduceError(f"{path}: no such file or folder")
    return found


class WhisperText:
    """An imported Whisper model's text: its tokenizer (read with ``transformers``) and the prompt
    Whisper's decoder starts from after <|startoftranscript|>: the language and the task (for a
    multilingual model), then <|notimestamps|> (timestamps are not predicted here)."""

    def __init__(self, folder: Path, language: str = "en", task: str = "transcribe") -> None:
        try:
            from transformers import WhisperTokenizer
        except ImportError:
            raise TransduceError("an imported Whisper model's tokenizer is read with transformers: "
                                 "pip install 'transduce[hf]'") from None
        try:
            self.tokenizer = WhisperTokenizer.from_pretrained(str(folder))
        except (OSError, ValueError, TypeError) as error:
            raise TransduceError(f"{folder}: Whisper's tokenizer cannot be read ({error}); import "
                                 "a folder with its tokenizer files (vocab.json and merges.txt, "
                                 "or tokenizer.json)") from None
        if task not in ("transcribe", "translate"):
            raise TransduceError(f"--task {task!r}: Whisper's tasks are transcribe and translate")
        known = set(self.tokenizer.get_vocab())
        multilingual = f"<|{language}|>" in known or "<|en|>" in known
        if multilingual and f"<|{language}|>" not in known:
            raise TransduceError(f"--language {language!r}: this Whisper model has no "
                                 f"<|{language}|> token")
        prompt = [f"<|{language}|>", f"<|{task}|>"] if multilingual else []
        self.prompt = self.tokenizer.convert_tokens_to_ids([*prompt, "<|notimestamps|>"])

    def decode_tgt(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True).strip()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(" " + text.strip(), add_special_tokens=False)

    def label(self, i: int) -> str:
        return self.tokenizer.convert_ids_to_tokens(int(i)).replace("Ġ", " ")


class Transcriber:
    """A trained speech model: ``Transcriber.load(RUN)``, then ``transcribe(files)``,
    ``evaluate(table)`` or ``attention(file)``."""

    def __init__(self, model, info: dict, device: torch.device, precision: str,
                 decode: Optional[DecodeConfig] = None, folder: Optional[Path] = None,
                 language: str = "en", task: str = "transcribe") -> None:
        self.model, self.info, self.device, self.precision = model, info, device, precision
        self.folder = folder
        self.config = model.config
        self.decode = decode or DecodeConfig()
        # a Whisper model: its tokenizer and prompt, and the 30-s chunks its encoder reads
        self.whisper = info.get("whisper")
        self.vocabulary = (WhisperText(folder, language, task) if self.whisper else
                           target_vocabulary(folder, info))
        self.prompt = getattr(self.vocabulary, "prompt", [])

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32",
             decode: Optional[DecodeConfig] = None, language: str = "en",
             task: str = "transcribe") -> "Transcriber":
        """A run or checkpoint of a speech model (trained here, or imported from Whisper: then
        ``language`` and ``task`` make its prompt)."""
        loaded = load_checked(path, ("speech-recognition",), "transcribe recordings", device,
                              precision)
        folder, model, info = loaded.folder, loaded.model, loaded.info
        dev, precision = loaded.device, loaded.precision
        if decode is not None and decode.ctc_weight and model.ctc is None:
            raise TransduceError(f"--ctc-weight {decode.ctc_weight}: {path} has no CTC head (it "
                                 "was trained with ctc_weight=0); transcribe without it")
        if "chars" not in info and "whisper" not in info:
            raise TransduceError(f"{folder}/model.json names neither characters nor a Whisper "
                                 "tokenizer: it was not written by transduce's training or import")
        return cls(model, info, dev, precision, decode, folder, language, task)

    def features(self, files: Sequence[Path], checked: bool = False) -> list[np.ndarray]:
        """Each file's log-mel frames ``(T, n_mels)``; a file that cannot be used is an error
        naming it (``check``, unless the caller ``checked`` them already)."""
        if not checked:
            self.check(files)
        return [self.frames(read_audio(path, SAMPLE_RATE)) for path in files]

    def frames(self, samples: np.ndarray) -> np.ndarray:
        """A recording's log-mel frames ``(T, n_mels)`` from its samples at 16 kHz."""
        if self.whisper:  # padded with silence to the chunk Whisper reads, as its extractor
            samples = np.pad(samples, (0, self.whisper["chunk_samples"] - len(samples)))
        return log_mel(samples, n_mels=self.config.channels).T.numpy()

    def check(self, files: Sequence[Path]) -> None:
        """Every recording readable and short enough for the model, from the files' headers, before
        any is transcribed: one DataError naming each that is not (the first ten)."""
        import soundfile

        problems = []
        for path in files:
            try:
                info = soundfile.info(str(path))
            except (RuntimeError, soundfile.LibsndfileError, OSError) as error:
                problems.append(f"{path}: not a readable recording ({error})")
                continue
            samples = round(info.frames * SAMPLE_RATE / info.samplerate) if info.samplerate else 0
            problem = self.too_long(samples)
            if problem:
                problems.append(f"{path}: {problem}")
        if problems:
            from .data.corpus import unusable

            raise unusable(f"{len(problems)} of {len(files):,} recordings cannot be transcribed "
                           "(cut long ones into shorter recordings; long-form transcription is "
                           "not supported)", problems)

    def too_long(self, samples: int) -> Optional[str]:
        """Why a recording of ``samples`` at 16 kHz is too long for the model (None: it is not)."""
        seconds = samples / SAMPLE_RATE
        if self.whisper:
            limit = self.whisper["chunk_samples"]
            if samples > limit:
                return (f"{seconds:.1f} s, longer than the {limit / SAMPLE_RATE:.0f} s Whisper "
                        "reads at a time")
            return None
        if self.model.src_embed.positions(samples // HOP) > self.config.audio_positions:
            most = self.config.audio_positions * self.config.subsample * HOP / SAMPLE_RATE
            return f"{seconds:.1f} s, longer than the about {most:.0f} s the model's encoder " \
                   "positions hold"
        return None

    def transcribe(self, files: Sequence[str | Path], chunk: int = 64) -> Iterator[str]:
        """The transcript of each recording, in order, yielded as each chunk of ``chunk``
        recordings is done: ``files`` are audio files, folders (their recordings, sorted) or
        recordings tables, as the command takes them; every recording is checked (``check``)
        before the first is transcribed."""
        # (what the command takes: files, folders of recordings, recordings tables)
        files = [path for path, _ in audio_inputs(listed(files, "recordings",
                                                         "Transcriber.transcribe"))]
        self.check(files)
        return self._transcribe(files, chunk)

    def _transcribe(self, files: list[Path], chunk: int) -> Iterator[str]:
        for start in range(0, len(files), chunk):
            frames = self.features(files[start:start + chunk], checked=True)
            yield from self.transcribe_features(frames)

    def transcribe_features(self, frames: Sequence[np.ndarray],
                            decode: Optional[DecodeConfig] = None) -> list[str]:
        """Transcripts of recordings given as log-mel frames ``(T, n_mels)`` each (searched with
        ``decode``, by default the transcriber's)."""
        self.model.eval()
        prefixes = [self.prompt] * len(frames) if self.prompt else None
        hyps = translate_ids(self.model, list(frames), decode or self.decode, prefixes,
                             precision=self.precision)
        return [self.vocabulary.decode_tgt(h[0].tokens) for h in hyps]

    def evaluate(self, table: str | Path) -> Evaluation:
        """Character and word error rates on a recordings table: ``scores`` holds ``cer``,
        ``wer`` and their counts (``char_errors``, ``chars``, ``word_errors``, ``words``);
        ``outputs`` the transcripts, in the table's order."""
        rows = read_table(table)
        texts = list(self.transcribe([path for path, _ in rows]))
        references = [text for _, text in rows]
        cer, wer = error_rate(texts, references, "char"), error_rate(texts, references, "word")
        return Evaluation("cer", cer["rate"], len(rows), {
            "cer": cer["rate"], "wer": wer["rate"], "char_errors": cer["errors"],
            "chars": cer["length"], "word_errors": wer["errors"], "words": wer["length"]}, texts)

    @torch.no_grad()
    def attention(self, path: Path, text: Optional[str] = None):
        """``(frames (T, n_mels), tokens, weights (L, H, len, S))``: the recording's features, the
        tokens (characters, or a Whisper model's prompt and pieces) of ``text`` (default: its
        transcript by the model) and the decoder's cross-attention from the step that wrote each
        token (then eos) to the encoder positions, every layer."""
        frames = self.features([path])[0]
        text = text if text is not None else self.transcribe_features([frames])[0]
        ids = self.prompt + self.vocabulary.encode(text)
        if len(ids) == len(self.prompt):
            raise DataError(f"{path}: the model heard nothing to write; give --tgt TEXT to draw "
                            "the attention of a transcript")
        c = self.config
        src = pad_frames([frames], self.device)
        tgt = torch.tensor([[c.start_id, *ids]], device=self.device)  # (the last step: eos)
        self.model.eval()
        with autocast(self.device, self.precision):
            _, attention = self.model(src, tgt, need_weights=True)
        weights = torch.stack([w[0].float().cpu() for w in attention.cross])  # (L, H, T, S)
        return frames, [self.vocabulary.label(i) for i in ids], weights


def draw_audio_attention(transcriber: Transcriber, file: str | Path, out: str | Path,
                         text: Optional[str] = None) -> tuple[Path, str]:
    """The recording's log-mel spectrogram, and under it each decoder layer's cross-attention
    (the mean of its heads) from every character to the encoder positions, on the same time axis
    (one position per ``subsample`` frames of 10 ms); returns the picture's path and the text."""
    from .visualize import _pyplot, _save

    frames, chars, weights = transcriber.attention(Path(file), text)
    if transcriber.whisper:  # (the silence Whisper's chunk was padded with is not drawn)
        frames = frames[: len(read_audio(file, SAMPLE_RATE)) // HOP + 1]
    seconds = len(frames) * HOP / SAMPLE_RATE
    layers = weights.size(0)
    plt = _pyplot()
    height = 1.6 + layers * max(1.2, 0.16 * len(chars))
    fig, axes = plt.subplots(1 + layers, 1, figsize=(max(6.0, 2.2 * seconds), height),
                             sharex=True, squeeze=False)
    axes = axes[:, 0]
    axes[0].imshow(frames.T, origin="lower", aspect="auto", cmap="magma",
                   extent=(0, seconds, 0, frames.shape[1]))
    axes[0].set_ylabel("mel bin")
    axes[0].set_title(f"{Path(file).name}: \"{''.join(chars)}\"", fontsize=9)
    step = transcriber.config.subsample * HOP / SAMPLE_RATE
    for layer, ax in enumerate(axes[1:]):
        mean = weights[layer].mean(0).numpy()  # (characters + eos, positions)
        rows = [*chars, "</s>"][: mean.shape[0]]
        ax.imshow(mean, aspect="auto", cmap="viridis", interpolation="nearest",
                  extent=(0, mean.shape[1] * step, len(rows) - 0.5, -0.5))
        ax.set_yticks(range(len(rows)), ["_" if c == " " else c for c in rows], fontsize=6)
        ax.set_ylabel(f"layer {layer + 1}")
    axes[-1].set_xlabel("seconds (_: a space)")
    axes[-1].set_xlim(0, seconds)
    return _save(fig, out, inputs=[file]), "".join(chars)
