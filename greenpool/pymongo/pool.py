"""GreenPool: PyMongo's application pool with greenpool's FIFO handoff and kill safety.

Rules of this module: :class:`GreenPool` and its grants, and nothing else. It
subclasses PyMongo's pool (``before_4_18.BasePool``, through ``holders.HoldingPool``,
which keeps who holds its connections) and replaces only the waiting and the
accounting: ``_get_conn``, ``checkin``, ``_reset``, ``ready`` and
``remove_stale_sockets``. Connecting (socket, TLS, handshake, auth, error labels),
perished checks, pinning, generations, events and logs remain PyMongo's code, so CMAP
events reach PyMongo listeners and the ``pymongo.connection`` log exactly as with the
stock pool. The waiting itself is :mod:`greenpool.pool.waitqueue`'s (the same FIFO
deliver-once slots the core pool uses). PyMongo's internals come from ``internals.py``.

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
The pool runs on one gevent hub and switches greenlets only where one
blocks. Every change of ``requests`` (permits: checked-out connections plus
connections being made), ``active_sockets`` (permits held by checkouts),
``_pending`` (connections being made, at most maxConnecting),
``operation_count`` and the idle deque happens between two blocking points,
so it needs no lock; the stock conditions are never waited on. A checkout
either takes what is free at once (only when nobody queues) or joins a FIFO
queue, and whatever frees up is delivered, with its counters already applied,
to the oldest waiter (``_gp_pump``). A waiter that leaves (kill, timeout,
cleared pool) gives back exactly what was delivered to it before anything can
yield. Events and socket closes, which may yield into listeners, come after
the bookkeeping.

Fork: PyMongo's after-fork hook builds a new topology in the child, so the
child gets new pools through ``keywords.pool_factory``. An old pool used in the
child (a connection checked out in the parent and checked in in the child)
starts over with zeroed counters and never counts the parent's connections.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from gevent import getcurrent
from pymongo.errors import AutoReconnect, WaitQueueTimeoutError

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
_CONN_ERROR_TEXT = "An error occurred while trying to establish a new connection"


class _Create:
    """What a waiter receives when it may make a new connection itself."""

    __repr__ = object.__repr__


CREATE = _Create()
Grant: TypeAlias = "Connection | _Create"


class _Paused(Exception):
    """A waiter's slot failed because the pool was cleared (paused) or closed."""


