#!/usr/bin/env python3
"""Set up greenpool's environment and run its jobs.

    python3 devtools/dev.py demo    # the main job: a demo (see README.rst)
    python3 devtools/dev.py test    # ruff, mypy --strict, the whole test suite
    python3 devtools/dev.py bench   # the benchmarks (not part of the tests); --quick
    python3 devtools/dev.py pymongo-suite [VERSION]  # PyMongo's own tests, stock vs greenpool
    python3 devtools/dev.py drift   # the suite on the newest versions allowed, vs the lock
    python3 devtools/dev.py lock    # write constraints.txt anew from the newest versions

Needs only Python 3.11+ with venv and pip. The virtual environment lives in
``.venv`` and is (re)installed when setup.cfg, pyproject.toml or
constraints.txt change; it gets exactly the versions constraints.txt pins (the
lock: the versions last known green). ``test`` then runs the greenpool.pymongo
tests and the connection string tests again on every other release of
PYMONGO_MATRIX (the latest patch of each supported minor), and greenpool's own
Client and pool tests on the lowest one too: each release is installed once,
without its dependencies, into ``.venv-pymongo/<version>`` and put first on the
main environment's PYTHONPATH. Extra arguments after ``test`` go to pytest, and
skip the matrix; after ``demo`` and ``bench``, to the demo and to
benchmarks/bench.py.

``drift`` resolves the newest versions the package allows into ``.venv-drift``
(the lock not applied), prints what changed against the lock, runs the test
suite there, and says which tests failed and whether PyPI has a PyMongo patch
or minor release newer than PYMONGO_MATRIX names. Run it before ``lock``:
``lock`` resolves the same way and writes what it got to constraints.txt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from datetime import date
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
OVERLAYS = ROOT / ".venv-pymongo"
#: The lock: every package of the test environment at the version last known green.
LOCK = ROOT / "constraints.txt"
#: The extras the lock covers (every environment this script makes).
LOCKED_EXTRAS = "test,bench,otel"
# The tests of what depends on PyMongo's private internals (greenpool.pymongo).
ADAPTER_TESTS = ("tests/test_pymongo_pool.py", "tests/test_pymongo_client.py")
# greenpool's own connection string tests: its messages on every PyMongo release.
URI_TESTS = ("tests/test_uri.py", "tests/test_uri_options.py")
# greenpool's own tests that prove its base requirement's floor (pymongo>=4.9).
BASE_TESTS = ("tests/test_client.py", "tests/test_pool.py", "tests/test_cmap_spec.py",
              "tests/test_read_preference.py", "tests/test_timeouts.py", "tests/test_csot_spec.py",
              "tests/test_hostile.py", "tests/test_metrics.py", "tests/test_sdam_logging.py",
              "tests/test_lb_audit.py", "tests/test_uri_options.py", "tests/test_cmap_logging.py")
# The latest patch of every PyMongo minor release greenpool.pymongo supports
# (greenpool.pymongo.SUPPORTED_PYMONGO; tests/test_pymongo_pool.py checks they agree).
PYMONGO_MATRIX = ("4.9.2", "4.10.1", "4.11.3", "4.12.1", "4.13.2", "4.14.1", "4.15.5",
                  "4.16.0", "4.17.0", "4.18.3", "4.19.0", "4.20.1")


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    result = subprocess.run([str(a) for a in args], cwd=ROOT, env=env)
    if result.returncode:
        sys.exit(result.returncode)


def setup(where: Path = VENV, *, extras: str = "test", locked: bool = True) -> Path:
    """Create ``where`` and install greenpool with ``extras``, at the lock's
    versions (or the newest allowed, unlocked), if not done for the current
    setup.cfg, pyproject.toml and lock. Returns the environment's python."""
    python = where / "bin" / "python"
    suffix = "" if extras == "test" else "-" + extras.replace(",", "-")
    stamp = where / f".greenpool-installed{suffix}"
    inputs = ["setup.cfg", "pyproject.toml", *([LOCK.name] if locked else [])]
    wanted = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in inputs)).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {where}", flush=True)
        venv.EnvBuilder(with_pip=True).create(where)
    constraints = ["--constraint", str(LOCK)] if locked else []
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip", *constraints)
    run(python, "-m", "pip", "install", "--quiet", "-e", f".[{extras}]", *constraints)
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
        tests = ADAPTER_TESTS + URI_TESTS + (BASE_TESTS if version == PYMONGO_MATRIX[0] else ())
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
    """PyMongo's test suite on both routes (devtools/pymongo_suite.py; --help)."""
    run(PYTHON, "devtools/pymongo_suite.py", *args)


def newest(where: Path) -> Path:
    """``where`` made anew with the newest versions the package and its
    extras allow: no lock, no cache of an earlier resolution."""
    if where.exists():
        shutil.rmtree(where)
    return setup(where, extras=LOCKED_EXTRAS, locked=False)


