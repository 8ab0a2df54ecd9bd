"""Monolingual text for the language-model descendants: ``prepare --monolingual``, the token
stream, its blocks, and the two objectives' batches (next token for GPT, masked tokens for BERT).

Output folder layout (the same conventions as the parallel ``prepare``)::

    meta.json            "kind": "monolingual", vocabulary, special ids (with <mask>), sizes
    spm.model            SentencePiece, with <mask> at id 4 (the special ids 0-3, then it)
    SPLIT.text.bin       the split as one stream of int32 ids: each non-empty line, then eos
    SPLIT.text.idx       int64 offsets of the lines in the stream, n + 1 of them

Training reads contiguous blocks of ``block_size`` tokens from the memory-mapped stream, across
line ends (as GPT-2 and BERT train): block i covers stream[i * block_size : (i + 1) * block_size],
and a language model's targets are the same positions shifted by one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..tasks import data_tasks
from ..version import __version__
from ..checkpoint import tokenizer_fingerprint
from ..errors import DataError
from ..files import check_output_dir, output_dir
from .corpus import fingerprint, previously_prepared, read_lines
from .dataset import Batch
from .spans import SENTINEL
from .tokenizer import SPECIAL_IDS, Tokenizer, train_sentencepiece

FORMAT_VERSION = 1
MASK = "<mask>"
MASK_ID = 4  # the first id after the special ones: SentencePiece puts user symbols there


def prepare_monolingual(
    train: str | Path,
    out: str | Path,
    valid: Optional[str | Path] = None,
    vocab_size: int = 8000,
    model_type: str = "bpe",
    vocab_sample: int = 1_000_000,
    encoding_errors: str = "strict",
    threads: int = 2,
    force: bool = False,
    log=print,
    sentinels: int = 0,
) -> dict:
    """Prepare ``out`` from one text file per split (plain or .gz, one line a sentence or
    paragraph).

    Reuses ``out`` when the inputs and options are unchanged; returns the metadata. ``sentinels``:
    that many ``<extra_id_N>`` pieces after ``<mask>``, for T5's span corruption.
    """
    out = Path(out)
    print_ = log or (lambda *a, **k: None)
    files = {"train": Path(train)}
    if valid:
        files["valid"] = Path(valid)
    for split, path in files.items():
        if not path.is_file():
            raise DataError(f"--{split} {path}: no such file")
    for name, value, low in (("--vocab-size", vocab_size, 16), ("--vocab-sample", vocab_sample, 1),
                             ("--threads", threads, 1)):
        if value < low:
            raise DataError(f"{name} {value}: must be at least {low}")
    options = {
        "kind": "monolingual",
        "vocab_size": vocab_size,
        "model_type": model_type,
        "vocab_sample": vocab_sample,
        "encoding_errors": encoding_errors,
        "format": FORMAT_VERSION,
        "splits": sorted(files),
    }
    if sentinels:  # (only then: the fingerprints of datasets prepared without hold)
        options["sentinels"] = sentinels
    check_output_dir(out, "prepared dataset", list(files.values()))
    fp = fingerprint(list(files.values()), options)
    old = previously_prepared(
        out, fp, force, lambda meta: [n for n in _files(meta) if not (out / n).is_file()], print_)
    if old is not None:
        return old
    with output_dir(out, "prepared dataset", list(files.values())) as tmp:
        start = time.time()
        sample = _sample(read_lines(files["train"], encoding_errors), vocab_sample)
        if not sample:
            raise DataError(f"{files['train']}: the training text has no non-empty lines")
        names = [SENTINEL.format(n) for n in range(sentinels)]
        train_sentencepiece(
            sample, tmp / "spm.model", vocab_size, model_type, threads, user_symbols=[MASK, *names]
        )
        del sample
        tokenizer = Tokenizer(tmp / "spm.model")
        if tokenizer.src.piece_to_id(MASK) != MASK_ID:  # a guard on SentencePiece's id assignment
            raise DataError(f"SentencePiece gave {MASK} the id {tokenizer.src.piece_to_id(MASK)}, "
                            f"not {MASK_ID}")
        meta = {
            "format": FORMAT_VERSION,
            "kind": "monolingual",
            "transduce_version": __version__,
            "src": "text",
            "tgt": "text",
            "joint": True,
            "model_type": model_type,
            "spm": {"src": "spm.model", "tgt": "spm.model"},
            "vocab_size": {
                "src": tokenizer.src.get_piece_size(),
                "tgt": tokenizer.src.get_piece_size(),
            },
            "special_ids": {**SPECIAL_IDS, "mask_id": MASK_ID},
            "sentinel_ids": [tokenizer.src.piece_to_id(name) for name in names],
            "fingerprint": fp,
            "splits": {},
            "inputs": {k: str(v) for k, v in files.items()},
        }
        for split, path in files.items():
            meta["splits"][split] = _encode(tmp, split, path, tokenizer, encoding_errors, threads)
            stats = meta["splits"][split]
            print_(f"{split}: {stats['lines']:,} lines ({stats['empty']:,} empty, skipped), "
                   f"{stats['tokens']:,} tokens")
        meta["seconds"] = round(time.time() - start, 2)
        meta["tokenizer_fingerprint"] = tokenizer_fingerprint(
            {"src": tmp / "spm.model", "tgt": tmp / "spm.model"}
        )
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _files(meta: dict) -> list[str]:
    return ["spm.model"] + [
        f"{split}.text.{ext}" for split in meta.get("splits", {}) for ext in ("bin", "idx")
    ]


def _sample(lines, size: int) -> list[str]:
    """The first ``size`` non-empty lines (a vocabulary sample; the stream keeps every line)."""
    sample = []
    for line in lines:
        if line.strip():
            sample.append(line)
            if len(sample) == size:
                break
    return sample


def _encode(
    tmp: Path,
    split: str,
    path: Path,
    tokenizer: Tokenizer,
    encoding_errors: str,
    threads: int,
    chunk: int = 100_000,
) -> dict:
    from tqdm.auto import tqdm

    eos = SPECIAL_IDS["eos_id"]
    lengths, lines, empty = [], 0, 0
    with (
        open(tmp / f"{split}.text.bin", "wb") as stream,
        tqdm(
            desc=f"encoding {split}", unit=" lines", unit_scale=True, leave=False, disable=None
        ) as bar,
    ):
        buffer: list[str] = []

        def flush() -> None:
            for ids in tokenizer.encode_src(buffer, threads):
                ids.append(eos)
                lengths.append(len(ids))
                stream.write(np.asarray(ids, dtype=np.int32).tobytes())
            bar.update(len(buffer))
            buffer.clear()

        for line in read_lines(path, encoding_errors):
            lines += 1
            if not line.strip():
                empty += 1
                continue
            buffer.append(line)
            if len(buffer) == chunk:
                flush()
        flush()
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
    offsets.tofile(tmp / f"{split}.text.idx")
    return {"lines": lines, "empty": empty, "tokens": int(offsets[-1])}


class TokenStream:
    """A split of a monolingual dataset as one memory-mapped stream of token ids."""

    def __init__(self, data_dir: str | Path, split: str) -> None:
        from .dataset import load_meta

        self.dir = Path(data_dir)
        self.meta = load_meta(data_dir)
        if not any(task.data_kind == "stream" for task in data_tasks(self.meta)):
            raise DataError(f"{data_dir} holds parallel text; a language model trains on a "
                            "monolingual dataset (transduce prepare --monolingual --train FILE "
                            "--out DIR)")
        if split not in self.meta["splits"]:
            raise DataError(f"{data_dir} has no {split!r} split (it has: "
                            f"{', '.join(self.meta['splits'])})")
        path = self.dir / f"{split}.text.bin"
        size = path.stat().st_size // 4
        if size != self.meta["splits"][split]["tokens"]:
            raise DataError(f"{path} holds {size} tokens but meta.json says "
                            f"{self.meta['splits'][split]['tokens']}; prepare the data again")
        self.split = split
        self.tokens = np.memmap(path, dtype=np.int32, mode="r") if size else np.zeros(0, np.int32)

    def __len__(self) -> int:
        return len(self.tokens)

    def num_blocks(self, block_size: int, shifted: bool) -> int:
        """Whole blocks in the stream (a next-token block needs one more token for its last
        target)."""
        return max(0, (len(self.tokens) - int(shifted)) // block_size)

    def block(self, i: int, length: int, block_size: int) -> np.ndarray:
        start = i * block_size
        return np.asarray(self.tokens[start : start + length], dtype=np.int64)


class BlockSampler:
    """Batches of block indices: every epoch's order depends only on ``(seed, epoch)``; rank r of
    ``world_size`` takes every world_size-th batch (the shards hold equally many: the rest is
    dropped), so runs resume exactly and data-parallel ranks never wait for one another."""

    def __init__(
        self,
        blocks: int,
        per_batch: int,
        seed: int = 1,
        shuffle: bool = True,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        if blocks < world_size:
            raise ValueError(f"{blocks} blocks cannot be shared by {world_size} ranks")
        self.blocks, self.per_batch, self.seed, self.shuffle = (
            blocks,
            max(1, per_batch),
            seed,
            shuffle,
        )
        self.world_size, self.rank = world_size, rank

    def batches(self, epoch: int, start: int = 0) -> list[np.ndarray]:
        order = (
            np.random.default_rng([self.seed, epoch]).permutation(self.blocks)
            if self.shuffle
            else np.arange(self.blocks)
        )
        batches = [order[i : i + self.per_batch] for i in range(0, self.blocks, self.per_batch)]
        usable = (
            len(batches) - len(batches) % self.world_size
            if len(batches) >= self.world_size
            else len(batches)
        )
        return batches[:usable][self.rank :: self.world_size][start:]

    def __len__(self) -> int:
        return len(self.batches(0))


def collate_next_token(stream: TokenStream, blocks, block_size: int, pad_id: int = 0) -> Batch:
    """GPT's batch: inputs ``(B, block_size)`` and the next tokens as targets."""
    # (B, bs + 1)
    rows = np.stack([stream.block(int(i), block_size + 1, block_size) for i in blocks])
    rows = torch.from_numpy(rows)
    return Batch(
        None, rows[:, :-1], rows[:, 1:], torch.as_tensor(np.asarray(blocks, dtype=np.int64)), pad_id
    )


