"""Fork safety: a forked child never uses its parent's connections.

A pool is not fork-safe (CMAP), and gunicorn's ``preload_app`` forks workers
after the application, and maybe its pools, were created. Two mechanisms:

* an ``os.register_at_fork(after_in_child=...)`` hook that, in the child,
  makes every inherited connection unusable at once, without writing to its
  socket (closing an inherited descriptor sends nothing while the parent
  still holds it);
* a pid check on every checkout and checkin (and background run), which
  catches forks that bypass ``os.fork`` and does the pool's bookkeeping: drop
  the parent's connections, fail checkouts copied from the parent, bump the
  generation, and carry on with the pool's state (a ready pool stays ready).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

__all__ = ["track", "untrack"]

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
