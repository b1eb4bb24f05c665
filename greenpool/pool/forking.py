"""Fork safety, and the pool's ownership of one process and one OS thread.

A pool is not fork-safe (CMAP), and gunicorn's ``preload_app`` forks workers
after the application, and maybe its pools, were created. Two mechanisms:

* an ``os.register_at_fork(after_in_child=...)`` hook that, in the child,
  makes every inherited connection unusable at once, without writing to its
  socket (closing an inherited descriptor sends nothing while the parent
  still holds it);
* an owner check on every checkout (and background run), which catches forks
  that bypass ``os.fork`` and does the pool's bookkeeping: drop the parent's
  connections, fail checkouts copied from the parent, bump the generation,
  and carry on with the pool's state (a ready pool stays ready).

The owner check reads one byte (:mod:`greenpool.pool.forkmark`).

What lives here: the at-fork hook and its registry of pools, and
:class:`_ForkHandling`, the pool's piece that owns ``_pid``, ``_owner`` and
``_thread``: the owner check, the at-fork forgetting and the reset on first
use. The reset is the one place that empties every set of the pool at once.

What must not live here: the owner checks themselves, which stay inline on
the hot path (``checkout.py``, ``maintenance.py``) and call in here only
when they fail. Imports: the pool core only.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from gevent.monkey import get_original

from greenpool.errors import PoolClearedError
from greenpool.pool.connection import ConnectionState, Transport, close_quietly
from greenpool.pool.fields import _PoolFields
from greenpool.pool.poolstate import PoolState

__all__ = ["real_thread_id", "track", "untrack"]

T = TypeVar("T", bound=Transport)

#: The OS thread's id, even under gevent's monkey-patching (which makes
#: ``threading.get_ident`` name the greenlet).
real_thread_id: Callable[[], int] = get_original("_thread", "get_ident")

_pools: weakref.WeakSet[Any] = weakref.WeakSet()


def track(pool: Any) -> None:
    """Reset ``pool`` in forked children from now on."""
    _pools.add(pool)


def untrack(pool: Any) -> None:
    _pools.discard(pool)


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_parent_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _ForkHandling(_PoolFields[T]):
    """The owner check and the reset after a fork: see the module docstring."""

    def _check_owner(self) -> None:
        if not self._owner[0]:
            self._reset_after_fork()
        elif self._thread != real_thread_id():
            raise RuntimeError(
                f"{self!r} was created in OS thread {self._thread} and used from "
                f"{real_thread_id()}: a pool belongs to one thread's gevent hub"
            )

    def _forget_parent_connections(self) -> None:
        """Right after a fork, in the child: make every inherited connection
        unusable without I/O on it (closing an inherited descriptor sends
        nothing while the parent holds it). Bookkeeping waits for first use."""
        for conn in (*self._available, *self._in_use):
            conn.mark_errored(PoolClearedError.forked(self.address))
            if conn.transport is not None:
                close_quietly(conn.transport)
        self._interrupt_pending()

    def _reset_after_fork(self) -> None:
        """In a forked child, on first use: start clean."""
        self._pid = os.getpid()
        self._owner[0] = 1
        self._thread = real_thread_id()
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
