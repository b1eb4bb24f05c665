#!/usr/bin/env python3
"""PyMongo's own test suite, run with PyMongo's stock pools and with greenpool's.

    python3 devtools/dev.py pymongo-suite [VERSION] [options]

1. Fetches the ``test/`` folder of PyMongo ``VERSION`` (default: the one in
   ``.venv``) from its sdist on PyPI (``pip download --no-binary :all:``) into
   ``~/.cache/greenpool/pymongo-suite/VERSION/`` (SHARED: shared by the user's clones;
   never part of this repository).
2. Installs that PyMongo, gevent and what its tests need (the sdist's
   ``requirements/test.txt``, capped per TOOLING_CAPS for old suites) into the cached venv
   ``SHARED/venv-VERSION-pyX.Y``; greenpool comes from this checkout (PYTHONPATH).
3. Per topology mode, starts SecantusDB on free ports of 127.0.0.1: ``rs`` (a one-node
   replica set: transactions), ``single`` (a standalone), ``lb`` (a standalone behind
   tests/lb_proxy.py's load balancer as one service, PyMongo's ``SINGLE_MONGOS_LB_URI``,
   and as two, ``MULTI_MONGOS_LB_URI``). It stops exactly what it started.
4. Runs every module twice, each in its own pytest process under
   ``gevent.monkey.patch_all()``: route ``stock`` (PyMongo's pools) and route
   ``greenpool`` (every ``MongoClient`` gets ``greenpool.pymongo``'s ``_pool_class``
   and ``_condition_class`` unless the test chose its own pool class). Each test is
   bounded by ``--test-timeout`` (an overrun is reported as ``hang``), each module
   by ``--module-timeout``.
5. Prints, per mode, a side-by-side table (passed/failed/skipped/errors per module and
   route) and every test whose outcome differs, and saves the outcomes as JSON.

Exit status 1 when parity is broken: a test that passed with the stock pools did
not pass with greenpool's (failed, error, hang, or never reported), or the
greenpool route built no GreenPool at all.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Each run's logs and outcomes, in this clone (git-ignored).
RUNS = ROOT / ".cache" / "pymongo-suite" / "runs"
#: Each release's test folder and environment, shared by the clones of one user: they take
#: minutes to fetch and install, and never change ($GREENPOOL_CACHE, else
#: $XDG_CACHE_HOME/greenpool, else ~/.cache/greenpool).
SHARED = Path(os.environ.get("GREENPOOL_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "greenpool") / "pymongo-suite"
MODES = ("rs", "single", "lb")
ROUTES = ("stock", "greenpool")
# The venv gets what the sdist's own requirements/test.txt declares (pytest,
# pytest-asyncio, ...), or TEST_REQUIREMENTS_FALLBACK where it has none, plus greenpool's
# own dependencies (greenpool itself is imported from this checkout) and the per-test bound.
TEST_REQUIREMENTS = "requirements/test.txt"
TEST_REQUIREMENTS_FALLBACK = ("pytest>=8.2", "pytest-asyncio>=0.24")
SUITE_REQUIREMENTS = ("pytest-timeout>=2.3", "gevent>=24.2", "dnspython>=2.6")
# requirements/test.txt gives lower bounds only, and a suite meets test tooling released
# long after it. Up to (not including) each PyMongo version here, its suite gets these
# caps too: the tooling of its release. PyMongo 4.9's conftest.py (a session-scoped
# event_loop_policy fixture with asyncio_default_fixture_loop_scope = "session") fails
# every module at setup under pytest 8.4+ / pytest-asyncio 0.25+ ("assert not
# self._finalizers" in _pytest/fixtures.py); it passes with pytest 8.3 and
# pytest-asyncio 0.24, current at its release (October 2024). 4.19 and 4.20 need no caps.
TOOLING_CAPS: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((4, 10), ("pytest<8.4", "pytest-asyncio<0.25")),
)
# PyMongo's default selection (pyproject.toml: "-m default or default_async"), without
# the junit file it writes; the asynchronous tests are not run (gevent programs use the
# synchronous client).
PYTEST_OPTIONS = ("-p", "no:cacheprovider", "-o", "addopts=", "--strict-markers", "-q", "-rN")
# test_load_balancer.py is marked load_balancer, which PyMongo runs against a load balancer.
MARKERS = {"rs": "default", "single": "default", "lb": "default or load_balancer"}
TIMEOUT_MARK = "Timeout (>"


# -- fetching the tests and the environment ------------------------------------------------

def run(*args: str | Path, **kwargs: Any) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], check=True, **kwargs)


@contextlib.contextmanager
def shared(version: str) -> Iterator[None]:
    """Hold SHARED's lock for ``version``: two clones never fetch or install it at once."""
    SHARED.mkdir(parents=True, exist_ok=True)
    with open(SHARED / f"{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def fetch_tests(version: str) -> Path:
    """``SHARED/VERSION`` holding the sdist's ``test/``, ``pyproject.toml`` (PyMongo's
    pytest configuration) and ``requirements/test.txt`` (what its tests need),
    downloaded once."""
    where = SHARED / version
    if (where / ".complete").exists() and (where / ".complete").read_text() == f"{version} 2":
        return where
    with tempfile.TemporaryDirectory(prefix="pymongo-sdist-") as scratch:
        run(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", ":all:", f"pymongo=={version}", "-d", scratch)
        archives = list(Path(scratch).glob("pymongo-*.tar.gz"))
        if len(archives) != 1:
            sys.exit(f"pip download pymongo=={version}: expected one sdist, got {archives}")
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        with tarfile.open(archives[0]) as archive:
            top = f"pymongo-{version}/"
            members = [m for m in archive.getmembers()
                       if m.name.startswith(top + "test/")
                       or m.name in (top + "pyproject.toml", top + TEST_REQUIREMENTS)]
            if not any(m.name.startswith(top + "test/") for m in members):
                sys.exit(f"{archives[0].name} has no {top}test/ folder")
            for member in members:
                member.name = member.name[len(top):]
            archive.extractall(where, members=members, filter="data")
    (where / ".complete").write_text(f"{version} 2")  # 2: with requirements/test.txt
    return where


def version_key(version: str) -> tuple[int, ...]:
    """``4.9.2`` -> ``(4, 9, 2)``; a pre-release suffix is ignored (``4.10.0rc1``)."""
    key = []
    for part in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        key.append(int(digits))
    return tuple(key)


def suite_requirements(version: str, tests: Path) -> list[str]:
    """What PyMongo ``version``'s suite needs: its sdist's requirements/test.txt (else
    TEST_REQUIREMENTS_FALLBACK), the TOOLING_CAPS that apply to it, SUITE_REQUIREMENTS."""
    declared = tests / TEST_REQUIREMENTS
    if declared.exists():
        wanted = [line.split("#", 1)[0].strip() for line in declared.read_text().splitlines()]
        wanted = [line for line in wanted if line and not line.startswith("-")]
    else:
        wanted = list(TEST_REQUIREMENTS_FALLBACK)
    for below, caps in TOOLING_CAPS:
        if version_key(version) < below:
            wanted.extend(caps)
    return [*wanted, *SUITE_REQUIREMENTS]


def suite_python(version: str, tests: Path) -> Path:
    """The python of ``SHARED/venv-VERSION-pyX.Y`` (this Python's release), created and
    filled once (again when what it should hold changed: pip then moves the tooling to
    what is wanted)."""
    where = SHARED / "venv-{}-py{}.{}".format(version, *sys.version_info[:2])
    python = where / "bin" / "python"
    stamp = where / ".suite-installed"
    requirements = [f"pymongo=={version}", *suite_requirements(version, tests)]
    wanted = " ".join(requirements)
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        print(f"creating {where}", flush=True)
        venv.EnvBuilder(with_pip=True).create(where)
    run(python, "-m", "pip", "install", "--quiet", *requirements)
    stamp.write_text(wanted)
    return python


def all_modules(tests: Path) -> list[str]:
    return sorted(path.name for path in (tests / "test").glob("test_*.py"))


# -- servers ---------------------------------------------------------------------------------

class Servers:
    """The servers of one mode; ``env`` is what PyMongo's test/__init__.py reads."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.env: dict[str, str] = {}
        self._stack: list[Any] = []
        self._servers: list[Any] = []

    def start(self) -> Servers:
        sys.path.insert(0, str(ROOT))
        from tests.lb_proxy import LBProxy
        from tests.servers import ServerProcess

        def enter(thing: Any) -> Any:
            entered = thing.__enter__()
            self._stack.append(thing)
            return entered

        try:
            if self.mode == "lb":
                # Two services in front of one server, as two mongoses in front of one
                # cluster: data and fail points are shared, whichever service a
                # connection lands on. Standalone: behind a load balancer a server must
                # not announce a replica set (PyMongo's test setup would then ask for
                # one, which loadBalanced=true forbids); mongos does not either.
                server = enter(ServerProcess())
                self._servers = [server]
                multi = enter(LBProxy([server.address, server.address]))
                single = enter(LBProxy([server.address],
                                       service_ids=[multi.backends[0].service_id]))
                self.env = {"DB_IP": "127.0.0.1", "DB_PORT": str(single.port),
                            "TEST_LOAD_BALANCER": "1", "SINGLE_MONGOS_LB_URI": single.uri,
                            "MULTI_MONGOS_LB_URI": multi.uri}
            else:
                server = enter(ServerProcess(replica_set=self.mode == "rs"))
                self._servers = [server]
                self.env = {"DB_IP": "127.0.0.1", "DB_PORT": str(server.port)}
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        while self._stack:
            self._stack.pop().__exit__(None, None, None)

    def clean(self) -> None:
        """Drop every database and fail point a run left behind, so that no run (the
        greenpool route after the stock one, say) finds another's data."""
        from pymongo import MongoClient
        from pymongo.errors import OperationFailure

        for server in self._servers:
            with MongoClient(server.host, server.port, directConnection=True,
                             serverSelectionTimeoutMS=10000) as client:
                with contextlib.suppress(OperationFailure):
                    client.admin.command("configureFailPoint", "failCommand", mode="off")
                for name in client.list_database_names():
                    if name not in ("admin", "config", "local"):
                        client.drop_database(name)

    def restart(self) -> None:
        self.stop()
        self.start()


# -- one module on one route -----------------------------------------------------------------

def run_module(python: Path, tests: Path, servers: Servers, route: str, module: str,
               test_timeout: float, module_timeout: float, logs: Path,
               select: str | None = None, stall: str | None = None) -> dict[str, Any]:
    """Run ``test/MODULE`` in a pytest process; its outcomes by test id, and its status:
    ``ok`` (pytest finished), ``exit N`` (pytest's exit code 2-5: interrupted,
    internal or usage error, none collected), ``timeout`` (killed after module_timeout)."""
    outcomes_file = logs / f"{route}-{module}.jsonl"
    outcomes_file.unlink(missing_ok=True)
    log = logs / f"{route}-{module}.log"
    command = [str(python), str(Path(__file__).resolve()), "--child", route,
               str(outcomes_file), "--", *PYTEST_OPTIONS, "-m", MARKERS[servers.mode],
               f"--timeout={test_timeout:g}",
               *(("-k", select) if select else ()), f"test/{module}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests), str(ROOT)]),
               PYTHONDONTWRITEBYTECODE="1", **servers.env)
    env.pop("GREENPOOL_TEST_URI", None)
    if stall:
        env["GREENPOOL_SUITE_STALL"] = stall
    started = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=tests, env=env, stdin=subprocess.DEVNULL,
                                   stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            code = process.wait(module_timeout)
            # 5: every test of the module deselected (markers PyMongo does not run by default)
            status = "ok" if code in (0, 1, 5) else f"exit {code}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: only what it started
            process.wait()
            status = "timeout"
        except BaseException:  # interrupted: the pytest process goes too
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    outcomes: dict[str, list[str]] = {}
    pools: dict[str, int] = {}
    running: str | None = None
    if outcomes_file.exists():
        for line in outcomes_file.read_text().splitlines():
            record = json.loads(line)
            if "setup_error" in record:
                status = f"not run: {record['setup_error']}"
            elif "pools" in record:
                pools = record["pools"]
            elif "started" in record:
                running = record["started"]
            else:
                outcomes[record["test"]] = [record["outcome"], record["message"]]
                running = None
    if status == "timeout" and running is not None:
        outcomes[running] = ["hang", f"still running after the module's {module_timeout:g} s"]
    return {"status": status, "seconds": round(time.monotonic() - started, 1),
            "outcomes": outcomes, "pools": pools}


# -- the pytest process (route stock or greenpool) -------------------------------------------

class Recorder:
    """A pytest plugin writing each test's final outcome as one JSON line, flushed at once
    (a module killed for hanging keeps what it reported, and which test was running)."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a")  # noqa: SIM115 (open for the whole session)
        self.current: dict[str, list[str]] = {}
        self.seconds: dict[str, float] = {}

    def _write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._write({"started": nodeid})

    def pytest_runtest_logreport(self, report: Any) -> None:
        message = ""
        if report.failed:
            text = str(report.longrepr)
            lines = text.strip().splitlines() or [""]
            # pytest's "E   ..." lines hold the exception; the last line is where it was.
            errors = [line[1:].strip() for line in lines if line.startswith("E ")]
            message = (errors[0] if errors else lines[-1])[:300]
            outcome = "hang" if TIMEOUT_MARK in text else (
                "failed" if report.when == "call" else "error")
        elif report.skipped:
            outcome = "skipped"  # xfail counts as skipped, as in pytest's summary
        else:
            outcome = "passed"
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        previous = self.current.get(report.nodeid)
        # The worst phase wins: a passing call with a failing teardown is an error.
        if previous is None or previous[0] == "passed":
            self.current[report.nodeid] = [outcome, message]
        if report.when == "teardown":
            final = self.current.pop(report.nodeid)
            self._write({"test": report.nodeid, "outcome": final[0], "message": final[1],
                         "seconds": round(self.seconds.pop(report.nodeid), 2)})


def install_loopback_guard() -> None:
    """Let the pytest process reach 127.0.0.1 (and ::1) only: PyMongo's suite has tests
    that resolve or connect to outside hosts (SRV records, unresolvable names); here
    they fail at once, the same way on both routes."""
    import ipaddress
    import socket

    def local(host: object) -> bool:
        if not isinstance(host, str):
            return True  # AF_UNIX paths and the like
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return False

    def refuse(what: str, host: object) -> OSError:
        return ConnectionRefusedError(f"pymongo-suite: {what} {host!r} refused "
                                      "(the suite may reach 127.0.0.1 only)")

    original_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host is not None and not local(host if not isinstance(host, bytes)
                                          else host.decode()):
            raise socket.gaierror(socket.EAI_NONAME, f"pymongo-suite: no lookup of {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    import gevent._socketcommon
    import gevent.socket

    # gevent.socket.create_connection resolves through its own module's name.
    for module in (socket, gevent.socket, gevent._socketcommon):
        module.getaddrinfo = getaddrinfo  # type: ignore[attr-defined]
    cls = socket.socket
    for name in ("connect", "connect_ex"):
        original = getattr(cls, name)

        def guarded(self: object, address: object, _original: object = original,
                    _name: str = name) -> object:
            if isinstance(address, tuple) and not local(address[0]):
                raise refuse(_name, address[0])
            return _original(self, address)  # type: ignore[operator]

        setattr(cls, name, guarded)
    original_sendto = cls.sendto

    def sendto(self: object, data: object, *args: object) -> object:
        address = args[-1]
        if isinstance(address, tuple) and not local(address[0]):
            raise refuse("sendto", address[0])
        return original_sendto(self, data, *args)  # type: ignore[arg-type]

    cls.sendto = sendto  # type: ignore[method-assign]


def install_stall(command: str, after_ms: str, for_ms: str) -> None:
    """After each ``command`` starts, block the whole process (its gevent hub) for
    ``for_ms`` milliseconds, ``after_ms`` milliseconds later: what a loaded machine does
    to a process it deschedules. A timeout timer and a reply that both fall due in the
    stall are seen together when the hub wakes."""
    import gevent
    from gevent import monkey
    from pymongo import monitoring

    blocking_sleep = monkey.get_original("time", "sleep")

    class Stall(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == command:
                gevent.spawn_later(float(after_ms) / 1000, blocking_sleep,
                                   float(for_ms) / 1000)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    monitoring.register(Stall())


def child(route: str, outcomes_path: str, pytest_args: list[str]) -> int:
    from gevent import monkey

    monkey.patch_all()
    install_loopback_guard()
    import pytest

    stall = os.environ.get("GREENPOOL_SUITE_STALL")
    if stall:
        install_stall(*stall.split(":"))
    pools: Counter[str] = Counter()
    if route == "greenpool":
        import pymongo
        from pymongo.synchronous.mongo_client import MongoClient

        try:
            from greenpool.pymongo import KillSafeCondition, pool_factory
        except ImportError as error:  # e.g. a PyMongo version greenpool.pymongo refuses
            with open(outcomes_path, "a") as file:
                file.write(json.dumps({"setup_error": repr(error)}) + "\n")
            return 4

        def counting_factory(*args: Any, **kwargs: Any) -> Any:
            pool = pool_factory(*args, **kwargs)
            pools[type(pool).__name__] += 1
            return pool

        original_init = MongoClient.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            # A test that brings its own pool class (a mock) keeps it, on both routes.
            kwargs.setdefault("_pool_class", counting_factory)
            kwargs.setdefault("_condition_class", KillSafeCondition)
            original_init(self, *args, **kwargs)

        MongoClient.__init__ = init  # type: ignore[method-assign]
        assert pymongo.MongoClient is MongoClient
    recorder = Recorder(outcomes_path)
    try:
        return int(pytest.main(pytest_args, plugins=[recorder]))
    finally:
        recorder._write({"pools": dict(pools)})


# -- tables ----------------------------------------------------------------------------------

def tally(outcomes: dict[str, list[str]]) -> Counter[str]:
    counts: Counter[str] = Counter(outcome for outcome, _ in outcomes.values())
    counts["errors"] = counts["error"] + counts["hang"]
    return counts


def cell(result: dict[str, Any]) -> str:
    counts = tally(result["outcomes"])
    text = f"{counts['passed']}/{counts['failed']}/{counts['skipped']}/{counts['errors']}"
    if counts["hang"]:
        text += f" ({counts['hang']} hang)"
    if result["status"] != "ok":
        text += f" [{result['status']}]"
    return text


def differences(stock: dict[str, Any], green: dict[str, Any]) -> list[tuple[str, str, str]]:
    tests = sorted(set(stock["outcomes"]) | set(green["outcomes"]))
    found = []
    for test in tests:
        a = stock["outcomes"].get(test, ["not run", ""])
        b = green["outcomes"].get(test, ["not run", ""])
        if a[0] != b[0]:
            found.append((test, a[0], f"{b[0]}: {b[1]}" if b[1] else b[0]))
    return found


def report(results: dict[str, Any]) -> tuple[str, list[str]]:
    """The tables as text, and the parity breaks (passed with stock, not with greenpool)."""
    lines = [f"PyMongo {results['version']} test suite on SecantusDB, under gevent patch_all",
             "cells: passed/failed/skipped/errors (errors include hangs); "
             "[timeout]: the module was killed", ""]
    breaks: list[str] = []
    for mode, modules in results["modes"].items():
        totals = {route: Counter[str]() for route in ROUTES}
        width = max([len(m) for m in modules] + [6])
        lines.append(f"mode {mode}")
        lines.append(f"  {'module':<{width}}  {'stock':>22}  {'greenpool':>22}  differ")
        diffs: list[str] = []
        for module, by_route in modules.items():
            stock, green = by_route["stock"], by_route["greenpool"]
            for route in ROUTES:
                totals[route].update(tally(by_route[route]["outcomes"]))
            found = differences(stock, green)
            lines.append(f"  {module:<{width}}  {cell(stock):>22}  {cell(green):>22}  "
                         f"{len(found) or ''}")
            for test, a, b in found:
                diffs.append(f"  {test}: stock {a}, greenpool {b}")
                if a == "passed":
                    breaks.append(f"{mode}: {test}: stock passed, greenpool {b}")
        total = {route: f"{t['passed']}/{t['failed']}/{t['skipped']}/{t['errors']}"
                 for route, t in totals.items()}
        lines.append(f"  {'total':<{width}}  {total['stock']:>22}  {total['greenpool']:>22}")
        built = sum(by_route["greenpool"]["pools"].get("GreenPool", 0)
                    for by_route in modules.values())
        lines.append(f"  GreenPools built on the greenpool route: {built}")
        if modules and not totals["stock"]["passed"]:
            breaks.append(f"{mode}: no test passed with the stock pools: nothing was compared")
        for module, by_route in modules.items():
            for route in ROUTES:
                if by_route[route]["status"].startswith("not run"):
                    breaks.append(f"{mode}: {module} ({route}): {by_route[route]['status']}")
        if modules and not built:
            breaks.append(f"{mode}: the greenpool route built no GreenPool")
        lines.append(f"  tests whose outcome differs: {len(diffs)}")
        lines.extend(diffs)
        lines.append("")
    return "\n".join(lines), breaks


# -- main ------------------------------------------------------------------------------------

def installed_pymongo() -> str:
    import importlib.metadata

    return importlib.metadata.version("pymongo")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        route, path, separator, *pytest_args = sys.argv[2:]
        if route not in ROUTES or separator != "--":
            sys.exit(f"usage: {sys.argv[0]} --child {{stock|greenpool}} OUTCOMES -- ARGS")
        return child(route, path, pytest_args)
    parser = argparse.ArgumentParser(prog="devtools/dev.py pymongo-suite", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", nargs="?", help="PyMongo version (default: .venv's)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated topology modes among rs, single, lb")
    parser.add_argument("--modules", help="comma-separated test modules (default: all)")
    parser.add_argument("--test-timeout", type=float, default=120.0)
    parser.add_argument("--module-timeout", type=float, default=1200.0)
    parser.add_argument("--select", metavar="EXPRESSION",
                        help="only the tests pytest -k EXPRESSION selects")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each module this many times (flaky or real?)")
    parser.add_argument("--stall", metavar="COMMAND:AFTER_MS:FOR_MS",
                        help="after each COMMAND starts, block the test process for "
                             "FOR_MS ms, AFTER_MS ms later (timing-sensitive tests)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="modules run at once, each worker with servers of its own")
    parser.add_argument("--resume", action="store_true",
                        help="keep the modules already in the --json file")
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    parser.add_argument("--report", type=Path,
                        help="print the tables of a saved --json file and exit")
    args = parser.parse_args()
    if args.report:
        text, breaks = report(json.loads(args.report.read_text()))
        print(text)
        return 1 if breaks else 0
    version = args.version or installed_pymongo()
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            parser.error(f"--modes: unknown mode {mode!r} (choose among {', '.join(MODES)})")
    if args.stall:
        parts = args.stall.split(":")
        if len(parts) != 3 or not all(part.isdigit() for part in parts[1:]):
            parser.error(f"--stall: expected COMMAND:AFTER_MS:FOR_MS, not {args.stall!r}")
    for name in ("test_timeout", "module_timeout", "repeat", "jobs"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, not "
                         f"{getattr(args, name)}")
    with shared(version):
        tests = fetch_tests(version)
        available = all_modules(tests)
        modules = args.modules.split(",") if args.modules else available
        for module in modules:
            if module not in available:
                parser.error(f"--modules: PyMongo {version} has no test/{module}")
        python = suite_python(version, tests)
    # One folder per run: two runs at once (the test command's and a full one) never
    # share a file.
    RUNS.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix=f"{version}-{time.strftime('%Y%m%dT%H%M%S')}-",
                                 dir=RUNS))
    print(f"pytest logs and outcomes of each module: {logs}", flush=True)

    import gevent
    from gevent import monkey

    # The load balancer (tests/lb_proxy.py) serves from this process's hub while the
    # pytest processes run.
    monkey.patch_all()
    # SIGTERM stops the run like Ctrl-C: the servers and the running pytest go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    previous: dict[str, Any] = {}
    if args.resume and args.json and args.json.exists():
        saved = json.loads(args.json.read_text())
        if saved.get("version") == version:
            previous = saved["modes"]
    results: dict[str, Any] = {"version": version, "modes": {}}

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))

    for mode in modes:
        done: dict[str, Any] = dict(previous.get(mode, {}))
        results["modes"][mode] = done
        names = [(module if args.repeat == 1 else f"{module} #{repetition + 1}", module)
                 for module, repetition in itertools.product(modules, range(args.repeat))]
        queue = [(name, module) for name, module in reversed(names) if name not in done]

        def worker(mode: str = mode, done: dict[str, Any] = done,
                   queue: list[tuple[str, str]] = queue) -> None:
            # Each worker has servers of its own: no module sees another's fail points.
            servers = Servers(mode).start()
            try:
                while queue:
                    name, module = queue.pop()
                    by_route = {}
                    # The routes alternate, so both see the same server and machine load.
                    for route in ROUTES:
                        servers.clean()
                        result = run_module(python, tests, servers, route, module,
                                            args.test_timeout, args.module_timeout, logs,
                                            args.select, args.stall)
                        by_route[route] = result
                        print(f"{mode} {route:9} {name}: {cell(result)} "
                              f"({result['seconds']} s)", flush=True)
                        if result["status"] != "ok" or tally(result["outcomes"])["hang"]:
                            # A killed module may leave fail points or locks behind.
                            servers.restart()
                    done[name] = by_route
                    save()
            finally:
                servers.stop()

        workers = [gevent.spawn(worker) for _ in range(min(args.jobs, len(queue)))]
        try:
            gevent.joinall(workers, raise_error=True)
        finally:
            gevent.killall(workers)  # each stops its pytest process and its servers
        # In module order; modules a resumed file had beyond this run's list stay, after.
        ordered = {name: done[name] for name, _ in names if name in done}
        results["modes"][mode] = dict(ordered, **done)
        save()
    text, breaks = report(results)
    print(text)
    if breaks:
        print("PARITY BROKEN:\n  " + "\n  ".join(breaks))
        return 1
    print("parity: every test that passed with the stock pools passed with greenpool's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
