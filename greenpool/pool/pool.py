"""The CMAP connection pool, on gevent, assembled from one piece per job.

The pool knows nothing of sockets. It takes a *connector*, a callable that
establishes a transport for a pending :class:`Connection` (TCP, TLS,
handshake, auth: whatever the caller's connections need), and manages
connections around it: the spec's states, generations, wait queue, checkout,
checkin, clear, ready and close. Tests drive it with a mock connector.

What lives here: :class:`Pool`, which sets every field (their owners are
listed in ``fields.py``) and holds the pool's life (ready, close) and what
users read (state, stats). Its jobs are mixins, one module each, so that a
field or method is one lookup away, as in a single class:

* ``checkout.py``: the hot path, checkout, checkin and handoff to waiters,
  and its vocabulary of verbs; ``failures.py``: how a checkout fails;
* ``maintenance.py``: establishment and the background run;
* ``clearing.py``: generations, clear and interruption;
* ``services.py``: the serviceId map of load-balanced mode;
* ``forking.py``: process and thread ownership, the reset after a fork;
* ``connection.py``: :class:`Connection` and the verdicts on it;
* ``holds.py``: who holds the connections, read out by :meth:`Pool.holders`
  and :meth:`Pool.report`; ``longholds.py``: the long-hold watcher.

What must not live here: the work of any of those pieces. Imports: the pool
core only.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.address import Address, format_address, parse_address
from greenpool.errors import PoolClosedError
from greenpool.pool import forking, reports
from greenpool.pool.checkout import _HotPath
from greenpool.pool.clearing import _Clearing
from greenpool.pool.connection import (
    ConnectionState,
    Connector,
    ErrorHandler,
    PoolStats,
    Purpose,
    Transport,
)
from greenpool.pool.forking import _ForkHandling
from greenpool.pool.forkmark import owner_mark
from greenpool.pool.holds import Hold, Holder, PoolReport, records_sites, snapshot
from greenpool.pool.longholds import ConnectionHeldTooLongEvent, Watch, check_threshold, describe
from greenpool.pool.maintenance import _Maintenance
from greenpool.pool.metrics import Tally
from greenpool.pool.monitoring import Publisher
from greenpool.pool.options import PoolOptions
from greenpool.pool.poolstate import Action, PoolState, transition
from greenpool.pool.services import _ServiceMap
from greenpool.pool.waitqueue import Alarm, Turns, WaitQueue

__all__ = ["Pool"]

T = TypeVar("T", bound=Transport)


class Pool(_HotPath[T], _Maintenance[T], _Clearing[T], _ServiceMap[T], _ForkHandling[T]):
    """A CMAP connection pool for one server address.

    :param address: ``(host, port)`` or ``"host:port"``.
    :param options: :class:`PoolOptions`, or a mapping of options by Python
        or spec name.
    :param connector: ``connector(conn) -> transport``: establish a transport
        for the pending connection ``conn`` (read ``conn.address`` and
        ``conn.id``; in load-balanced mode set ``conn.service_id``). It runs
        in the greenlet that needs the connection and may block cooperatively.
    :param listeners: :class:`pymongo.monitoring.ConnectionPoolListener`
        objects that receive the pool's CMAP events.
    :param on_establish_error: called as ``handler(error, conn)`` when
        establishing ``conn`` failed, before ConnectionClosed is emitted; this
        is where SDAM error handling (clearing the pool) plugs in.
    :param acquire_sites: record where each checkout was asked for (the
        first frame outside greenpool, gevent, PyMongo and the standard
        library), for :meth:`holders`, exhaustion errors and long-hold
        warnings. It costs about 0.25 µs per checkout (a fifth of a bare
        uncontended checkout+checkin), more through deeper library code, so
        it is off unless asked for; None (the default): on when
        ``long_hold_threshold`` is set. The holder greenlet and the time are
        recorded always.
    :param long_hold_threshold: seconds (None: never). A connection checked
        out for longer is reported once per checkout: a warning on the
        ``greenpool`` logger with its acquire site and its holder's current
        stack, and a :class:`~greenpool.pool.longholds.ConnectionHeldTooLongEvent`
        to the listeners that define ``connection_held_too_long``. It is
        greenpool's setting, not a connection string option.

    A new pool is paused: call :meth:`ready` (a server monitor does) before
    checking out.

    >>> pool = Pool("localhost:27017", {"maxPoolSize": 5}, connector=my_connector)
    ... # doctest: +SKIP
    >>> pool.ready(); conn = pool.checkout(); pool.checkin(conn)  # doctest: +SKIP
    """

    def __init__(
        self,
        address: Address | str,
        options: PoolOptions | Mapping[str, Any] | None = None,
        *,
        connector: Connector[T],
        listeners: Iterable[object] = (),
        on_establish_error: ErrorHandler[T] | None = None,
        acquire_sites: bool | None = None,
        long_hold_threshold: float | None = None,
    ) -> None:
        self.address = parse_address(address)
        threshold = check_threshold(long_hold_threshold)
        self._acquire_sites = records_sites(acquire_sites, threshold)
        self._watch = None if threshold is None else Watch(threshold)
        self.options = options if isinstance(options, PoolOptions) else PoolOptions(options)
        # Read on every checkout and checkin; options never change.
        self._load_balanced = self.options.load_balanced
        self._max_idle = self.options.max_idle_time
        self._max_pool_size = self.options.max_pool_size
        self._max_connecting = self.options.max_connecting
        self._events = Publisher(self.address, listeners)
        self._tally = Tally()
        self._state = PoolState.PAUSED
        # The hot path's (checkout.py).
        self._available = deque()
        self._in_use = set()
        self._pending = set()
        self._queue = WaitQueue()
        self._turns = Turns()
        self._next_id = 1
        # Clearing's (clearing.py) and the serviceId map's (services.py).
        self._generation = 0
        self._clear_cause = None
        self._services = {}
        # Maintenance's (maintenance.py).
        self._connector = connector
        self._on_establish_error = on_establish_error
        self._filling = set()
        self._alarm = Alarm()
        self._maintainer = None
        self._fillers = set()
        # Fork handling's (forking.py).
        self._pid = os.getpid()
        self._owner = owner_mark()
        self._thread = forking.real_thread_id()
        forking.track(self)
        reports.track(self)
        self._events.pool_created(self.options.reported())
        self._events.flush()

    # -- what users read --------------------------------------------------------

    @property
    def state(self) -> PoolState:
        """The pool's state: paused, ready or closed."""
        return self._state

    @property
    def closed(self) -> bool:
        """Whether the pool was closed."""
        return self._state is PoolState.CLOSED

    def stats(self) -> PoolStats:
        """The pool's counts right now."""
        by_purpose = Counter(conn.purpose.value for conn in self._in_use)
        return PoolStats(
            address=self.address,
            state=self._state.value,
            generation=self._generation,
            total=self._total(),
            available=len(self._available),
            pending=len(self._pending),
            in_use=len(self._in_use),
            in_use_by_purpose={p.value: by_purpose.get(p.value, 0) for p in Purpose},
            waiting=len(self._queue),
            max_pool_size=self.options.max_pool_size,
        )

    @property
    def long_hold_threshold(self) -> float | None:
        """Seconds a connection may be held before it is reported (None: never)."""
        return None if self._watch is None else self._watch.threshold

    def holders(self) -> list[Holder]:
        """Who holds this pool's connections now, longest-held first: for
        each checked-out connection, the greenlet that checked it out, for
        how long, where (its acquire site, when ``acquire_sites`` is on) and
        where that greenlet is now.

        >>> for holder in pool.holders():  # doctest: +SKIP
        ...     print(holder)
        connection 3, held 2.31 s by Greenlet-12: checked out at app.py:42 in report; now at ...
        """
        return list(snapshot(self._holds()))

    def report(self) -> PoolReport:
        """:meth:`holders` and the waiters (how many, the longest wait), with
        the pool's counts; ``str(report)`` reads it out."""
        stats = self.stats()
        oldest = self._queue.oldest_since()
        return PoolReport(
            address=self.address, holders=snapshot(self._holds()), waiting=stats.waiting,
            oldest_wait=None if oldest is None else time.monotonic() - oldest,
            in_use=stats.in_use, available=stats.available, pending=stats.pending,
            max_pool_size=stats.max_pool_size)

    def _holds(self) -> Iterator[Hold]:
        for conn in self._in_use:
            holder = conn._holder
            if holder is not None:
                yield Hold(conn.id, holder, conn._out_at, conn._site, conn.purpose.value,
                           conn.pinned)

    def _report_long_hold(self, event: ConnectionHeldTooLongEvent, stack: str) -> None:
        text, fields = describe(event, stack)
        self._events.long_hold(event, text, fields)
        self._events.flush()

    def get_stats(self) -> dict[str, int]:
        """The pool's gauges and always-on counters, as psycopg_pool's
        ``get_stats()`` names them (times in whole milliseconds).

        Gauges: ``pool_min``, ``pool_max`` (minPoolSize, maxPoolSize),
        ``pool_size`` (connections, pending ones included), ``pool_available``,
        ``requests_waiting``. Counters since the pool was created or the last
        :meth:`pop_stats`: ``requests_num``, ``requests_queued``,
        ``requests_wait_ms``, ``requests_errors`` (``requests_timeouts``
        included), ``returns_bad``, ``usage_ms``, ``connections_num``,
        ``connections_ms``, ``connections_errors``, ``connections_lost``.
        They need no listener and cost a few increments per checkout.

        >>> pool.get_stats()["requests_num"]  # doctest: +SKIP
        42
        """
        return {
            "pool_min": self.options.min_pool_size,
            "pool_max": self.options.max_pool_size,
            "pool_size": self._total(),
            "pool_available": len(self._available),
            "requests_waiting": len(self._queue),
            **self._tally.counters(),
        }

    def pop_stats(self) -> dict[str, int]:
        """:meth:`get_stats`, then start the counters again from zero (the
        gauges describe the pool now and are not reset)."""
        stats = self.get_stats()
        self._tally = Tally()
        return stats

    # -- ready, close ---------------------------------------------------------------

    def ready(self) -> None:
        """Mark the pool ready: checkouts and background filling may proceed."""
        self._check_owner()
        step = transition(self._state, Action.READY)
        self._state = step.state
        if step.emit:
            self._events.pool_ready()
            self._start_maintenance()
        self._settle()

    def close(self) -> None:
        """Close the pool: close available connections now, in-use ones at
        checkin, and fail waiting and future checkouts with PoolClosedError."""
        step = transition(self._state, Action.CLOSE)
        if not step.emit:
            return
        self._state = step.state
        while self._available:
            self._retire(self._available.popleft(), _Closed.POOL_CLOSED)
        address = self.address
        self._queue.fail_all(lambda: PoolClosedError(address))
        self._events.pool_closed()
        self._stop_maintenance()
        forking.untrack(self)
        reports.untrack(self)
        self._settle()

    def __enter__(self) -> Pool[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<greenpool.Pool {format_address(self.address)} {self._state.value}>"

    # -- for tests ------------------------------------------------------------------

    def _check_invariants(self) -> None:
        """Assert the pool's structural invariants (used by the tests)."""
        def fail(what: str) -> None:
            raise AssertionError(f"{self!r}: {what}; {self.stats()}")
        for conn in self._available:
            if conn.state is not ConnectionState.AVAILABLE:
                fail(f"{conn!r} in available")
        for conn in self._in_use:
            if conn.state is not ConnectionState.IN_USE:
                fail(f"{conn!r} in in_use")
        for conn in self._pending:
            if conn.state is not ConnectionState.PENDING:
                fail(f"{conn!r} in pending")
        for conn in (*self._available, *self._pending):
            if conn._holder is not None or conn.pinned:
                fail(f"{conn!r} is not in use but has a hold record")
        everyone = [*self._available, *self._in_use, *self._pending]
        if len(set(everyone)) != len(everyone):
            fail("a connection is in two places")
        if not self._filling <= self._pending:
            fail("a background establishment is not pending")
        options = self.options
        if options.max_pool_size and self._total() > options.max_pool_size:
            fail("more connections than maxPoolSize")
        if len(self._pending) > options.max_connecting:
            fail("more establishments than maxConnecting")
        if self._queue and self._available:
            fail("checkouts wait while connections are available")
        if (self._queue.oldest_since() is None) != (not self._queue):
            fail("the oldest wait is not a live waiter's")
        if self._queue and self._may_create() and len(self._queue) > len(self._filling):
            fail("checkouts wait while a connection could be created")
        counts = Counter(conn.service_id for conn in everyone if conn._counted)
        # A zero entry is one kept while SDAM judges an establishment error.
        if {sid: entry[1] for sid, entry in self._services.items() if entry[1]} != dict(counts):
            fail("serviceId connection counts are off")
