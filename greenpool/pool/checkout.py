"""The pool's hot path: checkout, checkin, and handoff to waiters.

What lives here: :class:`_HotPath`, the piece of
:class:`~greenpool.pool.pool.Pool` a connection passes through on every use,
and the moves between the connection sets (create, retire). Its base
``_CheckoutFailures`` (``failures.py``) reports the checkouts that fail.

Fields: it owns the connection sets ``_available``, ``_in_use`` and
``_pending``, the wait queue ``_queue``, ``_turns`` and ``_next_id``; it
reads ``_state``, ``_generation`` and the option copies, reads
``_filling`` (and drops a connection from it when it stops pending), and
counts in ``_tally``. It keeps each connection's hold record
(``holds.py``): the holder greenlet at every hand-out (a getcurrent and a
store), the acquire site only when ``_acquire_sites`` (the frame walk is
what costs), both cleared by the checkin, in the same step as the move out
of ``_in_use`` or the handoff to a waiter.

The verbs, the only ones for connections moving back and on:

``checkout`` / ``checkin``
    A caller takes a connection / is done with it; both report (flush)
    before returning. Each opens with a fast path for the common case (a
    ready pool, nobody waiting, a fresh connection) that does the general
    path's work in fewer steps; any doubt takes the general path.
``_checkin``
    ``checkin`` without the flush, for exception paths, which must not
    yield (they ``flush_later``).
``_return_to_pool``
    An in-use connection comes back: retired if broken or the pool is
    closed, else handed to the oldest waiter (staying in use) or made
    available.
``_pass_on``
    A grant its checkout will not use (the waiter left, or the pool was
    cleared or closed in between) goes to the next waiter or back.
``_grant`` / ``_serve_waiters``
    What the pool can give one checkout now (an available connection or a
    new pending one) / grant to the oldest waiters until nothing is left.
``_rebalance`` / ``_settle``
    After any change: serve waiters, and ring maintenance if below
    minPoolSize / the same, then flush the events.

How it stays consistent under gevent: gevent switches greenlets only where
one blocks, so every change of the pool's state here happens between two
such points, atomic without a lock, and a kill (GreenletExit, an outer
gevent.Timeout) can land only where the code blocks: in the fair turn, in a
wait-queue slot, in the connector, or in a listener during ``flush``. Each of
those places undoes or hands on what it owns (see ``_wait_for_grant``,
``_hand_out``), and nothing is reported before the change it reports is
complete.

How it is fair: checkouts wait in one FIFO queue of one-shot slots. Whatever
frees up (a checked-in connection, an establishment slot under maxConnecting,
capacity under maxPoolSize) is handed straight to the oldest slot, so a
newcomer never overtakes a waiter, and a slot that left is handed nothing.

What must not live here: establishing (``maintenance.py``: the hot path
calls ``_establish``), clearing, the serviceId map, fork handling, and any
indirection on the path: the pieces are mixins, so every field and method
is one lookup on the pool, as in a single class. Imports: the pool core only.
"""

from __future__ import annotations

import time
from typing import TypeVar

import gevent
from gevent import getcurrent as _getcurrent
from pymongo.monitoring import ConnectionCheckOutFailedReason as _Failed
from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.errors import PoolClearedError, PoolClosedError
from greenpool.pool.connection import (
    Connection,
    ConnectionState,
    Purpose,
    Transport,
    broken,
    close_quietly,
    perished,
)
from greenpool.pool.failures import _CheckoutFailures
from greenpool.pool.forking import real_thread_id
from greenpool.pool.holds import acquire_site as _acquire_site
from greenpool.pool.monitoring import DEBUG, logs
from greenpool.pool.poolstate import PoolState
from greenpool.pool.waitqueue import WaitTimedOut

__all__: list[str] = []

T = TypeVar("T", bound=Transport)

