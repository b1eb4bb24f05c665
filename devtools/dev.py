#!/usr/bin/env python3
"""Set up greenpool's environment and run its jobs.

    python3 devtools/dev.py demo    # the main job: a demo (see README.rst)
    python3 devtools/dev.py test    # ruff, mypy --strict, the whole test suite
    python3 devtools/dev.py durations  # each test's time, by which ``test`` cuts its groups
    python3 devtools/dev.py pymongo-matrix  # the PyMongo releases, the compiled build
    python3 devtools/dev.py compile # the optional compiled build, into build/mypyc
    python3 devtools/dev.py bench   # the benchmarks (not part of the tests); --quick
    python3 devtools/dev.py faults  # restarts, partitions, elections per route (not a test)
    python3 devtools/dev.py pymongo-suite [VERSION]  # PyMongo's own tests, stock vs greenpool
    python3 devtools/dev.py cooperative   # the hub-block test, slow servers, its table
    python3 devtools/dev.py gevent-matrix [VERSION...|--ci]  # greenpool's tests per gevent
    python3 devtools/dev.py python-matrix [VERSION...]  # the whole suite on each other Python
    python3 devtools/dev.py slow    # the long runs the test command leaves out
    python3 devtools/dev.py perf    # instruction counts against the record; --record
    python3 devtools/dev.py drift   # the suite on the newest versions allowed, vs the lock
    python3 devtools/dev.py lock    # write constraints.txt anew from the newest versions

Needs only Python 3.11+ with venv and pip. The virtual environment lives in
``.venv`` and is (re)installed when setup.cfg, pyproject.toml or
constraints.txt change; it gets exactly the versions constraints.txt pins (the
lock: the versions last known green). Extra arguments after ``test`` go to
pytest; after ``demo`` and ``bench``, to the demo and to benchmarks/bench.py.

``test`` without arguments runs the suite as TEST_GROUPS pytest processes at once
(pytest-split cuts the groups by tests/durations.json, which ``durations`` writes anew
from a whole run in one process), each group's output in ``build/logs``, and closes with
the groups' counts added up; with arguments it runs one pytest with them.

``pymongo-matrix`` runs the greenpool.pymongo tests and the connection string
tests again on every other release of PYMONGO_MATRIX (the latest patch of each
supported minor), and greenpool's own Client and pool tests on the lowest one
too: each release is installed once, without its dependencies, into
``.venv-pymongo/<version>`` and put first on the main environment's PYTHONPATH.
It also builds the compiled build and runs COMPILED_TESTS on it.

``compile`` copies the package to ``build/mypyc`` and compiles the modules
greenpool/_compiled.py names (MODULES, the hot path) there with mypyc, mypy's
compiler; the package itself stays pure Python. ``pymongo-matrix`` runs
COMPILED_TESTS again with ``build/mypyc`` first on PYTHONPATH
(tests/test_compiled.py fails if any of those modules was imported pure).

``gevent-matrix`` runs GEVENT_TESTS on the latest patch of every gevent minor release
from the floor setup.cfg requires to the newest (GEVENT_MATRIX; the main environment's
own release is the test command's), each installed the same way into
``.venv-gevent/<version>``, and ends with a table of results and times; CI runs
``gevent-matrix --ci`` (GEVENT_CI) after ``test``.

``python-matrix`` runs the whole suite on every other Python release setup.cfg names
(PYTHON_MATRIX), each in ``.venv-py<version>`` with the lock; it finds each interpreter
in pyenv's versions or on PATH, and fails naming any it cannot find.

``slow`` runs the tests marked ``slow``, which the test command leaves out, then ``perf``
where valgrind is installed (else it says NOT TESTED).

``perf`` counts, with valgrind's callgrind, the instructions of the figures the same tree
counts alike run after run (the pool's checkout and checkin, greenpool.Client's
collection calls at one greenlet: benchmarks/instructions.py --guard), compares them with
benchmarks/recorded/instructions.json and fails if any grew more than 5%;
``perf --record`` writes that file anew.

docs/development.rst says all this at more length.

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
import runpy
import shutil
import subprocess
import sys
import time
import venv
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple
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
              "tests/test_lb_audit.py", "tests/test_cmap_logging.py", "tests/test_retries.py",
              "tests/test_client_retries.py", "tests/test_dns.py")
# The latest patch of every PyMongo minor release greenpool.pymongo supports
# (greenpool.pymongo.SUPPORTED_PYMONGO; tests/test_pymongo_pool.py checks they agree).
PYMONGO_MATRIX = ("4.9.2", "4.10.1", "4.11.3", "4.12.1", "4.13.2", "4.14.1", "4.15.5",
                  "4.16.0", "4.17.0", "4.18.3", "4.19.0", "4.20.1")
#: The compiled build (``compile``): a copy of the package, its hot path compiled by mypyc.
COMPILED = ROOT / "build" / "mypyc"
#: What ``test`` runs again on the compiled build: the compiled modules' check, the Client,
#: the topology (its SDAM spec files, many servers), what the collection API sends, the
#: pool, the CMAP spec, kill safety and the wait queue.
COMPILED_TESTS = ("tests/test_compiled.py", "tests/test_client.py", "tests/test_topology.py",
                  "tests/test_sdam_spec.py", "tests/test_collection_wire.py", "tests/test_pool.py",
                  "tests/test_cmap_spec.py", "tests/test_kill_safety.py",
                  "tests/test_waitqueue.py")
#: How many runs of a matrix (PyMongo, gevent, Python) run at once: their tests mostly wait
#: on servers and timers, so two share a 2-core machine ($GREENPOOL_MATRIX_JOBS overrides).
MATRIX_JOBS = int(os.environ.get("GREENPOOL_MATRIX_JOBS", "2"))
#: Each matrix run's output, and each group's of the test command.
LOGS = ROOT / "build" / "logs"
#: How many pytest processes the test command runs at once, each a group of the suite
#: (pytest-split): its tests mostly wait on servers and timers, so two groups nearly halve
#: its time on a 2-core machine ($GREENPOOL_TEST_GROUPS overrides; 1 runs one pytest).
TEST_GROUPS = int(os.environ.get("GREENPOOL_TEST_GROUPS", "2"))
#: What each test took in a whole run, by which pytest-split balances the groups
#: (``durations`` writes it anew).
DURATIONS = ROOT / "tests" / "durations.json"
#: The Python releases setup.cfg names (tests/test_packaging.py checks they agree): the
#: test command runs on the one running this script, ``python-matrix`` on the others.
PYTHON_MATRIX = ("3.11", "3.12", "3.13")
GEVENT_OVERLAYS = ROOT / ".venv-gevent"
#: The latest patch of every gevent minor release with a wheel for Python 3.11, from the
#: floor setup.cfg requires (tests/test_packaging.py checks they agree) to the newest, the
#: lock's; each with what its overlay needs besides gevent itself. gevent 22.10 loads its
#: own plugins through pkg_resources, which does not find the locked zope packages under
#: their normalized distribution names: its overlay has zope releases of its time.
GEVENT_MATRIX: dict[str, tuple[str, ...]] = {
    "22.10.2": ("zope.interface==6.4.post2", "zope.event==5.0"),
    "23.7.0": (), "23.9.1": (), "24.2.1": (), "24.10.3": (), "24.11.1": (), "25.4.2": (),
    "25.5.1": (), "25.8.2": (), "25.9.1": (), "26.4.0": (), "26.5.0": (), "26.7.0": (),
    "26.8.0": (), "26.9.0": (),
}
#: The releases CI runs (``gevent-matrix --ci``): the floor, one in the middle and the newest
#: but one (the newest is the lock's, the test command's); ``gevent-matrix`` runs them all.
GEVENT_CI = ("22.10.2", "24.11.1", "26.8.0")
#: What each gevent release runs: the pool, its wait queue, kills at every yield point,
#: fork, maintenance and fair turns, the CMAP spec, the Client with its sockets and
#: timeouts, the PyMongo adapter, and a preforking server's gevent workers (uWSGI's; the
#: gunicorn test stays in the main run, as gunicorn 24 on refuses gevent before 24.10.1).
GEVENT_TESTS = ("tests/test_pool.py", "tests/test_waitqueue.py", "tests/test_kill_safety.py",
                "tests/test_fork.py", "tests/test_maintenance.py", "tests/test_fair_turns.py",
                "tests/test_cmap_spec.py", "tests/test_client.py", "tests/test_timeouts.py",
                "tests/test_link.py", "tests/test_pymongo_pool.py", "tests/test_pymongo_client.py",
                "tests/test_uwsgi.py")


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    result = subprocess.run([str(a) for a in args], cwd=ROOT, env=env)
    if result.returncode:
        sys.exit(result.returncode)


def setup(where: Path = VENV, *, extras: str = "test", locked: bool = True,
          base: Path | None = None) -> Path:
    """Create ``where`` (with the interpreter ``base``, else this one) and install
    greenpool with ``extras``, at the lock's versions (or the newest allowed,
    unlocked), if not done for the current setup.cfg, pyproject.toml and lock.
    Returns the environment's python."""
    python = where / "bin" / "python"
    suffix = "" if extras == "test" else "-" + extras.replace(",", "-")
    stamp = where / f".greenpool-installed{suffix}"
    inputs = ["setup.cfg", "pyproject.toml", *([LOCK.name] if locked else [])]
    wanted = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in inputs)).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {where}", flush=True)
        if base is None:
            venv.EnvBuilder(with_pip=True).create(where)
        else:
            # Copies, as EnvBuilder makes them: a program that re-executes its own binary
            # (uWSGI's reload) then stays in the environment, not its base Python.
            run(base, "-m", "venv", "--copies", where)
    constraints = ["--constraint", str(LOCK)] if locked else []
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip", *constraints)
    run(python, "-m", "pip", "install", "--quiet", "-e", f".[{extras}]", *constraints)
    stamp.write_text(wanted)
    return python


