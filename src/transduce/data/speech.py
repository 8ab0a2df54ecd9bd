"""Speech for an encoder-decoder: ``prepare --audio TSV``, recordings and their transcripts checked,
turned into log-mel features (``data.audio``) and targets (characters, or with ``vocab_size`` the
pieces of a SentencePiece model trained on the training transcripts), and written for training to
stream.

Output folder layout (the same conventions as the text ``prepare``)::

    meta.json               "kind": "speech", the characters, feature settings, sizes
    chars.json              the target vocabulary: the special tokens, then every character of the
                            training transcripts (sorted); with pieces, the model's pieces
    pieces.model            with pieces: the SentencePiece model (special tokens at the same ids)
    SPLIT.features.bin      float16 log-mel frames, (all frames, n_mels), utterance after utterance
    SPLIT.features.idx      int64 frame offsets of the utterances, n + 1 of them
    SPLIT.tgt.bin/.idx      int32 target ids of each transcript, and their offsets
    SPLIT.transcripts.txt   the transcripts as given (scored against with CER and WER)
    SPLIT.tsv               the split's recordings table (absolute paths), for `evaluate --audio`

With ``speeds`` (e.g. 0.9, 1.0, 1.1: Ko et al. 2015's speed perturbation), the training split holds
each recording once per speed (``data.audio.change_speed``: tempo and pitch together), with its
transcript; train.tsv still lists each recording once.

Every recording is read and checked (``data.audio.read_audio``: its rate, length and loudness) as it
is written into the output's temporary folder, which becomes the output only when all could be
used; every transcript must be non-empty, and a character of a validation
transcript that no training transcript has is counted as unknown.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import DataError
from ..files import check_output_dir, member, output_dir
from ..reading import read_json
from ..version import __version__
from .audio import HOP, N_MELS, SAMPLE_RATE, change_speed, log_mel, read_audio, read_table
from .corpus import fingerprint, previously_prepared, read_lines, unusable
from .dataset import Batch, pad_sequences
from .tokenizer import SPECIAL_IDS, train_sentencepiece

FORMAT_VERSION = 1
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # at SPECIAL_IDS' ids


def char_vocabulary(transcripts: list[str]) -> list[str]:
    """The special tokens, then every character of ``transcripts`` in sorted order."""
    if [SPECIALS.index(name) for name in SPECIALS] != [
        SPECIAL_IDS[k] for k in ("pad_id", "bos_id", "eos_id", "unk_id")
    ]:
        raise DataError("the special tokens' ids disagree with the tokenizer's")
    return SPECIALS + sorted({c for text in transcripts for c in text})


class Characters:
    """A character vocabulary (``chars``: the special tokens, then one character per id): text to
    ids and back. Unknown characters become <unk>; the special tokens are not written."""

    # what defines the ids beyond the list itself (a checkpoint keeps it)
    files: tuple[Path, ...] = ()

    def __init__(self, chars: Sequence[str]) -> None:
        self.chars = list(chars)
        self.ids = {c: i for i, c in enumerate(self.chars)}
        self.unk_id = SPECIAL_IDS["unk_id"]

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(c, self.unk_id) for c in text]

    def label(self, i: int) -> str:
        return self.chars[int(i)]

    def decode_tgt(self, ids: Sequence[int]) -> str:
        n = len(SPECIALS)
        return "".join(self.chars[i] for i in map(int, ids) if n <= i < len(self.chars))


class Pieces(Characters):
    """A SentencePiece model's pieces as a speech model's targets (the special tokens at the ids of
    ``SPECIAL_IDS``, as every model trained here): text to ids and back."""

    def __init__(self, path: str | Path) -> None:
        import sentencepiece as spm

        self.path = Path(path)
        self.files = (self.path,)
        self.processor = spm.SentencePieceProcessor(model_file=str(self.path))
        super().__init__([self.processor.id_to_piece(i)
                          for i in range(self.processor.get_piece_size())])

    def encode(self, text: str) -> list[int]:
        return self.processor.encode(text)

    def label(self, i: int) -> str:
        return self.chars[int(i)].replace("\u2581", " ")

    def decode_tgt(self, ids: Sequence[int]) -> str:
        n = len(SPECIALS)
        return self.processor.decode([int(i) for i in ids if n <= int(i) < len(self.chars)])


def target_vocabulary(folder: str | Path, info: dict) -> Characters:
    """The targets a speech dataset's ``meta.json`` or a speech checkpoint's ``model.json``
    (``info``) names: its SentencePiece model's pieces (in ``folder``), else its characters."""
    if info.get("pieces"):
        return Pieces(member(folder, info["pieces"], "the target pieces' model"))
    return Characters(info["chars"])


