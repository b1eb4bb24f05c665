"""greenpool's pools under PyMongo's own ``MongoClient``.

Rules of this module: the adapter between PyMongo's MongoClient and greenpool's pool
core: it builds on :mod:`greenpool.pool` (the wait queue) and PyMongo's own pool
classes, and never imports greenpool's client or wire layers.

One line changes in an application that already runs PyMongo under gevent::

    from greenpool.pymongo import MongoClient   # instead of: from pymongo import MongoClient

Everything else is PyMongo: the same constructor arguments, URI options,
server selection, retries, sessions, transactions, SDAM, authentication, TLS
and compression. Only the application connection pools change. They hand
connections out in strict arrival order (FIFO, with direct handoff at
checkin), honour maxConnecting, and stay consistent when a greenlet is
killed (GreenletExit, gevent.Timeout) at any point of a checkout or checkin.

How it plugs in
---------------
PyMongo builds every pool through its ``_pool_class`` keyword, and the
condition server selection waits on through ``_condition_class``. Both are
private, documented only as "for deep customization": hence the exact
version range checked at import (:data:`SUPPORTED_PYMONGO`).

* :func:`pool_factory` is the ``_pool_class``. Application pools become
  :class:`GreenPool`; the monitor and RTT pools (``is_sdam=True``) stay
  PyMongo's, because nothing ever waits in them and SDAM reads their
  internals.
* :class:`GreenPool` subclasses PyMongo's ``Pool`` and replaces only the
  waiting and the accounting: ``_get_conn``, ``checkin``, ``_reset``,
  ``ready`` and ``remove_stale_sockets``. Connecting (socket, TLS, handshake,
  auth, error labels), perished checks, pinning, generations, events and
  logs remain PyMongo's code, so CMAP events reach PyMongo listeners and the
  ``pymongo.connection`` log exactly as with the stock pool.
* :class:`KillSafeCondition` is the ``_condition_class``. With the stock
  ``threading.Condition``, a kill that lands while ``wait()`` re-acquires its
  lock returns without the lock, and the caller's ``with`` block then
  releases a lock it does not hold: "RuntimeError: Semaphore released too
  many times", or two greenlets in one critical section (PYTHON-6074).

Why a subclass rather than :class:`greenpool.Pool` behind a facade
------------------------------------------------------------------
PyMongo's topology, server, client and connections reach into the pool's
attributes (``gen``, ``opts``, ``operation_count`` for server selection,
``active_sockets``/``ncursors``/``ntxns`` for the load-balanced timeout
message, ``_telemetry``, ``pool_ref``, the pinned set) and its
``connect()`` reports ConnectionCreated/Ready/Closed itself. A facade over
greenpool's own pool would have to re-implement all of that surface and
suppress or translate half of both event streams. Subclassing keeps PyMongo
authoritative for everything except the wait queue, which is greenpool's
:mod:`greenpool.pool.waitqueue` (the same FIFO deliver-once slots the core pool
uses).

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
child gets new pools through :func:`pool_factory`. An old pool used in the
child (a connection checked out in the parent and checked in in the child)
starts over with zeroed counters and never counts the parent's connections.

Requirements: ``gevent.monkey.patch_all()`` (at least ``threading``) before
the client is created, so PyMongo's monitors are greenlets in the same hub;
one hub per client (no OS threads using the same client).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import gevent
import gevent.monkey
import pymongo as _pymongo

__all__ = [
    "SUPPORTED_PYMONGO",
    "GreenPool",
    "KillSafeCondition",
    "MongoClient",
    "UnsupportedPyMongoVersion",
    "pool_factory",
]

SUPPORTED_PYMONGO = ((4, 9), (4, 21))
"""The PyMongo versions this module supports: ``>= 4.9, < 4.21``.

The ``pymongo`` extra pins the same range (``pip install 'greenpool[pymongo]'``);
greenpool itself (the Client and the pool) needs only ``pymongo>=4.9``.

