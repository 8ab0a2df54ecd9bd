"""A split's text as token ids: the pairs of a split (parallel files or a treebank), the sample a
vocabulary is trained on, the closed vocabulary of linearized trees, and the encoding of a split
into ``SPLIT.LANG.bin``/``.idx`` with the training filters (``prepare.py`` drives it)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from ..errors import DataError
from .corpus import read_pairs, write_lines
from .options import PrepareOptions
from .tokenizer import SPECIAL_IDS, Tokenizer, train_sentencepiece


def reservoir(
    pairs: Iterator[tuple[str, str]], size: int, seed: int
) -> tuple[list[str], list[str], int]:
    """Uniform sample of at most ``size`` non-empty pairs (Algorithm R), and the number of lines
    read."""
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    n = seen = 0
    draws = iter(())
    for n, (s, t) in enumerate(pairs, start=1):
        if not s.strip() or not t.strip():
            continue
        seen += 1
        if len(src) < size:
            src.append(s)
            tgt.append(t)
            continue
        j = next(draws, None)
        if j is None:  # draw random numbers in blocks; Python-level rng calls are slow
            block = np.arange(seen, seen + 65536)
            draws = iter((rng.random(65536) * block).astype(np.int64).tolist())
            j = next(draws)
        if j < size:
            src[j], tgt[j] = s, t
    return src, tgt, n


def encode_split(tmp: Path, split: str, src_path: Path, tgt_path: Path, tokenizer: Tokenizer,
                  o: PrepareOptions, filtered: bool, total: Optional[int]) -> dict:
    from tqdm.auto import tqdm

    dropped = {"empty": 0, "too_long": 0, "ratio": 0}
    lengths = {"src": [], "tgt": []}
    unknown = {"src": 0, "tgt": 0}
    lines = 0
    with (
        open(tmp / f"{split}.{o.src}.bin", "wb") as src_bin,
        open(tmp / f"{split}.{o.tgt}.bin", "wb") as tgt_bin,
        tqdm(
            total=total,
            desc=f"encoding {split}",
            unit=" lines",
            unit_scale=True,
            leave=False,
            disable=None,
        ) as bar,
    ):
        text = (
            None
            if filtered
            else {
                "src": open(tmp / f"{split}.{o.src}.txt", "w", encoding="utf-8", newline=""),
                "tgt": open(tmp / f"{split}.{o.tgt}.txt", "w", encoding="utf-8", newline=""),
            }
        )
        try:
            for chunk in chunks(split_pairs(o, src_path, tgt_path), o.chunk_lines):
                lines += len(chunk)
                bar.update(len(chunk))
                srcs, tgts = [s for s, _ in chunk], [t for _, t in chunk]
                src_ids = tokenizer.encode_src(
                    [o.task_prefix + s for s in srcs] if o.task_prefix else srcs, o.threads)
                tgt_ids = tokenizer.encode_tgt(tgts, o.threads)
                if filtered:
                    keep = [
                        keep_pair(s, t, si, ti, o, dropped)
                        for s, t, si, ti in zip(srcs, tgts, src_ids, tgt_ids)
                    ]
                    src_ids = [ids for ids, k in zip(src_ids, keep) if k]
                    tgt_ids = [ids for ids, k in zip(tgt_ids, keep) if k]
                else:
                    write_lines(text["src"], srcs)
                    write_lines(text["tgt"], tgts)
                for ids, handle, side in ((src_ids, src_bin, "src"), (tgt_ids, tgt_bin, "tgt")):
                    lengths[side].append(
                        np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
                    )
                    flat = np.fromiter((t for x in ids for t in x), dtype=np.int32)
                    unknown[side] += int((flat == tokenizer.unk_id).sum())
                    handle.write(flat.tobytes())
        finally:
            if text:
                for handle in text.values():
                    handle.close()
    for side, lang in (("src", o.src), ("tgt", o.tgt)):
        lens = np.concatenate(lengths[side]) if lengths[side] else np.zeros(0, np.int64)
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        offsets.tofile(tmp / f"{split}.{lang}.idx")
    pairs = int(sum(len(x) for x in lengths["src"]))
    tokens = {side: int(sum(int(x.sum()) for x in lengths[side])) for side in ("src", "tgt")}
    return {
        "lines": lines,
        "pairs": pairs,
        "dropped": dropped,
        "tokens": tokens,
        "unknown": unknown,
    }


def keep_pair(
    s: str, t: str, si: list[int], ti: list[int], o: PrepareOptions, dropped: dict
) -> bool:
    if not s.strip() or not t.strip():
        dropped["empty"] += 1
        return False
    if len(si) > o.max_len or len(ti) > o.max_len:
        dropped["too_long"] += 1
        return False
    if not o.trees and max(len(si), len(ti)) > o.max_ratio * max(1, min(len(si), len(ti))):
        dropped["ratio"] += 1
        return False
    return True


def split_pairs(o: PrepareOptions, src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    """A split's (source, target) lines: the two files of parallel text, or a treebank's words and
    linearized trees."""
    if o.trees:
        from .trees import tree_pairs

        return tree_pairs(src, o.encoding_errors, o.tags, o.bare_close)
    return read_pairs(src, tgt, o.encoding_errors)


def closed_vocabulary(targets: Iterator[str], out_file: Path) -> None:
    """A SentencePiece word model holding every token of ``targets`` whole: the linearized trees'
    brackets and placeholder, a closed vocabulary (however long a tree or a label is)."""
    import sentencepiece as spm

    tokens: set[str] = set()
    lines = []
    for line in targets:
        tokens.update(line.split())
        lines.append(line)
    longest = max((len(t) for t in tokens), default=1)
    if longest > PIECE_LIMIT:
        token = max(tokens, key=len)
        raise DataError(f"the target token {token[:40]!r}... has {longest} characters; "
                        f"SentencePiece keeps pieces of at most {PIECE_LIMIT}: shorten the "
                        "treebank's labels")
    longest_line = max((len(line.encode()) for line in lines), default=0)
    train_sentencepiece(lines, out_file, len(tokens) + len(SPECIAL_IDS), "word",
                        longest=(longest_line, longest))
    known = spm.SentencePieceProcessor(model_file=str(out_file))
    lost = sorted(t for t in tokens if known.piece_to_id("\u2581" + t) == known.unk_id())
    if lost:  # (a bug, not the user's: every token was given whole)
        raise RuntimeError(f"the closed vocabulary lacks {lost[:5]}")


PIECE_LIMIT = 512  # SentencePiece's largest max_sentencepiece_length


def chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