def prepare_speech(table: str | Path, out: str | Path, valid: Optional[str | Path] = None,
                   hold_out: int = 0, seed: int = 1, force: bool = False, log=print,
                   speeds: Sequence[float] = (1.0,), vocab_size: int = 0) -> dict:
    """Prepare ``out`` from the recordings table ``table`` (and ``valid``, or ``hold_out``
    recordings drawn at random as the validation split; the training recordings at each of
    ``speeds``; with ``vocab_size``, a SentencePiece model of that many pieces as the targets);
    reuses ``out`` when nothing changed."""
    out, say = Path(out), log or (lambda *a, **k: None)
    speeds = sorted({float(v) for v in speeds})
    if not speeds or not all(0.5 <= v <= 2.0 for v in speeds):
        raise DataError(f"speeds {speeds}: each must lie between 0.5 and 2 (e.g. 0.9,1.0,1.1)")
    rows = read_table(table)
    splits = {"train": rows}
    if valid is not None:
        splits["valid"] = read_table(valid)
    elif hold_out:
        if hold_out >= len(rows):
            raise DataError(f"--hold-out {hold_out}: {table} lists only {len(rows)} recordings")
        held = set(np.random.default_rng(seed).permutation(len(rows))[:hold_out].tolist())
        splits = {"train": [r for i, r in enumerate(rows) if i not in held],
                  "valid": [r for i, r in enumerate(rows) if i in held]}
    options = {"kind": "speech", "format": FORMAT_VERSION, "hold_out": hold_out, "seed": seed,
               **({"speeds": speeds} if speeds != [1.0] else {}),
               **({"pieces": vocab_size} if vocab_size else {}),
               "valid": valid is not None, "n_mels": N_MELS, "hop": HOP,
               "transcripts": [text for split in splits.values() for _, text in split]}
    inputs = [Path(table)] + ([Path(valid)] if valid is not None else [])
    check_output_dir(out, "prepared dataset", inputs)
    fp = fingerprint([path for split in splits.values() for path, _ in split], options)

    def missing(meta: dict) -> list[str]:
        names = ["chars.json"] + [f"{split}.{kind}" for split in meta.get("splits", {})
                                  for kind in ("features.bin", "features.idx", "tgt.bin",
                                               "tgt.idx", "transcripts.txt", "tsv")]
        names += ["pieces.model"] if meta.get("pieces") else []
        return [name for name in names if not (out / name).is_file()]

    old = previously_prepared(out, fp, force, missing, say)
    if old is not None:
        return old
    start = time.time()
    # (written into the output's temporary folder as read: a recording that cannot be used stops
    # it at the end, every one named, and nothing is left behind)
    with output_dir(out, "prepared dataset", inputs) as tmp:
        if vocab_size:
            train_sentencepiece([text for _, text in splits["train"]], tmp / "pieces.model",
                                vocab_size)
            vocabulary = Pieces(tmp / "pieces.model")
        else:
            vocabulary = Characters(char_vocabulary([text for _, text in splits["train"]]))
        chars = vocabulary.chars
        (tmp / "chars.json").write_text(json.dumps(chars, ensure_ascii=False) + "\n")
        meta = {"format": FORMAT_VERSION, "kind": "speech", "transduce_version": __version__,
                "sample_rate": SAMPLE_RATE, "n_mels": N_MELS, "hop": HOP,
                "units": "pieces" if vocab_size else "char",
                **({"pieces": "pieces.model"} if vocab_size else {}),
                "vocab_size": len(chars), "chars": chars, "special_ids": dict(SPECIAL_IDS),
                "fingerprint": fp, "speeds": speeds,
                "inputs": {"table": str(table), "valid": str(valid or "")}, "splits": {}}
        problems: list[str] = []
        for split, pairs in splits.items():
            meta["splits"][split] = _write_split(tmp, split, pairs, vocabulary, problems,
                                                 speeds if split == "train" else [1.0])
        if problems:
            raise unusable(f"{len(problems)} recording(s) cannot be used", problems)
        for split, stats in meta["splits"].items():
            say(f"{split}: {stats['utterances']:,} recordings"
                + (f" ({len(speeds)} speeds)" if split == "train" and len(speeds) > 1 else "")
                + f", {stats['seconds'] / 60:.1f} min, "
                f"{stats['frames']:,} frames" + (f", {stats['unknown']} unknown characters"
                                                  if stats["unknown"] else ""))
        meta["seconds"] = round(time.time() - start, 2)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _write_split(tmp: Path, split: str, pairs, vocabulary: Characters, problems: list[str],
                 speeds: Sequence[float]) -> dict:
    """One split's features, targets and transcripts, each recording at each of ``speeds``; the
    recordings that cannot be used go to ``problems``."""
    from tqdm.auto import tqdm

    unk = SPECIAL_IDS["unk_id"]
    frames, lengths, targets, unknown, samples = [0], [0], [], 0, 0
    with open(tmp / f"{split}.features.bin", "wb") as features:
        for path, _ in tqdm(pairs, desc=f"{split} audio", leave=False, disable=None):
            try:
                audio = read_audio(path, SAMPLE_RATE)
            except DataError as error:
                problems.append(str(error))
                continue
            for factor in speeds:
                played = change_speed(audio, factor)
                mel = log_mel(played).T.numpy().astype(np.float16)  # (frames, n_mels)
                features.write(mel.tobytes())
                frames.append(frames[-1] + len(mel))
                samples += len(played)
    pairs_out = [(path, text) for path, text in pairs for _ in speeds]
    for _, text in pairs_out:
        row = vocabulary.encode(text)
        unknown += row.count(unk)
        targets.append(np.asarray(row, dtype=np.int32))
        lengths.append(lengths[-1] + len(row))
    np.asarray(frames, dtype=np.int64).tofile(tmp / f"{split}.features.idx")
    np.concatenate(targets).tofile(tmp / f"{split}.tgt.bin")
    np.asarray(lengths, dtype=np.int64).tofile(tmp / f"{split}.tgt.idx")
    (tmp / f"{split}.transcripts.txt").write_text("".join(t + "\n" for _, t in pairs_out))
    # the split as a recordings table (absolute paths): `evaluate --audio` scores a model on it
    (tmp / f"{split}.tsv").write_text("path\ttranscript\n" + "".join(
        f"{Path(path).resolve()}\t{text}\n" for path, text in pairs))
    return {"utterances": len(pairs_out), "frames": frames[-1],
            "seconds": round(samples / SAMPLE_RATE, 2), "unknown": unknown}