4.9 is the first release with the ``pymongo.synchronous`` layout and the
``_pool_class``/``_condition_class`` keywords this module plugs into. The
pool internals it overrides or relies on moved between minor releases; what
differs is bridged here, so every guarantee holds on every supported release:

* 4.9-4.17 publish events from each pool method (there is no
  ``pool._telemetry``): :class:`GreenPool` publishes and logs its own as those
  releases do. Their ``checkout()`` lost the connection when a kill landed in
  the checked-out event or in SDAM error handling; :class:`GreenPool` checks
  out and in the way 4.19 does instead.
* 4.9-4.11 make sockets in ``_configured_socket``, 4.9-4.12 mark monitor
  pools ``handshake=False`` rather than ``is_sdam=True``.
* Monitor pools stay PyMongo's own on every release; nothing waits in them
  and no application greenlet runs in them.

The upper bound is the newest release reviewed. ``devtools/dev.py test`` runs the
adapter's tests on the latest patch of every minor release in the range."""


class UnsupportedPyMongoVersion(ImportError):
    """The installed PyMongo is outside :data:`SUPPORTED_PYMONGO`."""


def _supported_text() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_PYMONGO
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def check_pymongo_version(version: str) -> None:
    """Raise :class:`UnsupportedPyMongoVersion` unless ``version`` is supported."""
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        major_minor = ()
    low, high = SUPPORTED_PYMONGO
    if len(major_minor) != 2 or not low <= major_minor < high:
        raise UnsupportedPyMongoVersion(
            f"greenpool.pymongo supports pymongo{_supported_text()}, but pymongo {version} "
            f"is installed: it relies on private PyMongo internals (the _pool_class and "
            f"_condition_class keywords, the pool's counters) reviewed only for that range. "
            f"Install a supported version: pip install 'pymongo{_supported_text()}' "
            f"(or pip install 'greenpool[pymongo]')"
        )


check_pymongo_version(_pymongo.version)

# Imported after the check: these private names are what the range guarantees.
from pymongo import _csot  # noqa: E402
from pymongo.errors import AutoReconnect, WaitQueueTimeoutError  # noqa: E402
from pymongo.logger import (  # noqa: E402
    _CONNECTION_LOGGER,
    _ConnectionStatusMessage,
    _debug_log,
    _verbose_connection_error_reason,
)
from pymongo.monitoring import ConnectionCheckOutFailedReason as _Failed  # noqa: E402
from pymongo.monitoring import ConnectionClosedReason as _Closed  # noqa: E402
from pymongo.synchronous import pool as _stock_pool  # noqa: E402
from pymongo.synchronous.pool import Connection, Pool  # noqa: E402
from pymongo.typings import _DocumentType  # noqa: E402

from greenpool.pool.waitqueue import Slot, Turns, WaitQueue, WaitTimedOut  # noqa: E402

if TYPE_CHECKING:
    from bson.objectid import ObjectId
    from pymongo.helpers_shared import _get_timeout_details
    from pymongo.pool_shared import PoolState, _PoolClosedError, _raise_connection_failure
    from pymongo.synchronous.mongo_client import _ClientCheckout
else:
    # These moved between modules from release to release; PyMongo's own pool
    # module defines or imports all four in every supported release.
    PoolState = _stock_pool.PoolState
    _PoolClosedError = _stock_pool._PoolClosedError
    _raise_connection_failure = _stock_pool._raise_connection_failure
    _get_timeout_details = _stock_pool._get_timeout_details

_PYMONGO = tuple(int(part) for part in _pymongo.version.split(".")[:2])
# 4.9-4.17: no pool._telemetry (each pool method publishes its events itself),
# the pinned set is name-mangled, and checkout() is a generator that runs SDAM
# error handling, then the checkin, with no ``finally`` between them.
_LEGACY = _PYMONGO < (4, 18)
# 4.9-4.12 tell a monitor pool by handshake=False; 4.13 on, by is_sdam=True.
_MONITOR_FLAG, _MONITOR_VALUE = (
    ("is_sdam", True) if "is_sdam" in inspect.signature(Pool.__init__).parameters
    else ("handshake", False))

