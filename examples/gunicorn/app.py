"""A WSGI app that shares one greenpool Client per gunicorn worker.

Run it with the gevent worker and ``preload_app = True`` (see gunicorn.conf.py),
from this directory, with the gunicorn of the clone's ``.venv``::

    export MONGODB_URI=mongodb://127.0.0.1:27017/
    PORT=8000 ../../.venv/bin/gunicorn -c gunicorn.conf.py app:app

The Client is created at import time, so with ``preload_app`` it is created
once in gunicorn's master and inherited by every forked worker. The import
also runs a command, so the master holds a pooled connection at fork time.
greenpool resets the pool in each worker after the fork: a worker never uses
(or writes to) the master's connection, and opens its own.

Each request runs ``whatsmyuri`` and answers JSON: the worker's pid, the
client address the server saw for the connection used (``you``, i.e. this
side's host:port), the server's ``connectionId`` for it and the pool's
generation, plus the same
identity for the master's connection made at import time.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pymongo import monitoring

from greenpool import Client


class _ConnectionIds(monitoring.CommandListener):
    """Remembers, per greenlet (threading.local is greenlet-local under gevent's
    monkey-patching), the server connectionId of its last command."""

    def __init__(self) -> None:
        self.local = threading.local()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.local.server_connection_id = event.server_connection_id

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.local.server_connection_id = None


_ids = _ConnectionIds()
# acquire_sites: a worker's pool report (SIGUSR2, see gunicorn.conf.py) says
# where each held connection was checked out.
client = Client(os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/"),
                event_listeners=[_ids], acquire_sites=True)


def _identity() -> dict[str, Any]:
    reply = client.command("admin", {"whatsmyuri": 1})
    return {"you": reply["you"], "connection_id": _ids.local.server_connection_id,
            # Bumped once by the reset after the fork, and by every clear.
            "generation": client.pool.generation}


# Import time (the master, with preload_app): the pool now holds a connection.
PARENT = dict(_identity(), pid=os.getpid())


def app(environ: dict[str, Any],
        start_response: Callable[[str, list[tuple[str, str]]], Any]) -> Iterable[bytes]:
    try:
        body = dict(_identity(), pid=os.getpid(), parent=PARENT)
        status = "200 OK"
    except Exception as error:  # report it to the caller, who counts failures
        body = {"error": repr(error), "pid": os.getpid()}
        status = "500 Internal Server Error"
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]
