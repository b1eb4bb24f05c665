"""gunicorn with gevent workers and ``preload_app``: examples/gunicorn.

The app creates its Client at import time, in gunicorn's master, and runs a
command there, so the master's pool holds a connection when the four workers
are forked. 2000 concurrent requests must all succeed, every worker must
serve, no connection (client port or server connectionId) may ever be used by
two processes, and no worker may use the master's connection.
"""

from __future__ import annotations

import contextlib
import http.client
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

from tests.servers import free_port

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gunicorn"
WORKERS = 4
REQUESTS = 2000
CONCURRENCY = 50

pytest.importorskip("gunicorn")


def get(port: int, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/", headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@contextlib.contextmanager
def gunicorn(uri: str, log: Path) -> Iterator[int]:
    """Boot gunicorn on a free port; stop exactly its process group afterwards."""
    port = free_port()
    env = dict(os.environ, MONGODB_URI=uri, PORT=str(port),
               PYTHONPATH=os.pathsep.join([str(EXAMPLE.parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "app:app"],
            cwd=EXAMPLE, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(OSError):
                if get(port, timeout=2)[0] == 200:
                    break
            assert time.monotonic() < deadline, f"gunicorn did not answer:\n{log.read_text()}"
            time.sleep(0.1)
        # Every worker booted (they answer as soon as they are up).
        while log.read_text().count("Booting worker") < WORKERS:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        # The workers are in the same group; none may outlive the master.
        gevent.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 0)
            pytest.fail(f"gunicorn's process group {process.pid} survived")


@pytest.mark.timeout(120)
def test_gunicorn_preload_gevent_workers(mongodb_uri: str, tmp_path: Path) -> None:
    separator = "&" if "?" in mongodb_uri else ("?" if mongodb_uri.endswith("/") else "/?")
    uri = f"{mongodb_uri}{separator}maxPoolSize=10"
    with gunicorn(uri, tmp_path / "gunicorn.log") as port:
        replies: list[dict[str, Any]] = []
        failures: list[str] = []

        def one(_: int) -> None:
            try:
                status, body = get(port)
            except Exception as error:  # counted, and shown if any
                failures.append(repr(error))
                return
            if status != 200 or "error" in body:
                failures.append(f"{status} {body}")
            else:
                replies.append(body)

        started = time.monotonic()
        gevent.pool.Pool(CONCURRENCY).map(one, range(REQUESTS))
        elapsed = time.monotonic() - started

    assert failures == [], f"{len(failures)} failed, e.g. {failures[:5]}"
    assert len(replies) == REQUESTS

    parents = {json.dumps(r["parent"], sort_keys=True) for r in replies}
    assert len(parents) == 1, "every worker inherited the same preloaded app"
    parent = replies[0]["parent"]
    pids_by_port: defaultdict[str, set[int]] = defaultdict(set)
    pids_by_connection_id: defaultdict[int, set[int]] = defaultdict(set)
    for reply in replies:
        pids_by_port[reply["you"]].add(reply["pid"])
        pids_by_connection_id[reply["connection_id"]].add(reply["pid"])
    workers = {reply["pid"] for reply in replies}

    assert parent["pid"] not in workers
    assert len(workers) == WORKERS, f"only {len(workers)} workers served: {workers}"
    shared = {k: v for k, v in pids_by_port.items() if len(v) > 1}
    assert shared == {}, f"connections used by several processes: {shared}"
    shared_ids = {k: v for k, v in pids_by_connection_id.items() if len(v) > 1}
    assert shared_ids == {}, f"connectionIds used by several processes: {shared_ids}"
    # The master's connection (made at import, before the fork) never served a worker.
    assert parent["you"] not in pids_by_port
    assert parent["connection_id"] not in pids_by_connection_id
    # Each worker's pool was reset once, by the fork, and never cleared after
    # that (a monitor sharing the master's connection would fail checks).
    generations = {reply["generation"] for reply in replies}
    assert generations == {parent["generation"] + 1}, generations
    # Each worker opened its own small pool: at most maxPoolSize connections.
    per_worker: defaultdict[int, set[str]] = defaultdict(set)
    for reply in replies:
        per_worker[reply["pid"]].add(reply["you"])
    assert all(1 <= len(ports) <= 10 for ports in per_worker.values()), per_worker
    print(f"\n{REQUESTS} requests in {elapsed:.2f} s; connections per worker: "
          f"{ {pid: len(p) for pid, p in per_worker.items()} }")