def frozen(python: Path) -> dict[str, str]:
    """What an environment holds: {distribution name: version}, greenpool aside."""
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--exclude-editable"],
        capture_output=True, text=True, check=True).stdout
    return {item["name"].lower(): item["version"] for item in json.loads(listing)
            if item["name"].lower() not in ("greenpool", "setuptools", "wheel")}


def read_lock() -> dict[str, str]:
    pins = (line.split("#")[0].strip() for line in LOCK.read_text().splitlines())
    return {name.lower(): version for name, _, version in
            (pin.partition("==") for pin in pins if pin)}


def lock(args: list[str]) -> None:
    """Write constraints.txt from the newest versions allowed (run ``drift`` first)."""
    if args:
        sys.exit("usage: python3 devtools/dev.py lock")
    pins = frozen(newest(ROOT / ".venv-lock"))
    header = (f"# The test environment's lock: every package at the version last known green.\n"
              f"# devtools/dev.py installs exactly these (pip --constraint). Written by\n"
              f"# `python3 devtools/dev.py lock` on {date.today()} with Python "
              f"{sys.version.split()[0]}, extras [{LOCKED_EXTRAS}];\n"
              f"# run `python3 devtools/dev.py drift` first, then the test command.\n")
    LOCK.write_text(header + "".join(f"{name}=={version}\n"
                                     for name, version in sorted(pins.items())))
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(pins)} packages; now run "
          "`python3 devtools/dev.py test` and commit it if it is green")


def drift(args: list[str]) -> None:
    """The test suite on the newest versions allowed, and what changed against the lock."""
    python = newest(ROOT / ".venv-drift")
    locked, now = read_lock(), frozen(python)
    changed = [(name, locked.get(name, "-"), now.get(name, "-"))
               for name in sorted(set(locked) | set(now)) if locked.get(name) != now.get(name)]
    print(f"\n{len(changed)} packages differ from {LOCK.name} (locked -> newest allowed):")
    for name, old, new in changed:
        print(f"  {name:32} {old:>14} -> {new}")
    newer = pymongo_releases_beyond_matrix(python)
    report = ROOT / ".venv-drift" / "junit.xml"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"--junitxml={report}", *args], cwd=ROOT, env=env)
    failed = failures(report)
    print(f"\ndrift: {len(changed)} packages newer than the lock; "
          f"{len(failed)} tests failed on them" + (":" if failed else "."))
    for name in failed:
        print(f"  FAILED {name}")
    for line in newer:
        print(f"  {line}")
    if not newer:
        print(f"  PYMONGO_MATRIX names the newest patch of every PyMongo minor release on PyPI "
              f"(up to {PYMONGO_MATRIX[-1]}).")
    sys.exit(result.returncode or bool(newer))


def failures(report: Path) -> list[str]:
    """The tests a JUnit XML report says failed or errored."""
    if not report.exists():
        return ["(no report: pytest did not finish)"]
    return [f"{case.get('classname')}::{case.get('name')}"
            for case in ElementTree.parse(report).iter("testcase")
            if case.find("failure") is not None or case.find("error") is not None]


def pymongo_releases_beyond_matrix(python: Path) -> list[str]:
    """What PyPI has beyond PYMONGO_MATRIX: a newer patch of a minor it names,
    or a newer minor release."""
    listing = subprocess.run([str(python), "-m", "pip", "index", "versions", "pymongo"],
                             capture_output=True, text=True)
    line = next((x for x in listing.stdout.splitlines() if x.startswith("Available versions:")),
                None)
    if line is None:
        return [f"could not list PyMongo's releases on PyPI: {listing.stderr.strip()}"]
    releases = [tuple(map(int, v.split("."))) for v in line.split(":", 1)[1].split(", ")
                if re.fullmatch(r"\d+\.\d+(\.\d+)?", v.strip())]
    named = {tuple(map(int, v.split("."))) for v in PYMONGO_MATRIX}
    newest_by_minor: dict[tuple[int, ...], tuple[int, ...]] = {}
    for release in releases:
        minor = release[:2]
        newest_by_minor[minor] = max(newest_by_minor.get(minor, release), release)
    top = max(named)
    found = []
    for minor, release in sorted(newest_by_minor.items()):
        shown = ".".join(map(str, release))
        matrix = next((v for v in named if v[:2] == minor), None)
        if matrix is not None and release > matrix:
            found.append(f"newer PyMongo patch: {shown} (PYMONGO_MATRIX names "
                         f"{'.'.join(map(str, matrix))})")
        elif matrix is None and minor > top[:2]:
            found.append(f"newer PyMongo minor release: {shown} (beyond PYMONGO_MATRIX's "
                         f"{'.'.join(map(str, top))}: review greenpool.pymongo for it)")
    return found


JOBS = {"bench": bench, "demo": demo, "drift": drift, "lock": lock,
        "pymongo-suite": pymongo_suite, "test": test}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        sys.exit(f"usage: python3 devtools/dev.py {{{'|'.join(JOBS)}}} [args...]")
    if sys.version_info < (3, 11):  # noqa: UP036 (this script may run on any python3)
        sys.exit(f"greenpool needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if sys.argv[1] not in ("drift", "lock"):
        setup()
    JOBS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