class GreenPool(HoldingPool):
    """PyMongo's application pool with greenpool's FIFO handoff and kill safety.

    Counters keep PyMongo's meaning (see the module docstring), so server
    selection (``operation_count``) and the load-balanced wait-queue timeout
    message (``active_sockets``, ``ncursors``, ``ntxns``) read them unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Checkouts waiting for a permit (a slot under maxPoolSize).
        self._gp_new: WaitQueue[Grant] = WaitQueue()
        # Checkouts that hold a permit but whose idle connection had perished:
        # they wait for another idle connection or a slot under maxConnecting.
        self._gp_held: WaitQueue[Grant] = WaitQueue()
        # Bumped after a fork: counters changed before it are not undone after it.
        self._gp_epoch = 0
        self._gp_turns = Turns()

    # -- the policy: never yields ------------------------------------------------

    def _gp_pump(self) -> None:
        """Deliver whatever is free to the oldest waiters, counters included."""
        if self.state != _READY:
            return
        held, new, conns = self._gp_held, self._gp_new, self.conns
        while held.waiting:
            if conns:
                held.deliver(conns.popleft())
            elif self._pending < self._max_connecting:
                self._pending += 1
                held.deliver(CREATE)
            else:
                return
        while new.waiting:
            if conns:
                grant: Grant = conns.popleft()
            elif self.requests < self.max_pool_size and self._pending < self._max_connecting:
                self._pending += 1
                grant = CREATE
            else:
                return
            self.requests += 1
            self.active_sockets += 1
            new.deliver(grant)

    def _gp_take_free(self) -> Grant | None:
        """A free idle connection or connection slot, with its permit; only
        when nobody queues (a newcomer never overtakes a waiter)."""
        if self._gp_new.waiting or self._gp_held.waiting:
            return None
        grant: Grant
        if self.conns:
            grant = self.conns.popleft()
        elif self.requests < self.max_pool_size and self._pending < self._max_connecting:
            self._pending += 1
            grant = CREATE
        else:
            return None
        self.requests += 1
        self.active_sockets += 1
        return grant

    def _gp_give_back(self, grant: Grant | None, with_permit: bool, epoch: int) -> None:
        """Undo a grant its waiter will not use (no yield)."""
        if grant is None or epoch != self._gp_epoch:
            return
        if grant is CREATE:
            self._pending -= 1
        else:
            assert isinstance(grant, Connection)
            self.conns.appendleft(grant)
        if with_permit:
            self.requests -= 1
            self.active_sockets -= 1
        self._gp_pump()

    def _gp_wait(self, queue: WaitQueue[Grant], deadline: float | None, started: float,
                 epoch: int) -> Grant:
        slot: Slot[Grant] = queue.join(started)
        timeout = None if deadline is None else deadline - time.monotonic()
        try:
            return slot.wait(timeout)
        except WaitTimedOut:
            # Nothing was or can be delivered to an expired slot. This emits
            # ConnectionCheckOutFailed(timeout) and raises WaitQueueTimeoutError.
            self._raise_wait_queue_timeout(started)
        except BaseException:
            # Killed, or failed by a clear: hand on anything delivered meanwhile.
            self._gp_give_back(slot.abandon(), queue is self._gp_new, epoch)
            raise

    def _gp_raise_paused(self) -> NoReturn:
        _raise_connection_failure(
            self.address, AutoReconnect("connection pool paused"),
            timeout_details=_get_timeout_details(self.opts),
        )

    def _gp_fail_waiters(self) -> None:
        self._gp_held.fail_all(_Paused)
        self._gp_new.fail_all(_Paused)

    # -- overrides ---------------------------------------------------------------

    def _get_conn(
        self, checkout_started_time: float, handler: _ClientCheckout | None = None
    ) -> Connection:
        started = checkout_started_time
        if self.state == _READY and not (self._gp_new.waiting or self._gp_held.waiting):
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

        # Stage 1: a permit, with an idle connection or a connection slot.
        epoch = self._gp_epoch
        self.operation_count += 1
        grant: Grant | None = None
        try:
            grant = self._gp_take_free()
            if grant is None:
                grant = self._gp_wait(self._gp_new, deadline, started, epoch)
        except BaseException as error:
            if epoch == self._gp_epoch:
                self.operation_count -= 1
            if not isinstance(error, _Paused):
                raise
        if grant is None:  # failed by a clear while waiting
            self._telemetry.checkout_failed(_CONN_ERROR_TEXT, Failed.CONN_ERROR, started)
            self._gp_raise_paused()

        # Stage 2: the permit is ours; every failure below returns it first.
        conn: Connection | None = None
        reported = False
        try:
            # From here the grant is _gp_use_grant's: it gives it back on failure.
            conn = self._gp_use_grant(grant, epoch, deadline, started, handler)
            conn.active = True
            self.active_contexts.add(conn.cancel_context)
            # Checked out, with its hold record (holders.py): who, since when, where.
            self._gp_out[conn] = (getcurrent(), time.monotonic(),
                                  acquire_site() if self._gp_sites else None)
        except BaseException as error:
            reported = isinstance(error, WaitQueueTimeoutError)
            if epoch == self._gp_epoch:
                self.requests -= 1
                self.active_sockets -= 1
                self.operation_count -= 1
                self._gp_pump()
            if conn is not None:
                conn.close_conn(Closed.ERROR)
            if not reported:
                self._telemetry.checkout_failed(_CONN_ERROR_TEXT, Failed.CONN_ERROR, started)
            raise
        return conn

    def _gp_use_grant(self, grant: Grant, epoch: int, deadline: float | None, started: float,
                      handler: _ClientCheckout | None) -> Connection:
        """Turn a grant into a usable connection: connect, or check an idle
        one and replace it if it perished. The caller holds the permit."""
        while True:
            if grant is CREATE:
                if self.state != _READY:  # cleared between the grant and now
                    self._gp_give_back(grant, False, epoch)
                    self._gp_raise_paused()
                try:
                    return self.connect(handler=handler)
                finally:
                    if epoch == self._gp_epoch:
                        self._pending -= 1
                        self._gp_pump()
            assert isinstance(grant, Connection)
            if not self._perished(grant):  # closes it (and may yield) if perished
                return grant
            if self.state != _READY:
                self._gp_raise_paused()
            if self.conns:
                grant = self.conns.popleft()
            elif self._pending < self._max_connecting and not self._gp_held:
                self._pending += 1
                grant = CREATE
            else:
                try:
                    grant = self._gp_wait(self._gp_held, deadline, started, epoch)
                except _Paused:
                    self._gp_raise_paused()

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
        if txn:
            self.ntxns -= 1
        elif cursor:
            self.ncursors -= 1
        self.requests -= 1
        self.active_sockets -= 1
        self.operation_count -= 1
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
                self._gp_fail_waiters()  # those who queued while it yielded
            else:
                self._gp_pump()

    def _gp_start_over(self) -> None:
        """In a forked child: the parent's checkouts are not ours to undo."""
        self._gp_epoch += 1
        self.requests = self._pending = self.active_sockets = self.operation_count = 0
        self.ncursors = self.ntxns = 0
        self._pinned_sockets.clear()
        self._gp_out = weakref.WeakKeyDictionary()
        # Greenlets copied from the parent may sit in the old queues; they
        # belong to the parent's hub state and are never woken.
        self._gp_new, self._gp_held = WaitQueue(), WaitQueue()

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
            if (self._gp_new or self._gp_held or self.state != _READY
                    or len(self.conns) + self.active_sockets >= min_size
                    or self.requests >= min_size or self.requests >= self.max_pool_size
                    or self._pending >= self._max_connecting):
                return
            epoch = self._gp_epoch
            self.requests += 1
            self._pending += 1
            made: Connection | None = None
            try:
                made = self.connect()
            finally:
                if epoch == self._gp_epoch:
                    self.requests -= 1
                    self._pending -= 1
                    if (made is not None and self.state == _READY
                            and self.gen.get_overall() == reference_generation):
                        self.active_contexts.discard(made.cancel_context)
                        self.conns.appendleft(made)
                        made = None
                    self._gp_pump()
            if made is not None:
                made.close_conn(Closed.STALE)
                return
