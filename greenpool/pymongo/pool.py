"""GreenPool: PyMongo's application pool with greenpool's FIFO handoff and kill safety.

Rules of this module: :class:`GreenPool`, its grants and its counters, and nothing
else. It subclasses PyMongo's pool (``before_4_18.BasePool``, through
``holders.HoldingPool``, which keeps who holds its connections) and replaces only the
waiting and the accounting: ``_get_conn``, ``checkin``, ``_reset``, ``ready`` and
``remove_stale_sockets``. PyMongo's internals come from ``internals.py``.

The seam: what stays PyMongo's
------------------------------
Connecting (socket, TLS, handshake, auth, error labels), the perished check of an
idle connection (``_perished``, which closes it), pinning (the checkout context's
exit counts ``ncursors`` and ``ntxns``), generations, events and logs remain PyMongo's
code, so CMAP events reach PyMongo listeners and the ``pymongo.connection`` log
exactly as with the stock pool. Each of them may yield (a listener, a socket), so
GreenPool calls them only where it holds nothing it has not counted, and never from
the handoff. Everything else is greenpool's: who gets what frees up is
:mod:`greenpool.pool.handoff`'s policy, the same one :class:`greenpool.Pool` applies,
and the waiting is :mod:`greenpool.pool.waitqueue`'s FIFO of deliver-once slots.

Why a subclass rather than :class:`greenpool.Pool` behind a facade
------------------------------------------------------------------
PyMongo's topology, server, client and connections reach into the pool's
attributes (``gen``, ``opts``, ``operation_count`` for server selection,
``active_sockets``/``ncursors``/``ntxns`` for the load-balanced timeout
message, ``_telemetry``, ``pool_ref``, the pinned set) and its
``connect()`` reports ConnectionCreated/Ready/Closed itself. A facade over
greenpool's own pool would have to re-implement all of that surface and
suppress or translate half of both event streams. Subclassing keeps PyMongo
authoritative for everything except the wait queue.

How the accounting stays right
------------------------------
The pool runs on one gevent hub and switches greenlets only where one blocks.
PyMongo's counters (``requests``: permits, i.e. checked-out connections plus
connections being made; ``active_sockets``: permits held by checkouts;
``_pending``: connections being made, at most maxConnecting; ``operation_count``;
``ncursors``, ``ntxns``) live in a :class:`Book`, one per process: the pool's
attributes of those names read and write the current book. Every change happens
between two blocking points, so it needs no lock; the stock conditions are never
waited on.

A checkout takes a grant (a permit with an idle connection or a connection slot)
at once only when nobody queues; else it joins the one FIFO queue, and whatever
frees up is delivered, with its counters already applied, to the oldest waiter
(``handoff.serve``). A checkout whose idle connection had perished gives its
permit back and waits again at the front of the line, where the permit comes
back to it with the next connection or slot. Whatever fails gives back exactly
what it holds, to the book it took it from, before anything can yield.

Fork: PyMongo's after-fork hook builds a new topology in the child, so the child
gets new pools through ``keywords.pool_factory``. An old pool used in the child (a
connection checked out in the parent and checked in in the child) starts over
with a new book, a new queue and no checked-out connections: what the parent's
checkouts give back goes to the parent's book, so the child's counts stay right.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from gevent import getcurrent
from pymongo.errors import AutoReconnect, WaitQueueTimeoutError

from greenpool.pool import handoff
from greenpool.pool.holds import acquire_site
from greenpool.pool.waitqueue import Slot, Turns, WaitQueue, WaitTimedOut
from greenpool.pymongo.holders import HoldingPool
from greenpool.pymongo.internals import (
    Closed,
    Connection,
    Failed,
    PoolState,
    _csot,
    _get_timeout_details,
    _PoolClosedError,
    _raise_connection_failure,
)

if TYPE_CHECKING:
    from bson.objectid import ObjectId

    from greenpool.pymongo.internals import _ClientCheckout

_READY = PoolState.READY
_IDLE = handoff.Grant.IDLE
_CONN_ERROR_TEXT = "An error occurred while trying to establish a new connection"


class _Create:
    """What a waiter receives when it may make a new connection itself."""

    __repr__ = object.__repr__


CREATE = _Create()
Grant: TypeAlias = "Connection | _Create"


class _Paused(Exception):
    """A waiter's slot failed because the pool was cleared (paused) or closed."""