class SpeechSet:
    """One split of a prepared speech dataset, memory-mapped: ``dataset[i]`` is recording i's
    log-mel frames ``(T, n_mels)`` (float16) and its transcript's ids; ``src_lengths`` (frames) and
    ``tgt_lengths`` (ids) per recording, ``transcripts`` as written."""

    def __init__(self, folder: str | Path, split: str) -> None:
        folder = Path(folder)
        meta = read_json(folder / "meta.json")
        self.n_mels = meta["n_mels"]
        try:
            frames = np.fromfile(folder / f"{split}.features.idx", dtype=np.int64)
            self.features = np.memmap(folder / f"{split}.features.bin", np.float16, "r",
                                      shape=(int(frames[-1]), self.n_mels))
            self.offsets = np.fromfile(folder / f"{split}.tgt.idx", dtype=np.int64)
            self.targets = np.fromfile(folder / f"{split}.tgt.bin", dtype=np.int32)
            # (the project's line reader: a transcript's \u2028 or \r stays inside its line)
            self.transcripts = list(read_lines(folder / f"{split}.transcripts.txt"))
        except (OSError, ValueError, IndexError) as error:
            raise DataError(f"{folder}: the {split} recordings do not match meta.json ({error}); "
                            "prepare it again") from None
        if not len(frames) - 1 == len(self.offsets) - 1 == len(self.transcripts):
            raise DataError(f"{folder}: the {split} split's features, targets and transcripts "
                            "disagree in number; prepare it again")
        self.frames = frames
        self.src_lengths = np.diff(frames)
        self.tgt_lengths = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.transcripts)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return (self.features[self.frames[i]:self.frames[i + 1]],
                self.targets[self.offsets[i]:self.offsets[i + 1]])


