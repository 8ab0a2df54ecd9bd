"""The shape of the house: imports run one way (the import-linter contract in pyproject.toml), no
source file outgrows a reader, no line is wider than 100 characters, ``model/`` holds only the
paper's modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "transduce"
PAPER_MODULES = {
    "__init__.py",
    "masks.py",
    "positions.py",
    "attention.py",
    "feed_forward.py",
    "layers.py",
    "transformer.py",
    "cache.py",
    "inputs.py",  # §3.4's embeddings as the encoder's front end: token ids, or an image's patches
}


def test_imports_follow_the_layers():
    """``lint-imports`` checks the layers written in pyproject.toml; an import from a lower layer to
    a higher one (even inside a function) breaks the contract."""
    command = shutil.which("lint-imports")
    if command is None:
        pytest.fail("lint-imports is missing: install the project with its dev extra (pip install "
                    "-e '.[dev]')")
    result = subprocess.run(
        [command, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


LINE_LIMIT = 100  # pyproject.toml's [tool.ruff] line-length, for editors and `ruff format`


def test_no_line_over_100_characters():
    """Every Python file of the package, the tests, the benchmarks and the recipes."""
    wide = [
        f"{path.relative_to(ROOT)}:{number} ({len(line)})"
        for folder in ("src", "tests", "benchmarks", "recipes")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1)
        if len(line) > LINE_LIMIT
    ]
    assert not wide, f"lines over {LINE_LIMIT} characters: " + ", ".join(wide[:20])


def test_no_source_file_over_400_lines():
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, f"split these files (a room a reader can hold in mind): {long}"


def test_model_holds_only_the_papers_modules():
    found = {p.name for p in (SRC / "model").glob("*.py")}
    assert found == PAPER_MODULES, (
        f"model/ is the paper; move {sorted(found - PAPER_MODULES)} elsewhere"
    )


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("src/", "benchmarks/", "recipes/", "tests/", "docs/", ".ci/")


def _mentioned_paths(doc: Path) -> list[tuple[str, Path]]:
    """Relative paths a document mentions: its Markdown links (from the document's folder) and the
    repository paths it quotes in backticks (from the root)."""
    import re

    text = doc.read_text(encoding="utf-8")
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not target.startswith(("http://", "https://", "#", "mailto:")):
            found.append((target, doc.parent / target.split("#")[0]))
    for quoted in re.findall(r"`([^`\s]+)`", text):
        path = quoted.split("::")[0]
        if path.startswith(TOP) and not any(c in path for c in "*<>{}[]$") and not path.isupper():
            if not re.search(r"/[A-Z_]+(/|$)", path):  # a placeholder such as RUN or DIR
                found.append((quoted, ROOT / path))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_path_a_document_mentions_exists(doc):
    missing = [text for text, path in _mentioned_paths(doc) if not path.exists()]
    assert not missing, f"{doc.relative_to(ROOT)} mentions paths that do not exist: {missing}"


def test_documents_speak_to_users():
    """The README fits a few screens, and no document or source speaks of work sessions."""
    import re

    assert len((ROOT / "README.md").read_text().splitlines()) <= 450
    for path in [*DOCS, *SRC.rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\bsessions?\b", text, re.IGNORECASE), (
            f"{path.relative_to(ROOT)} speaks of sessions"
        )
        assert not re.search(r"\bissues? #?\d", text, re.IGNORECASE), (
            f"{path.relative_to(ROOT)} cites an issue"
        )


def test_no_import_cycle_between_modules():
    """No two modules import each other, even through others (a cycle makes the import order
    matter and hides which room depends on which); type-checking imports count."""
    import grimp

    graph = grimp.build_graph("transduce")
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    cycles = [(a, b) for a in edges for b in edges[a]
              if a != b and graph.chain_exists(importer=b, imported=a)]
    assert not cycles, f"import cycles: {sorted(cycles)[:6]}"


def test_help_and_argument_errors_do_not_import_torch():
    """``--help`` of every command, and a mistyped option, answer at once: torch (seconds to import)
    is imported by the commands that run, not by those that describe themselves."""
    script = (
        "import sys\n"
        "from transduce.cli.main import COMMANDS, main\n"
        "for argv in [['--help'], *[[c, '--help'] for c in COMMANDS], ['train', '--bogus']]:\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "    assert 'torch' not in sys.modules, f'{argv} imported torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]


def test_only_the_task_registry_and_the_front_ends_tell_inputs_and_data_apart():
    """What a model reads (``input``) and what a prepared dataset holds (its ``kind``) are asked of
    the task (``tasks/``) everywhere else; the front ends (``config/inputs.py``,
    ``model/inputs.py``) build what each input needs."""
    import re

    allowed = {"tasks", "config/inputs.py", "model/inputs.py"}
    pattern = re.compile(r"\.input\s*(==|!=|in\b)|input\s*==\s*\"|get\(\"kind\""
                         r"|\[\"kind\"\]\s*(==|!=)")
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        if not any(str(path.relative_to(SRC)).startswith(a) for a in allowed)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and "MARKER" not in line
    ]
    assert not found, f"ask the task (transduce.tasks) instead: {found}"
