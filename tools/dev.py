#!/usr/bin/env python3
"""Set up greenpool's environment and run its jobs: ``demo`` or ``test``.

    python3 tools/dev.py demo    # the main job: a demo (see README.rst)
    python3 tools/dev.py test    # ruff, mypy --strict, the whole test suite

Needs only Python 3.11+ with venv and pip. The virtual environment lives in
``.venv`` and is (re)installed when setup.cfg or pyproject.toml change.
Extra arguments after ``test`` go to pytest.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".greenpool-installed"


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    result = subprocess.run([str(a) for a in args], cwd=ROOT, env=env)
    if result.returncode:
        sys.exit(result.returncode)


def setup() -> None:
    """Create .venv and install greenpool with its test extra, if needed."""
    wanted = hashlib.sha256(
        b"".join((ROOT / name).read_bytes() for name in ("setup.cfg", "pyproject.toml"))
    ).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PYTHON, "-m", "pip", "install", "--quiet", "-e", ".[test]")
    STAMP.write_text(wanted)


def demo(args: list[str]) -> None:
    run(PYTHON, "-m", "greenpool.demo", *args)


def test(args: list[str]) -> None:
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "mypy", "--strict", "greenpool")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run(PYTHON, "-m", "pytest", *args, env=env)


JOBS = {"demo": demo, "test": test}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        sys.exit(f"usage: python3 tools/dev.py {{{'|'.join(JOBS)}}} [args...]")
    if sys.version_info < (3, 11):  # noqa: UP036 (this script may run on any python3)
        sys.exit(f"greenpool needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    setup()
    JOBS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
