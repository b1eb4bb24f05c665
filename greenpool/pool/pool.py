"""The CMAP connection pool on gevent: its hot path, its state and its counts.

The pool knows nothing of sockets. It takes a *connector*, a callable that
establishes a transport for a pending :class:`Connection` (TCP, TLS,
handshake, auth: whatever the caller's connections need), and manages
connections around it: the spec's states, generations, wait queue, checkout,
checkin, clear, ready and close. Tests drive it with a mock connector.

What lives here: :class:`Pool`. It holds the connection sets (available, in
use, pending) and the wait queue, and makes every move of a connection between
them: checkout, checkin, the handoff to waiters, creating and retiring. It
holds the pool's state (paused, ready, closed: ``poolstate.py``'s table) and
its counts (``stats``, ``get_stats``, the holders). The rest of its work is
done by parts, objects it holds, each with its own fields:

* ``_maintenance`` (``maintenance.py``): establishing connections, the
  background greenlet and the long-hold watcher;
* ``_clearing`` (``clearing.py``): the generation, ``clear`` and interruption;
* ``_services`` (``services.py``): the serviceId map of load-balanced mode;
* ``_fork`` (``forking.py``): the process and thread the pool belongs to, and
  the start over after a fork.

What a waiter gets, and in which order, is ``handoff.py``'s policy; what a
refused or timed-out checkout raises is built by ``failures.py``.

How the pool and its parts talk: a part changes only its own fields. It moves
connections, and changes the pool's state, through the pool's methods in the
section "for the parts" below; it may read the sets. The pool reads a part's
documented fields inline where it runs on every checkout (the generation, the
fork guard's mark, pid and thread) or grant (the connections being filled), and
calls a part for anything else.

How it stays consistent under gevent: gevent switches greenlets only where
one blocks, so every change of the pool's state happens between two such
points, atomic without a lock, and a kill (GreenletExit, an outer
gevent.Timeout) can land only where the code blocks: in the fair turn, in a
wait-queue slot, in the connector, or in a listener during ``flush``. Each of
those places undoes or hands on what it owns (see ``_wait_for_grant``,
``_hand_out``), and nothing is reported before the change it reports is
complete.

The verbs, the only ones for connections moving back and on:

``checkout`` / ``checkin``
    A caller takes a connection / is done with it; both report (flush)
    before returning, and a checkin reports exactly when its checkout did
    (someone listened then), so that a checkout's events come in pairs.
    Each opens with a fast path for the common case (a ready pool, nobody
    waiting, a connection the pool keeps), which does the general path's
    work in fewer steps; any doubt takes the general path. One predicate,
    ``_keeps``, decides whether a connection goes on as it is, for both
    checkins and for the checkout's fast path.
``_checkin``
    ``checkin`` without the flush, for exception paths, which must not
    yield (they ``flush_later``).
``_return_to_pool``
    An in-use connection comes back: retired unless the pool keeps it, else
    handed to the oldest waiter (staying in use) or made available.
``_pass_on``
    A grant its checkout will not use (the waiter left, or the pool was
    cleared or closed in between) goes to the next waiter or back.
``_grant`` / ``_serve_waiters``
    What the pool gives one checkout now (``handoff.grant``: an available
    connection or a new pending one) / grants to the oldest waiters until
    nothing is left (``handoff.serve``).
``_rebalance`` / ``_settle``
    After any change: serve waiters, and wake maintenance if below
    minPoolSize / the same, then flush the events.

What must not live here: establishing, clearing, the serviceId map and fork
handling (the parts), and the text of errors (``failures.py``). Imports: the
pool core only.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, NoReturn, TypeVar

import gevent
from bson.objectid import ObjectId
from gevent import getcurrent as _getcurrent
from pymongo.monitoring import ConnectionCheckOutFailedReason as _Failed
from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.address import Address, format_address, parse_address
from greenpool.errors import PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from greenpool.pool import handoff, reports
from greenpool.pool.clearing import Clearing
from greenpool.pool.connection import (
    Connection,
    ConnectionState,
    Connector,
    ErrorHandler,
    PoolStats,
    Purpose,
    Transport,
    broken,
    close_quietly,
    perished,
)
from greenpool.pool.failures import refusal, timeout_error
from greenpool.pool.forking import ForkGuard, real_thread_id
from greenpool.pool.holds import Hold, Holder, PoolReport, records_sites, snapshot
from greenpool.pool.holds import acquire_site as _acquire_site
from greenpool.pool.longholds import ConnectionHeldTooLongEvent, check_threshold, describe
from greenpool.pool.maintenance import Maintenance
from greenpool.pool.metrics import Tally
from greenpool.pool.monitoring import DEBUG, Publisher, logs
from greenpool.pool.options import PoolOptions
from greenpool.pool.poolstate import Action, PoolState, transition
from greenpool.pool.services import ServiceMap
from greenpool.pool.waitqueue import Turns, WaitQueue, WaitTimedOut

__all__ = ["Pool"]

T = TypeVar("T", bound=Transport)

_now = time.monotonic
# The enum members the hot path compares with, as module globals: one global
# lookup instead of a global plus a class attribute.
_READY = PoolState.READY
_CLOSED = PoolState.CLOSED
_PENDING = ConnectionState.PENDING
_AVAILABLE = ConnectionState.AVAILABLE
_IN_USE = ConnectionState.IN_USE
_CONN_CLOSED = ConnectionState.CLOSED
_OTHER = Purpose.OTHER
_IDLE = handoff.Grant.IDLE
_grant = handoff.grant


class Pool(Generic[T]):
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
        warnings. The frame walk is the costly part of a checkout that does
        it (more through deeper library code), so it is off unless asked for;
        None (the default): on when ``long_hold_threshold`` is set. The holder
        greenlet and the time are recorded always.
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
        #: Whether checkouts record their acquire site.
        self._acquire_sites = records_sites(acquire_sites, threshold)
        self.options = options if isinstance(options, PoolOptions) else PoolOptions(options)
        # Read on every checkout and checkin; options never change.
        self._load_balanced = self.options.load_balanced
        self._max_idle = self.options.max_idle_time
        self._max_pool_size = self.options.max_pool_size
        self._max_connecting = self.options.max_connecting
        #: Every report goes through it, flushed once the change it reports is complete.
        self._events = Publisher(self.address, listeners)
        #: The counters; pop_stats replaces it.
        self._tally = Tally()
        self._state = PoolState.PAUSED
        # The connection sets: each connection is in exactly one, matching its
        # state. Only one in use carries a hold record (``_holder``, ``_site``:
        # holds.py), from its hand-out to its checkin.
        self._available: deque[Connection[T]] = deque()  # newest on the right
        self._in_use: set[Connection[T]] = set()
        self._pending: set[Connection[T]] = set()
        #: Waiting checkouts; clear and close fail them all.
        self._queue: WaitQueue[Connection[T]] = WaitQueue()
        self._turns = Turns()
        self._next_id = 1
        # The parts.
        self._services = ServiceMap()
        self._clearing: Clearing[T] = Clearing(self)
        self._maintenance: Maintenance[T] = Maintenance(
            self, connector, on_establish_error, threshold)
        self._fork = ForkGuard(self)
        self._fork.track()
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

    @property
    def generation(self) -> int:
        """The pool's generation, incremented by every clear; older connections are stale."""
        return self._clearing.generation

    def is_stale(self, conn: Connection[T]) -> bool:
        """Whether ``conn`` belongs to an older generation than the pool's
        (for its serviceId in load-balanced mode). SDAM ignores errors on
        stale connections."""
        return self._clearing.is_stale(conn)

    def stats(self) -> PoolStats:
        """The pool's counts right now."""
        by_purpose = Counter(conn.purpose.value for conn in self._in_use)
        return PoolStats(
            address=self.address,
            state=self._state.value,
            generation=self._clearing.generation,
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
        return self._maintenance.long_hold_threshold

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

    # -- ready, clear, close ------------------------------------------------------

    def ready(self) -> None:
        """Mark the pool ready: checkouts and background filling may proceed."""
        self._fork.check()
        if self._move(Action.READY):
            self._events.pool_ready()
            self._maintenance.start()
        self._settle()

    def clear(
        self,
        interrupt_in_use_connections: bool = False,
        service_id: ObjectId | None = None,
        *,
        error: BaseException | None = None,
    ) -> None:
        """Mark every current connection stale.

        Outside load-balanced mode this also pauses the pool and fails every
        waiting checkout with a retryable :class:`PoolClearedError` that cites
        ``error`` (what made the caller clear). With
        ``interrupt_in_use_connections`` the in-use and pending connections
        of older generations are interrupted now (their transports closed,
        blocked greenlets woken) without waiting for them.

        In load-balanced mode pass the ``service_id`` to clear: only that
        service's generation changes; the pool neither pauses nor fails waiters.
        """
        self._clearing.clear(interrupt_in_use_connections, service_id, error)

    def close(self) -> None:
        """Close the pool: close available connections now, in-use ones at
        checkin, and fail waiting and future checkouts with PoolClosedError."""
        if not self._move(Action.CLOSE):
            return
        while self._available:
            self._retire(self._available.popleft(), _Closed.POOL_CLOSED)
        address = self.address
        self._queue.fail_all(lambda: PoolClosedError(address))
        self._events.pool_closed()
        self._maintenance.stop()
        self._fork.untrack()
        reports.untrack(self)
        self._settle()

    def background_run(self) -> None:
        """One Background Thread Run (spec): close perished available
        connections and start establishing up to minPoolSize. Never waits."""
        self._maintenance.run()

    def __enter__(self) -> Pool[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<greenpool.Pool {format_address(self.address)} {self._state.value}>"

    # -- checkout ---------------------------------------------------------------

    def checkout(self, timeout: float | None = None, *,
                 replaces_wait_queue_timeout: bool = False) -> Connection[T]:
        """Check out a connection (use it as a context manager to check it in).

        Waits in FIFO order for an available connection or for room to
        create one. ``timeout`` (seconds) limits the wait for this call; the
        wait also stops at waitQueueTimeoutMS, whichever comes first, unless
        ``replaces_wait_queue_timeout`` (an operation's timeoutMS: the CSOT
        spec ignores the deprecated waitQueueTimeoutMS then).

        :raises PoolClosedError: the pool is closed.
        :raises PoolClearedError: the pool is paused, or was cleared while
            waiting (retryable).
        :raises WaitQueueTimeoutError: the wait timed out.
        :raises: whatever the connector raised, if establishing failed.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"checkout timeout must be None or a number >= 0, not {timeout!r}")
        fork = self._fork
        if not fork.mark[0] or fork.thread != real_thread_id():
            fork.check()
        holder = None
        if self._state is _READY and not self._queue.waiting:
            # Fair turns, only where a checkout could take without queueing:
            # may yield once, before anything is held. It names the holder
            # (this greenlet) for the fast path, which only ever runs after it.
            holder = self._turns.take()
        self._tally.requests_num += 1
        # The fast path: nobody waits, and the pool keeps the newest idle
        # connection as it is (_keeps) and none can have idled too long (no
        # maxIdleTimeMS). Anything else takes the general path below, whose
        # grant decides by the same predicate (and ``perished``).
        available = self._available
        if (self._state is _READY and not self._queue.waiting and available
                and self._max_idle is None and self._keeps(available[-1])):
            conn = available.pop()
            conn.state = _IN_USE
            self._in_use.add(conn)
            events = self._events
            if events.listeners or logs(DEBUG):  # Publisher.active, inline
                # The general path's reports: the same events in the same
                # order, flushed once the connection is ours.
                events.checkout_started()
                return self._hand_out(conn, _now(), True)
            conn._out_at = _now()
            conn._holder = holder
            conn._reported = False
            if self._acquire_sites:
                conn._site = _acquire_site()
            return conn
        return self._checkout(timeout, replaces_wait_queue_timeout)

    def _checkout(self, timeout: float | None, replaces_wait_queue_timeout: bool = False,
                  ) -> Connection[T]:
        started = _now()
        reported = self._events.checkout_started()
        if self.options.wait_queue_timeout_ms and not replaces_wait_queue_timeout:
            timeout = self._with_wait_queue_timeout(timeout)
        conn = self._wait_for_grant(started, timeout)
        if conn.state is _PENDING:
            self._establish_for_checkout(conn, started)
        return self._hand_out(conn, started, reported)

    def _hand_out(self, conn: Connection[T], started: float, reported: bool) -> Connection[T]:
        """Report the checkout of ``conn`` (now in use) and return it.
        ``reported``: whether anyone listens to this checkout; its checkin
        reports only then, so that its events come in pairs."""
        events = self._events
        now = _now()
        self._tally.requests_wait_s += now - started
        conn._out_at = now
        conn._holder = _getcurrent()
        conn._reported = reported
        if self._acquire_sites:
            conn._site = _acquire_site()  # from our caller on: checkout, _checkout
        events.checked_out(conn.id, now - started)
        try:
            if events.outbox:
                events.flush()
        except BaseException as kill:
            self._count_failed_request(0.0, _Failed.TIMEOUT
                                       if isinstance(kill, gevent.Timeout) else None)
            self._checkin(conn)  # killed in a listener: the caller never got it
            events.flush_later()
            raise
        return conn

    def _wait_for_grant(self, started: float, timeout: float | None) -> Connection[T]:
        """Take an available connection or a pending one to establish."""
        if self._state is not _READY:
            self._fail_checkout(started, self._refusal())
        queue = self._queue
        if not queue.waiting:
            conn = self._grant(1)
            if conn is not None:
                return conn
        slot = queue.join(started)
        self._tally.requests_queued += 1
        # One more waiter can mean one more creation: waiters beyond those the
        # background establishments will serve may create (see _grant).
        if self._available or self._may_create():
            self._serve_waiters()
        try:
            if self._events.outbox:
                self._events.flush()  # CheckOutStarted before blocking; may yield
            conn = slot.wait(None if timeout is None else timeout - (_now() - started))
        except WaitTimedOut:
            self._fail_checkout(started, self._timeout_error(started), _Failed.TIMEOUT)
        except (PoolClearedError, PoolClosedError) as error:
            self._fail_checkout(started, error)
        except BaseException as kill:
            # Killed in line (in the flush or the wait): leave the line, and
            # pass on anything delivered in the meantime.
            leftover = slot.abandon()
            if leftover is not None:
                self._pass_on(leftover)
            self._report_killed_checkout(started, kill)
            raise
        if self._state is not _READY:  # cleared or closed after the grant, before we woke
            self._pass_on(conn)
            self._fail_checkout(started, self._refusal())
        return conn

    def _establish_for_checkout(self, conn: Connection[T], started: float) -> None:
        try:
            self._maintenance.establish(conn)
        except Exception as error:
            reason = _Failed.POOL_CLOSED if self.closed else _Failed.CONN_ERROR
            self._fail_checkout(started, error, reason)
        except BaseException as kill:
            self._report_killed_checkout(started, kill)
            raise
        if self.closed:
            self._return_to_pool(conn)
            self._fail_checkout(started, PoolClosedError(self.address))

    def _with_wait_queue_timeout(self, timeout: float | None) -> float:
        """The wait's limit when waitQueueTimeoutMS is set (the caller
        checks): ``timeout`` or waitQueueTimeoutMS, the shorter."""
        limit = self.options.wait_queue_timeout_ms / 1000
        return timeout if timeout is not None and timeout < limit else limit

    # -- a checkout that fails ----------------------------------------------------

    def _refusal(self) -> BaseException:
        """Why the pool, not ready, refuses a checkout."""
        clearing = self._clearing
        refused = refusal(self._state, self.address, clearing.generation, clearing.cause)
        assert refused is not None  # the callers ask only a pool that is not ready
        return refused

    def _timeout_error(self, started: float) -> WaitQueueTimeoutError:
        return timeout_error(self.stats(), list(self._holds()), _now() - started,
                             self._load_balanced)

    def _fail_checkout(
        self, started: float, error: BaseException, reason: str | None = None
    ) -> NoReturn:
        if reason is None:
            closed = isinstance(error, PoolClosedError)
            reason = _Failed.POOL_CLOSED if closed else _Failed.CONN_ERROR
        detail = error if reason == _Failed.CONN_ERROR else None
        waited = _now() - started
        self._count_failed_request(waited, reason)
        self._events.checkout_failed(reason, waited, detail)
        self._events.flush()
        try:
            raise error
        finally:
            # The traceback holds this frame: without its locals, the error
            # makes no cycle through it and dies without the collector.
            del error, detail

    def _report_killed_checkout(self, started: float, kill: BaseException) -> None:
        """Report a checkout ended by a kill, without yielding: a yield here
        would let another exception (the greenlet's own timeout) replace it."""
        reason = _Failed.TIMEOUT if isinstance(kill, gevent.Timeout) else _Failed.CONN_ERROR
        waited = _now() - started
        self._count_failed_request(waited, reason)
        self._events.checkout_failed(reason, waited, None)
        self._events.flush_later()

    def _count_failed_request(self, waited: float, reason: str | None) -> None:
        tally = self._tally
        tally.requests_errors += 1
        tally.requests_wait_s += waited
        if reason == _Failed.TIMEOUT:
            tally.requests_timeouts += 1

    # -- checkin ----------------------------------------------------------------

    def checkin(self, conn: Connection[T]) -> None:
        """Return a checked-out connection to the pool.

        A perished connection (stale, errored) or any connection checked in
        to a closed pool is closed instead of made available.

        :raises ValueError: ``conn`` is from another pool, or not checked out.
        """
        events = self._events
        # The fast path: a connection of this pool and process that the pool
        # keeps as it is (_keeps, the predicate _return_to_pool decides by)
        # goes to the oldest waiter (staying in use), or becomes available:
        # _return_to_pool's work, without the general path's checks. Nothing
        # else changes: with waiters there is no idle connection and no room
        # to create one (else they would not wait), and the pool's size is
        # the same, so the general path's _rebalance would find nothing to do.
        if (conn._pool is self and conn.state is _IN_USE and conn._pid == self._fork.pid
                and self._keeps(conn)):
            if conn._reported:
                events.checked_in(conn.id)
            now = _now()
            self._tally.usage_s += now - conn._out_at
            conn.purpose = _OTHER
            conn.pinned = False
            conn._holder = None
            queue = self._queue
            if not (queue.waiting and queue.deliver(conn)):
                self._in_use.discard(conn)
                conn.state = _AVAILABLE
                conn._idle_since = now
                self._available.append(conn)
            if events.outbox:
                events.flush()
            return
        self._checkin(conn)
        events.flush()

    def checkin_after_error(self, conn: Connection[T]) -> None:
        """:meth:`checkin` for code that an exception is leaving, above all a
        kill (GreenletExit, an outer gevent.Timeout): the same checkin, its
        events delivered from a new greenlet. Nothing here yields, so a
        listener that blocks cannot let a second exception (the greenlet's
        own gevent.Timeout) replace the one in flight.

        :raises ValueError: as :meth:`checkin`.
        """
        self._checkin(conn)
        self._events.flush_later()

    def _checkin(self, conn: Connection[T]) -> None:
        """Check in without reporting yet (the caller flushes)."""
        if conn._pool is not self:
            raise ValueError(f"{conn!r} was checked out of another pool, not {self!r}")
        # After a fork the at-fork hook has already marked inherited
        # connections errored, and the next checkout starts the pool over.
        if conn._pid != self._fork.pid:  # checked out before a fork: drop it quietly
            conn.state = _CONN_CLOSED
            if conn.transport is not None:
                close_quietly(conn.transport)
            return
        if conn.state is not _IN_USE:
            raise ValueError(f"cannot check in {conn!r}: it is not checked out")
        self._tally.usage_s += _now() - conn._out_at
        if conn._reported:
            self._events.checked_in(conn.id)
        if not self._return_to_pool(conn):
            self._tally.returns_bad += 1
        self._rebalance()

    def _keeps(self, conn: Connection[T]) -> bool:
        """Whether a connection of this pool goes on as it is, back into use
        or idle: the pool is ready, and the connection has no error and is
        of the current generation (its service's, in load-balanced mode).
        Both checkins decide by it, and the checkout's fast path; whatever it
        refuses, the general path examines (``broken``, ``perished``). It
        makes no call but for a load-balanced connection: it runs on every
        checkout and checkin."""
        if self._state is not _READY or conn.error is not None:
            return False
        if conn._counted:
            return not self._clearing.is_stale(conn)
        return conn.generation == self._clearing.generation  # is_stale's rule for the rest

    def _return_to_pool(self, conn: Connection[T]) -> bool:
        """An in-use connection comes back: retire it unless the pool keeps it
        (``_keeps``), else hand it to the oldest waiter (it stays in use) or
        make it available. Whether it was kept."""
        conn.purpose = _OTHER
        conn.pinned = False
        conn._holder = None
        if not self._keeps(conn):
            reason = (_Closed.POOL_CLOSED if self._state is _CLOSED
                      else broken(conn, self._clearing.is_stale(conn)))
            if reason is not None:
                self._in_use.discard(conn)
                self._retire(conn, reason, conn.error if reason == _Closed.ERROR else None)
                return False
        queue = self._queue
        if not (queue.waiting and queue.deliver(conn)):
            self._in_use.discard(conn)
            conn.state = _AVAILABLE
            conn._idle_since = _now()
            self._available.append(conn)
        return True

    def _pass_on(self, conn: Connection[T]) -> None:
        """Pass on what was granted to a checkout that will not use it."""
        if conn.state is _PENDING:
            if not (self._queue and self._queue.deliver(conn)):
                self._unpend(conn)
                self._retire(conn, _Closed.POOL_CLOSED if self.closed else _Closed.ERROR)
        else:
            self._return_to_pool(conn)
        self._rebalance()

    # -- granting -----------------------------------------------------------------

    def _settle(self) -> None:
        """After any change: serve waiters, wake maintenance if short, report."""
        self._rebalance()
        self._events.flush()

    def _rebalance(self) -> None:
        if self._queue.waiting:
            self._serve_waiters()
        min_pool_size = self.options.min_pool_size
        if min_pool_size and self._total() < min_pool_size and self._may_create():
            self._maintenance.wake()

    def _serve_waiters(self) -> None:
        """Give the oldest waiters whatever the pool can grant now."""
        handoff.serve(self._queue, self._grant)

    def _grant(self, waiting: int) -> Connection[T] | None:
        """What the oldest of ``waiting`` checkouts gets now (``handoff.grant``):
        an available connection that has not perished (now in use), a new
        pending one, or None. Background establishments already under way are
        owed to the first waiters."""
        if self._state is not _READY:
            return None
        available = self._available
        while True:
            granted = _grant(len(available), self._total(), len(self._pending),
                             self._max_pool_size, self._max_connecting,
                             waiting, len(self._maintenance.filling))
            if granted is None:
                return None
            if granted is not _IDLE:
                return self._create()
            conn = available.pop()
            reason = perished(conn, self._clearing.is_stale(conn), self._max_idle, _now())
            if reason is None:
                conn.state = _IN_USE
                self._in_use.add(conn)
                return conn
            self._retire(conn, reason)

    # -- for the parts: the moves of connections, the state, the waiters ------------

    def _may_create(self) -> bool:
        """Whether the pool may start establishing a new connection now."""
        pending = self._pending
        return self._state is _READY and handoff.may_create(
            len(self._available) + len(self._in_use) + len(pending), len(pending),
            self._max_pool_size, self._max_connecting)

    def _total(self) -> int:
        return len(self._available) + len(self._in_use) + len(self._pending)

    def _create(self) -> Connection[T]:
        """A new pending connection, counted and reported."""
        conn: Connection[T] = Connection(self, self._next_id, self._clearing.generation,
                                         self._fork.pid)
        self._next_id += 1
        self._tally.connections_num += 1
        self._pending.add(conn)
        self._events.connection_created(conn.id)
        return conn

    def _established(self, conn: Connection[T], took: float) -> None:
        """Pending ``conn`` has its transport: it is in use now (by whoever
        established it), counted and reported. It does not flush: a listener
        could yield and a kill would then strand the connection; whoever owns
        it flushes."""
        self._pending.discard(conn)
        # A connector that did not report its hello (handshake_done) gets
        # its service's generation now.
        self._take_service_generation(conn)
        conn.state = _IN_USE
        self._in_use.add(conn)
        self._tally.connections_s += took
        self._events.connection_ready(conn.id, took)
        self._rebalance()

    def _abandoned(self, conn: Connection[T]) -> None:
        """Pending ``conn`` failed to establish: count it and close it. The
        caller hands on its slot (``_rebalance``) and reports it."""
        tally = self._tally
        tally.connections_errors += 1
        tally.connections_s += _now() - conn._created_at
        self._unpend(conn)
        conn.state = _CONN_CLOSED

    def _unpend(self, conn: Connection[T]) -> None:
        self._pending.discard(conn)
        self._maintenance.filling.discard(conn)

    def _retire(self, conn: Connection[T], reason: str, error: BaseException | None = None) -> None:
        """Mark a connection closed (already out of its set) and report it."""
        conn.state = _CONN_CLOSED
        if reason == _Closed.ERROR and conn.transport is not None:
            self._tally.connections_lost += 1
        if conn._counted:
            self._services.leave(conn)
        self._events.connection_closed(conn.id, reason, error)
        if conn.transport is not None:
            self._events.later(close_quietly, conn.transport)

    def _prune(self) -> None:
        """Retire every available connection that has perished."""
        now = _now()
        max_idle = self._max_idle
        is_stale = self._clearing.is_stale
        keep: deque[Connection[T]] = deque()
        for conn in self._available:
            reason = perished(conn, is_stale(conn), max_idle, now)
            if reason is None:
                keep.append(conn)
            else:
                self._retire(conn, reason)
        self._available = keep

    def _take_service_generation(self, conn: Connection[T]) -> None:
        """Count ``conn`` in its service and give it the service's generation
        (once, only in load-balanced mode, and only in the pool's process)."""
        if self._load_balanced and not conn._counted and conn._pid == self._fork.pid:
            self._services.join(conn)

    def _move(self, action: Action) -> bool:
        """Apply ``action`` to the pool's state; whether to emit its event."""
        step = transition(self._state, action)
        self._state = step.state
        return step.emit

    def _fail_waiters(self, make_error: Callable[[], BaseException]) -> None:
        self._queue.fail_all(make_error)

    def _start_over(self, make_error: Callable[[Address], BaseException]) -> None:
        """After a fork (``forking.py``): drop every connection quietly, fail
        the waiters copied from the parent with ``make_error(address)``, and
        carry on in the state the pool was in."""
        for conn in (*self._available, *self._in_use, *self._pending):
            conn.state = _CONN_CLOSED
        self._available.clear()
        self._in_use.clear()
        self._pending.clear()
        address = self.address
        self._queue.fail_all(lambda: make_error(address))
        if self._state is _READY:
            self._events.pool_cleared(None, False)
            self._maintenance.start()
        self._settle()

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
        filling = self._maintenance.filling
        if not filling <= self._pending:
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
        if self._queue and self._may_create() and len(self._queue) > len(filling):
            fail("checkouts wait while a connection could be created")
        counts = Counter(conn.service_id for conn in everyone if conn._counted)
        # A zero entry is one kept while SDAM judges an establishment error.
        if self._services.counts() != dict(counts):
            fail("serviceId connection counts are off")
