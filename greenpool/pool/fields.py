"""The pool's fields, which piece owns each, and what the pieces call on each other.

:class:`~greenpool.pool.pool.Pool` is assembled from one mixin per job, each
in its own module:

==================  ===================================================
piece               job
==================  ===================================================
``checkout.py``     the hot path: checkout, checkin, handoff to waiters
``failures.py``     how a checkout fails (the hot path's base)
``maintenance.py``  establishment, the background run and its fill
``clearing.py``     generations, clear, interruption
``services.py``     the serviceId map (load-balanced mode)
``forking.py``      process and thread ownership, the reset after a fork
``pool.py``         construction, ready, close, stats
==================  ===================================================

What lives here: :class:`_PoolFields`, the base of every piece. It declares
the fields (``__init__`` in ``pool.py`` sets them all), says which piece
owns each (makes its changes) and which others touch it, and declares, for
the type checker only, the methods the pieces call on each other. One piece
touches everything: the fork reset (``forking.py``) starts the pool afresh.

What must not live here: behaviour. Nothing in this class exists at run
time but its annotations, so a field or method lookup costs what it cost
when the pool was one class. Imports: the pool core only.

Keep the fields below 30: a pool has 29 instance attributes, and CPython
3.11 shares at most 30 attribute names between the instances of a class;
at 30 every attribute access on the pool takes a slower path, which cost
7-8% of the uncontended checkout+checkin when measured (2026-11-25). Group
a new field with one of its kind (as ``_watch`` holds a threshold and a
greenlet) rather than add the 30th.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from bson.objectid import ObjectId

from greenpool.address import Address
from greenpool.pool.connection import Connection, Connector, ErrorHandler, PoolStats, Transport
from greenpool.pool.forkmark import OwnerMark
from greenpool.pool.holds import Hold
from greenpool.pool.longholds import Watch
from greenpool.pool.metrics import Tally
from greenpool.pool.monitoring import Publisher
from greenpool.pool.options import PoolOptions
from greenpool.pool.poolstate import PoolState
from greenpool.pool.waitqueue import Alarm, Turns, WaitQueue

__all__: list[str] = []

T = TypeVar("T", bound=Transport)


class _PoolFields(Generic[T]):
    """Declarations only: see the module docstring."""

    # -- pool.py: set once, read by every piece ----------------------------------
    address: Address
    options: PoolOptions
    # Copies of options the hot path reads on every checkout and checkin.
    _load_balanced: bool
    _max_idle: float | None
    _max_pool_size: int
    _max_connecting: int
    #: Every piece reports through it, and flushes once its change is complete.
    _events: Publisher
    #: Counters: every piece counts in it; pop_stats replaces it.
    _tally: Tally
    #: Whether checkouts record their acquire site (the hot path reads it).
    _acquire_sites: bool
    #: The long-hold threshold and its watcher greenlet (None: no
    #: threshold); maintenance.py starts and stops the watcher.
    _watch: Watch | None
    #: Paused, ready or closed: ready and close (pool.py) and clear
    #: (clearing.py) move it; the hot path refuses checkouts by it.
    _state: PoolState

    # -- checkout.py: the connection sets and the waiters --------------------------
    # Each connection is in exactly one set, matching its state. Only one in
    # use carries a hold record (``_holder``, ``_site``; holds.py), from its
    # hand-out to its checkin. The hot path moves connections between them.
    # Maintenance moves a connection it established from pending to in use
    # and prunes available (replacing the deque); close retires every
    # available one.
    _available: deque[Connection[T]]  # newest on the right
    _in_use: set[Connection[T]]
    _pending: set[Connection[T]]
    #: Waiting checkouts; clear and close fail them all.
    _queue: WaitQueue[Connection[T]]
    _turns: Turns
    _next_id: int

    # -- clearing.py --------------------------------------------------------------
    #: Bumped by every clear; older connections are stale. The hot path
    #: stamps new connections with it.
    _generation: int
    #: The error that caused the last clear, cited by refused checkouts.
    _clear_cause: BaseException | None

    # -- services.py --------------------------------------------------------------
    #: serviceId -> [generation, connection count] (load-balanced mode);
    #: ``is_stale`` (clearing.py) reads the generations.
    _services: dict[ObjectId | None, list[int]]

    # -- maintenance.py -----------------------------------------------------------
    _connector: Connector[T]
    _on_establish_error: ErrorHandler[T] | None
    #: The pending connections the background run asked for: owed to the
    #: first waiters (the hot path's ``_grant`` reads it, ``_unpend`` drops).
    _filling: set[Connection[T]]
    #: Rung by any piece that wants a background run now.
    _alarm: Alarm
    _maintainer: Any  # gevent.Greenlet | None
    _fillers: set[Any]  # gevent.Greenlet

    # -- forking.py: the process and OS thread the pool belongs to ----------------
    #: The hot path and the background run check them inline. ``_pid``
    #: stamps connections; ``_owner[0]`` is 0 once the process has forked.
    _pid: int
    _owner: OwnerMark
    _thread: int

    if TYPE_CHECKING:
        # What the pieces call on each other, by the piece that defines it.

        # pool.py
        @property
        def closed(self) -> bool: ...
        def stats(self) -> PoolStats: ...
        def _holds(self) -> Iterator[Hold]: ...

        # checkout.py
        def checkin(self, conn: Connection[T]) -> None: ...
        def checkin_after_error(self, conn: Connection[T]) -> None: ...
        def _checkin(self, conn: Connection[T]) -> None: ...
        def _return_to_pool(self, conn: Connection[T]) -> bool: ...
        def _settle(self) -> None: ...
        def _rebalance(self) -> None: ...
        def _may_create(self) -> bool: ...
        def _create(self) -> Connection[T]: ...
        def _retire(self, conn: Connection[T], reason: str,
                    error: BaseException | None = None) -> None: ...
        def _unpend(self, conn: Connection[T]) -> None: ...
        def _total(self) -> int: ...

        # maintenance.py
        def _establish(self, conn: Connection[T]) -> None: ...
        def _start_maintenance(self) -> None: ...

        # clearing.py
        def is_stale(self, conn: Connection[T]) -> bool: ...
        def _interrupt_pending(self) -> None: ...

        # services.py
        def _take_service_generation(self, conn: Connection[T]) -> None: ...
        def _leave_service(self, conn: Connection[T]) -> None: ...
        def _clear_service(self, service_id: ObjectId | None) -> None: ...
        def _judged_in_service(
                self, conn: Connection[T]) -> AbstractContextManager[None]: ...

        # forking.py
        def _check_owner(self) -> None: ...
        def _reset_after_fork(self) -> None: ...
