"""``transduce prepare``: raw parallel text -> SentencePiece vocabulary + memory-mapped token ids.

Output folder layout::

    meta.json                 languages, vocabulary, special ids, sizes, filter counts, fingerprint
    spm.model                 (joint) or spm.SRC.model + spm.TGT.model (separate); with --tokenizer
                              the model's files instead (and its vocab.json files, if it has them)
    SPLIT.LANG.bin            all token ids of a split and side, flat int32 (no bos/eos)
    SPLIT.LANG.idx            int64 offsets, n + 1 of them: sentence i is bin[idx[i]:idx[i+1]]
    SPLIT.LANG.txt            the raw text of valid/test splits (references for BLEU)

Everything is written in a temporary sibling folder and renamed into place at the end, so a
failure never leaves a half-prepared folder behind; an existing ``--out`` is replaced only when
transduce prepared it (``files.output_dir``), never when it holds anything else or the inputs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ..version import __version__
from ..checkpoint import tokenizer_fingerprint
from ..errors import DataError
from ..files import check_output_dir, output_dir
from .options import PrepareOptions
from .binarize import closed_vocabulary, encode_split, reservoir, split_pairs
from .corpus import find_files, fingerprint, previously_prepared
from .tokenizer import SPECIAL_IDS, ModelTokenizer, Tokenizer, model_tokenizer, train_sentencepiece

FORMAT_VERSION = 1


# the share of a side's pieces unknown to a model's tokenizer above which prepare warns
UNKNOWN_WARNING = 0.01


def prepare(options: PrepareOptions, out: str | Path, force: bool = False, log=print) -> dict:
    """Prepare ``out`` from the raw files; reuse it when the inputs and options are unchanged.

    Returns the metadata written to ``out/meta.json``.
    """
    out = Path(out)
    o = options
    if not o.train_prefix:
        raise DataError("--train-prefix is required")
    splits = {"train": o.train_prefix, "valid": o.valid_prefix, "test": o.test_prefix}
    given = [split for split, prefix in splits.items() if prefix]
    if o.trees:
        found = iter(find_files([("", f"{splits[split]}.trees") for split in given],
                                "check the prefixes (PREFIX.trees or PREFIX.trees.gz)"))
        files = {split: (path, path) for split, path in zip(given, found)}
    else:
        found = iter(
            find_files(
                [("", f"{splits[split]}.{lang}") for split in given for lang in (o.src, o.tgt)],
                "check the prefixes and --src/--tgt",
            )
        )
        files = {split: (next(found), next(found)) for split in given}
    shaping = {
        k: v
        for k, v in vars(o).items()
        if k not in ("chunk_lines", "threads", "train_prefix", "valid_prefix", "test_prefix")
    }
    for later in ("task_prefix", "extend_vocab"):  # (only when given: the fingerprints of
        if not getattr(o, later):                  # datasets prepared before them hold)
            shaping.pop(later)
    shaping["format"] = FORMAT_VERSION
    shaping["splits"] = sorted(files)
    print_ = log or (lambda *a, **k: None)
    _check_options(o)
    borrowed = model_tokenizer(o.tokenizer) if o.tokenizer else None
    if borrowed is not None:
        _check_languages(borrowed, o)
        shaping.update(
            tokenizer=borrowed.fingerprint,
            vocab_size=None,
            joint=None,
            model_type=None,
            vocab_sample=None,
        )
    inputs = list(dict.fromkeys(p for pair in files.values() for p in pair))
    # before reading
    check_output_dir(out, "prepared dataset", inputs + ([borrowed.folder] if borrowed else []))
    fp = fingerprint(inputs, shaping)
    old = previously_prepared(out, fp, force, lambda meta: _missing_files(out, meta), print_)
    if old is not None:
        return old
    with output_dir(
        out, "prepared dataset", inputs + ([borrowed.folder] if borrowed else [])
    ) as tmp:
        meta = _prepare_into(tmp, files, o, fp, print_, borrowed)
    return meta


def _check_languages(borrowed: ModelTokenizer, o: PrepareOptions) -> None:
    if borrowed.languages is not None and borrowed.languages != (o.src, o.tgt):
        raise DataError(f"--tokenizer {o.tokenizer}: the model translates {borrowed.languages[0]} "
                        f"-> {borrowed.languages[1]}, not --src {o.src} --tgt {o.tgt}; give its "
                        "languages' files")


def _check_options(o: PrepareOptions) -> None:
    """Refuse impossible options before reading any data."""
    for name, value, low in (("--vocab-size", o.vocab_size, 8), ("--max-len", o.max_len, 1),
                             ("--vocab-sample", o.vocab_sample, 1), ("--threads", o.threads, 1),
                             ("chunk_lines", o.chunk_lines, 1)):
        if value < low:
            raise DataError(f"{name} {value}: must be at least {low}")
    if o.max_ratio < 1:
        raise DataError(f"--max-ratio {o.max_ratio}: must be at least 1 (a ratio of longer to "
                        "shorter side)")
    if o.src == o.tgt:
        raise DataError(f"--src and --tgt are both {o.src!r}; give the two languages' file "
                        "suffixes")
    if any(c in o.task_prefix for c in "\n\r\t"):
        raise DataError(f"--task-prefix {o.task_prefix!r}: one line of text, without tabs")


def _missing_files(out: Path, meta: dict) -> list[str]:
    """The files a prepared folder should hold but does not (or whose index does not fit its
    tokens)."""
    missing = [name for name in set(meta.get("spm", {}).values()) if not (out / name).is_file()]
    for split in meta.get("splits", {}):
        for lang in (meta["src"], meta["tgt"]):
            names = [f"{split}.{lang}.bin", f"{split}.{lang}.idx"] + (
                [f"{split}.{lang}.txt"] if split != "train" else []
            )
            missing += [n for n in names if not (out / n).is_file()]
            bin_path, idx_path = out / f"{split}.{lang}.bin", out / f"{split}.{lang}.idx"
            if bin_path.is_file() and idx_path.is_file():
                offsets = np.fromfile(idx_path, dtype=np.int64)
                if not len(offsets) or offsets[-1] * 4 != bin_path.stat().st_size:
                    missing.append(f"{bin_path.name} (complete)")
    return missing


def _copy_tokenizer(tmp: Path, borrowed: ModelTokenizer, o: PrepareOptions) -> dict[str, str]:
    """The model's tokenizer files copied into the dataset by role; returns their names."""
    import shutil

    shared = borrowed.files["src"] == borrowed.files["tgt"]
    names = {
        "src": "spm.model" if shared else f"spm.{o.src}.model",
        "tgt": "spm.model" if shared else f"spm.{o.tgt}.model",
        "vocab": "vocab.json",
        "tgt_vocab": f"vocab.{o.tgt}.json",
        "added": "added_tokens.json",
    }
    names = {role: names[role] for role in borrowed.files}
    for role, name in names.items():
        shutil.copyfile(borrowed.files[role], tmp / name)
    return names


