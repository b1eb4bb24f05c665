"""Fork safety, and the pool's ownership of one process and one OS thread.

A pool is not fork-safe (CMAP), and gunicorn's ``preload_app`` forks workers
after the application, and maybe its pools, were created. Two mechanisms:

* an ``os.register_at_fork(after_in_child=...)`` hook that, in the child,
  makes every inherited connection unusable at once, without writing to its
  socket (closing an inherited descriptor sends nothing while the parent
  still holds it);
* an owner check on every checkout (and background run), which catches forks
  that bypass ``os.fork`` and starts the pool over: it drops the parent's
  connections, fails checkouts copied from the parent, makes the parent's
  generation stale, and carries on with the pool's state (a ready pool stays
  ready).

The owner check reads one byte (:mod:`greenpool.pool.forkmark`).

What lives here: the at-fork hook and its registry, and :class:`ForkGuard`, a
part of :class:`greenpool.Pool` (its ``_fork``). It owns ``pid`` (which stamps
new connections), ``mark`` and ``thread``; the pool's hot path reads all three
inline and calls ``check`` only when they say the process forked or the thread
is another. The start over asks each piece to start over its own fields: the
pool (``_start_over``: its sets and waiters), the maintenance, the serviceId
map and the clearing parts (:class:`Forked` lists what it uses of the pool).

What must not live here: the inline owner checks themselves (``pool.py``,
``maintenance.py``), and any field of another piece. Imports: the pool core only.
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from gevent.monkey import get_original

from greenpool.address import Address
from greenpool.errors import PoolClearedError
from greenpool.pool.clearing import Clearing
from greenpool.pool.connection import Connection, close_quietly
from greenpool.pool.forkmark import owner_mark
from greenpool.pool.maintenance import Maintenance
from greenpool.pool.services import ServiceMap

__all__ = ["ForkGuard", "Forked", "real_thread_id"]

#: The OS thread's id, even under gevent's monkey-patching (which makes
#: ``threading.get_ident`` name the greenlet).
real_thread_id: Callable[[], int] = get_original("_thread", "get_ident")

_guards: weakref.WeakSet[ForkGuard] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for guard in list(_guards):
        guard.forget_parent_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Forked(Protocol):
    """What the fork handling uses of its pool (:class:`greenpool.Pool` is one)."""

    @property
    def address(self) -> Address: ...
    # Read only: the connections the at-fork hook makes unusable.
    @property
    def _available(self) -> deque[Connection[Any]]: ...
    @property
    def _in_use(self) -> set[Connection[Any]]: ...
    # The pieces that start over.
    @property
    def _clearing(self) -> Clearing[Any]: ...
    @property
    def _maintenance(self) -> Maintenance[Any]: ...
    @property
    def _services(self) -> ServiceMap: ...

    def _start_over(self, make_error: Callable[[Address], BaseException]) -> None: ...


class ForkGuard:
    """The owner check and the start over after a fork: see the module docstring."""

    __slots__ = ("__weakref__", "_pool", "mark", "pid", "thread")

    def __init__(self, pool: Forked) -> None:
        self._pool = pool
        #: The process the pool belongs to; new connections carry it.
        self.pid = os.getpid()
        #: ``mark[0]`` reads 0 once the process has forked.
        self.mark = owner_mark()
        #: The OS thread whose gevent hub the pool runs on.
        self.thread = real_thread_id()

    def track(self) -> None:
        """Forget the pool's connections in forked children from now on."""
        _guards.add(self)

    def untrack(self) -> None:
        _guards.discard(self)

    def check(self) -> None:
        """The inline owner check failed: start over in a forked child, or
        refuse use from another OS thread."""
        if not self.mark[0]:
            self._start_over()
        elif self.thread != real_thread_id():
            raise RuntimeError(
                f"{self._pool!r} was created in OS thread {self.thread} and used from "
                f"{real_thread_id()}: a pool belongs to one thread's gevent hub"
            )

    def forget_parent_connections(self) -> None:
        """Right after a fork, in the child: make every inherited connection
        unusable without I/O on it (closing an inherited descriptor sends
        nothing while the parent holds it). Bookkeeping waits for first use."""
        pool = self._pool
        for conn in (*pool._available, *pool._in_use):
            conn.mark_errored(PoolClearedError.forked(pool.address))
            if conn.transport is not None:
                close_quietly(conn.transport)
        pool._clearing.interrupt_pending()

    def _start_over(self) -> None:
        """In a forked child, on first use: own this process, and start clean."""
        self.pid = os.getpid()
        self.mark[0] = 1
        self.thread = real_thread_id()
        self.forget_parent_connections()
        pool = self._pool
        pool._maintenance.start_over()
        pool._services.start_over()
        pool._clearing.start_over()
        pool._start_over(PoolClearedError.forked)