_READY = PoolState.READY
_CONN_ERROR_TEXT = "An error occurred while trying to establish a new connection"


class _Create:
    """What a waiter receives when it may make a new connection itself."""

    __repr__ = object.__repr__


CREATE = _Create()
Grant: TypeAlias = "Connection | _Create"


class _Paused(Exception):
    """A waiter's slot failed because the pool was cleared (paused) or closed."""


class GreenPool(Pool):
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
        # Connections checked out of this pool in this process, not yet back.
        self._gp_out: weakref.WeakSet[Connection] = weakref.WeakSet()
        # Bumped after a fork: counters changed before it are not undone after it.
        self._gp_epoch = 0
        self._gp_turns = Turns()
        # The events and logs this class emits itself, and the set of pinned
        # connections, wherever this PyMongo release keeps them.
        self._gp_events: Any = _LegacyEvents(self) if _LEGACY else self._telemetry
        self._gp_pinned: set[Connection] = (
            vars(self)["_Pool__pinned_sockets"] if _LEGACY else self._pinned_sockets)

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
        slot: Slot[Grant] = queue.join()
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
            self._gp_events.checkout_failed(
                "Connection pool was closed", _Failed.POOL_CLOSED, started)
            raise _PoolClosedError(
                "Attempted to check out a connection from closed connection pool")
        if self.state != _READY:
            self._gp_events.checkout_failed(_CONN_ERROR_TEXT, _Failed.CONN_ERROR, started)
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
            self._gp_events.checkout_failed(_CONN_ERROR_TEXT, _Failed.CONN_ERROR, started)
            self._gp_raise_paused()

        # Stage 2: the permit is ours; every failure below returns it first.
        conn: Connection | None = None
        reported = False
        try:
            # From here the grant is _gp_use_grant's: it gives it back on failure.
            conn = self._gp_use_grant(grant, epoch, deadline, started, handler)
            conn.active = True
            self.active_contexts.add(conn.cancel_context)
            self._gp_out.add(conn)
        except BaseException as error:
            reported = isinstance(error, WaitQueueTimeoutError)
            if epoch == self._gp_epoch:
                self.requests -= 1
                self.active_sockets -= 1
                self.operation_count -= 1
                self._gp_pump()
            if conn is not None:
                conn.close_conn(_Closed.ERROR)
            if not reported:
                self._gp_events.checkout_failed(_CONN_ERROR_TEXT, _Failed.CONN_ERROR, started)
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
            self._gp_events.checked_in(conn.id)
            self.reset_without_pause()
            return
        if conn not in self._gp_out:
            return  # already checked in, or out since before a fork: not ours to count
        # Bookkeeping and handoff, with no yield ...
        self._gp_out.discard(conn)
        txn, cursor = conn.pinned_txn, conn.pinned_cursor
        conn.active = conn.pinned_txn = conn.pinned_cursor = False
        self._gp_pinned.discard(conn)
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
            close_reason = _Closed.POOL_CLOSED
        elif conn.closed:
            closed_by_error = True
        elif self.stale_generation(conn.generation, conn.service_id):
            close_reason = _Closed.STALE
        else:
            conn.update_last_checkin_time()
            conn.update_is_writable(bool(self.is_writable))
            self.conns.appendleft(conn)
        self._gp_pump()  # the oldest waiter gets this connection, or the freed permit
        # ... then what may yield: events (listeners) and closing.
        self._gp_events.checked_in(conn.id)
        if closed_by_error:
            self._gp_events.connection_closed(conn.id, _Closed.ERROR)
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
        self._gp_pinned.clear()
        self._gp_out = weakref.WeakSet()
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
                conn.close_conn(_Closed.IDLE)
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
                made.close_conn(_Closed.STALE)
                return


