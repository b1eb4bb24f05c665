"""Helpers for the greenpool.pymongo tests: GreenPools over a fake network.

:class:`FakeNetwork` replaces the two places PyMongo's ``Pool.connect()``
touches the network (making the socket, the handshake ``hello``), so the
pool's own code, PyMongo's ``connect()``, ``Connection`` objects, events and
logs all run for real, without a server and without I/O.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from bson.objectid import ObjectId
from pymongo.monitoring import _EventListeners
from pymongo.pool_options import PoolOptions
from pymongo.synchronous import pool as pymongo_pool

from greenpool.pymongo import GreenPool

ADDRESS = ("db.test", 27017)

# Spec option name -> (PoolOptions keyword, conversion).
_OPTIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "maxPoolSize": ("max_pool_size", int),
    "minPoolSize": ("min_pool_size", int),
    "maxConnecting": ("max_connecting", int),
    "maxIdleTimeMS": ("max_idle_time_seconds", lambda ms: ms / 1000),
    "waitQueueTimeoutMS": ("wait_queue_timeout", lambda ms: ms / 1000),
    "loadBalanced": ("load_balanced", bool),
}


class FakeSocket:
    """Stands in for PyMongo's networking interface; only knows if it was closed."""

    def __init__(self) -> None:
        self.closed = False

    @property
    def get_conn(self) -> FakeSocket:
        return self

    def settimeout(self, timeout: float | None) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeNetwork:
    """Install with :meth:`install` (a pytest ``monkeypatch``).

    :param before_connect: called at the start of every connection attempt
        (a place for a test to yield, block or count).
    :param fail: called likewise; an exception it returns is raised as the
        socket's error (PyMongo turns an OSError into AutoReconnect).
    """

    def __init__(self, before_connect: Callable[[], None] | None = None,
                 fail: Callable[[], BaseException | None] | None = None) -> None:
        self.before_connect = before_connect
        self.fail = fail
        self.opened: list[FakeSocket] = []
        self.service_id = ObjectId()

    def install(self, monkeypatch: Any) -> FakeNetwork:
        # PyMongo 4.12 on make the socket in _configured_socket_interface; 4.9-4.11
        # in _configured_socket. FakeSocket answers what Connection asks of either.
        maker = ("_configured_socket_interface"
                 if hasattr(pymongo_pool, "_configured_socket_interface") else "_configured_socket")
        monkeypatch.setattr(pymongo_pool, maker, self._socket)

        def hello(conn: Any) -> None:  # a plain function: it becomes Connection's method
            self._hello(conn)

        monkeypatch.setattr(pymongo_pool.Connection, "hello", hello)
        return self

    @property
    def open_count(self) -> int:
        return sum(1 for sock in self.opened if not sock.closed)

    def _socket(self, address: Any, options: Any, *args: Any) -> FakeSocket:
        if self.before_connect is not None:
            self.before_connect()
        error = self.fail() if self.fail is not None else None
        if error is not None:
            raise error
        sock = FakeSocket()
        self.opened.append(sock)
        return sock

    def _hello(self, conn: Any) -> None:
        # What Connection.hello() leaves behind that the pool reads.
        conn.performed_handshake = True
        conn.is_writable = True
        if conn.opts.load_balanced:
            conn.service_id = self.service_id
            conn.generation = conn.pool_gen.get(conn.service_id)


def make_pool(options: dict[str, Any], listeners: Iterable[object] = (),
              **greenpool_options: Any) -> GreenPool:
    """A GreenPool for ``ADDRESS`` with spec-named ``options`` (not ready yet),
    and greenpool's own (``acquire_sites``, ``long_hold_threshold``)."""
    kwargs = {_OPTIONS[name][0]: _OPTIONS[name][1](value)
              for name, value in options.items() if name in _OPTIONS}
    pool = GreenPool(ADDRESS, PoolOptions(event_listeners=_EventListeners(list(listeners)),
                                          **kwargs), **greenpool_options)
    pool._check_interval_seconds = None  # no liveness polls of fake sockets
    return pool


def counters(pool: GreenPool) -> dict[str, int]:
    return {
        "requests": pool.requests, "active_sockets": pool.active_sockets,
        "operation_count": pool.operation_count, "pending": pool._pending,
        "ncursors": pool.ncursors, "ntxns": pool.ntxns,
        "waiting": len(pool._gp_queue),
    }


def check_invariants(pool: GreenPool) -> None:
    """The accounting rules from greenpool.pymongo.pool's docstring, at this instant."""
    state = {**counters(pool), "idle": len(pool.conns)}
    limit = pool.max_pool_size
    assert 0 <= pool.active_sockets <= pool.requests <= limit, state
    assert len(pool.conns) + pool.requests <= limit, state
    assert 0 <= pool._pending <= pool._max_connecting, state
    assert pool.operation_count >= pool.active_sockets, state
    if pool.state == pymongo_pool.PoolState.READY and len(pool._gp_queue):
        assert not pool.conns, state
        assert pool.requests >= limit or pool._pending >= pool._max_connecting, state
    # Hold records: one per connection checked out (and not since a fork),
    # none naming a greenlet that ended; the longest wait is a live waiter's.
    assert len(pool._gp_out) <= pool.active_sockets, state
    assert not [hold for hold in pool._holds() if hold.greenlet.dead], state
    assert (pool._gp_queue.oldest_since() is None) == (not pool._gp_queue), state


# The checkout contexts of held connections. Before PyMongo 4.18 checkout()
# is a generator: dropping its context would close the generator, and that
# checks the connection back in.
_HELD: weakref.WeakKeyDictionary[GreenPool, list[Any]] = weakref.WeakKeyDictionary()


def hold(pool: GreenPool) -> Any:
    """Check a connection out and keep it (the spec runner's checkOut)."""
    context = pool.checkout()
    conn = context.__enter__()
    _HELD.setdefault(pool, []).append(context)
    return conn


class SpecPool:
    """The cmap-format runner's pool interface, over a GreenPool.

    PyMongo has no pool-owned background thread: its client calls
    ``remove_stale_sockets`` periodically. When a test asks for background
    runs (minPoolSize, maxIdleTimeMS), a greenlet plays that part at
    ``backgroundThreadIntervalMS`` (default 50 ms; -1: never).
    """

    def __init__(self, options: dict[str, Any], listener: object) -> None:
        self.pool = make_pool(options, [listener])
        interval = options.get("backgroundThreadIntervalMS", 50)
        self._background: gevent.Greenlet | None = None
        if interval != -1 and ("minPoolSize" in options or "maxIdleTimeMS" in options):
            self._background = gevent.spawn(self._run_background, interval / 1000)

    def _run_background(self, interval: float) -> None:
        while True:
            gevent.sleep(interval)
            self.pool.remove_stale_sockets(self.pool.gen.get_overall())

    def checkout(self) -> Any:
        return hold(self.pool)

    def checkin(self, conn: Any) -> None:
        self.pool.checkin(conn)

    def clear(self, interrupt_in_use_connections: bool = False) -> None:
        self.pool.reset(interrupt_connections=interrupt_in_use_connections)

    def ready(self) -> None:
        self.pool.ready()

    def close(self) -> None:
        if self._background is not None:
            self._background.kill()
        self.pool.close()