def collate_masked(stream: TokenStream, blocks, block_size: int, config, mask_prob: float,
                   generator: np.random.Generator) -> Batch:
    """BERT's batch: ``mask_prob`` of the tokens are to be predicted (at least one per block); of
    those, 80% become <mask>, 10% a random ordinary token and 10% stay as they are. Targets are the
    original tokens at those positions and pad everywhere else (the loss skips pad)."""
    rows = np.stack([stream.block(int(i), block_size, block_size) for i in blocks])  # (B, bs)
    inputs, targets = mask_tokens(rows, config, mask_prob, generator)
    return Batch(None, torch.from_numpy(inputs), torch.from_numpy(targets),
                 torch.as_tensor(np.asarray(blocks, dtype=np.int64)), config.pad_id)


def mask_tokens(rows: np.ndarray, config, mask_prob: float, generator: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """``rows (B, T)`` -> (inputs, targets) of the masked-LM objective; see ``collate_masked``."""
    real = rows != config.pad_id
    chosen = (generator.random(rows.shape) < mask_prob) & real
    # every block predicts something
    for b in np.flatnonzero(~chosen.any(axis=1) & real.any(axis=1)):
        chosen[b, generator.choice(np.flatnonzero(real[b]))] = True
    action = generator.random(rows.shape)
    inputs = rows.copy()
    inputs[chosen & (action < 0.8)] = config.mask_id
    random = chosen & (action >= 0.8) & (action < 0.9)
    first = max(config.pad_id, config.bos_id, config.eos_id, config.unk_id, config.mask_id) + 1
    inputs[random] = generator.integers(first, config.vocab_size, size=int(random.sum()))
    targets = np.where(chosen, rows, config.pad_id)
    return inputs, targets
