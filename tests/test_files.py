"""``files.py``: the one rule for outputs. Atomic writes, never over what transduce did not create,
never onto an input, names from a checkpoint confined to its folder."""

from __future__ import annotations

import pytest

from transduce.errors import TransduceError
from transduce.files import (
    MARKER,
    check_output_dir,
    member,
    output_dir,
    output_file,
    remove_output,
    write_text,
)
from transduce.reading import read_json


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


KILLED_BETWEEN_RENAMES = """
import os, sys
import transduce.files as files
real, calls = os.replace, []
def replace(a, b):
    calls.append((a, b))
    real(a, b)
    if len(calls) == int(sys.argv[2]):
        os._exit(9)  # as SIGKILL at this instant: no except clause, no finally
files.os.replace = replace
with files.output_dir(sys.argv[1], "export") as tmp:
    (tmp / "version.txt").write_text("new")
"""


@pytest.mark.parametrize("renames", [1, 2])
def test_a_kill_while_an_output_is_replaced_never_loses_it(tmp_path, renames):
    """Killed after moving the old version aside (1 rename) or after renaming the new one in (2):
    the next command that reads or writes there finds one complete version, the old or the new."""
    import subprocess
    import sys

    out = tmp_path / "export"
    with output_dir(out, "export") as tmp:
        (tmp / "version.txt").write_text("old")
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(out), str(renames)])
    assert killed.returncode == 9
    expected = "old" if renames == 1 else "new"
    assert out.exists() == (renames == 2)  # the window: nothing at the output's own name
    from transduce.files import recover

    recover(out)  # what reading commands do first (resolve, load_meta)
    assert (out / "version.txt").read_text() == expected
    with output_dir(out, "export") as tmp:  # and a write beside it tidies the rest
        (tmp / "version.txt").write_text("newer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert (out / "version.txt").read_text() == "newer"


@pytest.mark.parametrize("sibling", ["folder", "file"])
def test_a_command_writing_another_output_beside_a_killed_one_puts_it_back_first(tmp_path, sibling):
    """Killed between the two renames, then a command writes a *different* output in the same folder
    (``average RUN --out RUN/averaged-2`` after a killed ``average``): tidying the temporaries
    restores the moved-aside output before removing anything, whatever name the new command
    writes."""
    import subprocess
    import sys

    out = tmp_path / "export"
    with output_dir(out, "export") as tmp:
        (tmp / "version.txt").write_text("old")
    assert (
        subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(out), "1"]).returncode
        == 9
    )
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if ".old-" in p.name]
    if sibling == "folder":
        with output_dir(tmp_path / "export-2", "export") as tmp:
            (tmp / "version.txt").write_text("other")
    else:
        with output_file(tmp_path / "notes.txt") as handle:
            handle.write("other")
    assert (out / "version.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["export", "export-2" if sibling == "folder" else "notes.txt"]
    )


def test_a_failure_between_the_renames_puts_the_old_version_back(tmp_path, monkeypatch):
    import transduce.files as files

    out = tmp_path / "export"
    with output_dir(out, "export") as tmp:
        (tmp / "version.txt").write_text("old")
    real, calls = files.os.replace, []

    def failing(a, b):
        calls.append(a)
        if len(calls) == 2:
            raise OSError("disk full")
        real(a, b)
    monkeypatch.setattr(files.os, "replace", failing)
    with pytest.raises(OSError):
        with output_dir(out, "export") as tmp:
            (tmp / "version.txt").write_text("new")
    monkeypatch.undo()
    assert (out / "version.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
