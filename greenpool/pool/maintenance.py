"""Establishment and the background: how connections come to be and go idle.

Establishing runs the caller's connector for a pending connection, in
whichever greenlet needs it: a checkout's own, or a filler the background run
spawned. The background is one maintenance greenlet per ready pool
(``_maintain``): a Background Thread Run (CMAP) whenever the interval
passes or someone rings ``_alarm``, which closes perished available
connections and spawns fillers up to minPoolSize; and, with a
long_hold_threshold, the long-hold watcher (``longholds.py``).

What lives here: :class:`_Maintenance`, the pool's piece that owns
``_connector``, ``_on_establish_error``, ``_filling``, ``_alarm``,
``_maintainer``, ``_fillers`` and the watcher of ``_watch``, and the maintenance
greenlet's loop. Of the hot path's sets it touches two moves: an
established connection from ``_pending`` to ``_in_use``, and the pruning of
``_available``.

What must not live here: handoff (a filled connection goes through the hot
path's ``_return_to_pool``), and any yield while a connection is held
unreported: ``_establish`` leaves the flush to its caller. Imports: the pool
core only.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import deque
from typing import Any, TypeVar

import gevent
from gevent import getcurrent
from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.errors import PoolClearedError
from greenpool.pool import longholds
from greenpool.pool.connection import (
    Connection,
    ConnectionState,
    Transport,
    close_quietly,
    perished,
)
from greenpool.pool.fields import _PoolFields
from greenpool.pool.waitqueue import Alarm

__all__: list[str] = []

T = TypeVar("T", bound=Transport)

_now = time.monotonic


class _Maintenance(_PoolFields[T]):
    """Establishment and the background run: see the module docstring."""

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
            close_quietly(transport)
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

    def _abandon(self, conn: Connection[T], error: BaseException) -> None:
        """A pending connection failed to establish: close it, then hand on."""
        if conn._pid != self._pid:
            return  # the process forked; the reset already dropped it
        tally = self._tally
        tally.connections_errors += 1
        tally.connections_s += _now() - conn._created_at
        self._unpend(conn)
        conn.state = ConnectionState.CLOSED
        with self._judged_in_service(conn):
            self._rebalance()  # hand on the freed slot before anything can yield
            reason = _Closed.POOL_CLOSED if self.closed else _Closed.ERROR
            # A kill gets no SDAM handling, and nothing may yield while a kill
            # propagates (the handler may yield, so a kill can land in it): a
            # listener's yield would let the greenlet's own timeout fire and
            # replace the kill.
            quiet = not isinstance(error, Exception)
            try:
                # SDAM error handling (which may clear the pool) comes before
                # ConnectionClosed, as the spec's pool-create-min-size-error orders it.
                handler = self._on_establish_error
                if isinstance(error, Exception) and handler is not None and not self.closed:
                    handler(error, conn)
            except BaseException as escaped:
                quiet = quiet or not isinstance(escaped, Exception)
                raise
            finally:
                self._events.connection_closed(conn.id, reason, error)
                if quiet:
                    self._events.flush_later()
                else:
                    self._events.flush()

    # -- the background -----------------------------------------------------------

    def _start_maintenance(self) -> None:
        watch = self._watch
        if watch is not None and (watch.greenlet is None or watch.greenlet.dead):
            watch.greenlet = gevent.spawn(longholds.watch, weakref.ref(self), Alarm())
        if self.options.background_interval is None:
            return  # the test hook for "never run"
        if self._maintainer is None or self._maintainer.dead:
            self._maintainer = gevent.spawn(_maintain, weakref.ref(self), self._alarm)
        self._alarm.ring()

    def _stop_maintenance(self) -> None:
        watcher = None
        if self._watch is not None:
            watcher, self._watch.greenlet = self._watch.greenlet, None
        greenlets = [g for g in (self._maintainer, watcher, *self._fillers) if g is not None]
        self._maintainer = None
        self._fillers.clear()
        for greenlet in greenlets:
            if greenlet is not getcurrent():
                greenlet.kill(block=False)

    def background_run(self) -> None:
        """One Background Thread Run (spec): close perished available
        connections and start establishing up to minPoolSize. Never waits."""
        if not self._owner[0]:
            self._reset_after_fork()
        if self.closed:
            return
        now = _now()
        max_idle = self._max_idle
        keep: deque[Connection[T]] = deque()
        for conn in self._available:
            reason = perished(conn, self.is_stale(conn), max_idle, now)
            if reason is None:
                keep.append(conn)
            else:
                self._retire(conn, reason)
        self._available = keep
        while self._total() < self.options.min_pool_size and self._may_create():
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
        self._return_to_pool(conn)
        self._settle()


def _maintain(pool_ref: weakref.ref[_Maintenance[Any]], alarm: Alarm) -> None:
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
