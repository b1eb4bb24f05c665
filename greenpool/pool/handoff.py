"""Who gets what frees up, and what: the handoff policy both pools apply.

The policy, whole:

* **Who.** Checkouts wait in one FIFO queue (``waitqueue.py``). Whatever frees up
  (a connection checked in, a slot under maxConnecting, room under maxPoolSize)
  goes to the oldest waiter, handed over directly; a checkout takes something at
  once only when nobody waits, so a newcomer never overtakes a waiter.
* **What** (:func:`grant`). An idle connection first; else, below maxPoolSize and
  maxConnecting, a slot to establish a new connection; else nothing yet.
* **When** (:func:`serve`). After every change that can free something, the pool
  grants to the oldest waiters until nobody waits or nothing is left.

Both pools apply it: :class:`greenpool.Pool` counts all its connections against
maxPoolSize and owes the connections its background run establishes to the first
waiters; ``greenpool.pymongo``'s ``GreenPool`` counts PyMongo's permits (checkouts
plus establishments, ``requests``) and applies the grants to PyMongo's counters.
Each pool carries out a grant its own way (checks the connection, counts it); this
module only decides.

Rules of this module: pure decisions over counts, and the serving loop; no pool
state, no events, no gevent. Imports: ``waitqueue.py`` (for its types) only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeVar

from greenpool.pool.waitqueue import WaitQueue

__all__ = ["Grant", "grant", "may_create", "serve"]

G = TypeVar("G")


class Grant(enum.Enum):
    """What a checkout is given."""

    #: An idle connection (the pool picks which, and checks it).
    IDLE = "idle"
    #: A slot under maxPoolSize and maxConnecting: the checkout establishes a
    #: new connection in it.
    NEW = "new"


def may_create(size: int, pending: int, max_pool_size: float, max_connecting: int) -> bool:
    """Whether a new connection may start now: ``size`` (what counts against
    maxPoolSize) below ``max_pool_size`` (0: no limit), and fewer than
    ``max_connecting`` establishments under way (``pending``)."""
    return (not max_pool_size or size < max_pool_size) and pending < max_connecting


def grant(idle: int, size: int, pending: int, max_pool_size: float, max_connecting: int,
          waiting: int = 1, owed: int = 0) -> Grant | None:
    """What the oldest of ``waiting`` checkouts gets now, or None.

    ``idle``: idle connections; ``size`` and ``pending`` as :func:`may_create`
    reads them; ``owed``: establishments under way that are already promised to
    the first waiters (the core pool's background fill), so only the waiters
    beyond them may start one more.
    """
    if idle:
        return Grant.IDLE
    if waiting > owed and may_create(size, pending, max_pool_size, max_connecting):
        return Grant.NEW
    return None


def serve(queue: WaitQueue[G], take: Callable[[int], G | None]) -> None:
    """Hand the oldest waiters of ``queue`` what ``take(waiting)`` grants them
    (``take`` carries out :func:`grant` and counts what it gives), until nobody
    waits or nothing is granted. It never yields: each grant is counted and
    delivered in one step, so a kill cannot land between the two. ``waiting``
    counts live slots, so each delivery finds one."""
    while queue.waiting:
        granted = take(queue.waiting)
        if granted is None:
            return
        queue.deliver(granted)