def overlay(where: Path, *requirements: str) -> Path:
    """``where``: the ``requirements`` alone (no dependencies), installed once; put
    first on PYTHONPATH, they shadow the main environment's own versions."""
    stamp = where / ".greenpool-installed"
    wanted = " ".join(requirements)
    if stamp.exists() and stamp.read_text() == wanted:
        return where
    if where.exists():  # an install that did not finish, or of other requirements
        shutil.rmtree(where)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", "--target", where,
        *requirements)
    stamp.write_text(wanted)
    return where


def pymongo_overlay(version: str) -> Path:
    """``.venv-pymongo/<version>``: that PyMongo (with its bson and gridfs)."""
    return overlay(OVERLAYS / version, f"pymongo=={version}")


def first_on_path(env: dict[str, str], where: Path) -> dict[str, str]:
    return dict(env, PYTHONPATH=os.pathsep.join(
        [str(where), *filter(None, [env.get("PYTHONPATH")])]))


def demo(args: list[str]) -> None:
    run(PYTHON, "-m", "greenpool.cli.demo", *args)


def test(args: list[str]) -> None:
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "mypy", "--strict", "greenpool")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if args or TEST_GROUPS == 1:
        run(PYTHON, "-m", "pytest", *args, env=env)
    else:
        test_groups(env)


