import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from transduce.data import ParallelDataset, PrepareOptions, Tokenizer, prepare
from transduce.errors import DataError

from ..conftest import MULTI30K, NO_MULTI30K

WORDS = "the a cat dog sat on mat house big small red blue runs walks sees".split()


def write_corpus(
    folder: Path,
    prefix: str,
    n: int,
    seed: int = 0,
    gz: bool = False,
    src_lines=None,
    tgt_lines=None,
):
    rng = np.random.default_rng(seed)
    src = src_lines if src_lines is not None else [
        " ".join(rng.choice(WORDS, rng.integers(2, 9))) for _ in range(n)]
    tgt = tgt_lines if tgt_lines is not None else [s.upper() for s in src]
    for lang, lines in (("en", src), ("de", tgt)):
        data = ("\n".join(lines) + "\n").encode()
        path = folder / (f"{prefix}.{lang}" + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(data) if gz else data)
    return src, tgt


def options(folder: Path, **kw) -> PrepareOptions:
    base = dict(
        src="en",
        tgt="de",
        train_prefix=str(folder / "train"),
        valid_prefix=str(folder / "valid"),
        vocab_size=60,
        threads=1,
    )
    base.update(kw)
    return PrepareOptions(**base)


def normalized(sp, text: str) -> str:
    return sp.normalize(text).replace("\u2581", " ").strip()


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path, "train", 300, gz=True)
    write_corpus(tmp_path, "valid", 20, seed=1)
    return tmp_path


def test_prepare_writes_memmaps_meta_and_round_trips(corpus, tmp_path):
    out = tmp_path / "data"
    meta = prepare(options(corpus), out, log=None)
    assert json.loads((out / "meta.json").read_text())["fingerprint"] == meta["fingerprint"]
    assert meta["special_ids"] == {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    assert meta["splits"]["train"]["pairs"] == 300 and meta["splits"]["valid"]["pairs"] == 20
    ds = ParallelDataset(out, "valid")
    tok = Tokenizer(out / "spm.model")
    assert (
        tok.src.pad_id() == 0
        and tok.src.bos_id() == 1
        and tok.src.eos_id() == 2
        and tok.src.unk_id() == 3
    )
    src_text, tgt_text = ds.raw_text("src"), ds.raw_text("tgt")
    for i in range(len(ds)):
        s, t = ds[i]
        assert s.dtype == np.int32
        assert tok.src.decode(s.tolist()) == normalized(tok.src, src_text[i])
        assert tok.decode_tgt(t.tolist()) == normalized(tok.tgt, tgt_text[i])


def test_prepare_reuses_unchanged_inputs_and_redoes_changed(corpus, tmp_path):
    out = tmp_path / "data"
    messages = []
    prepare(options(corpus), out, log=messages.append)
    stamp = (out / "train.en.bin").stat().st_mtime_ns
    prepare(options(corpus), out, log=messages.append)
    assert "reusing" in messages[-1] and (out / "train.en.bin").stat().st_mtime_ns == stamp
    write_corpus(corpus, "valid", 25, seed=2)
    meta = prepare(options(corpus), out, log=messages.append)
    assert meta["splits"]["valid"]["pairs"] == 25
    assert not list(tmp_path.glob(".data.tmp-*"))


def test_separate_vocabularies(corpus, tmp_path):
    meta = prepare(
        options(corpus, joint=False, vocab_size=30, model_type="unigram"), tmp_path / "d", log=None
    )
    assert meta["spm"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    assert meta["vocab_size"] == {"src": 30, "tgt": 30}


def test_filters_are_counted_and_never_touch_valid(tmp_path):
    src = ["a cat sat"] * 50 + ["", "  ", "the dog"] + [" ".join(["cat"] * 100)] + ["a"]
    tgt = ["A CAT SAT"] * 50 + ["X", "Y", "  "] + [" ".join(["CAT"] * 100)] + ["DOG HOUSE MAT"]
    write_corpus(tmp_path, "train", 0, src_lines=src, tgt_lines=tgt)
    write_corpus(tmp_path, "valid", 0, src_lines=["", "a cat"], tgt_lines=["", "A CAT"])
    meta = prepare(options(tmp_path, max_len=60, vocab_size=30), tmp_path / "d", log=None)
    train = meta["splits"]["train"]
    assert train["dropped"] == {"empty": 3, "too_long": 1, "ratio": 1}
    assert train["pairs"] == 50 == train["lines"] - 5
    assert meta["splits"]["valid"]["pairs"] == 2


def assert_no_output(tmp_path: Path):
    assert not (tmp_path / "d").exists()
    assert not list(tmp_path.glob(".d.tmp-*"))


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"missing files: .*train\.en \(nor \.gz\); .*train\.de "
                                        r"\(nor \.gz\)"):
        prepare(options(tmp_path), tmp_path / "d", log=None)
    assert_no_output(tmp_path)


def test_line_count_mismatch_names_both_files_and_counts(corpus, tmp_path):
    (corpus / "valid.de").write_text("one\ntwo\n")
    with pytest.raises(DataError, match=r"valid\.en has 20 lines but .*valid\.de has 2"):
        prepare(options(corpus), tmp_path / "d", log=None)
    assert_no_output(tmp_path)


def test_invalid_utf8_names_file_and_line_and_can_be_replaced(corpus, tmp_path):
    lines = (corpus / "valid.en").read_bytes().split(b"\n")
    lines[6] = b"caf\xe9 latte"
    (corpus / "valid.en").write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=r"valid\.en, line 7: invalid UTF-8.*--encoding-errors "
                                        r"replace"):
        prepare(options(corpus), tmp_path / "d", log=None)
    assert_no_output(tmp_path)
    meta = prepare(options(corpus, encoding_errors="replace"), tmp_path / "d", log=None)
    assert meta["splits"]["valid"]["pairs"] == 20


def test_empty_training_set_after_filtering(tmp_path):
    write_corpus(tmp_path, "train", 0, src_lines=["", " "], tgt_lines=["x", ""])
    write_corpus(tmp_path, "valid", 3)
    with pytest.raises(DataError, match="no non-empty line pairs"):
        prepare(options(tmp_path), tmp_path / "d", log=None)
    write_corpus(tmp_path, "train", 0, src_lines=["a b c d e f g "
                                                  "h"] * 5, tgt_lines=["A B C D E F G H"] * 5)
    with pytest.raises(DataError, match="every training pair was filtered out"):
        prepare(options(tmp_path, max_len=2, vocab_size=25), tmp_path / "d", log=None)
    assert_no_output(tmp_path)


def test_vocabulary_too_large_says_the_largest_that_works(corpus, tmp_path):
    with pytest.raises(DataError, match=r"--vocab-size 5000 is too large .* the largest that works "
                                        r"is \d+"):
        prepare(options(corpus, vocab_size=5000), tmp_path / "d", log=None)
    assert_no_output(tmp_path)


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=NO_MULTI30K)
def test_multi30k_keeps_every_pair_but_the_counted_filtered(tmp_path):
    meta = prepare(
        PrepareOptions(
            src="en",
            tgt="de",
            train_prefix=str(MULTI30K / "train"),
            valid_prefix=str(MULTI30K / "val"),
            vocab_size=8000,
        ),
        tmp_path / "m",
        log=None,
    )
    train = meta["splits"]["train"]
    assert train["lines"] == 29000
    assert train["pairs"] == 29000 - sum(train["dropped"].values())
    assert train["pairs"] > 28900
    assert meta["splits"]["valid"]["pairs"] == 1014
