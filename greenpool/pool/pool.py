"""The CMAP connection pool, on gevent.

The pool knows nothing of sockets. It takes a *connector*, a callable that
establishes a transport for a pending :class:`Connection` (TCP, TLS,
handshake, auth: whatever the caller's connections need), and manages
connections around it: the spec's states, generations, wait queue, checkout,
checkin, clear, ready and close. Tests drive it with a mock connector.

How it stays consistent under gevent. gevent switches greenlets only where
one blocks; every change of the pool's state below happens between two such
points, so it is atomic without a lock, and a kill (GreenletExit, an outer
gevent.Timeout) can only land where the code blocks: in a wait-queue slot,
in the connector, or in a listener during ``flush``. Each of those places
undoes or hands on what it owns (see ``_wait_for_grant``, ``_establish``),
and nothing is reported before the change it reports is complete.

How it is fair. Checkouts wait in one FIFO queue of one-shot slots. Whatever
frees up (a checked-in connection, an establishment slot under maxConnecting,
capacity under maxPoolSize) is handed straight to the oldest slot, so a
newcomer can never overtake a waiter, and a slot that left (timeout, kill)
is never handed anything.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, TypeVar

import gevent
from bson.objectid import ObjectId
from gevent import get_hub, getcurrent
from gevent.monkey import get_original
from pymongo.monitoring import ConnectionCheckOutFailedReason as _Failed
from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.address import Address, format_address, parse_address
from greenpool.errors import PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from greenpool.pool import forking
from greenpool.pool.metrics import Tally
from greenpool.pool.monitoring import Publisher
from greenpool.pool.options import PoolOptions
from greenpool.pool.poolstate import Action, PoolState, transition
from greenpool.pool.waitqueue import Alarm, Turns, WaitQueue, WaitTimedOut

__all__ = ["Connection", "ConnectionState", "Pool", "PoolStats", "Purpose", "Transport"]

_now = time.monotonic
_real_thread_id: Callable[[], int] = get_original("_thread", "get_ident")


class Transport(Protocol):
    """What the pool needs from an established connection's transport."""

    def close(self) -> None:
        """Release the transport. Must not block, must be idempotent, and must
        wake any greenlet blocked on it (gevent sockets do all three)."""


T = TypeVar("T", bound=Transport)


class ConnectionState(enum.Enum):
    """Where a pooled connection is in its life: pending, available, in use, closed."""

    PENDING = "pending"
    AVAILABLE = "available"
    IN_USE = "in use"
    CLOSED = "closed"


class Purpose(enum.Enum):
    """Why a connection is checked out (the Load Balancer spec's tracking)."""

    OTHER = "other"
    CURSOR = "cursor"
    TRANSACTION = "transaction"


class Connection(Generic[T]):
    """A pooled connection: the pool's bookkeeping around one transport.

    Use it as a context manager to check it back in::

        with pool.checkout() as conn:
            conn.transport.command(...)
    """

    __slots__ = (
        "__weakref__", "_counted", "_created_at", "_establisher", "_idle_since", "_out_at", "_pid",
        "_pool", "error", "generation", "id", "interrupted", "purpose", "service_id", "state",
        "transport",
    )

    def __init__(self, pool: Pool[T], conn_id: int, generation: int) -> None:
        self.id = conn_id
        self.generation = generation
        #: The serviceId the handshake reported (load-balanced mode only);
        #: the connector sets it.
        self.service_id: ObjectId | None = None
        self.transport: T | None = None
        self.state = ConnectionState.PENDING
        self.purpose = Purpose.OTHER
        #: The error that made this connection unusable, if any.
        self.error: BaseException | None = None
        #: Whether clear(interrupt_in_use_connections=True) interrupted it.
        self.interrupted = False
        self._pool = pool
        self._pid = pool._pid
        self._created_at = _now()
        self._idle_since = 0.0
        self._out_at = 0.0  # when the current checkout handed it out (usage time)
        self._establisher: Any = None
        self._counted = False

    @property
    def address(self) -> Address:
        """The address of the pool this connection belongs to."""
        return self._pool.address

    @property
    def errored(self) -> bool:
        """Perished by error: it will be closed at checkin, not reused."""
        return self.error is not None

    def mark_errored(self, error: BaseException) -> None:
        """Record that this connection failed; checkin will close it."""
        if self.error is None:
            self.error = error

    def handshake_done(self, service_id: ObjectId | None) -> None:
        """The connector's hello reply named ``service_id``: in load-balanced
        mode the connection takes its service's generation now, before
        authentication (Load Balancer spec), so that a clear of the service
        while it authenticates makes it stale."""
        self.service_id = service_id
        self._pool._take_service_generation(self)

    def __enter__(self) -> Connection[T]:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        pool = self._pool
        if exc_type is None:
            pool.checkin(self)
        else:
            pool._checkin(self)
            pool._events.flush_later()  # never yield while an exception propagates

    def __repr__(self) -> str:
        return (f"<greenpool.Connection {self.id} to {format_address(self.address)}, "
                f"{self.state.value}, generation {self.generation}>")


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool's counts, for dashboards and tests."""

    address: Address
    state: str
    generation: int
    total: int
    available: int
    pending: int
    in_use: int
    in_use_by_purpose: Mapping[str, int]
    waiting: int
    max_pool_size: int


