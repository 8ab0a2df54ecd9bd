"""Reading and writing files safely. The one rule for outputs, in one place: transduce never
deletes or overwrites what it did not create.

Every file and folder transduce writes goes through this module:

- ``output_dir(out, kind, inputs)`` writes a folder atomically. The content is built in a hidden
  sibling (``.NAME.tmp-PID-XXXX``) and renamed into place; an existing ``out`` is replaced only
  when it is empty or carries transduce's marker file (``.transduce``) of the same ``kind``, and
  the old folder is removed only after the new one is in place. Anything else (a folder of the
  user's, a regular file, a symbolic link, a folder that is or holds one of the command's inputs)
  is refused *before* any work, with a message that says what is there and what to do.
- ``output_file(path, inputs)`` writes a file the same way (temporary sibling, fsync, rename);
  a file the user named as the output is replaced, never an input and never a folder.
- ``member(folder, name)`` confines a file name read from a checkpoint to that folder.
- Temporaries left by a killed process (its PID no longer runs) are removed the next time a
  command writes beside them.

Files are created with the permissions the umask allows (``mkstemp`` alone would give 0600).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, TextIO

from .errors import TransduceError

MARKER = ".transduce"
_TEMP_RE = re.compile(r"^\..+\.(?:tmp|old)-(\d+)(?:-[A-Za-z0-9_]+)?$")
# an output moved aside by output_dir
_OLD_RE = re.compile(r"^\.(.+)\.old-(\d+)(?:-[A-Za-z0-9_]+)?$")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _follow_umask(folder: Path) -> None:
    """Give every file and folder written into ``folder`` the permissions the umask allows: some
    writers (safetensors) create their files 0600 whatever the umask."""
    mask = _umask()
    for path in folder.rglob("*"):
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(folder)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale(parent: Path) -> list[Path]:
    """Tidy what dead transduce processes left in ``parent``: an old output moved aside by a process
    killed before its new one was in place is put back (``recover``); the other temporaries are
    removed. Returns the removed paths."""
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    recover_all(parent, entries)
    for path in entries:
        match = _TEMP_RE.match(path.name)
        if match and path.exists() and not _pid_alive(int(match.group(1))):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def recover(out: str | Path) -> bool:
    """Put back the previous version of the output folder ``out`` when a process was killed between
    moving it aside and renaming its new version into place (``output_dir``): ``out`` is missing and
    a dead process's ``.NAME.old-PID-...`` holds it. Returns whether it did."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        entries = list(parent.iterdir())
    except OSError:
        return False
    return out.name in recover_all(parent, entries)


def recover_all(parent: Path, entries: list[Path]) -> list[str]:
    restored = []
    for path in entries:
        match = _OLD_RE.match(path.name)
        if not match or _pid_alive(int(match.group(2))):
            continue
        target = parent / match.group(1)
        if not target.exists() and not target.is_symlink():
            os.replace(path, target)
            restored.append(target.name)
    return restored