def pool_factory(address: Any, options: Any, *args: Any, **kwargs: Any) -> Pool:
    """PyMongo's ``_pool_class``: a :class:`GreenPool` for application pools,
    PyMongo's own pool for monitoring (``is_sdam=True``; ``handshake=False``
    before PyMongo 4.13)."""
    flag = args[0] if args else kwargs.get(_MONITOR_FLAG, not _MONITOR_VALUE)
    if flag == _MONITOR_VALUE:
        return Pool(address, options, *args, **kwargs)
    _require_patched_threading()
    return GreenPool(address, options, *args, **kwargs)


class _LegacyEvents:
    """PyMongo 4.9-4.17 have no ``pool._telemetry``: the reports
    :class:`GreenPool` and :class:`_LegacyCheckout` make themselves, published
    and logged as those releases' own pool does (``durationMS`` included,
    which they log in seconds)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def _publish(self) -> Any:
        pool: Any = self._pool
        return pool.opts._event_listeners if pool.enabled_for_cmap else None

    def _log(self, message: str, **fields: Any) -> None:
        pool: Any = self._pool
        if pool.enabled_for_logging and _CONNECTION_LOGGER.isEnabledFor(logging.DEBUG):
            _debug_log(_CONNECTION_LOGGER, clientId=pool._client_id, message=message,
                       serverHost=pool.address[0], serverPort=pool.address[1], **fields)

    def checkout_started(self) -> float:
        started = time.monotonic()
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_check_out_started(self._pool.address)
        self._log(_ConnectionStatusMessage.CHECKOUT_STARTED)
        return started

    def checkout_succeeded(self, conn_id: int, start: float) -> None:
        duration = time.monotonic() - start
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_checked_out(self._pool.address, conn_id, duration)
        self._log(_ConnectionStatusMessage.CHECKOUT_SUCCEEDED, driverConnectionId=conn_id,
                  durationMS=duration)

    def checkout_failed(self, reason: str, error: str, start: float) -> None:
        duration = time.monotonic() - start
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_check_out_failed(self._pool.address, error, duration)
        self._log(_ConnectionStatusMessage.CHECKOUT_FAILED, reason=reason, error=error,
                  durationMS=duration)

    def checked_in(self, conn_id: int) -> None:
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_checked_in(self._pool.address, conn_id)
        self._log(_ConnectionStatusMessage.CHECKEDIN, driverConnectionId=conn_id)

    def connection_closed(self, conn_id: int, reason: str) -> None:
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_closed(self._pool.address, conn_id, reason)
        self._log(_ConnectionStatusMessage.CONN_CLOSED, driverConnectionId=conn_id,
                  reason=_verbose_connection_error_reason(reason), error=reason)


class _LegacyCheckout:
    """``GreenPool.checkout()`` on PyMongo 4.9-4.17, in the shape of 4.19's.

    Their stock checkout is a generator that leaks the connection when a
    kill lands in the checked-out event or log (nothing checks it in), and
    that runs SDAM error handling (which may yield: a pool clear, listeners)
    and then the checkin with no ``finally`` between, so a kill landing in
    the handling lost the pool a slot for good. Here, as in 4.19: a failure
    while reporting the checkout checks the connection in, and the checkin
    after an error runs in a ``finally`` after the handling.
    """

    __slots__ = ("_conn", "_handler", "_pool")

    def __init__(self, pool: GreenPool, handler: Any = None) -> None:
        self._pool = pool
        self._handler = handler
        self._conn: Connection | None = None

    def __enter__(self) -> Connection:
        pool = self._pool
        events = pool._gp_events
        started = events.checkout_started()
        conn = pool._get_conn(started, handler=self._handler)
        try:
            events.checkout_succeeded(conn.id, started)
        except BaseException:
            pool.checkin(conn)
            raise
        self._conn = conn
        return conn

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        pool = self._pool
        if exc_type is not None:
            # The session owns a pinned connection and checks it in itself.
            pinned = conn.pinned_txn or conn.pinned_cursor
            try:
                if self._handler is not None:  # while the connection is still out
                    self._handler.handle(exc_type, exc_val)
            finally:
                if not pinned and conn.active:
                    pool.checkin(conn)
        elif conn.pinned_txn:
            pool._gp_pinned.add(conn)
            pool.ntxns += 1
        elif conn.pinned_cursor:
            pool._gp_pinned.add(conn)
            pool.ncursors += 1
        elif conn.active:
            pool.checkin(conn)


def _legacy_checkout(pool: GreenPool, handler: Any = None) -> _LegacyCheckout:
    return _LegacyCheckout(pool, handler)


if _LEGACY:
    GreenPool.checkout = _legacy_checkout  # type: ignore[assignment,method-assign]


def _require_patched_threading() -> None:
    if not gevent.monkey.is_module_patched("threading"):
        raise RuntimeError(
            "greenpool.pymongo needs gevent's monkey-patching (gevent.monkey.patch_all(), "
            "before PyMongo is used): its pools and PyMongo's monitors must share one hub"
        )


class KillSafeCondition(threading.Condition):
    """``threading.Condition`` whose :meth:`wait` always returns holding the lock.

    The stock ``wait()`` re-acquires the lock in a ``finally``; under gevent
    that acquire can block, and a kill landing there propagates without the
    lock. This ``wait()`` re-acquires whatever happens, then re-raises the
    first kill; a second one that lands while it re-acquires (its own
    timeout firing, then a ``GreenletExit``, say) is thrown into the greenlet
    again at its next yield, so no kill is ever lost. A notification
    delivered to a waiter that is then killed is lost, so it suits broadcast
    use (PyMongo's topology calls ``notify_all``), not a FIFO queue.
    """

    _is_owned: Callable[[], bool]
    _release_save: Callable[[], Any]
    _acquire_restore: Callable[[Any], None]
    _waiters: Any

    def wait(self, timeout: float | None = None) -> bool:
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        waiter = threading._allocate_lock()  # type: ignore[attr-defined]
        waiter.acquire()
        self._waiters.append(waiter)
        saved_state = self._release_save()
        gotit = False
        pending: BaseException | None = None
        try:
            if timeout is None:
                waiter.acquire()
                gotit = True
            elif timeout > 0:
                gotit = waiter.acquire(True, timeout)
            else:
                gotit = waiter.acquire(False)
        except BaseException as error:
            pending = error
        later: list[BaseException] = []
        while True:
            try:
                self._acquire_restore(saved_state)
                break
            except BaseException as error:
                if pending is None:
                    pending = error
                else:
                    later.append(error)
        if not gotit:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
        for kill in later:
            _throw_later(gevent.getcurrent(), kill)
        if pending is not None:
            raise pending
        return gotit


def _throw_later(glet: Any, error: BaseException) -> None:
    """Throw ``error`` into ``glet`` at its next yield, as a kill would be."""

    def throw() -> None:
        if not glet.dead:
            glet.throw(error)

    gevent.get_hub().loop.run_callback(throw)


class MongoClient(_pymongo.MongoClient[_DocumentType]):
    """PyMongo's ``MongoClient`` with greenpool's application pools.

    Same arguments and behaviour as :class:`pymongo.MongoClient`; only the
    connection pools differ (see the module docstring). Requires
    ``gevent.monkey.patch_all()`` before it is created.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _require_patched_threading()
        for keyword, ours in (("_pool_class", pool_factory),
                              ("_condition_class", KillSafeCondition)):
            if kwargs.setdefault(keyword, ours) is not ours:
                raise TypeError(f"greenpool.pymongo.MongoClient sets {keyword} itself")
        super().__init__(*args, **kwargs)