def test_groups(env: dict[str, str]) -> None:
    """The whole suite as TEST_GROUPS pytest processes at once, each a group that
    pytest-split cuts from the suite by the recorded durations: each process starts its
    own servers on free ports and shares nothing with the others. Ends with the groups'
    counts added up, and exits non-zero if any group failed."""
    started = time.monotonic()
    jobs = [Job(f"test-group-{group}", [
        PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--splits={TEST_GROUPS}",
        f"--group={group}", "--splitting-algorithm=duration_based_chunks",
        f"--durations-path={DURATIONS.relative_to(ROOT)}"], env)
        for group in range(1, TEST_GROUPS + 1)]
    rows = run_jobs(jobs, at_once=TEST_GROUPS)
    totals: dict[str, int] = {}
    loud: list[str] = []
    for job in jobs:
        lines = (LOGS / f"{job.name}.log").read_text(errors="replace").splitlines()
        for count, what in PYTEST_COUNT.findall(summary_line(lines)):
            what = {"error": "errors", "warning": "warnings"}.get(what, what)
            totals[what] = totals.get(what, 0) + int(count)
        loud += [line for line in lines if line.startswith("!!! ") and line not in loud]
    print("\n".join(loud), flush=True)
    # pytest-split deselects each group's share of the others: not a count of the suite.
    rest = ", ".join(f"{count} {what}" for what, count in sorted(totals.items())
                     if what not in ("passed", "failed", "deselected"))
    elapsed = time.monotonic() - started
    # The plain closing line ("N passed, N failed"), then how long the groups took.
    print(f"tests: {totals.get('passed', 0)} passed, {totals.get('failed', 0)} failed"
          + (f", {rest}" if rest else ""))
    print(f"({len(jobs)} groups at once, in {elapsed / 60:.1f} min; the longest group "
          f"{max(seconds for _, _, seconds in rows) / 60:.1f} min)", flush=True)
    if any(code for _, code, _ in rows):
        sys.exit(1)


