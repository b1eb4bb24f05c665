"""uWSGI's gevent loop (``uwsgi --gevent``), on both routes: examples/uwsgi, as written.

The ``pyuwsgi`` wheel (the test extra) is uWSGI with the gevent loop built in. Its master
imports the app, whose client runs a command there, and forks two gevent workers from it.
For greenpool.Client and for greenpool.pymongo.MongoClient in turn:

* many concurrent requests all succeed, both workers serve, no connection is used by two
  processes and no worker uses the master's (the Client route's master uses its client
  at import; the PyMongo route's creates it with ``connect=False``, as PyMongo requires);
* a reload (SIGHUP to the master) lets the requests in flight finish, and the workers,
  which wait for gevent's hub to end (``gevent-wait-for-hub``), are gone and replaced
  within a few seconds, where uWSGI would wait its 30 s mercy for a worker whose hub
  stays busy;
* a shutdown (SIGTERM, with ``die-on-term``) ends the master and every worker within a
  few seconds, the same way.

The timings are printed (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
import pytest

from tests.gunicorn_run import http_get
from tests.servers import free_port

# uWSGI (2.0.31 and earlier) aborts every worker it forks on Python 3.13 when told to run
# Python's fork hooks there (py-call-osafterfork, which the example needs): uWSGI's own
# bug, github.com/unbit/uwsgi/issues/2710; docs/guides/uwsgi.rst says so.
pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 13),
    reason="uWSGI aborts its workers on Python 3.13 with py-call-osafterfork "
           "(github.com/unbit/uwsgi/issues/2710)")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "uwsgi"
UWSGI = Path(sys.executable).parent / "uwsgi"  # the pyuwsgi wheel's, in this environment
WORKERS = 2  # uwsgi.ini's processes
REQUESTS = 600
CONCURRENCY = 50
# "Within a few seconds" (uWSGI's master looks at its workers once a second), far below
# the 30 s worker-reload-mercy of uwsgi.ini that a worker whose hub never ends runs into.
# A reload also re-executes the master, which imports the app again.
SHUTDOWN_LIMIT = 5.0
RELOAD_LIMIT = 10.0
POOLS = {"client": "Pool", "pymongo": "GreenPool"}


class Uwsgi:
    """One uWSGI master running examples/uwsgi, in its own process group."""

    def __init__(self, route: str, uri: str, log: Path) -> None:
        assert UWSGI.exists(), (
            f"{UWSGI} is missing: the test extra installs the pyuwsgi wheel, uWSGI with "
            f"its gevent loop (pip install -e '.[test]')")
        self.port = free_port()
        self.log = log
        env = dict(os.environ, GREENPOOL_ROUTE=route, MONGODB_URI=uri, PORT=str(self.port))
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(UWSGI), "--ini", "uwsgi.ini"], cwd=EXAMPLE, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until_serving(self, old_pids: set[int], timeout: float) -> None:
        """Wait until every worker was spawned (again, after a reload) and a
        worker not in ``old_pids`` answers."""
        deadline = time.monotonic() + timeout
        spawned = WORKERS * (2 if old_pids else 1)
        while True:
            assert self.process.poll() is None, self.text()
            with contextlib.suppress(OSError, ValueError, KeyError):
                status, body = http_get(self.port, timeout=2)
                if (status == 200 and json.loads(body)["pid"] not in old_pids
                        and self.text().count("spawned uWSGI worker") >= spawned):
                    return
            assert time.monotonic() < deadline, f"uWSGI did not serve:\n{self.text()[-6000:]}"
            time.sleep(0.05)

    def stop(self) -> None:
        """Whatever happened: end the process group, and check nothing outlived it."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)  # uWSGI's "stop"
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # The workers are in the same group; none may outlive the master.
        deadline = time.monotonic() + 5
        while True:
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                return
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                pytest.fail(f"uWSGI's process group {self.process.pid} outlived its master")
            time.sleep(0.05)


@contextlib.contextmanager
def uwsgi(route: str, uri: str, log: Path) -> Iterator[Uwsgi]:
    server = Uwsgi(route, uri, log)
    try:
        server.wait_until_serving(set(), timeout=60)
        yield server
    finally:
        server.stop()