def pad_frames(recordings: Sequence, device=None) -> torch.Tensor:
    """Recordings' frames ``(T_i, n_mels)`` -> ``(B, max T, n_mels)`` float32, the shorter ones
    padded with frames of NaN (the model's front end reads them as "no recording here")."""
    longest = max(len(r) for r in recordings)
    out = torch.full((len(recordings), longest, recordings[0].shape[-1]), float("nan"))
    for i, frames in enumerate(recordings):
        out[i, : len(frames)] = torch.as_tensor(np.asarray(frames, dtype=np.float32))
    return out if device is None else out.to(device)


def spec_augment(frames: np.ndarray, time_masks: int, freq_masks: int, time_width: int,
                 freq_width: int, rng: np.random.Generator) -> np.ndarray:
    """SpecAugment's masks (Park et al. 2019) on one recording ``(T, n_mels)``: ``time_masks``
    runs of up to ``time_width`` frames (at most a fifth of the recording each) and
    ``freq_masks`` bands of up to ``freq_width`` bins set to zero; a copy."""
    frames = np.array(frames, dtype=np.float32)
    T, F = frames.shape
    for _ in range(time_masks):
        width = int(rng.integers(0, min(time_width, T // 5) + 1))
        start = int(rng.integers(0, T - width + 1))
        frames[start:start + width] = 0.0
    for _ in range(freq_masks):
        width = int(rng.integers(0, min(freq_width, F) + 1))
        start = int(rng.integers(0, F - width + 1))
        frames[:, start:start + width] = 0.0
    return frames


def collate_speech(dataset: SpeechSet, indices: Sequence[int], config, train=None,
                   rng: Optional[np.random.Generator] = None) -> Batch:
    """The batch of recordings ``indices``: frames (NaN-padded) as the source, the transcripts'
    ids as the target; with ``train`` (a TrainConfig) and ``rng``, SpecAugment's masks."""
    pairs = [dataset[int(i)] for i in indices]
    recordings = [frames for frames, _ in pairs]
    if train is not None and rng is not None and (train.time_masks or train.freq_masks):
        recordings = [spec_augment(r, train.time_masks, train.freq_masks, train.time_mask_width,
                                   train.freq_mask_width, rng) for r in recordings]
    targets = [t for _, t in pairs]
    c = config
    return Batch(pad_frames(recordings), pad_sequences(targets, c.pad_id, prefix=c.start_id),
                 pad_sequences(targets, c.pad_id, suffix=c.eos_id),
                 torch.as_tensor(np.asarray(indices, dtype=np.int64)), c.pad_id)
