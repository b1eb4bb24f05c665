"""Every code block of README.rst and docs/*.rst runs as written, or says it is a fragment.

The convention (enforced here): an rST comment names each block's kind, on the line
above the paragraph that introduces the block (the one ending in ``::``) or above its
directive::

    .. snippet: python      run as a Python script
    .. snippet: shell       run with bash, as in a shell where .venv is activated
    .. snippet: server      the command that starts the server the others use
    .. snippet: fragment    not run: an excerpt, sample output, a long-running command

``.. doctest::`` blocks need no comment: ``tests/test_docs.py`` runs them (Sphinx's doctest
builder) against the same kind of server. Hidden setup (``.. testsetup::``) is refused:
what a reader sees is what runs.

The blocks run in the repository's root against ``python -m greenpool server --replset``
(the ``server`` block, on a free port rather than 27017 so that concurrent runs never
collide), with ``MONGODB_URI`` set to the URI it printed, as the documents tell the reader.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.rst", *sorted((ROOT / "docs").glob("*.rst")),
             *sorted((ROOT / "docs" / "guides").glob("*.rst"))]
KINDS = ("python", "shell", "server", "fragment")
MARKER = re.compile(r"^\.\. snippet: (\S+)")
CODE_DIRECTIVE = re.compile(r"^\.\. (code-block|code|sourcecode|testcode|testsetup|testcleanup"
                            r"|doctest)::")

pytestmark = pytest.mark.timeout(600)


@dataclass
class Block:
    path: Path
    line: int  # 1-based, of the line that introduces the block
    kind: str | None  # from the marker; None when there is none
    directive: str | None  # code-block, doctest, ...; None for a literal block
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _marker_above(lines: list[str], index: int) -> str | None:
    """The ``.. snippet:`` kind above the paragraph (or directive) at ``index``."""
    i = index
    while i > 0 and lines[i - 1].strip():  # the rest of the paragraph
        i -= 1
    i -= 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    found = MARKER.match(lines[i]) if i >= 0 else None
    return found[1] if found else None


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = CODE_DIRECTIVE.match(line)
        literal = (line.rstrip().endswith("::") and not line.startswith(".. ")
                   and not line.startswith(" "))
        if not (directive or literal):
            i += 1
            continue
        start = i + 1
        # Directive options (":caption: ..."), then a blank line, then the indented body.
        while start < len(lines) and lines[start].strip().startswith(":") and directive:
            start += 1
        body: list[str] = []
        j = start
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith((" ", "\t"))):
            body.append(lines[j])
            j += 1
        yield Block(path, i + 1, _marker_above(lines, i), directive[1] if directive else None,
                    textwrap.dedent("\n".join(body)).strip("\n") + "\n")
        i = j


ALL = [block for path in DOCUMENTS for block in blocks(path)]


def test_every_block_is_run_or_marked_a_fragment() -> None:
    problems = []
    for block in ALL:
        if block.directive in ("testsetup", "testcleanup"):
            problems.append(f"{block.where}: hidden setup ({block.directive}); show it")
        elif block.directive == "doctest":
            continue
        elif block.kind not in KINDS:
            problems.append(f"{block.where}: no '.. snippet: KIND' comment above it "
                            f"(KIND is one of {', '.join(KINDS)}); it starts "
                            f"{block.text.splitlines()[0]!r}")
    assert problems == []
    assert [b.where for b in ALL if b.kind == "server"], "no block starts the server"


@pytest.fixture(scope="module")
def server_uri() -> Iterator[str]:
    """Run the documents' ``server`` block (on a free port), and yield the URI it printed."""
    commands = {b.text.strip() for b in ALL if b.kind == "server"}
    assert len(commands) == 1, commands
    (command,) = commands
    assert command.startswith("python -m greenpool server"), command
    process = subprocess.Popen(
        [sys.executable, "-m", "greenpool", "server", *command.split()[4:], "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        uri = None
        for line in process.stdout:
            if line.startswith("export MONGODB_URI="):
                uri = line.split("=", 1)[1].strip().strip("'")
                break
        assert uri, process.stderr.read() if process.stderr else ""
        yield uri
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


RUN = [b for b in ALL if b.kind in ("python", "shell")]


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_block_runs_as_written(block: Block, server_uri: str, tmp_path: Path) -> None:
    env = dict(os.environ, MONGODB_URI=server_uri,
               # What "source .venv/bin/activate" gives the reader: this environment first.
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if block.kind == "python":
        script = tmp_path / "snippet.py"
        script.write_text(block.text)
        command = [sys.executable, "-W", "error::DeprecationWarning", str(script)]
    else:
        # The shell's python commands too: a snippet may not trip a deprecation.
        env["PYTHONWARNINGS"] = "error::DeprecationWarning"
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, (
        f"{block.where} failed:\n{block.text}\n--- stdout\n{result.stdout}\n--- stderr\n"
        f"{result.stderr}")
