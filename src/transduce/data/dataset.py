"""A prepared split as a memory-mapped dataset, and collation into padded tensors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from ..checkpoint import TOKENIZER_KEYS, tokenizer_fingerprint
from ..errors import DataError, TransduceError
from ..files import member, recover
from .corpus import find_files, read_lines, read_pairs
from .tokenizer import SPECIAL_IDS, Tokenizer


def load_meta(data_dir: str | Path) -> dict:
    """``DATA_DIR/meta.json``, with a clear error when the folder is not a prepared dataset."""
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        recover(data_dir)  # a prepare killed while replacing the folder had moved it aside
    if not Path(data_dir).exists():
        raise DataError(f"{data_dir} does not exist: give the folder `transduce prepare ... --out "
                        f"DIR` wrote, or prepare one with `transduce prepare ... --out {data_dir}`")
    if not Path(data_dir).is_dir():
        raise DataError(f"{data_dir} is a file, not a prepared dataset folder; give the folder "
                        "`transduce prepare ... --out DIR` wrote")
    if not path.is_file():
        raise DataError(f"{data_dir} is not a prepared dataset (no meta.json); run `transduce "
                        f"prepare ... --out {data_dir}` first")
    try:
        meta = json.loads(path.read_text())
        meta["splits"]
        if "vocab_size" in meta and isinstance(meta["vocab_size"], dict):  # (text: languages)
            meta["src"], meta["tgt"]
    except (ValueError, KeyError) as error:
        raise DataError(f"{path} is damaged or from an incompatible version ({error}); prepare the "
                        "data again") from None
    return meta


def tokenizer_files(data_dir: str | Path, meta: dict) -> dict[str, Path]:
    """A prepared dataset's tokenizer files by role (``checkpoint.TOKENIZER_KEYS``), each confined
    to the folder: the SentencePiece models, and the ``vocab.json`` files of a model's own
    tokenizer."""
    spm = meta["spm"]
    try:
        return {
            key: member(data_dir, spm[key], f"tokenizer file ({key})")
            for key in TOKENIZER_KEYS
            if spm.get(key)
        }
    except TransduceError as error:
        raise DataError(str(error).replace("model.json", "meta.json")) from None


def dataset_fingerprint(data_dir: str | Path, meta: dict) -> tuple[str, bool]:
    """``(fingerprint, recorded)`` of the tokenizer a dataset's ids were made with (see
    ``checkpoint.tokenizer_fingerprint``); a dataset prepared before fingerprints gets one computed
    from its files (``recorded`` False).

    Raises:
        DataError: the tokenizer files were changed after the ids were written.
    """
    files = tokenizer_files(data_dir, meta)
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise DataError(f"{missing[0]} is missing: {data_dir} is incomplete; prepare the data "
                        "again")
    computed = tokenizer_fingerprint(files)
    recorded = meta.get("tokenizer_fingerprint")
    if recorded is None:
        return computed, False
    if recorded != computed:
        raise DataError(f"{data_dir}: its tokenizer files were changed after `transduce prepare` "
                        "wrote the token ids (they no longer match); prepare the data again")
    return recorded, True


def load_tokenizer(data_dir: str | Path, meta: dict | None = None) -> Tokenizer:
    meta = meta or load_meta(data_dir)
    return Tokenizer.from_roles(
        tokenizer_files(data_dir, meta),
        unk_id=meta.get("special_ids", {}).get("unk_id", SPECIAL_IDS["unk_id"]),
    )


class ParallelDataset:
    """Token ids of one split, read lazily from the memory-mapped arrays ``prepare`` wrote.

    ``dataset[i]`` is ``(src_ids, tgt_ids)``, numpy int32 arrays without bos/eos;
    ``src_lengths``/``tgt_lengths`` are the sentence lengths (numpy, for the batch sampler).
    """

    def __init__(self, data_dir: str | Path, split: str) -> None:
        self.dir = Path(data_dir)
        self.meta = load_meta(data_dir)
        if split not in self.meta["splits"]:
            raise DataError(f"{data_dir} has no {split!r} split (it has: "
                            f"{', '.join(self.meta['splits'])})")
        self.split = split
        self._src_tokens, self._src_offsets = self._open(self.meta["src"])
        self._tgt_tokens, self._tgt_offsets = self._open(self.meta["tgt"])
        self.src_lengths = np.diff(self._src_offsets).astype(np.int64)
        self.tgt_lengths = np.diff(self._tgt_offsets).astype(np.int64)

    def _open(self, lang: str) -> tuple[np.ndarray, np.ndarray]:
        bin_path, idx_path = (
            self.dir / f"{self.split}.{lang}.bin",
            self.dir / f"{self.split}.{lang}.idx",
        )
        offsets = np.fromfile(idx_path, dtype=np.int64)
        size = bin_path.stat().st_size // 4
        if offsets[-1] != size:
            raise DataError(f"{bin_path} holds {size} tokens but its index says {offsets[-1]}; "
                            "prepare the data again")
        tokens = np.memmap(bin_path, dtype=np.int32, mode="r") if size else np.zeros(0, np.int32)
        return tokens, offsets

    def __len__(self) -> int:
        return len(self.src_lengths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        s0, s1 = self._src_offsets[i], self._src_offsets[i + 1]
        t0, t1 = self._tgt_offsets[i], self._tgt_offsets[i + 1]
        return np.asarray(self._src_tokens[s0:s1]), np.asarray(self._tgt_tokens[t0:t1])

    def raw_text(self, side: str) -> list[str]:
        """The original lines of a valid/test split (``side`` is "src" or "tgt")."""
        path = self.dir / f"{self.split}.{self.meta[side]}.txt"
        if not path.is_file():
            raise DataError(f"{path} is missing: only valid/test splits keep their raw text")
        lines = list(read_lines(path))
        if len(lines) != len(self):
            raise DataError(f"{path} has {len(lines)} lines but the split has {len(self)} "
                            "sentences; prepare the data again")
        return lines


class EncodedPairs:
    """The pairs of raw files ``PREFIX.SRC``/``PREFIX.TGT`` (or ``.gz``), encoded in memory with
    ``tokenizer``: a second validation set (``train --valid-extra``) with the part of
    ``ParallelDataset``'s interface that validation reads."""

    def __init__(self, prefix: str | Path, src: str, tgt: str, tokenizer: Tokenizer,
                 task_prefix: str = "") -> None:
        src_file, tgt_file = find_files(
            [("", f"{prefix}.{src}"), ("", f"{prefix}.{tgt}")], "check the prefix"
        )
        pairs = list(read_pairs(src_file, tgt_file))
        if not pairs:
            raise DataError(f"{prefix}.{src} and {prefix}.{tgt} hold no sentence pairs")
        self._text = {"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]}
        sources = [task_prefix + s for s in self._text["src"]]
        self._src = [np.asarray(ids, np.int32) for ids in tokenizer.encode_src(sources)]
        self._tgt = [np.asarray(ids, np.int32) for ids in tokenizer.encode_tgt(self._text["tgt"])]
        self.src_lengths = np.array([len(ids) for ids in self._src], np.int64)
        self.tgt_lengths = np.array([len(ids) for ids in self._tgt], np.int64)

    def __len__(self) -> int:
        return len(self._src)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self._src[i], self._tgt[i]

    def raw_text(self, side: str) -> list[str]:
        return list(self._text[side])


@dataclass
class Batch:
    """A padded batch. src ``(B, S)`` ends with eos; tgt_in ``(B, T)`` = start + target;
    tgt_out ``(B, T)`` = target + eos; ``indices`` are the examples' positions in the split.

    A language model's batch has no src: tgt_in holds its input tokens and tgt_out the tokens to
    predict (the next ones; for a masked LM the originals at the masked positions, pad elsewhere).
    """

    src: Optional[Tensor]
    tgt_in: Tensor
    tgt_out: Tensor
    indices: Tensor

    @property
    def target_tokens(self) -> int:
        return int(self.tgt_out.ne(self.pad_id).sum())

    pad_id: int = 0
    # a parser's batch for a tagging head: each source word's tag (B, S), pad where it has none
    src_tags: Optional[Tensor] = None

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The model's arguments: ``(src, tgt_in)``, or ``(tokens,)`` for a language model."""
        return (self.tgt_in,) if self.src is None else (self.src, self.tgt_in)

    def to(self, device, non_blocking: bool = False) -> "Batch":
        """The batch on ``device``; with ``non_blocking`` (from pinned memory) the copy overlaps
        compute."""
        src, tags = (None if t is None else t.to(device, non_blocking=non_blocking)
                     for t in (self.src, self.src_tags))
        return Batch(src, self.tgt_in.to(device, non_blocking=non_blocking),
                     self.tgt_out.to(device, non_blocking=non_blocking), self.indices, self.pad_id,
                     tags)

    def pin_memory(self) -> "Batch":
        src, tags = (None if t is None else t.pin_memory() for t in (self.src, self.src_tags))
        return Batch(src, self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.indices,
                     self.pad_id, tags)


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int, prefix: int | None = None,
                  suffix: int | None = None) -> Tensor:
    """Right-pad id lists into ``(B, L)``, optionally adding a first and/or last token to each."""
    lead = int(prefix is not None)
    lengths = [len(s) for s in sequences]
    width = max(lengths, default=0) + lead + int(suffix is not None)
    out = np.full((len(sequences), width), pad_id, dtype=np.int64)
    if prefix is not None:
        out[:, 0] = prefix
    for b, (seq, n) in enumerate(zip(sequences, lengths)):
        out[b, lead : lead + n] = seq
        if suffix is not None:
            out[b, lead + n] = suffix
    return torch.from_numpy(out)


def collate(dataset: ParallelDataset, indices: Sequence[int], pad_id: int = 0, start_id: int = 1,
            eos_id: int = 2) -> Batch:
    """Build a ``Batch`` of the examples ``indices``."""
    pairs = [dataset[int(i)] for i in indices]
    src = pad_sequences([s for s, _ in pairs], pad_id, suffix=eos_id)
    tgt_in = pad_sequences([t for _, t in pairs], pad_id, prefix=start_id)
    tgt_out = pad_sequences([t for _, t in pairs], pad_id, suffix=eos_id)
    return Batch(src, tgt_in, tgt_out, torch.as_tensor(np.asarray(indices, dtype=np.int64)), pad_id)