def _prepare_into(tmp: Path, files: dict, o: PrepareOptions, fp: str, log,
                  borrowed: Optional[ModelTokenizer] = None) -> dict:
    start = time.time()
    if borrowed is not None:
        return _encode_with_model(tmp, files, o, fp, log, borrowed, start)
    src_train, tgt_train = files["train"]
    log(f"reading {src_train}{'' if o.trees else f' and {tgt_train}'} to train the vocabulary "
        f"(sample of at most {o.vocab_sample:,} lines)")
    src_sample, tgt_sample, n_lines = reservoir(split_pairs(o, src_train, tgt_train),
                                                 o.vocab_sample // (2 if o.joint else 1), o.seed)
    if not src_sample:
        raise DataError(f"{src_train}: the training text has no non-empty line pairs")
    if o.trees:
        train_sentencepiece(
            src_sample, tmp / f"spm.{o.src}.model", o.vocab_size, o.model_type, o.threads
        )
        closed_vocabulary(
            (t for _, t in split_pairs(o, src_train, tgt_train)), tmp / f"spm.{o.tgt}.model"
        )
        models = {"src": f"spm.{o.src}.model", "tgt": f"spm.{o.tgt}.model"}
    elif o.joint:
        train_sentencepiece(
            src_sample + tgt_sample, tmp / "spm.model", o.vocab_size, o.model_type, o.threads
        )
        models = {"src": "spm.model", "tgt": "spm.model"}
    else:
        for lang, sample in ((o.src, src_sample), (o.tgt, tgt_sample)):
            train_sentencepiece(
                sample, tmp / f"spm.{lang}.model", o.vocab_size, o.model_type, o.threads
            )
        models = {"src": f"spm.{o.src}.model", "tgt": f"spm.{o.tgt}.model"}
    del src_sample, tgt_sample
    tokenizer = Tokenizer(tmp / models["src"], tmp / models["tgt"])
    meta = {
        "format": FORMAT_VERSION,
        "transduce_version": __version__,
        "src": o.src,
        "tgt": o.tgt,
        "joint": o.joint,
        "model_type": o.model_type,
        "spm": models,
        "trees": o.trees,
        "tags": o.tags,
        "bare_close": o.bare_close,
        "vocab_size": {
            "src": tokenizer.src.get_piece_size(),
            "tgt": tokenizer.tgt.get_piece_size(),
        },
        "special_ids": dict(SPECIAL_IDS),
        "max_len": o.max_len,
        "max_ratio": o.max_ratio,
        "fingerprint": fp,
        "splits": {},
        "inputs": {},
    }
    return _encode_splits(tmp, files, o, tokenizer, meta, log, start, n_lines)


def _encode_with_model(
    tmp: Path, files: dict, o: PrepareOptions, fp: str, log, borrowed: ModelTokenizer, start: float
) -> dict:
    """Encode with a model's own tokenizer: no vocabulary is trained; the ids are the model's."""
    config = borrowed.config
    names = _copy_tokenizer(tmp, borrowed, o)
    extension = None
    if o.extend_vocab:
        from .extend import extend_tokenizer

        extension = {"from": borrowed.fingerprint, "model": str(borrowed.folder),
                     **extend_tokenizer(tmp, names, config, split_pairs(o, *files["train"]),
                                        o.extend_vocab, log)}
    tokenizer = Tokenizer.from_roles(
        {role: tmp / name for role, name in names.items()}, unk_id=config.unk_id
    )
    max_len = min(o.max_len, config.max_positions - 1)
    if max_len < o.max_len:
        log(f"the model holds {config.max_positions} positions: dropping training pairs over "
            f"{max_len} tokens")
    log(f"encoding with the tokenizer of {borrowed.folder}"
        + (" and its new pieces" if extension else " (no vocabulary is trained)"))
    meta = {
        "format": FORMAT_VERSION,
        "transduce_version": __version__,
        "src": o.src,
        "tgt": o.tgt,
        "joint": config.tgt_vocab_size is None,
        "model_type": None,
        "spm": names,
        "vocab_size": extension.pop("vocab_size") if extension else
        {"src": config.vocab_size, "tgt": config.target_vocab_size},
        "special_ids": {name: getattr(config, name) for name in SPECIAL_IDS},
        "max_len": max_len,
        "max_ratio": o.max_ratio,
        "fingerprint": fp,
        "tokenizer_from": str(borrowed.folder),
        **({"extension": extension} if extension else {}),
        "splits": {},
        "inputs": {},
    }
    from dataclasses import replace

    return _encode_splits(
        tmp, files, replace(o, max_len=max_len), tokenizer, meta, log, start, None
    )


def _encode_splits(
    tmp: Path,
    files: dict,
    o: PrepareOptions,
    tokenizer: Tokenizer,
    meta: dict,
    log,
    start: float,
    n_lines: Optional[int],
) -> dict:
    if o.task_prefix:
        size = len(tokenizer.encode_src([o.task_prefix])[0])
        if size >= o.max_len:
            raise DataError(f"--task-prefix {o.task_prefix!r} has {size} tokens: with eos no "
                            f"sentence fits in --max-len {o.max_len} (for a model's tokenizer: "
                            "its positions) after it; shorten it")
        meta["task_prefix"] = o.task_prefix
    meta["tokenizer_fingerprint"] = tokenizer_fingerprint(
        {role: tmp / name for role, name in meta["spm"].items()}
    )
    for split, (src_path, tgt_path) in files.items():
        stats = encode_split(
            tmp,
            split,
            src_path,
            tgt_path,
            tokenizer,
            o,
            filtered=split == "train",
            total=n_lines if split == "train" else None,
        )
        meta["splits"][split] = stats
        meta["inputs"][split] = [str(src_path), str(tgt_path)]
        dropped = stats["dropped"]
        log(f"{split}: {stats['pairs']:,} pairs kept of {stats['lines']:,}"
            + (f" (dropped: {dropped['empty']} empty, {dropped['too_long']} over {o.max_len} tokens"
               + ("" if o.trees else f", {dropped['ratio']} over length ratio {o.max_ratio}") + ")"
               if split == "train" else ""))
        if "tokenizer_from" in meta:
            _report_unknown(split, stats, log)
    if meta["splits"]["train"]["pairs"] == 0:
        raise DataError("every training pair was filtered out "
                        f"({meta['splits']['train']['dropped']}); "
                        "raise --max-len or --max-ratio, or check the files")
    meta["seconds"] = round(time.time() - start, 2)
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _report_unknown(split: str, stats: dict, log) -> None:
    """How much of the text the model's vocabulary does not cover (its unknown token)."""
    shares = {
        side: stats["unknown"][side] / max(1, stats["tokens"][side]) for side in ("src", "tgt")
    }
    log(f"{split}: {shares['src']:.2%} of source pieces and {shares['tgt']:.2%} of target pieces "
        "are unknown to the model")
    for side, share in shares.items():
        if share > UNKNOWN_WARNING:
            import sys

            print(f"warning: {share:.1%} of the {split} split's "
                  f"{'source' if side == 'src' else 'target'} pieces are unknown to the model's "
                  f"tokenizer (more than {UNKNOWN_WARNING:.0%}): is the text in the model's "
                  "languages and script?", file=sys.stderr)