class Book:
    """PyMongo's pool counters for one process's life of a pool."""

    __slots__ = ("active_sockets", "ncursors", "ntxns", "operation_count", "pending",
                 "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.active_sockets = 0
        self.pending = 0
        self.operation_count = 0
        self.ncursors = 0
        self.ntxns = 0


class _Counter:
    """One of PyMongo's pool attributes, kept in the pool's current :class:`Book`."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __get__(self, pool: Any, owner: type | None = None) -> int:
        value: int = getattr(pool._gp_book, self.field)
        return value

    def __set__(self, pool: Any, value: int) -> None:
        setattr(pool._gp_book, self.field, value)


class GreenPool(HoldingPool):
    """PyMongo's application pool with greenpool's FIFO handoff and kill safety.

    Counters keep PyMongo's meaning (see the module docstring), so server
    selection (``operation_count``) and the load-balanced wait-queue timeout
    message (``active_sockets``, ``ncursors``, ``ntxns``) read them unchanged.
    """

    requests = _Counter("requests")
    active_sockets = _Counter("active_sockets")
    _pending = _Counter("pending")
    operation_count = _Counter("operation_count")
    ncursors = _Counter("ncursors")
    ntxns = _Counter("ntxns")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._gp_book = Book()  # before PyMongo's __init__ sets the counters
        super().__init__(*args, **kwargs)
        #: Checkouts waiting for a grant, oldest first.
        self._gp_queue: WaitQueue[Grant] = WaitQueue()
        self._gp_turns = Turns()

    # -- the handoff: never yields ---------------------------------------------------

    def _gp_grant(self, waiting: int = 1) -> Grant | None:
        """What ``handoff.grant`` gives the oldest of ``waiting`` checkouts
        now, counted in the current book: an idle connection or a slot to
        connect, each with a permit (None: nothing, or the pool is not ready)."""
        if self.state != _READY:
            return None
        book = self._gp_book
        granted = handoff.grant(len(self.conns), book.requests, book.pending,
                                self.max_pool_size, self._max_connecting, waiting)
        if granted is None:
            return None
        grant: Grant
        if granted is _IDLE:
            grant = self.conns.popleft()
        else:
            book.pending += 1
            grant = CREATE
        book.requests += 1
        book.active_sockets += 1
        return grant

    def _gp_pump(self) -> None:
        """Deliver whatever is free to the oldest waiters, counters included."""
        handoff.serve(self._gp_queue, self._gp_grant)

    def _gp_give_back(self, book: Book, grant: Grant | None) -> None:
        """Give back a permit (and ``grant``, when its checkout will not use
        it) to the book it came from, then hand on what freed up (no yield)."""
        if grant is CREATE:
            book.pending -= 1
        elif grant is not None:
            assert isinstance(grant, Connection)
            self.conns.appendleft(grant)
        book.requests -= 1
        book.active_sockets -= 1
        self._gp_pump()

    def _gp_wait(self, book: Book, deadline: float | None, started: float,
                 again: bool = False) -> Grant:
        """A grant for this checkout: at once if nobody waits and something is
        free, else the one it is delivered in line. ``again``: this checkout
        held a permit whose idle connection perished; it waits at the front
        (it was served before everyone waiting now) and gives the permit back
        there, so the permit returns to it with the next connection or slot."""
        queue = self._gp_queue
        if again:
            slot: Slot[Grant] = queue.join_first(started)
            self._gp_give_back(book, None)
        else:
            if not queue.waiting:
                grant = self._gp_grant()
                if grant is not None:
                    return grant
            slot = queue.join(started)
        timeout = None if deadline is None else deadline - time.monotonic()
        try:
            return slot.wait(timeout)
        except WaitTimedOut:
            # Nothing was or can be delivered to an expired slot. This emits
            # ConnectionCheckOutFailed(timeout) and raises WaitQueueTimeoutError.
            self._raise_wait_queue_timeout(started)
        except BaseException:
            # Killed, or failed by a clear: hand on anything delivered meanwhile.
            leftover = slot.abandon()
            if leftover is not None:
                self._gp_give_back(book, leftover)
            raise

    def _gp_raise_paused(self) -> NoReturn:
        _raise_connection_failure(
            self.address, AutoReconnect("connection pool paused"),
            timeout_details=_get_timeout_details(self.opts),
        )

    # -- overrides ---------------------------------------------------------------

    def _get_conn(
        self, checkout_started_time: float, handler: _ClientCheckout | None = None
    ) -> Connection:
        started = checkout_started_time
        if self.state == _READY and not self._gp_queue.waiting:
            # Fair turns, only where a checkout could take without queueing:
            # may yield once, before anything is checked, counted or held.
            self._gp_turns.take()
        if self.pid != os.getpid():
            self.reset_without_pause()
        if self.closed:
            self._telemetry.checkout_failed(
                "Connection pool was closed", Failed.POOL_CLOSED, started)
            raise _PoolClosedError(
                "Attempted to check out a connection from closed connection pool")
        if self.state != _READY:
            self._telemetry.checkout_failed(_CONN_ERROR_TEXT, Failed.CONN_ERROR, started)
            self._gp_raise_paused()
        if _csot.get_timeout():
            deadline = _csot.get_deadline()
        elif self.opts.wait_queue_timeout:
            deadline = time.monotonic() + self.opts.wait_queue_timeout
        else:
            deadline = None
        book = self._gp_book
        book.operation_count += 1
        granted = False  # reporting as PyMongo's pool: a kill before any grant emits nothing
        try:
            grant = self._gp_wait(book, deadline, started)
            granted = True
            conn = self._gp_use(grant, book, deadline, started, handler)
        except BaseException as error:
            book.operation_count -= 1
            if isinstance(error, _Paused) or (
                    granted and not isinstance(error, WaitQueueTimeoutError)):
                # (A timeout reported itself, in _raise_wait_queue_timeout.)
                self._telemetry.checkout_failed(_CONN_ERROR_TEXT, Failed.CONN_ERROR, started)
            if isinstance(error, _Paused):
                self._gp_raise_paused()
            raise
        return conn

    def _gp_use(self, grant: Grant, book: Book, deadline: float | None, started: float,
                handler: _ClientCheckout | None) -> Connection:
        """Turn a grant into a checked-out connection: connect, or check an
        idle one and wait again if it perished. Holding the grant's permit,
        every failure gives it back first."""
        while True:
            try:
                conn = self._gp_connection(grant, book, handler)
            except BaseException:
                self._gp_give_back(book, None)
                raise
            if conn is not None:
                break
            # PyMongo closed the idle connection as perished (it may have yielded).
            if self.state != _READY or book is not self._gp_book:
                self._gp_give_back(book, None)
                raise _Paused
            grant = self._gp_wait(book, deadline, started, again=True)
        try:
            conn.active = True
            self.active_contexts.add(conn.cancel_context)
            # Checked out, with its hold record (holders.py): who, since when, where.
            self._gp_out[conn] = (getcurrent(), time.monotonic(),
                                  acquire_site(3) if self._gp_sites else None)
        except BaseException:
            self._gp_give_back(book, None)
            conn.close_conn(Closed.ERROR)
            raise
        return conn

    def _gp_connection(self, grant: Grant, book: Book,
                       handler: _ClientCheckout | None) -> Connection | None:
        """The connection of ``grant``: a new one (connect, PyMongo's), or the
        idle one unless PyMongo's ``_perished`` closed it (None)."""
        if grant is CREATE:
            try:
                if self.state != _READY:  # cleared between the grant and now
                    raise _Paused
                return self.connect(handler=handler)
            finally:
                book.pending -= 1
                self._gp_pump()
        assert isinstance(grant, Connection)
        return None if self._perished(grant) else grant

    def checkin(self, conn: Connection) -> None:
        if self.pid != os.getpid():
            # Checked out before a fork, checked in in the child: the pool
            # starts over and drops the connection unclosed, like PyMongo's.
            conn.active = conn.pinned_txn = conn.pinned_cursor = False
            self._telemetry.checked_in(conn.id)
            self.reset_without_pause()
            return
        if conn not in self._gp_out:
            return  # already checked in, or out since before a fork: not ours to count
        # Bookkeeping and handoff, with no yield ...
        del self._gp_out[conn]  # and its hold record
        txn, cursor = conn.pinned_txn, conn.pinned_cursor
        conn.active = conn.pinned_txn = conn.pinned_cursor = False
        self._pinned_sockets.discard(conn)
        self.active_contexts.discard(conn.cancel_context)
        book = self._gp_book
        if txn:
            book.ntxns -= 1
        elif cursor:
            book.ncursors -= 1
        book.requests -= 1
        book.active_sockets -= 1
        book.operation_count -= 1
        close_reason: str | None = None
        closed_by_error = False
        if self.closed:
            close_reason = Closed.POOL_CLOSED
        elif conn.closed:
            closed_by_error = True
        elif self.stale_generation(conn.generation, conn.service_id):
            close_reason = Closed.STALE
        else:
            conn.update_last_checkin_time()
            conn.update_is_writable(bool(self.is_writable))
            self.conns.appendleft(conn)
        self._gp_pump()  # the oldest waiter gets this connection, or the freed permit
        # ... then what may yield: events (listeners) and closing.
        self._telemetry.checked_in(conn.id)
        if closed_by_error:
            self._telemetry.connection_closed(conn.id, Closed.ERROR)
        if close_reason is not None:
            conn.close_conn(close_reason)

    def _reset(
        self,
        close: bool,
        pause: bool = True,
        service_id: ObjectId | None = None,
        interrupt_connections: bool = False,
    ) -> None:
        if self.pid != os.getpid():
            self._gp_start_over()
        if close:
            self._gp_stop_holding()
        try:
            super()._reset(close, pause=pause, service_id=service_id,
                           interrupt_connections=interrupt_connections)
        finally:
            if self.state != _READY:
                self._gp_queue.fail_all(_Paused)  # those who queued while it yielded
            else:
                self._gp_pump()

    def _gp_start_over(self) -> None:
        """In a forked child: a new book, a new line, no checkouts. What the
        parent's checkouts give back goes to the parent's book."""
        self._gp_book = Book()
        self._pinned_sockets.clear()
        self._gp_out = weakref.WeakKeyDictionary()
        # Greenlets copied from the parent may sit in the old queue; they
        # belong to the parent's hub state and are never woken.
        self._gp_queue = WaitQueue()

    def ready(self) -> None:
        try:
            super().ready()
        finally:
            self._gp_pump()  # checkouts that queued while the pool was paused

    def remove_stale_sockets(self, reference_generation: int) -> None:
        """Close idle connections past maxIdleTimeMS, then fill to minPoolSize
        one connection at a time, never ahead of a waiting checkout."""
        if self.state != _READY:
            return
        max_idle = self.opts.max_idle_time_seconds
        if max_idle is not None:
            expired = []
            while self.conns and self.conns[-1].idle_time_seconds() > max_idle:
                expired.append(self.conns.pop())
            for conn in expired:
                conn.close_conn(Closed.IDLE)
        min_size = self.opts.min_pool_size
        while True:
            book = self._gp_book
            if (self._gp_queue.waiting or self.state != _READY
                    or len(self.conns) + book.active_sockets >= min_size
                    or book.requests >= min_size
                    or not handoff.may_create(book.requests, book.pending,
                                              self.max_pool_size, self._max_connecting)):
                return
            book.requests += 1
            book.pending += 1
            made: Connection | None = None
            try:
                made = self.connect()
            finally:
                book.requests -= 1
                book.pending -= 1
                if (made is not None and self.state == _READY
                        and self.gen.get_overall() == reference_generation):
                    self.active_contexts.discard(made.cancel_context)
                    self.conns.appendleft(made)
                    made = None
                self._gp_pump()
            if made is not None:
                made.close_conn(Closed.STALE)
                return