Connector = Callable[[Connection[T]], T]
ErrorHandler = Callable[[Exception, Connection[T]], None]


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
    ) -> None:
        self.address: Address = parse_address(address)
        self.options = options if isinstance(options, PoolOptions) else PoolOptions(options)
        # Read on every checkout and checkin; options never change.
        self._load_balanced = self.options.load_balanced
        self._max_idle = self.options.max_idle_time
        self._min_pool_size = self.options.min_pool_size
        self._max_pool_size = self.options.max_pool_size
        self._max_connecting = self.options.max_connecting
        self._connector = connector
        self._on_establish_error = on_establish_error
        self._events = Publisher(self.address, listeners)
        self._pid = os.getpid()
        self._thread = _real_thread_id()
        self._state = PoolState.PAUSED
        self._generation = 0
        self._clear_cause: BaseException | None = None
        # serviceId -> [generation, connection count] (load-balanced mode).
        self._services: dict[ObjectId | None, list[int]] = {}
        # Each connection is in exactly one of these, matching its state.
        self._available: deque[Connection[T]] = deque()  # newest on the right
        self._in_use: set[Connection[T]] = set()
        self._pending: set[Connection[T]] = set()
        self._filling: set[Connection[T]] = set()  # pending ones the background asked for
        self._queue: WaitQueue[Connection[T]] = WaitQueue()
        self._turns = Turns()
        self._next_id = 1
        self._alarm = Alarm()
        self._maintainer: gevent.Greenlet | None = None
        self._fillers: set[gevent.Greenlet] = set()
        self._tally = Tally()
        forking.track(self)
        self._events.pool_created(self.options.reported())
        self._events.flush()

    # -- what users read --------------------------------------------------------

    @property
    def state(self) -> PoolState:
        """The pool's state: paused, ready or closed."""
        return self._state

    @property
    def generation(self) -> int:
        """The pool's generation, incremented by every clear; older connections are stale."""
        return self._generation

    @property
    def closed(self) -> bool:
        """Whether the pool was closed."""
        return self._state is PoolState.CLOSED

    def is_stale(self, conn: Connection[T]) -> bool:
        """Whether ``conn`` belongs to an older generation than the pool's
        (for its serviceId in load-balanced mode). SDAM ignores errors on
        stale connections."""
        if self._load_balanced and conn._counted:
            entry = self._services.get(conn.service_id)
            return entry is None or conn.generation != entry[0]
        # A load-balanced connection takes its service's generation after its
        # hello (handshake_done); before that only a fork reset makes it stale.
        return conn.generation != self._generation

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
        if self._pid != os.getpid() or self._thread != _real_thread_id():
            self._check_owner()
        if self._state is PoolState.READY and not self._queue.waiting:
            # Fair turns, only where a checkout could take without queueing:
            # may yield once, before anything is held.
            self._turns.take()
        self._tally.requests_num += 1
        # The fast path: nobody waits and the newest idle connection is
        # fresh. Anything else takes the general path below. With listeners
        # or the log on, it reports what the general path would: the same
        # events in the same order, flushed once the connection is ours.
        if self._state is PoolState.READY and not self._queue.waiting:
            if not self._events.active:
                conn = self._take_fresh()
                if conn is not None:
                    conn._out_at = _now()
                    return conn
            else:
                started = _now()
                conn = self._take_fresh()
                if conn is not None:
                    self._events.checkout_started()
                    return self._hand_out(conn, started)
        return self._checkout(timeout, replaces_wait_queue_timeout)

    def _checkout(self, timeout: float | None, replaces_wait_queue_timeout: bool = False,
                  ) -> Connection[T]:
        started = _now()
        self._events.checkout_started()
        if not replaces_wait_queue_timeout:
            timeout = self._with_wait_queue_timeout(timeout)
        conn = self._wait_for_grant(started, timeout)
        if conn.state is ConnectionState.PENDING:
            self._establish_for_checkout(conn, started)
        return self._hand_out(conn, started)

    def _hand_out(self, conn: Connection[T], started: float) -> Connection[T]:
        """Report the checkout of ``conn`` (now in use) and return it."""
        events = self._events
        now = _now()
        self._tally.requests_wait_s += now - started
        conn._out_at = now
        events.checked_out(conn.id, now - started)
        try:
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
        refusal = self._refusal()
        if refusal is not None:
            self._fail_checkout(started, refusal)
        if not self._queue.waiting:
            conn = self._grant(wanting=1)
            if conn is not None:
                return conn
        slot = self._queue.join()
        self._tally.requests_queued += 1
        # One more waiter can mean one more creation: waiters beyond those the
        # background establishments will serve may create (see _grant).
        if self._available or self._may_create():
            self._dispatch()
        try:
            self._events.flush()  # CheckOutStarted before blocking; may yield
            conn = slot.wait(None if timeout is None else timeout - (_now() - started))
        except WaitTimedOut:
            self._fail_checkout(started, self._timeout_error(started), _Failed.TIMEOUT)
        except (PoolClearedError, PoolClosedError) as error:
            self._fail_checkout(started, error)
        except BaseException as kill:
            # Killed in line (in the flush or the wait): leave the line, and
            # hand on anything delivered in the meantime.
            leftover = slot.abandon()
            if leftover is not None:
                self._give_back(leftover)
            self._report_killed_checkout(started, kill)
            raise
        if self._state is not PoolState.READY:
            refusal = self._refusal()
            if refusal is not None:  # cleared or closed after the grant, before we woke
                self._give_back(conn)
                self._fail_checkout(started, refusal)
        return conn

    def _establish_for_checkout(self, conn: Connection[T], started: float) -> None:
        try:
            self._establish(conn)
        except Exception as error:
            reason = _Failed.POOL_CLOSED if self.closed else _Failed.CONN_ERROR
            self._fail_checkout(started, error, reason)
        except BaseException as kill:
            self._report_killed_checkout(started, kill)
            raise
        if self.closed:
            self._put_back(conn)
            self._fail_checkout(started, PoolClosedError(self.address))

    def _refusal(self) -> BaseException | None:
        if self._state is PoolState.READY:
            return None
        if self._state is PoolState.CLOSED:
            return PoolClosedError(self.address)
        if self._generation == 0:
            return PoolClearedError.not_ready(self.address)
        return PoolClearedError.cleared(self.address, self._clear_cause)

    def _with_wait_queue_timeout(self, timeout: float | None) -> float | None:
        """The wait's limit: ``timeout`` or waitQueueTimeoutMS, the shorter."""
        limit = self.options.wait_queue_timeout
        if limit is None or (timeout is not None and timeout < limit):
            return timeout
        return limit

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
        raise error

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

    def _timeout_error(self, started: float) -> WaitQueueTimeoutError:
        stats = self.stats()
        waited = _now() - started
        if self.options.load_balanced:
            counts = stats.in_use_by_purpose
            text = (
                "Timeout waiting for connection from the connection pool. "
                f"maxPoolSize: {stats.max_pool_size}, "
                f"connections in use by cursors: {counts['cursor']}, "
                f"connections in use by transactions: {counts['transaction']}, "
                f"connections in use by other operations: {counts['other']}"
            )
        else:
            text = (
                f"{WaitQueueTimeoutError.message} {format_address(self.address)} after "
                f"{waited * 1000:.0f} ms (maxPoolSize: {stats.max_pool_size}, in use: "
                f"{stats.in_use}, available: {stats.available}, pending: {stats.pending}, "
                f"waiting: {stats.waiting})"
            )
        return WaitQueueTimeoutError(
            self.address, text, waited=waited, max_pool_size=stats.max_pool_size,
            in_use=stats.in_use, in_use_by_purpose=dict(stats.in_use_by_purpose),
            available=stats.available, pending=stats.pending, waiting=stats.waiting,
        )

    # -- establishing -----------------------------------------------------------

    def _establish(self, conn: Connection[T]) -> None:
        """Run the connector for pending ``conn`` and make it in use.

        On any exception ``conn`` is closed, its slot under maxConnecting and
        maxPoolSize is handed on, and the exception propagates.
        """
        conn._establisher = getcurrent()
        try:
            transport = self._connector(conn)
        except BaseException as error:
            conn._establisher = None
            self._abandon(conn, error)
            raise
        conn._establisher = None
        conn.transport = transport
        if conn._pid != self._pid:  # the process forked while connecting
            _close_quietly(transport)
            raise PoolClearedError.forked(self.address)
        # Still "filling" if the maintenance greenlet made it: it is owed to
        # the first waiter (see _grant) until _fill hands it on.
        self._pending.discard(conn)
        # A connector that did not report its hello (handshake_done) gets
        # its service's generation now.
        self._take_service_generation(conn)
        conn.state = ConnectionState.IN_USE
        self._in_use.add(conn)
        took = _now() - conn._created_at
        self._tally.connections_s += took
        self._events.connection_ready(conn.id, took)
        # No flush here: a listener could yield and a kill would then strand
        # this in-use connection; the caller flushes once it owns it.
        self._rebalance()

    def _take_service_generation(self, conn: Connection[T]) -> None:
        if not self.options.load_balanced or conn._counted or conn._pid != self._pid:
            return
        entry = self._services.setdefault(conn.service_id, [0, 0])
        conn.generation = entry[0]
        entry[1] += 1
        conn._counted = True

    def _abandon(self, conn: Connection[T], error: BaseException) -> None:
        """A pending connection failed to establish: close it, then hand on."""
        if conn._pid != self._pid:
            return  # the process forked; the reset already dropped it
        tally = self._tally
        tally.connections_errors += 1
        tally.connections_s += _now() - conn._created_at
        self._unpend(conn)
        conn.state = ConnectionState.CLOSED
        # No longer counted in its service; the entry stays (even at zero)
        # until SDAM has judged the error, which needs its generation.
        entry = self._services.get(conn.service_id) if conn._counted else None
        if entry is not None:
            entry[1] -= 1
        self._rebalance()  # hand on the freed slot before anything can yield
        reason = _Closed.POOL_CLOSED if self.closed else _Closed.ERROR
        try:
            if not isinstance(error, Exception):  # a kill: no SDAM handling, no yield
                self._events.connection_closed(conn.id, reason, error)
                self._events.flush_later()
                return
            try:
                # SDAM error handling (which may clear the pool) comes before
                # ConnectionClosed, as the spec's pool-create-min-size-error orders it.
                handler = self._on_establish_error
                if handler is not None and isinstance(error, Exception) and not self.closed:
                    handler(error, conn)
            finally:
                self._events.connection_closed(conn.id, reason, error)
                self._events.flush()
        finally:
            if entry is not None:
                conn._counted = False
                if entry[1] == 0 and self._services.get(conn.service_id) is entry:
                    del self._services[conn.service_id]

    def _unpend(self, conn: Connection[T]) -> None:
        self._pending.discard(conn)
        self._filling.discard(conn)

    # -- checkin ----------------------------------------------------------------

    def checkin(self, conn: Connection[T]) -> None:
        """Return a checked-out connection to the pool.

        A perished connection (stale, errored) or any connection checked in
        to a closed pool is closed instead of made available.

        :raises ValueError: ``conn`` is from another pool, or not checked out.
        """
        events = self._events
        # The fast path: a healthy connection of the current generation back
        # to a ready pool goes to the oldest waiter (staying in use), or
        # becomes available. Anything else (and any doubt) takes the general
        # path below. Nothing else changes here: with waiters there is no
        # idle connection and no room to create one (else they would not
        # wait), and the pool's size is the same, so the general path's
        # _rebalance would find nothing to do.
        if (conn._pool is self and conn.state is ConnectionState.IN_USE
                and self._state is PoolState.READY
                and conn.error is None and conn.generation == self._generation
                and not self._load_balanced and conn._pid == self._pid):
            if events.active:
                events.checked_in(conn.id)
            now = _now()
            self._tally.usage_s += now - conn._out_at
            conn.purpose = Purpose.OTHER
            queue = self._queue
            if not (queue.waiting and queue.deliver(conn)):
                self._in_use.discard(conn)
                conn.state = ConnectionState.AVAILABLE
                conn._idle_since = now
                self._available.append(conn)
            if events._outbox:
                events.flush()
            return
        self._checkin(conn)
        events.flush()

    def _checkin(self, conn: Connection[T]) -> None:
        """Check in without reporting yet (the caller flushes)."""
        if conn._pool is not self:
            raise ValueError(f"{conn!r} was checked out of another pool, not {self!r}")
        # No pid check here: after a fork the at-fork hook has already marked
        # inherited connections errored, and the next checkout resets the pool.
        if conn._pid != self._pid:  # checked out before a fork: drop it quietly
            conn.state = ConnectionState.CLOSED
            if conn.transport is not None:
                _close_quietly(conn.transport)
            return
        if conn.state is not ConnectionState.IN_USE:
            raise ValueError(f"cannot check in {conn!r}: it is not checked out")
        self._tally.usage_s += _now() - conn._out_at
        self._events.checked_in(conn.id)
        if not self._put_back(conn):
            self._tally.returns_bad += 1
        self._rebalance()

    def _put_back(self, conn: Connection[T]) -> bool:
        """An in-use connection comes back: close it if perished, else free
        it. Whether it was kept (not closed)."""
        self._in_use.discard(conn)
        conn.purpose = Purpose.OTHER
        if self._state is PoolState.CLOSED:
            self._retire(conn, _Closed.POOL_CLOSED)
        elif (reason := self._broken(conn)) is not None:
            self._retire(conn, reason, conn.error if reason == _Closed.ERROR else None)
        else:
            self._release(conn)
            return True
        return False

    def _release(self, conn: Connection[T]) -> None:
        """Hand a good connection to the oldest waiter, or make it available."""
        if self._queue.waiting:
            conn.state = ConnectionState.IN_USE
            self._in_use.add(conn)
            if self._queue.deliver(conn):
                return
            self._in_use.discard(conn)
        conn.state = ConnectionState.AVAILABLE
        conn._idle_since = _now()
        self._available.append(conn)

    def _give_back(self, conn: Connection[T]) -> None:
        """Hand on what was granted to a checkout that will not use it."""
        if conn.state is ConnectionState.PENDING:
            if not (self._queue and self._queue.deliver(conn)):
                self._unpend(conn)
                self._retire(conn, _Closed.POOL_CLOSED if self.closed else _Closed.ERROR)
        else:
            self._put_back(conn)
        self._rebalance()

    # -- granting -----------------------------------------------------------------

    def _settle(self) -> None:
        """After any change: serve waiters, wake maintenance if short, report."""
        self._rebalance()
        self._events.flush()

    def _rebalance(self) -> None:
        if self._queue.waiting:
            self._dispatch()
        if self._min_pool_size and self._total() < self._min_pool_size and self._may_create():
            self._alarm.ring()

    def _dispatch(self) -> None:
        """Give the oldest waiters whatever the pool can grant now."""
        queue = self._queue
        while queue:
            conn = self._grant(wanting=len(queue))
            if conn is None:
                return
            if not queue.deliver(conn):  # cannot happen: the queue had a live slot
                self._give_back(conn)

    def _take_fresh(self) -> Connection[T] | None:
        """The newest available connection, in use now, if it has not
        perished; else None, touching nothing."""
        available = self._available
        if not available:
            return None
        conn = available[-1]
        if conn.error is not None or self._generation != conn.generation or (
                self._load_balanced or self._max_idle is not None):
            return None  # maybe perished: the general path decides
        available.pop()
        conn.state = ConnectionState.IN_USE
        self._in_use.add(conn)
        return conn

    def _grant(self, wanting: int) -> Connection[T] | None:
        """An available connection (now in use), a new pending one, or None.

        ``wanting`` is how many checkouts are waiting; background
        establishments already under way are owed to the first of them.
        """
        if self._available:
            now = _now()
            while self._available:
                conn = self._available.pop()
                reason = self._perished(conn, now)
                if reason is None:
                    conn.state = ConnectionState.IN_USE
                    self._in_use.add(conn)
                    return conn
                self._retire(conn, reason)
        if self._may_create() and wanting > len(self._filling):
            return self._create()
        return None

    def _may_create(self) -> bool:
        max_pool_size = self._max_pool_size
        return (
            (not max_pool_size or self._total() < max_pool_size)
            and len(self._pending) < self._max_connecting
            and self._state is PoolState.READY
        )

    def _create(self) -> Connection[T]:
        conn = Connection(self, self._next_id, self._generation)
        self._next_id += 1
        self._tally.connections_num += 1
        self._pending.add(conn)
        self._events.connection_created(conn.id)
        return conn

    def _broken(self, conn: Connection[T]) -> str | None:
        """Why ``conn`` must be closed however recently used: its own error
        (ahead of staleness, since the error is usually why the pool was
        cleared), or staleness (an interrupted connection is stale: a clear
        interrupted it). None if neither. No side effects."""
        if conn.error is not None and not conn.interrupted:
            return _Closed.ERROR
        if self.is_stale(conn):
            return _Closed.STALE
        if conn.error is not None:
            return _Closed.ERROR
        return None

    def _perished(self, conn: Connection[T], now: float) -> str | None:
        """Why an available connection must be closed, or None. No side effects."""
        reason = self._broken(conn)
        if reason is not None:
            return reason
        max_idle = self._max_idle
        if max_idle is not None and now - conn._idle_since > max_idle:
            return _Closed.IDLE
        return None

    def _retire(self, conn: Connection[T], reason: str, error: BaseException | None = None) -> None:
        """Mark a connection closed (already out of its container) and report it."""
        conn.state = ConnectionState.CLOSED
        if reason == _Closed.ERROR and conn.transport is not None:
            self._tally.connections_lost += 1
        if conn._counted:
            conn._counted = False
            entry = self._services[conn.service_id]
            entry[1] -= 1
            if entry[1] == 0:
                del self._services[conn.service_id]
        self._events.connection_closed(conn.id, reason, error)
        if conn.transport is not None:
            self._events.later(_close_quietly, conn.transport)

    def _total(self) -> int:
        return len(self._available) + len(self._in_use) + len(self._pending)

    # -- ready, clear, close ------------------------------------------------------

    def ready(self) -> None:
        """Mark the pool ready: checkouts and background filling may proceed."""
        self._check_owner()
        step = transition(self._state, Action.READY)
        self._state = step.state
        if step.emit:
            self._events.pool_ready()
            self._start_maintenance()
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
        self._check_owner()
        load_balanced = self.options.load_balanced
        if load_balanced and service_id is None:
            raise ValueError("a load-balanced pool is cleared per service: pass service_id")
        if not load_balanced and service_id is not None:
            raise ValueError(f"service_id={service_id!r} only applies to load-balanced pools")
        if self.closed:
            return
        if load_balanced:
            entry = self._services.get(service_id)
            if entry is not None:
                entry[0] += 1
            self._events.pool_cleared(service_id, interrupt_in_use_connections)
        else:
            self._generation += 1
            self._clear_cause = error
            step = transition(self._state, Action.CLEAR)
            self._state = step.state
            if step.emit:
                self._events.pool_cleared(None, interrupt_in_use_connections)
            address = self.address
            self._queue.fail_all(lambda: PoolClearedError.cleared(address, error))
        if interrupt_in_use_connections:
            self._interrupt(service_id)
        self._alarm.ring()  # the background run closes stale idle connections now
        self._settle()

    def _interrupt(self, service_id: ObjectId | None) -> None:
        """Interrupt the connections a clear just made stale."""
        for conn in list(self._in_use):
            if conn.service_id == service_id and self.is_stale(conn):
                conn.interrupted = True
                conn.mark_errored(PoolClearedError.interrupted(self.address))
                if conn.transport is not None:
                    self._events.later(_close_quietly, conn.transport)
        if not self.options.load_balanced:  # a pending connection has no serviceId yet
            self._interrupt_pending()

    def _interrupt_pending(self) -> None:
        hub = get_hub()
        for conn in self._pending:
            if conn._establisher is not None:
                hub.loop.run_callback(self._interrupt_establishment, conn, conn._establisher)

    def _interrupt_establishment(self, conn: Connection[T], greenlet: Any) -> None:
        # Runs in the hub. Throw only while that greenlet is still inside the
        # connector for this connection: anywhere else it would hit innocent code.
        if conn._establisher is greenlet:
            conn.interrupted = True
            greenlet.throw(PoolClearedError.interrupted(self.address))

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
        self._settle()

    def __enter__(self) -> Pool[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<greenpool.Pool {format_address(self.address)} {self._state.value}>"

    # -- background maintenance ---------------------------------------------------

    def _start_maintenance(self) -> None:
        if self.options.background_interval is None:
            return  # the test hook for "never run"
        if self._maintainer is None or self._maintainer.dead:
            self._maintainer = gevent.spawn(_maintain, weakref.ref(self), self._alarm)
        self._alarm.ring()

    def _stop_maintenance(self) -> None:
        greenlets = [g for g in (self._maintainer, *self._fillers) if g is not None]
        self._maintainer = None
        self._fillers.clear()
        for greenlet in greenlets:
            if greenlet is not getcurrent():
                greenlet.kill(block=False)

    def background_run(self) -> None:
        """One Background Thread Run (spec): close perished available
        connections and start establishing up to minPoolSize. Never waits."""
        if self._pid != os.getpid():
            self._reset_after_fork()
        if self.closed:
            return
        now = _now()
        keep: deque[Connection[T]] = deque()
        for conn in self._available:
            reason = self._perished(conn, now)
            if reason is None:
                keep.append(conn)
            else:
                self._retire(conn, reason)
        self._available = keep
        options = self.options
        while self._total() < options.min_pool_size and self._may_create():
            conn = self._create()
            self._filling.add(conn)
            filler = gevent.spawn(self._fill, conn)
            self._fillers.add(filler)
            filler.link(self._fillers.discard)
        self._settle()

    def _fill(self, conn: Connection[T]) -> None:
        try:
            self._establish(conn)
        except Exception:
            return  # already closed and reported; SDAM handled the error
        self._filling.discard(conn)
        self._put_back(conn)
        self._settle()

    # -- process and thread ownership ----------------------------------------------

    def _check_owner(self) -> None:
        if self._pid != os.getpid():
            self._reset_after_fork()
        elif self._thread != _real_thread_id():
            raise RuntimeError(
                f"{self!r} was created in OS thread {self._thread} and used from "
                f"{_real_thread_id()}: a pool belongs to one thread's gevent hub"
            )

    def _forget_parent_connections(self) -> None:
        """Right after a fork, in the child: make every inherited connection
        unusable without I/O on it (closing an inherited descriptor sends
        nothing while the parent holds it). Bookkeeping waits for first use."""
        for conn in (*self._available, *self._in_use):
            conn.mark_errored(PoolClearedError.forked(self.address))
            if conn.transport is not None:
                _close_quietly(conn.transport)
        self._interrupt_pending()

    def _reset_after_fork(self) -> None:
        """In a forked child, on first use: start clean."""
        self._pid = os.getpid()
        self._thread = _real_thread_id()
        self._forget_parent_connections()
        for conn in (*self._available, *self._in_use, *self._pending):
            conn.state = ConnectionState.CLOSED
        self._available.clear()
        self._in_use.clear()
        self._pending.clear()
        self._filling.clear()
        self._fillers.clear()
        self._services.clear()
        address = self.address
        self._queue.fail_all(lambda: PoolClearedError.forked(address))
        self._generation += 1
        if self._state is PoolState.READY:
            self._events.pool_cleared(None, False)
            self._start_maintenance()
        self._settle()

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
        if self._queue and self._may_create() and len(self._queue) > len(self._filling):
            fail("checkouts wait while a connection could be created")
        counts = Counter(conn.service_id for conn in everyone if conn._counted)
        # A zero entry is one kept while SDAM judges an establishment error.
        if {sid: entry[1] for sid, entry in self._services.items() if entry[1]} != dict(counts):
            fail("serviceId connection counts are off")


def _close_quietly(transport: Transport) -> None:
    with contextlib.suppress(Exception):  # a transport that cannot close is gone anyway
        transport.close()


def _maintain(pool_ref: weakref.ref[Pool[Any]], alarm: Alarm) -> None:
    """The maintenance greenlet: a Run, then sleep until the interval or a ring.

    It holds the pool weakly: a pool nobody references is collected and its
    maintenance ends with it.
    """
    while True:
        pool = pool_ref()
        if pool is None or pool.closed:
            return
        interval = pool.options.background_interval
        try:
            pool.background_run()
        except (Exception, gevent.Timeout):
            # A listener's own timeout must not end maintenance; only a kill
            # (GreenletExit, from close()) does.
            logging.getLogger("greenpool").exception("greenpool: background run of %r failed", pool)
        del pool
        alarm.sleep(interval)