def durations(args: list[str]) -> None:
    """Run the whole suite in one process and write what each test took to DURATIONS,
    by which the test command cuts its groups (``args`` go to pytest)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run(PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--store-durations",
        "--clean-durations", f"--durations-path={DURATIONS.relative_to(ROOT)}", *args,
        env=env)


def pymongo_matrix(args: list[str]) -> None:
    if args:
        sys.exit(f"pymongo-matrix takes no arguments, not {' '.join(args)!r}")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    jobs = []
    reason = cannot_compile()
    if reason is None:
        build_compiled()
        print(f"+ compiled ({COMPILED.relative_to(ROOT)}): {' '.join(COMPILED_TESTS)}",
              flush=True)
        jobs.append(Job("compiled", [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                     "--import-mode=append", *COMPILED_TESTS],
                        compiled_env(env)))
    else:
        print(f"+ NOT TESTED: the compiled build, as {reason}", flush=True)
    installed = subprocess.run(
        [str(PYTHON), "-c", "import pymongo; print(pymongo.version)"],
        capture_output=True, text=True, check=True).stdout.strip()
    for version in PYMONGO_MATRIX:
        if version == installed:
            continue  # the run above
        tests = ADAPTER_TESTS + URI_TESTS + (BASE_TESTS if version == PYMONGO_MATRIX[0] else ())
        matrix_env = first_on_path(env, pymongo_overlay(version))
        run(PYTHON, "-c", f"import pymongo; assert pymongo.version == {version!r}, "
            "pymongo.__file__", env=matrix_env)
        jobs.append(Job(f"pymongo-{version}", [PYTHON, "-m", "pytest", "-q", "-p",
                                                "no:cacheprovider", *tests], matrix_env))
    print(f"+ the PyMongo matrix: {' '.join(ADAPTER_TESTS + URI_TESTS)} on each release, "
          f"and {' '.join(BASE_TESTS)} on {PYMONGO_MATRIX[0]}", flush=True)
    run_matrix("The compiled build and PyMongo", jobs,
               f"pymongo {installed}: the main run's")


class Job(NamedTuple):
    """One run of a matrix: its name, its command and its environment."""

    name: str
    command: list[str | Path]
    env: dict[str, str]


def run_jobs(jobs: list[Job], at_once: int = MATRIX_JOBS) -> list[tuple[str, int, float]]:
    """Run ``jobs``, ``at_once`` at a time, each with its output in ``build/logs/NAME.log``;
    as each ends, say how, with what its log says of a failure if it failed. Returns (name,
    exit status, seconds) rows in the order of ``jobs``."""
    LOGS.mkdir(parents=True, exist_ok=True)
    waiting = list(jobs)
    running: dict[str, tuple[subprocess.Popen[bytes], float, Any]] = {}
    rows: dict[str, tuple[str, int, float]] = {}
    while waiting or running:
        while waiting and len(running) < at_once:
            job = waiting.pop(0)
            log = open(LOGS / f"{job.name}.log", "wb")  # noqa: SIM115 (closed when it ends)
            print(f"+ {job.name}: {' '.join(str(a) for a in job.command)}", flush=True)
            process = subprocess.Popen([str(a) for a in job.command], cwd=ROOT, env=job.env,
                                       stdout=log, stderr=subprocess.STDOUT)
            running[job.name] = (process, time.monotonic(), log)
        time.sleep(0.5)
        for name, (process, started, log) in list(running.items()):
            if process.poll() is None:
                continue
            log.close()
            del running[name]
            seconds = time.monotonic() - started
            rows[name] = (name, process.returncode, seconds)
            lines = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()
            verdict = "passed" if process.returncode == 0 else f"FAILED ({process.returncode})"
            print(f"  {name}: {verdict} in {seconds:.0f} s: {summary_line(lines)} "
                  f"(log: {(LOGS / f'{name}.log').relative_to(ROOT)})", flush=True)
            if process.returncode:
                print("\n".join(failure_lines(lines)), flush=True)
    return [rows[job.name] for job in jobs]


def failure_lines(lines: list[str]) -> list[str]:
    """What a failed run's log says of its failures: the 80 lines before pytest's short
    summary (the last traceback's end), then the summary's failures and errors, not its
    skips; a log without a short summary (a crash), its last 80 lines."""
    marker = next((number for number, line in enumerate(lines)
                   if "short test summary info" in line), None)
    if marker is None:
        return lines[-80:]
    summary = [line for line in lines[marker:] if line.startswith(("FAILED", "ERROR"))]
    return [*lines[max(0, marker - 80):marker + 1], *summary, summary_line(lines)]


#: pytest's closing line ("3 passed, 1 failed in 2.50s").
PYTEST_SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?|deselected)\b.* in [\d.]+s\b")
#: Each count of that line.
PYTEST_COUNT = re.compile(r"\b(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?"
                          r"|warnings?)\b")


def summary_line(lines: list[str]) -> str:
    """What a run's log says of it: pytest's closing line, else its last line
    (an interpreter may print more at exit, such as old gevent's complaints)."""
    return next((line for line in reversed(lines) if PYTEST_SUMMARY.search(line)),
                lines[-1] if lines else "")


def compile_build(args: list[str]) -> None:
    """``build/mypyc``: a copy of the package with greenpool._compiled.MODULES compiled."""
    if args:
        sys.exit("usage: python3 devtools/dev.py compile")
    reason = cannot_compile()
    if reason is not None:
        sys.exit(f"compile: impossible here, as {reason}")
    build_compiled()


def build_compiled() -> None:
    """What ``compile`` does once :func:`cannot_compile` found nothing in the way."""
    modules: tuple[str, ...] = runpy.run_path(str(ROOT / "greenpool" / "_compiled.py"))["MODULES"]
    if COMPILED.exists():
        shutil.rmtree(COMPILED)
    shutil.copytree(ROOT / "greenpool", COMPILED / "greenpool",
                    ignore=shutil.ignore_patterns("__pycache__"))
    sources = [name.replace(".", "/") + ".py" for name in modules]
    print(f"+ mypyc {' '.join(sources)} (in {COMPILED.relative_to(ROOT)})", flush=True)
    started = time.monotonic()
    result = subprocess.run([str(VENV / "bin" / "mypyc"), *sources], cwd=COMPILED,
                            capture_output=True, text=True)
    if result.returncode:
        print(result.stdout[-5000:], result.stderr[-5000:], sep="\n")
        sys.exit(f"compile: mypyc failed ({result.returncode})")
    print(f"compiled {len(sources)} modules in {time.monotonic() - started:.0f} s; to use them, "
          f"put {COMPILED} first on PYTHONPATH", flush=True)


def cannot_compile() -> str | None:
    """Why mypyc cannot build here (it needs setuptools, a C compiler and
    Python's headers), or None."""
    probe = ("import importlib.util, os, shlex, shutil, sysconfig\n"
             "cc = shlex.split(sysconfig.get_config_var('CC') or 'cc')[0]\n"
             "headers = os.path.join(sysconfig.get_paths()['include'], 'Python.h')\n"
             "print(importlib.util.find_spec('setuptools') is not None, "
             "shutil.which(cc) is not None, os.path.exists(headers), cc, headers)")
    found = subprocess.run([str(PYTHON), "-c", probe], capture_output=True, text=True,
                           check=True).stdout.split()
    if found[0] != "True":
        return f"{VENV} lacks setuptools (pip install -e '.[test]' installs it)"
    if found[1] != "True":
        return f"there is no C compiler ({found[3]!r} is not on PATH; Debian: apt install gcc)"
    if found[2] != "True":
        return f"Python's headers are missing ({found[4]}; Debian: apt install python3-dev)"
    return None


def compiled_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` importing greenpool from the compiled build: first on PYTHONPATH, and neither
    the working directory (PYTHONSAFEPATH) nor pytest (``--import-mode=append``) putting the
    tree's own package before it. GREENPOOL_COMPILED tells tests/test_compiled.py to expect it."""
    return dict(first_on_path(env, COMPILED), PYTHONSAFEPATH="1", GREENPOOL_COMPILED="1")


def gevent_matrix(args: list[str]) -> None:
    """GEVENT_TESTS on every release of GEVENT_MATRIX (or those named, or with ``--ci``
    GEVENT_CI's) but the main environment's own (the test command runs the whole suite on
    that one), each installed once, without its dependencies, into
    ``.venv-gevent/<version>`` and put first on the main environment's PYTHONPATH; a
    table of the results and times."""
    if args == ["--ci"]:
        args = list(GEVENT_CI)
    unknown = [version for version in args if version not in GEVENT_MATRIX]
    if unknown:
        sys.exit(f"not in GEVENT_MATRIX: {', '.join(unknown)}")
    installed = subprocess.run([str(PYTHON), "-c", "import gevent; print(gevent.__version__)"],
                               capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    jobs = []
    for version in args or [v for v in GEVENT_MATRIX if v != installed]:
        where = overlay(GEVENT_OVERLAYS / version, f"gevent=={version}", *GEVENT_MATRIX[version])
        matrix_env = first_on_path(env, where)
        run(PYTHON, "-c", f"import gevent; assert gevent.__version__ == {version!r}, "
            "gevent.__file__", env=matrix_env)
        jobs.append(Job(f"gevent-{version}", [PYTHON, "-m", "pytest", "-q", "-p",
                                               "no:cacheprovider", *GEVENT_TESTS], matrix_env))
    print(f"+ the gevent matrix: {' '.join(GEVENT_TESTS)} on each release", flush=True)
    run_matrix("gevent", jobs, f"{installed}: the main environment's, in the test command")


def python_matrix(args: list[str]) -> None:
    """The whole test suite on every release of PYTHON_MATRIX (or those named) but the one
    running this script (the test command's), each in ``.venv-py<version>`` with the lock;
    a table of the results and times."""
    unknown = [version for version in args if version not in PYTHON_MATRIX]
    if unknown:
        sys.exit(f"not in PYTHON_MATRIX {PYTHON_MATRIX}: {', '.join(unknown)}")
    running = "{}.{}".format(*sys.version_info[:2])
    versions = args or [version for version in PYTHON_MATRIX if version != running]
    interpreters = {version: find_python(version) for version in versions}
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    jobs = [Job(f"python-{version}", [setup(ROOT / f".venv-py{version}", base=base), "-m",
                                      "pytest", "-q", "-p", "no:cacheprovider"], env)
            for version, base in interpreters.items()]
    print(f"+ the Python matrix: the whole suite on {', '.join(interpreters)}", flush=True)
    run_matrix("Python", jobs, f"{running}: this one's, in the test command")


def find_python(version: str) -> Path:
    """The interpreter of Python ``version`` ("3.12"): the newest patch of it among pyenv's
    versions, else ``python3.12`` on PATH if it runs as that release; else exit naming
    the release and where it was looked for."""
    looked = []
    for root in pyenv_roots():
        found = [path for path in (root / "versions").glob(f"{version}.*/bin/python{version}")
                 if path.parents[1].name.removeprefix(f"{version}.").isdigit()]
        if found:
            return max(found, key=lambda path: int(path.parents[1].name.split(".")[2]))
        looked.append(f"{root / 'versions'}/{version}.*")
    on_path = shutil.which(f"python{version}")
    if on_path is not None:
        probe = subprocess.run([on_path, "-c", "import sys; print(*sys.version_info[:2], "
                                "sep='.')"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return Path(on_path)
        looked.append(f"python{version} on PATH ({on_path}: it does not run as {version}: "
                      f"{(probe.stderr or probe.stdout).strip().splitlines()[0]})")
    else:
        looked.append(f"python{version} on PATH")
    sys.exit(f"python-matrix: no Python {version} here; looked in: {'; '.join(looked)}. "
             f"Install it (pyenv install {version}), or name the releases to run.")


def pyenv_roots() -> list[Path]:
    """Where pyenv keeps its versions: $PYENV_ROOT, ``pyenv root``, ~/.pyenv (each once)."""
    roots = [os.environ.get("PYENV_ROOT")]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        roots.append(subprocess.run([pyenv, "root"], capture_output=True, text=True)
                     .stdout.strip())
    roots.append(str(Path.home() / ".pyenv"))
    unique = dict.fromkeys(Path(root).resolve() for root in roots if root)
    return [root for root in unique if (root / "versions").is_dir()]


def run_matrix(what: str, jobs: list[Job], note: str) -> None:
    """Run a matrix's ``jobs`` (:func:`run_jobs`), print a table of the results and times,
    and exit non-zero if any failed."""
    started = time.monotonic()
    rows = run_jobs(jobs)
    elapsed = time.monotonic() - started
    print(f"\n{'run':16} {'result':11} time (s)   ({note})")
    for name, code, seconds in rows:
        print(f"{name:16} {'passed' if code == 0 else f'FAILED ({code})':11} {seconds:8.0f}")
    failed = sum(1 for _, code, _ in rows if code)
    print(f"{what} matrix: {len(rows) - failed} passed, {failed} failed, in "
          f"{elapsed / 60:.1f} min ({MATRIX_JOBS} at a time)")
    if failed:
        sys.exit(1)


def bench(args: list[str]) -> None:
    python = setup(VENV, extras="test,bench")  # matplotlib for the plot
    run(python, "benchmarks/bench.py", *args)


def faults(args: list[str]) -> None:
    """The fault benchmark (benchmarks/bench_faults.py; --help)."""
    run(PYTHON, "benchmarks/bench_faults.py", *args)


def pymongo_suite(args: list[str]) -> None:
    """PyMongo's test suite on both routes (devtools/pymongo_suite.py; --help)."""
    run(PYTHON, "devtools/pymongo_suite.py", *args)


def mongoengine_suite(args: list[str]) -> None:
    """MongoEngine's shipped tests on stock PyMongo and on greenpool.Client
    (devtools/mongoengine_suite.py; --help)."""
    run(PYTHON, "devtools/mongoengine_suite.py", *args)


def slow(args: list[str]) -> None:
    """The tests marked slow, which the test command leaves out (tests/slow_tests.py;
    ``args`` go to pytest), then ``perf`` where valgrind is installed."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run(PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--slow", "-m", "slow", *args,
        env=env)
    reason = cannot_count()
    if reason is None:
        perf([])
    else:
        print(f"+ NOT TESTED: perf, the instruction counts against the record, as {reason}",
              flush=True)


def cannot_count() -> str | None:
    """Why ``perf`` cannot count instructions here, or None."""
    if shutil.which("valgrind") is None:
        return "valgrind is not on PATH (Debian: apt install valgrind)"
    return None


def perf(args: list[str]) -> None:
    """The regression guard: instruction counts of the stable figures against
    benchmarks/recorded/instructions.json, failing on a growth over 5%; ``--record``
    writes that file anew (benchmarks/instructions.py --guard)."""
    if args not in ([], ["--record"]):
        sys.exit(f"usage: python3 devtools/dev.py perf [--record], not {' '.join(args)!r}")
    reason = cannot_count()
    if reason is not None:
        sys.exit(f"perf: cannot count instructions, as {reason}; nothing was compared")
    run(PYTHON, "benchmarks/instructions.py", "--guard", *args)


def cooperative(args: list[str]) -> None:
    """tests/test_cooperative.py with its slow delays (DNS answers 1 s, replies 0.3 s),
    printing the longest hub block of each step; ``args`` go to pytest."""
    env = dict(os.environ, GREENPOOL_COOPERATIVE_SLOW="1", PYTHONDONTWRITEBYTECODE="1")
    run(PYTHON, "-m", "pytest", "-s", "-p", "no:cacheprovider", "-o", "timeout=600",
        "tests/test_cooperative.py", *args, env=env)


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


JOBS = {"bench": bench, "compile": compile_build, "cooperative": cooperative, "demo": demo,
        "drift": drift, "durations": durations, "faults": faults,
        "gevent-matrix": gevent_matrix, "lock": lock, "mongoengine-suite": mongoengine_suite,
        "perf": perf, "pymongo-matrix": pymongo_matrix,
        "pymongo-suite": pymongo_suite, "python-matrix": python_matrix, "slow": slow,
        "test": test}


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