_now = time.monotonic
# The enum members the hot path compares with, as module globals: one global
# lookup instead of a global plus a class attribute (~0.1 µs each, seven per
# checkout+checkin).
_READY = PoolState.READY
_CLOSED = PoolState.CLOSED
_PENDING = ConnectionState.PENDING
_AVAILABLE = ConnectionState.AVAILABLE
_IN_USE = ConnectionState.IN_USE
_CONN_CLOSED = ConnectionState.CLOSED
_OTHER = Purpose.OTHER


class _HotPath(_CheckoutFailures[T]):
    """Checkout, checkin and handoff: see the module docstring."""

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
        if not self._owner[0] or self._thread != real_thread_id():
            self._check_owner()
        holder = None
        if self._state is _READY and not self._queue.waiting:
            # Fair turns, only where a checkout could take without queueing:
            # may yield once, before anything is held. It names the holder
            # (this greenlet) for the fast path, which only ever runs after it.
            holder = self._turns.take()
        self._tally.requests_num += 1
        # The fast path: nobody waits and the newest idle connection is
        # fresh. Anything else takes the general path below. With listeners
        # or the log on, it reports what the general path would: the same
        # events in the same order, flushed once the connection is ours.
        if self._state is _READY and not self._queue.waiting:
            events = self._events
            if not (events.listeners or logs(DEBUG)):  # Publisher.active, inline
                conn = self._take_fresh()
                if conn is not None:
                    conn._out_at = _now()
                    conn._holder = holder
                    if self._acquire_sites:
                        conn._site = _acquire_site()
                    return conn
            else:
                started = _now()
                conn = self._take_fresh()
                if conn is not None:
                    events.checkout_started()
                    return self._hand_out(conn, started)
        return self._checkout(timeout, replaces_wait_queue_timeout)

    def _checkout(self, timeout: float | None, replaces_wait_queue_timeout: bool = False,
                  ) -> Connection[T]:
        started = _now()
        self._events.checkout_started()
        if self.options.wait_queue_timeout_ms and not replaces_wait_queue_timeout:
            timeout = self._with_wait_queue_timeout(timeout)
        conn = self._wait_for_grant(started, timeout)
        if conn.state is _PENDING:
            self._establish_for_checkout(conn, started)
        return self._hand_out(conn, started)

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
        conn.state = _IN_USE
        self._in_use.add(conn)
        return conn

    def _hand_out(self, conn: Connection[T], started: float) -> Connection[T]:
        """Report the checkout of ``conn`` (now in use) and return it."""
        events = self._events
        now = _now()
        self._tally.requests_wait_s += now - started
        conn._out_at = now
        conn._holder = _getcurrent()
        if self._acquire_sites:
            conn._site = _acquire_site()  # from our caller on: checkout, _checkout
        events.checked_out(conn.id, now - started)
        try:
            if events._outbox:
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
        slot = self._queue.join(started)
        self._tally.requests_queued += 1
        # One more waiter can mean one more creation: waiters beyond those the
        # background establishments will serve may create (see _grant).
        if self._available or self._may_create():
            self._serve_waiters()
        try:
            if self._events._outbox:
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
        if self._state is not _READY:
            refusal = self._refusal()
            if refusal is not None:  # cleared or closed after the grant, before we woke
                self._pass_on(conn)
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
            self._return_to_pool(conn)
            self._fail_checkout(started, PoolClosedError(self.address))

    def _with_wait_queue_timeout(self, timeout: float | None) -> float:
        """The wait's limit when waitQueueTimeoutMS is set (the caller
        checks): ``timeout`` or waitQueueTimeoutMS, the shorter."""
        limit = self.options.wait_queue_timeout_ms / 1000
        return timeout if timeout is not None and timeout < limit else limit

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
        # becomes available: _return_to_pool's work, inline. Nothing else
        # changes: with waiters there is no idle connection and no room to
        # create one (else they would not wait), and the pool's size is the
        # same, so the general path's _rebalance would find nothing to do.
        if (conn._pool is self and conn.state is _IN_USE
                and self._state is _READY
                and conn.error is None and conn.generation == self._generation
                and not self._load_balanced and conn._pid == self._pid):
            if events.listeners or logs(DEBUG):  # Publisher.active, inline
                events.checked_in(conn.id)
            now = _now()
            self._tally.usage_s += now - conn._out_at
            conn.purpose = _OTHER
            conn._holder = None
            queue = self._queue
            if not (queue.waiting and queue.deliver(conn)):
                self._in_use.discard(conn)
                conn.state = _AVAILABLE
                conn._idle_since = now
                self._available.append(conn)
            if events._outbox:
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
        # connections errored, and the next checkout resets the pool.
        if conn._pid != self._pid:  # checked out before a fork: drop it quietly
            conn.state = _CONN_CLOSED
            if conn.transport is not None:
                close_quietly(conn.transport)
            return
        if conn.state is not _IN_USE:
            raise ValueError(f"cannot check in {conn!r}: it is not checked out")
        self._tally.usage_s += _now() - conn._out_at
        self._events.checked_in(conn.id)
        if not self._return_to_pool(conn):
            self._tally.returns_bad += 1
        self._rebalance()

    def _return_to_pool(self, conn: Connection[T]) -> bool:
        """An in-use connection comes back: retire it if the pool is closed or
        it is broken, else hand it to the oldest waiter (it stays in use) or
        make it available. Whether it was kept."""
        conn.purpose = _OTHER
        conn.pinned = False
        conn._holder = None
        if self._state is _CLOSED:
            reason: str | None = _Closed.POOL_CLOSED
        else:
            reason = broken(conn, self.is_stale(conn))
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
            self._alarm.ring()

    def _serve_waiters(self) -> None:
        """Give the oldest waiters whatever the pool can grant now."""
        queue = self._queue
        while queue:
            conn = self._grant(wanting=len(queue))
            if conn is None:
                return
            if not queue.deliver(conn):  # cannot happen: the queue had a live slot
                self._pass_on(conn)

    def _grant(self, wanting: int) -> Connection[T] | None:
        """An available connection (now in use), a new pending one, or None.

        ``wanting`` is how many checkouts are waiting; background
        establishments already under way are owed to the first of them.
        """
        if self._available:
            now = _now()
            while self._available:
                conn = self._available.pop()
                reason = perished(conn, self.is_stale(conn), self._max_idle, now)
                if reason is None:
                    conn.state = _IN_USE
                    self._in_use.add(conn)
                    return conn
                self._retire(conn, reason)
        if self._may_create() and wanting > len(self._filling):
            return self._create()
        return None

    # -- the connection sets ------------------------------------------------------

    def _may_create(self) -> bool:
        max_pool_size = self._max_pool_size
        return (
            (not max_pool_size or self._total() < max_pool_size)
            and len(self._pending) < self._max_connecting
            and self._state is _READY
        )

    def _create(self) -> Connection[T]:
        conn: Connection[T] = Connection(self, self._next_id, self._generation)
        self._next_id += 1
        self._tally.connections_num += 1
        self._pending.add(conn)
        self._events.connection_created(conn.id)
        return conn

    def _retire(self, conn: Connection[T], reason: str, error: BaseException | None = None) -> None:
        """Mark a connection closed (already out of its set) and report it."""
        conn.state = _CONN_CLOSED
        if reason == _Closed.ERROR and conn.transport is not None:
            self._tally.connections_lost += 1
        if conn._counted:
            self._leave_service(conn)
        self._events.connection_closed(conn.id, reason, error)
        if conn.transport is not None:
            self._events.later(close_quietly, conn.transport)

    def _unpend(self, conn: Connection[T]) -> None:
        self._pending.discard(conn)
        self._filling.discard(conn)

    def _total(self) -> int:
        return len(self._available) + len(self._in_use) + len(self._pending)