def requests(port: int, count: int) -> tuple[list[dict[str, Any]], list[str]]:
    replies: list[dict[str, Any]] = []
    failures: list[str] = []

    def one(_: int) -> None:
        try:
            status, body = http_get(port)
        except Exception as error:  # counted, and shown if any
            failures.append(repr(error))
            return
        if status != 200:
            failures.append(f"{status} {body[:300]!r}")
        else:
            replies.append(json.loads(body))

    gevent.pool.Pool(CONCURRENCY).map(one, range(count))
    return replies, failures


def check_processes(replies: list[dict[str, Any]], route: str) -> set[int]:
    """Every reply from a worker forked from one preloaded app, on its own
    connections; the workers' pids."""
    (parent,) = {json.dumps(reply["parent"], sort_keys=True) for reply in replies}
    master = json.loads(parent)
    workers = {reply["pid"] for reply in replies}
    assert len(workers) == WORKERS, f"{len(workers)} workers served: {workers}"
    assert master["pid"] not in workers
    assert {reply["pool"] for reply in replies} == {POOLS[route]}
    pids_by_connection: defaultdict[str, set[int]] = defaultdict(set)
    for reply in replies:
        pids_by_connection[reply["you"]].add(reply["pid"])
    shared = {you: pids for you, pids in pids_by_connection.items() if len(pids) > 1}
    assert shared == {}, f"connections used by several processes: {shared}"
    # The Client route's master holds a connection when it forks; the PyMongo
    # route's creates its client unconnected (see app.py).
    assert (master["you"] is None) == (route == "pymongo"), master
    assert master["you"] not in pids_by_connection, "a worker used the master's connection"
    return workers


def wait_for_exit(process: subprocess.Popen[bytes], timeout: float) -> float:
    started = time.monotonic()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout)
    return time.monotonic() - started


@pytest.mark.timeout(120)
@pytest.mark.parametrize("route", ["client", "pymongo"])
def test_uwsgi_gevent_loop_forks_reloads_and_stops(route: str, mongodb_uri: str,
                                                   tmp_path: Path) -> None:
    log = tmp_path / "uwsgi.log"
    with uwsgi(route, mongodb_uri, log) as server:
        replies, failures = requests(server.port, REQUESTS)
        assert failures == [], f"{len(failures)} failed, e.g. {failures[:3]}"
        assert len(replies) == REQUESTS
        first = check_processes(replies, route)

        # A reload while requests are in flight: none of them may fail.
        in_flight = gevent.spawn(requests, server.port, REQUESTS // 2)
        gevent.sleep(0.05)
        reload_started = time.monotonic()
        os.kill(server.process.pid, signal.SIGHUP)
        server.wait_until_serving(first, timeout=60)
        reload_seconds = time.monotonic() - reload_started
        during, failures = in_flight.get(timeout=60)
        assert failures == [], f"{len(failures)} failed across the reload: {failures[:3]}"
        assert server.text().count(" buried after ") == WORKERS, server.text()[-4000:]

        replies, failures = requests(server.port, REQUESTS)
        assert failures == [], f"{len(failures)} failed after the reload, e.g. {failures[:3]}"
        second = check_processes(replies, route)
        assert not second & first, "the reload replaced every worker"

        shutdown_started = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)
        shutdown_seconds = wait_for_exit(server.process, timeout=40)
        text = server.text()
        assert server.process.returncode is not None, f"uWSGI is still running:\n{text[-4000:]}"
        assert "goodbye to uWSGI" in text, text[-4000:]
        assert "NO MERCY" not in text, f"a worker's hub never ended:\n{text[-4000:]}"

    print(f"\nuWSGI --gevent, {route}: {2 * REQUESTS + len(during)} requests served "
          f"({len(during)} across the reload); reload {reload_seconds:.2f} s; "
          f"shutdown {shutdown_seconds:.2f} s (started {shutdown_started - reload_started:.1f} s "
          f"after the reload)")
    assert reload_seconds < RELOAD_LIMIT, f"reload took {reload_seconds:.1f} s"
    assert shutdown_seconds < SHUTDOWN_LIMIT, f"shutdown took {shutdown_seconds:.1f} s"