def read_marker(folder: Path) -> Optional[str]:
    """The kind of transduce output ``folder`` is (from its marker file), or None."""
    try:
        return json.loads((folder / MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def write_marker(folder: Path, kind: str) -> None:
    from .version import __version__

    (folder / MARKER).write_text(
        json.dumps({"kind": kind, "transduce_version": __version__}) + "\n", encoding="utf-8"
    )


def _legacy_kind(folder: Path) -> Optional[str]:
    """The kind of an output written by transduce 0.1.0, before folders carried a marker."""
    names = {p.name for p in folder.iterdir()}
    if "meta.json" in names and all(n == "meta.json" or n.startswith("spm") or n.split(".")[-1] in
                                    ("bin", "idx", "txt") for n in names):
        return "prepared dataset"
    if {"model.json", "model.safetensors"} <= names and all(
            n.startswith(("model.", "spm", "vocab", "tgt_vocab", "source.spm", "target.spm")) or
            n in ("state.pt", "trainer.json") for n in names):
        return "checkpoint"
    if "config.json" in names and ("checkpoints" in names or "metrics.jsonl" in names):
        return "run"
    return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def check_not_input(
    out: Path, inputs: Iterable[str | Path], what: str, run: Optional[Path] = None
) -> None:
    """Refuse an output that is, contains or lies inside one of the command's inputs, or lies among
    a training run's checkpoints (``RUN/checkpoints/``: only that run writes there; ``run`` names
    the run whose own trainer is writing)."""
    target = Path(os.path.abspath(out)).resolve()
    for item in inputs:
        if item is None:
            continue
        source = Path(os.path.abspath(item)).resolve()
        if source == target or _inside(source, target) or _inside(target, source):
            raise TransduceError(f"{what} {out}: it is, contains or lies inside an input of this "
                                 f"command ({item}); writing there could destroy the input. Choose "
                                 "a path outside it")
    owner = _run_holding(target)
    if owner is not None and (run is None or Path(os.path.abspath(run)).resolve() != owner):
        raise TransduceError(f"{what} {out}: it lies among the checkpoints of the training run "
                             f"{owner}, which only that run writes (they are what --resume "
                             f"continues from). Choose a path outside {owner / 'checkpoints'}")


def _run_holding(path: Path) -> Optional[Path]:
    """The training run whose ``checkpoints/`` folder ``path`` lies in (a resolved path), or
    None."""
    for folder in path.parents:
        if folder.name == "checkpoints" and folder.parent != folder:
            run = folder.parent
            if run.is_dir() and (read_marker(run) or _legacy_kind(run)) == "run":
                return run
    return None


def check_output_dir(
    out: str | Path,
    kind: str,
    inputs: Iterable[str | Path] = (),
    what: str = "--out",
    run: Optional[Path] = None,
) -> Path:
    """Check, before any work, that ``out`` may be (re)written as a transduce output of ``kind``.

    Allowed: a path that does not exist, an empty folder, or a folder transduce wrote as ``kind``.

    Raises:
        TransduceError: anything else, saying what is there and what to do.
    """
    out = Path(out)
    check_not_input(out, inputs, what, run)
    if out.is_symlink():
        raise TransduceError(f"{what} {out} is a symbolic link; give the real folder path "
                             "(transduce replaces output folders by renaming, which would not "
                             "follow the link)")
    if not out.exists():
        if out.parent.exists() and not out.parent.is_dir():
            raise TransduceError(f"{what} {out}: {out.parent} is a file, not a folder")
        return out
    if not out.is_dir():
        raise TransduceError(f"{what} {out} is an existing file, not a folder; choose another path "
                             "(transduce does not overwrite files it did not create)")
    if out.resolve() == Path.cwd().resolve():
        raise TransduceError(f"{what} {out} is the current directory; give a new folder name")
    entries = [p.name for p in out.iterdir()]
    if not entries:
        return out
    found = read_marker(out) or _legacy_kind(out)
    if found == kind:
        return out
    shown = ", ".join(sorted(entries)[:5]) + (", ..." if len(entries) > 5 else "")
    if found:
        raise TransduceError(f"{what} {out} holds a transduce {found}, not a {kind}; choose "
                             "another path")
    raise TransduceError(f"{what} {out} already exists and holds files transduce did not write "
                         f"({shown}); choose a new or empty folder, or move those files away "
                         "yourself")


@contextmanager
def output_dir(out: str | Path, kind: str, inputs: Iterable[str | Path] = (), what: str = "--out",
               run: Optional[Path] = None) -> Iterator[Path]:
    """Build a folder in a temporary sibling and rename it to ``out`` on success.

    Yields the temporary folder to write into. On any exception (or kill) the temporary is
    removed (or cleaned at the next run) and ``out`` is left as it was. ``run``: the training run
    writing its own checkpoints (see ``check_not_input``).
    """
    out = check_output_dir(out, kind, inputs, what, run)
    parent = out.parent if str(out.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    clean_stale(parent)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.tmp-{os.getpid()}-"))
    os.chmod(tmp, 0o777 & ~_umask())
    old: Optional[Path] = None
    try:
        yield tmp
        write_marker(tmp, kind)
        _follow_umask(tmp)
        _fsync_tree(tmp)
        check_output_dir(out, kind, inputs, what, run)  # nothing else appeared there meanwhile
        if out.exists():
            # Two renames: between them ``out`` is absent and the old version waits beside it. If
            # this process dies there, the next command that reads or writes here puts it back
            # (recover); if it fails there in Python, the except clause below does.
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.old-{os.getpid()}-"))
            os.rmdir(old)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not out.exists():
            os.replace(old, out)
        raise


def remove_output(folder: str | Path, kind: str) -> bool:
    """Delete ``folder`` only if transduce wrote it as ``kind`` (its marker, or a 0.1.0 output's
    files).

    Returns whether it was removed; anything else is left where it is.
    """
    folder = Path(folder)
    if (
        folder.is_symlink()
        or not folder.is_dir()
        or (read_marker(folder) or _legacy_kind(folder)) != kind
    ):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def check_output_file(
    path: str | Path, inputs: Iterable[str | Path] = (), what: str = "--output"
) -> Path:
    """Check, before any work, that ``path`` can be written as a file."""
    path = Path(path)
    check_not_input(path, inputs, what)
    if path.is_dir():
        raise TransduceError(f"{what} {path} is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise TransduceError(f"{what} {path} is not a regular file; give a file name")
    if path.parent.exists() and not path.parent.is_dir():
        raise TransduceError(f"{what} {path}: {path.parent} is a file, not a folder")
    return path


@contextmanager
def output_file(
    path: str | Path,
    inputs: Iterable[str | Path] = (),
    what: str = "--output",
    binary: bool = False,
    check: Optional[Callable[[Path], None]] = None,
) -> Iterator[TextIO]:
    """Open a temporary sibling of ``path`` for writing; rename it to ``path`` when the block ends.

    ``check`` (if given) is called with the complete temporary file before the rename and may
    raise to refuse it. A failure leaves ``path`` as it was and no temporary behind.
    """
    path = check_output_file(path, inputs, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-{os.getpid()}-")
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with (
            os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        ) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(
    path: str | Path, text: str, inputs: Iterable[str | Path] = (), what: str = "--output"
) -> Path:
    """Write ``text`` to ``path`` atomically (complete or absent, never half-written)."""
    with output_file(path, inputs, what) as handle:
        handle.write(text)
    return Path(path)


def member(folder: str | Path, name: str, what: str = "file") -> Path:
    """``folder / name`` for a file name read from a checkpoint, confined to ``folder``.

    Raises:
        TransduceError: the name is absolute, climbs out with ``..``, or is a link leading out.
    """
    folder = Path(folder)
    if (
        not isinstance(name, str)
        or not name
        or Path(name).is_absolute()
        or ".." in Path(name).parts
        or "/" in name
        or "\\" in name
    ):
        raise TransduceError(f"{folder}/model.json names the {what} {name!r}, which is not a plain "
                             "file name inside the checkpoint folder; the checkpoint is damaged "
                             "or not trustworthy")
    path = folder / name
    if path.is_symlink() and not _inside(path.resolve(), folder.resolve()):
        raise TransduceError(f"{path} is a link to a file outside the checkpoint folder; refusing "
                             "to read it")
    return path
