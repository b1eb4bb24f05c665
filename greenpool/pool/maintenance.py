"""Establishment and the background: how connections come to be and go idle.

Establishing (CMAP's "Establishing a Connection") runs the caller's connector
for a pending connection, in whichever greenlet needs it: a checkout's own, or
a filler the background run spawned. The background is one maintenance
greenlet per ready pool (:func:`_maintain`): a Background Thread Run (CMAP)
whenever the interval passes or someone calls ``wake``, which closes perished
available connections and spawns fillers up to minPoolSize; and, with a
``long_hold_threshold``, the long-hold watcher (``longholds.py``).

What lives here: :class:`Maintenance`, a part of :class:`greenpool.Pool` (its
``_maintenance``). It owns the connector and the establishment error handler,
``filling`` (the pending connections the background run asked for, owed to the
first waiters), the alarm, and the greenlets: the maintainer, the fillers and
the long-hold watcher. The pool calls ``establish`` (a checkout's own
establishment), ``run`` (``Pool.background_run``), ``start`` and ``stop`` (ready,
close), ``wake`` and ``start_over`` (after a fork); its grants read ``filling``,
and it drops a connection from it when it stops pending. What it uses of the
pool, :class:`Maintained` lists: above all the moves of its connection sets.

What must not live here: handoff (a filled connection goes through the pool's
``_return_to_pool``), and any yield while a connection is held unreported:
``establish`` leaves the flush to its caller. Imports: the pool core only.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any, Generic, Protocol, TypeVar

import gevent
from gevent import getcurrent
from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.address import Address
from greenpool.errors import PoolClearedError
from greenpool.pool import longholds
from greenpool.pool.connection import Connection, Connector, ErrorHandler, Transport, close_quietly
from greenpool.pool.forkmark import OwnerMark
from greenpool.pool.monitoring import Publisher
from greenpool.pool.options import PoolOptions
from greenpool.pool.services import ServiceMap
from greenpool.pool.waitqueue import Alarm, spawn_background

__all__ = ["Maintained", "Maintenance"]

T = TypeVar("T", bound=Transport)

_now = time.monotonic


class _Owned(Protocol):
    pid: int
    mark: OwnerMark

    def check(self) -> None: ...


class Maintained(Protocol):
    """What establishment and the background run use of their pool
    (:class:`greenpool.Pool` is one)."""

    @property
    def address(self) -> Address: ...
    @property
    def options(self) -> PoolOptions: ...
    @property
    def _events(self) -> Publisher: ...
    @property
    def _services(self) -> ServiceMap: ...  # judging, around the SDAM handling of a failure
    @property
    def _fork(self) -> _Owned: ...  # the process a connection must be established in

    @property
    def closed(self) -> bool: ...
    def background_run(self) -> None: ...  # the maintainer's work, each round
    # The moves of the pool's connection sets, and its counts.
    def _create(self) -> Connection[Any]: ...
    def _established(self, conn: Connection[Any], took: float) -> None: ...
    def _abandoned(self, conn: Connection[Any]) -> None: ...
    def _return_to_pool(self, conn: Connection[Any]) -> bool: ...
    def _prune(self) -> None: ...
    def _total(self) -> int: ...
    def _may_create(self) -> bool: ...
    def _rebalance(self) -> None: ...
    def _settle(self) -> None: ...


class Maintenance(Generic[T]):
    """Establishment and the background run: see the module docstring."""

    __slots__ = ("_pool", "alarm", "connector", "fillers", "filling", "greenlet",
                 "long_hold_threshold", "on_establish_error", "watcher")

    def __init__(self, pool: Maintained, connector: Connector[T],
                 on_establish_error: ErrorHandler[T] | None,
                 long_hold_threshold: float | None) -> None:
        self._pool = pool
        self.connector = connector
        #: Called as ``handler(error, conn)`` when establishing ``conn`` failed.
        self.on_establish_error = on_establish_error
        #: The pending connections the background run asked for: owed to the
        #: first waiters (the pool's grants read it) until handed on.
        self.filling: set[Connection[T]] = set()
        #: Rung by ``wake``: the maintainer's sleep ends at once.
        self.alarm = Alarm()
        #: The maintainer greenlet (None while the pool is not ready, and
        #: with a negative backgroundThreadIntervalMS).
        self.greenlet: Any = None
        self.fillers: set[Any] = set()
        #: Seconds a connection may be held before it is reported (None: never).
        self.long_hold_threshold = long_hold_threshold
        #: The long-hold watcher greenlet (None until started, and without a threshold).
        self.watcher: Any = None

    # -- establishing -----------------------------------------------------------

    def establish(self, conn: Connection[T]) -> None:
        """Run the connector for pending ``conn`` and make it in use.

        On any exception ``conn`` is closed, its slot under maxConnecting and
        maxPoolSize is handed on, and the exception propagates.
        """
        pool = self._pool
        conn._establisher = getcurrent()
        try:
            transport = self.connector(conn)
        except BaseException as error:
            conn._establisher = None
            self._abandon(conn, error)
            raise
        conn._establisher = None
        conn.transport = transport
        if conn._pid != pool._fork.pid:  # the process forked while connecting
            close_quietly(transport)
            raise PoolClearedError.forked(pool.address)
        # Still in ``filling`` if the background run asked for it: owed to the
        # first waiter until _fill hands it on.
        pool._established(conn, _now() - conn._created_at)

    def _abandon(self, conn: Connection[T], error: BaseException) -> None:
        """A pending connection failed to establish: close it, then hand on."""
        pool = self._pool
        if conn._pid != pool._fork.pid:
            return  # the process forked; the start over already dropped it
        pool._abandoned(conn)
        with pool._services.judging(conn):
            pool._rebalance()  # hand on the freed slot before anything can yield
            reason = _Closed.POOL_CLOSED if pool.closed else _Closed.ERROR
            # A kill gets no SDAM handling, and nothing may yield while a kill
            # propagates (the handler may yield, so a kill can land in it): a
            # listener's yield would let the greenlet's own timeout fire and
            # replace the kill.
            quiet = not isinstance(error, Exception)
            events = pool._events
            try:
                # SDAM error handling (which may clear the pool) comes before
                # ConnectionClosed, as the spec's pool-create-min-size-error orders it.
                handler = self.on_establish_error
                if isinstance(error, Exception) and handler is not None and not pool.closed:
                    handler(error, conn)
            except BaseException as escaped:
                quiet = quiet or not isinstance(escaped, Exception)
                raise
            finally:
                events.connection_closed(conn.id, reason, error)
                if quiet:
                    events.flush_later()
                else:
                    events.flush()

    # -- the background -----------------------------------------------------------

    def start(self) -> None:
        """The pool is ready: start the watcher and the maintainer, and run now."""
        pool = self._pool
        threshold = self.long_hold_threshold
        if threshold is not None and (self.watcher is None or self.watcher.dead):
            self.watcher = spawn_background(longholds.watch, weakref.ref(pool), Alarm())
        if pool.options.background_interval is None:
            return  # the test hook for "never run"
        if self.greenlet is None or self.greenlet.dead:
            self.greenlet = spawn_background(_maintain, weakref.ref(pool), self.alarm)
        self.alarm.ring()

    def stop(self) -> None:
        """The pool is closed: end every background greenlet."""
        greenlets = [g for g in (self.greenlet, self.watcher, *self.fillers) if g is not None]
        self.greenlet = self.watcher = None
        self.fillers.clear()
        for greenlet in greenlets:
            if greenlet is not getcurrent():
                greenlet.kill(block=False)

    def wake(self) -> None:
        """Run the background now (the maintainer's sleep ends)."""
        self.alarm.ring()

    def start_over(self) -> None:
        """After a fork: the parent's fillers and their connections are gone."""
        self.filling.clear()
        self.fillers.clear()

    def run(self) -> None:
        """One Background Thread Run: close perished available connections
        and start establishing up to minPoolSize. Never waits."""
        pool = self._pool
        fork = pool._fork
        if not fork.mark[0]:
            fork.check()
        if pool.closed:
            return
        pool._prune()
        min_pool_size = pool.options.min_pool_size
        while pool._total() < min_pool_size and pool._may_create():
            conn = pool._create()
            self.filling.add(conn)
            filler = gevent.spawn(self._fill, conn)
            self.fillers.add(filler)
            filler.link(self.fillers.discard)
        pool._settle()

    def _fill(self, conn: Connection[T]) -> None:
        pool = self._pool
        try:
            self.establish(conn)
        except Exception:
            return  # already closed and reported; SDAM handled the error
        self.filling.discard(conn)
        pool._return_to_pool(conn)
        pool._settle()


def _maintain(pool_ref: weakref.ref[Maintained], alarm: Alarm) -> None:
    """The maintenance greenlet: a Run, then sleep until the interval or a wake.

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
