"""A WSGI app under uWSGI's gevent loop, on either of greenpool's routes.

Run it from this directory with the uWSGI of the clone's ``.venv`` (the
``pyuwsgi`` wheel, which has the gevent loop built in; see uwsgi.ini)::

    export MONGODB_URI=mongodb://127.0.0.1:27017/
    GREENPOOL_ROUTE=client PORT=8000 ../../.venv/bin/uwsgi --ini uwsgi.ini
    GREENPOOL_ROUTE=pymongo PORT=8000 ../../.venv/bin/uwsgi --ini uwsgi.ini

``GREENPOOL_ROUTE`` picks the client: ``client`` (the default) for
:class:`greenpool.Client`, ``pymongo`` for :class:`greenpool.pymongo.MongoClient`.

uWSGI imports the app once, in its master, and forks the workers from it:
the client is created at import time. On the Client route the import also
runs a command, so the master's pool holds a connection when the workers are
forked; greenpool's pools start clean in each worker, which never uses the
master's connection. On the PyMongo route the client is created with
``connect=False`` and first used in the workers, as PyMongo requires:
PyMongo's own monitors, started in the master, would be copied into every
worker, each waiting on the master's monitoring sockets (PyMongo warns
"MongoClient opened before fork").

Stopping: with ``gevent-wait-for-hub`` a worker that is told to stop (a
reload, SIGHUP; a shutdown, SIGINT or SIGTERM) stops accepting requests, lets
the requests in flight finish, and then waits until gevent's hub has nothing
left to run. greenpool.Client's monitor never keeps the hub waiting, but
PyMongo's monitor threads (greenlets under monkey-patching) do, for as long as
the client is open: each worker closes its client when it is told to stop,
once the requests it is serving are done (:func:`close_when_told_to_stop`).
Without that, a PyMongo worker lives until uWSGI's ``worker-reload-mercy``
runs out and it is killed.

Each request runs ``whatsmyuri`` and answers JSON: the worker's pid, the
client address the server saw for the connection used (``you``), the class
of the pool, and the master's pid and connection (``parent``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

import gevent

ROUTE = os.environ.get("GREENPOOL_ROUTE", "client")
URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/")
# How long a stopping worker lets the requests it serves finish before it
# closes its client anyway (uWSGI's worker-reload-mercy is the hard limit).
DRAIN_SECONDS = 10.0

client: Any
if ROUTE == "client":
    from greenpool import Client

    client = Client(URI)

    def whatsmyuri() -> str:
        you: str = client.command("admin", {"whatsmyuri": 1})["you"]
        return you

    def pool_class() -> str:
        return type(client.pool).__name__
elif ROUTE == "pymongo":
    from greenpool.pymongo import MongoClient

    # connect=False: nothing starts in the master; each worker connects on first use.
    client = MongoClient(URI, connect=False)

    def whatsmyuri() -> str:
        you: str = client.admin.command("whatsmyuri")["you"]
        return you

    def pool_class() -> str:
        # A look at PyMongo internals, to show which pool serves the app.
        servers = client._topology._servers.values()
        return ",".join(sorted({type(server.pool).__name__ for server in servers}))
else:
    raise SystemExit(f"GREENPOOL_ROUTE must be 'client' or 'pymongo', not {ROUTE!r}")

# Import time, in uWSGI's master: on the Client route the pool now holds a connection.
PARENT = {"you": whatsmyuri() if ROUTE == "client" else None, "pid": os.getpid()}

_serving = 0  # requests this worker is serving now
_last_started = 0.0  # when the last one started (time.monotonic())
# Quiet this long, with nothing being served, and the requests accepted before
# the stop have all reached the app.
QUIET_SECONDS = 0.25
_handlers: list[Any] = []  # gevent's signal handlers stop when dropped


def close_when_told_to_stop() -> None:
    """In each worker: close the client once the worker is told to stop and
    its requests are done, so gevent's hub can end and the worker exit.

    Call it from inside the worker's gevent loop, as below: uWSGI installs
    its own handlers for these signals when its loop starts, and gevent
    watchers registered before that would leave uWSGI's non-gevent ones in
    place, which end the worker at once on SIGHUP, dropping the requests in
    flight."""
    stopping: list[bool] = []

    def close() -> None:
        if stopping:
            return
        stopping.append(True)
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline and (
                _serving or time.monotonic() - _last_started < QUIET_SECONDS):
            gevent.sleep(0.05)
        client.close()

    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        # Beside uWSGI's own handlers for these signals, not instead of them.
        _handlers.append(gevent.signal_handler(signum, close))


try:
    from uwsgidecorators import postfork
except ImportError:  # not under uWSGI: nothing forks, nothing to stop
    pass
else:
    # In each worker, once its gevent loop runs (after uWSGI's own handlers).
    postfork(lambda: gevent.spawn(close_when_told_to_stop))


def app(environ: dict[str, Any],
        start_response: Callable[[str, list[tuple[str, str]]], Any]) -> Iterable[bytes]:
    global _serving, _last_started
    _serving += 1
    _last_started = time.monotonic()
    try:
        body = {"you": whatsmyuri(), "pid": os.getpid(), "pool": pool_class(),
                "parent": PARENT}
        status = "200 OK"
    except Exception as error:  # report it to the caller, who counts failures
        body = {"error": repr(error), "pid": os.getpid()}
        status = "500 Internal Server Error"
    finally:
        _serving -= 1
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]
