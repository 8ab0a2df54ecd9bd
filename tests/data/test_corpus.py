"""Reading text as users keep it: plain or gzip, one sentence a line, every error named by file
and line."""

from __future__ import annotations

import gzip
import io

import pytest

from transduce.data.corpus import decode_lines, find_files, read_lines, read_pairs, text_file
from transduce.errors import DataError


def test_lines_end_at_newline_only_and_a_byte_order_mark_is_dropped():
    raw = "\ufeffone\r\ntwo\x0bstill two\u2028and this\nthree\rthree".encode()
    assert list(decode_lines(io.BytesIO(raw), "x")) == [
        "one", "two\x0bstill two\u2028and this", "three\rthree"]


def test_bad_bytes_are_named_by_line_or_replaced_when_asked(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nbro\xffken\n")
    with pytest.raises(DataError, match=r"bad.txt, line 2: invalid UTF-8 .* --encoding-errors "
                                        "replace"):
        list(read_lines(path))
    assert list(read_lines(path, "replace")) == ["fine", "bro\ufffdken"]


def test_plain_and_gzip_files_are_found_and_every_missing_one_named(tmp_path):
    with gzip.open(tmp_path / "train.de.gz", "wt") as handle:
        handle.write("ein Hund\n")
    (tmp_path / "train.en").write_text("a dog\n")
    assert text_file(tmp_path / "train.de") == tmp_path / "train.de.gz"
    assert list(read_lines(tmp_path / "train.de.gz")) == ["ein Hund"]
    with pytest.raises(DataError, match=r"missing files: --src .*train.fr \(nor .gz\); --tgt "
                                        r".*train.es \(nor .gz\); see the guide"):
        find_files([("--src", tmp_path / "train.fr"), ("--tgt", tmp_path / "train.es")],
                   "see the guide")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="folder is not a file"):
        find_files([("", tmp_path / "folder")])
    (tmp_path / "broken.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="cannot read it .* a valid gzip"):
        list(read_lines(tmp_path / "broken.gz"))


def test_pairs_must_have_as_many_lines_on_both_sides(tmp_path):
    (tmp_path / "a.en").write_text("1\n2\n3\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    assert list(read_pairs(tmp_path / "a.en", tmp_path / "a.en")) == [("1", "1"), ("2", "2"),
                                                                       ("3", "3")]
    with pytest.raises(DataError, match=r"line counts differ: .*a.en has 3 lines but .*a.de has 2"):
        list(read_pairs(tmp_path / "a.en", tmp_path / "a.de"))
    with pytest.raises(DataError, match=r"a.de has 2 lines but .*a.en has 3"):
        list(read_pairs(tmp_path / "a.de", tmp_path / "a.en"))
