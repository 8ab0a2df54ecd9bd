"""``files.py``: the one rule for outputs. Atomic writes, never over what transduce did not create,
never onto an input, names from a checkpoint confined to its folder."""

from __future__ import annotations

import pytest

from transduce.errors import TransduceError
from transduce.files import (MARKER, check_output_dir, member, output_dir, output_file, read_json, remove_output,
                             write_text)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with output_file(path) as handle:
            handle.write("half of the new")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_folder_is_replaced_only_when_transduce_made_it(tmp_path):
    ours = tmp_path / "ours"
    with output_dir(ours, "export") as tmp:
        (tmp / "a.txt").write_text("1")
    assert (ours / MARKER).is_file() and (ours / "a.txt").read_text() == "1"
    with output_dir(ours, "export") as tmp:  # the same kind: replaced whole
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in ours.iterdir()) == [MARKER, "b.txt"]
    yours = tmp_path / "yours"
    yours.mkdir()
    (yours / "notes.txt").write_text("mine")
    for kind in ("export", "run"):
        with pytest.raises(TransduceError, match="yours"):
            check_output_dir(yours, kind)
    with pytest.raises(TransduceError):
        check_output_dir(ours, "run")  # another kind of output
    assert (yours / "notes.txt").read_text() == "mine"
    assert not remove_output(yours, "export") and yours.exists()
    assert remove_output(ours, "export") and not ours.exists()


def test_an_output_is_never_an_input(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en").write_text("a\n")
    with pytest.raises(TransduceError, match="input"):
        check_output_dir(data, "prepared data", inputs=[data / "train.en"])
    with pytest.raises(TransduceError, match="input"):
        write_text(data / "train.en", "over it", inputs=[data / "train.en"])
    assert (data / "train.en").read_text() == "a\n"


def test_names_read_from_a_checkpoint_stay_inside_it(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "spm.model").write_text("x")
    assert member(folder, "spm.model") == folder / "spm.model"
    for name in ("../elsewhere", "/etc/passwd", "sub/../../x"):
        with pytest.raises(TransduceError):
            member(folder, name)


def test_json_errors_name_the_file_and_the_place(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"a": 1,,}')
    with pytest.raises(TransduceError, match="broken.json"):
        read_json(path)
    with pytest.raises(TransduceError, match="missing.json"):
        read_json(tmp_path / "missing.json")
