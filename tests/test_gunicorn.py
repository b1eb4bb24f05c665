"""gunicorn with gevent workers and ``preload_app``: examples/gunicorn.

The app creates its Client at import time, in gunicorn's master, and runs a
command there, so the master's pool holds a connection when the four workers
are forked. 2000 concurrent requests must all succeed, every worker must
serve, no connection (client port or server connectionId) may ever be used by
two processes, and no worker may use the master's connection.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
import pytest

from tests.failpoints import failpoint
from tests.gunicorn_run import gunicorn, http_get
from tests.servers import unique, with_options

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gunicorn"
WORKERS = 4
REQUESTS = 2000
CONCURRENCY = 50

pytest.importorskip("gunicorn")


def get(port: int) -> tuple[int, dict[str, Any]]:
    status, body = http_get(port)
    return status, json.loads(body)


@pytest.mark.timeout(120)
def test_gunicorn_preload_gevent_workers(mongodb_uri: str, tmp_path: Path) -> None:
    separator = "&" if "?" in mongodb_uri else ("?" if mongodb_uri.endswith("/") else "/?")
    uri = f"{mongodb_uri}{separator}maxPoolSize=10"
    with gunicorn(EXAMPLE, {"MONGODB_URI": uri}, tmp_path / "gunicorn.log",
                  workers=WORKERS, boot_timeout=30, ready_status=200) as port:
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


@pytest.mark.timeout(120)
def test_sigusr2_logs_who_holds_a_workers_pool(mongodb_uri: str, tmp_path: Path) -> None:
    """``kill -USR2 <worker pid>`` (examples/gunicorn/gunicorn.conf.py's
    post_worker_init) writes the worker's pool report to gunicorn's log: a
    request whose command the server holds for 3 s is named, with its line
    in app.py; the other workers report their idle pools."""
    app_name = unique("gunicorn_holds")
    uri = with_options(mongodb_uri, maxPoolSize=10, appName=app_name)
    log = tmp_path / "gunicorn.log"
    block = {"configureFailPoint": "failCommand", "mode": {"times": 1},
             "data": {"failCommands": ["whatsmyuri"], "appName": app_name,
                      "blockConnection": True, "blockTimeMS": 3000}}
    with gunicorn(EXAMPLE, {"MONGODB_URI": uri}, log, workers=WORKERS, boot_timeout=30,
                  ready_status=200) as port:
        workers = [int(line.rsplit(" ", 1)[1]) for line in log.read_text().splitlines()
                   if "Booting worker with pid:" in line]
        with failpoint(mongodb_uri, block):
            slow = gevent.spawn(get, port)
            time.sleep(0.5)  # the request holds its connection, blocked on the server
            for worker in workers:
                os.kill(worker, signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while log.read_text().count("greenpool: process ") < len(workers):
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            status, _ = slow.get(timeout=10)
        text = log.read_text()
    assert status == 200
    reports = text[text.index("greenpool: process "):].splitlines()
    print("\n" + "\n".join(reports))
    heads = [line for line in reports if line.startswith("greenpool: process ")]
    assert sorted(int(line.split()[2].rstrip(":")) for line in heads) == sorted(workers)
    (busy,) = [n for n, line in enumerate(reports) if " 1 in use (maxPoolSize 10), " in line]
    assert reports[busy + 1] == "Held by, longest first:"
    holder = reports[busy + 2]
    app_py = str(EXAMPLE / "app.py")
    assert f"checked out at {app_py}:" in holder and " in _identity; now at " in holder
    assert holder.endswith(" in _identity, inside Client.command")
    idle = [line for line in heads if " 0 in use (maxPoolSize 10), " in line]
    assert len(idle) == len(workers) - 1
