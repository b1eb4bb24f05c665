#!/usr/bin/env python3
"""Set up greenpool's environment and run its jobs: ``demo``, ``test``, ``bench``.

    python3 tools/dev.py demo    # the main job: a demo (see README.rst)
    python3 tools/dev.py test    # ruff, mypy --strict, the whole test suite
    python3 tools/dev.py bench   # the benchmarks (not part of the tests); --quick
    python3 tools/dev.py pymongo-suite [VERSION]  # PyMongo's own tests, stock vs greenpool

Needs only Python 3.11+ with venv and pip. The virtual environment lives in
``.venv`` and is (re)installed when setup.cfg or pyproject.toml change; it
gets the newest PyMongo the ``pymongo`` extra allows. ``test`` then runs the
greenpool.pymongo tests again on every other release of PYMONGO_MATRIX (the
latest patch of each supported minor), and greenpool's own Client and pool
tests on the lowest one too: each release is installed once, without its
dependencies, into ``.venv-pymongo/<version>`` and put first on the main
environment's PYTHONPATH. Extra arguments after ``test`` go to pytest, and
skip the matrix; after ``demo`` and ``bench``, to the demo and to
benchmarks/bench.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
OVERLAYS = ROOT / ".venv-pymongo"
# The tests of what depends on PyMongo's private internals (greenpool.pymongo).
ADAPTER_TESTS = ("tests/test_pymongo_pool.py", "tests/test_pymongo_client.py")
# greenpool's own tests that prove its base requirement's floor (pymongo>=4.9).
BASE_TESTS = ("tests/test_client.py", "tests/test_pool.py", "tests/test_cmap_spec.py",
              "tests/test_read_preference.py", "tests/test_timeouts.py", "tests/test_csot_spec.py",
              "tests/test_hostile.py", "tests/test_metrics.py", "tests/test_sdam_logging.py",
              "tests/test_lb_audit.py", "tests/test_uri_options.py", "tests/test_cmap_logging.py")
# The latest patch of every PyMongo minor release greenpool.pymongo supports
# (greenpool.pymongo.SUPPORTED_PYMONGO; tests/test_pymongo_pool.py checks they agree).
PYMONGO_MATRIX = ("4.9.2", "4.10.1", "4.11.3", "4.12.1", "4.13.2", "4.14.1", "4.15.5",
                  "4.16.0", "4.17.0", "4.18.3", "4.19.0", "4.20.0")


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


def overlay(version: str) -> Path:
    """``.venv-pymongo/<version>``: that PyMongo (with its bson and gridfs) alone,
    installed once; put first on PYTHONPATH it shadows the main environment's."""
    where = OVERLAYS / version
    stamp = where / ".greenpool-installed"
    if stamp.exists():
        return where
    if where.exists():  # an install that did not finish
        shutil.rmtree(where)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", "--target", where,
        f"pymongo=={version}")
    stamp.write_text(version)
    return where


def demo(args: list[str]) -> None:
    run(PYTHON, "-m", "greenpool.cli.demo", *args)


def test(args: list[str]) -> None:
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "mypy", "--strict", "greenpool")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run(PYTHON, "-m", "pytest", *args, env=env)
    if args:
        return
    installed = subprocess.run(
        [str(PYTHON), "-c", "import pymongo; print(pymongo.version)"],
        capture_output=True, text=True, check=True).stdout.strip()
    for version in PYMONGO_MATRIX:
        if version == installed:
            continue  # the run above
        tests = ADAPTER_TESTS + (BASE_TESTS if version == PYMONGO_MATRIX[0] else ())
        print(f"+ with pymongo {version}: {' '.join(tests)}", flush=True)
        where = overlay(version)
        matrix_env = dict(env, PYTHONPATH=os.pathsep.join(
            [str(where), *filter(None, [env.get("PYTHONPATH")])]))
        run(PYTHON, "-c", f"import pymongo; assert pymongo.version == {version!r}, "
            "pymongo.__file__", env=matrix_env)
        run(PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, env=matrix_env)


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
