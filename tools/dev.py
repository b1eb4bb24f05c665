#!/usr/bin/env python3
"""Set up greenpool's environment and run its jobs: ``demo``, ``test``, ``bench``.

    python3 tools/dev.py demo    # the main job: a demo (see README.rst)
    python3 tools/dev.py test    # ruff, mypy --strict, the whole test suite
    python3 tools/dev.py bench   # the benchmarks (not part of the tests); --quick
    python3 tools/dev.py pymongo-suite [VERSION]  # PyMongo's own tests, stock vs greenpool

Needs only Python 3.11+ with venv and pip. The virtual environment lives in
``.venv`` and is (re)installed when setup.cfg or pyproject.toml change; it
gets the newest PyMongo that setup.cfg allows. ``test`` then runs the
greenpool.pymongo tests again in ``.venv-pymongo-low``, with the lowest
PyMongo setup.cfg allows pinned (installed the same way, on first need).
Extra arguments after ``test`` go to pytest, and skip that second run;
after ``demo`` and ``bench``, to the demo and to benchmarks/bench.py.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
LOW_VENV = ROOT / ".venv-pymongo-low"
# The tests of what depends on PyMongo's private internals (greenpool.pymongo).
ADAPTER_TESTS = ("tests/test_pymongo_pool.py", "tests/test_pymongo_client.py")


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    result = subprocess.run([str(a) for a in args], cwd=ROOT, env=env)
    if result.returncode:
        sys.exit(result.returncode)


def setup(where: Path = VENV, *pins: str, extras: str = "test") -> Path:
    """Create ``where`` and install greenpool with ``extras`` (and ``pins``),
    if not done for the current setup.cfg and pyproject.toml.
    Returns the environment's python."""
    python = where / "bin" / "python"
    suffix = "" if extras == "test" else "-" + extras.replace(",", "-")
    stamp = where / f".greenpool-installed{suffix}"
    wanted = hashlib.sha256(
        b"".join((ROOT / name).read_bytes() for name in ("setup.cfg", "pyproject.toml"))
        + " ".join(pins).encode()
    ).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {where}", flush=True)
        venv.EnvBuilder(with_pip=True).create(where)
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(python, "-m", "pip", "install", "--quiet", "-e", f".[{extras}]", *pins)
    stamp.write_text(wanted)
    return python


def lowest_pymongo() -> str:
    """``pymongo==X.Y.0`` for setup.cfg's ``pymongo>=X.Y,<...`` requirement."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    for requirement in config["options"]["install_requires"].split():
        found = re.fullmatch(r"pymongo>=(\d+)\.(\d+)(?:\.0)?,<[\d.]+", requirement)
        if found:
            return f"pymongo=={found[1]}.{found[2]}.0"
    sys.exit("setup.cfg: no 'pymongo>=X.Y,<Z' requirement to find the lowest PyMongo from")


def demo(args: list[str]) -> None:
    run(PYTHON, "-m", "greenpool.demo", *args)


def test(args: list[str]) -> None:
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "mypy", "--strict", "greenpool")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run(PYTHON, "-m", "pytest", *args, env=env)
    if args:
        return
    low = lowest_pymongo()
    print(f"+ the greenpool.pymongo tests again with {low}", flush=True)
    low_python = setup(LOW_VENV, low)
    run(low_python, "-c", "import pymongo; print('pymongo', pymongo.version)")
    run(low_python, "-m", "pytest", *ADAPTER_TESTS, env=env)


def bench(args: list[str]) -> None:
    python = setup(VENV, extras="test,bench")  # matplotlib for the plot
    run(python, "benchmarks/bench.py", *args)


def pymongo_suite(args: list[str]) -> None:
    """PyMongo's test suite on both routes (tools/pymongo_suite.py; --help)."""
    run(PYTHON, "tools/pymongo_suite.py", *args)


JOBS = {"bench": bench, "demo": demo, "pymongo-suite": pymongo_suite, "test": test}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        sys.exit(f"usage: python3 tools/dev.py {{{'|'.join(JOBS)}}} [args...]")
    if sys.version_info < (3, 11):  # noqa: UP036 (this script may run on any python3)
        sys.exit(f"greenpool needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    setup()
    JOBS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
