"""Generations, clearing and interruption.

A clear makes every current connection stale by bumping a generation: the
pool's, or in load-balanced mode one service's (``services.py``). Stale
connections are closed where the pool next meets them (checkin, a grant, the
background run), never searched for, so a clear costs the same however many
connections there are; only ``interrupt_in_use_connections`` walks the in-use
and pending ones, and closes their transports or throws into their
establishing greenlets.

What lives here: :class:`Clearing`, a part of :class:`greenpool.Pool` (its
``_clearing``). It owns ``generation`` (which the pool's hot path reads, and
stamps new connections with) and ``cause`` (the error of the last clear, which
refused checkouts cite). The pool calls ``clear`` (from ``Pool.clear``),
``is_stale``, ``interrupt_pending`` (the fork's at-fork hook does too) and
``start_over``. What it uses of the pool, :class:`Cleared` lists.

What must not live here: retiring connections (whoever meets a stale
connection retires it) and waiting: nothing in a clear yields before its final
``_settle`` flushes what it reported. Imports: the pool core only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from bson.objectid import ObjectId
from gevent import get_hub

from greenpool.address import Address
from greenpool.errors import PoolClearedError
from greenpool.pool.connection import Connection, Transport, close_quietly
from greenpool.pool.monitoring import Publisher
from greenpool.pool.poolstate import Action
from greenpool.pool.services import ServiceMap

__all__ = ["Cleared", "Clearing"]

T = TypeVar("T", bound=Transport)


class _Checked(Protocol):
    def check(self) -> None: ...


class _Woken(Protocol):
    def wake(self) -> None: ...


class Cleared(Protocol):
    """What a clear uses of its pool (:class:`greenpool.Pool` is one)."""

    @property
    def address(self) -> Address: ...
    @property
    def _load_balanced(self) -> bool: ...
    @property
    def _events(self) -> Publisher: ...
    @property
    def _services(self) -> ServiceMap: ...
    # Read only, to mark the connections a clear interrupts.
    @property
    def _in_use(self) -> set[Connection[Any]]: ...
    @property
    def _pending(self) -> set[Connection[Any]]: ...
    @property
    def _fork(self) -> _Checked: ...  # the owner check, first
    @property
    def _maintenance(self) -> _Woken: ...  # the background run closes stale idle connections

    @property
    def closed(self) -> bool: ...
    def _move(self, action: Action) -> bool: ...  # the state machine's clear
    def _fail_waiters(self, make_error: Callable[[], BaseException]) -> None: ...
    def _settle(self) -> None: ...


class Clearing(Generic[T]):
    """Generations, clear and interruption: see the module docstring."""

    __slots__ = ("_pool", "cause", "generation")

    def __init__(self, pool: Cleared) -> None:
        self._pool = pool
        #: Bumped by every clear (and the start over after a fork); older
        #: connections are stale.
        self.generation = 0
        #: The error that caused the last clear, cited by refused checkouts.
        self.cause: BaseException | None = None

    def is_stale(self, conn: Connection[T]) -> bool:
        """Whether ``conn`` belongs to an older generation than the pool's
        (its service's, once counted in load-balanced mode)."""
        if conn._counted:
            return not self._pool._services.is_current(conn)
        # A load-balanced connection takes its service's generation after its
        # hello (handshake_done); before that only a fork's start over makes it stale.
        return conn.generation != self.generation

    def clear(self, interrupt_in_use_connections: bool, service_id: ObjectId | None,
              error: BaseException | None) -> None:
        """``Pool.clear``'s work (its docstring says what a clear does)."""
        pool = self._pool
        pool._fork.check()
        load_balanced = pool._load_balanced
        if load_balanced and service_id is None:
            raise ValueError("a load-balanced pool is cleared per service: pass service_id")
        if not load_balanced and service_id is not None:
            raise ValueError(f"service_id={service_id!r} only applies to load-balanced pools")
        if pool.closed:
            return
        events = pool._events
        if load_balanced:
            pool._services.clear(service_id)
            events.pool_cleared(service_id, interrupt_in_use_connections)
        else:
            self.generation += 1
            self.cause = error
            if pool._move(Action.CLEAR):
                events.pool_cleared(None, interrupt_in_use_connections)
            # Each waiter raises its own error (its own traceback), but the
            # message is the same: built once, not once per waiter.
            address, message = pool.address, PoolClearedError.cleared(pool.address, error).message
            pool._fail_waiters(lambda: PoolClearedError(message, address, cause=error))
        if interrupt_in_use_connections:
            self._interrupt(service_id)
        pool._maintenance.wake()  # the background run closes stale idle connections now
        pool._settle()

    def start_over(self) -> None:
        """After a fork: every connection of the parent is stale."""
        self.generation += 1

    def _interrupt(self, service_id: ObjectId | None) -> None:
        """Interrupt the connections a clear just made stale."""
        pool = self._pool
        for conn in list(pool._in_use):
            if conn.service_id == service_id and self.is_stale(conn):
                conn.interrupted = True
                conn.mark_errored(PoolClearedError.interrupted(pool.address))
                if conn.transport is not None:
                    pool._events.later(close_quietly, conn.transport)
        if not pool._load_balanced:  # a pending connection has no serviceId yet
            self.interrupt_pending()

    def interrupt_pending(self) -> None:
        """Interrupt every establishment under way (from the hub, at once)."""
        hub = get_hub()
        for conn in self._pool._pending:
            if conn._establisher is not None:
                hub.loop.run_callback(self._interrupt_establishment, conn, conn._establisher)

    def _interrupt_establishment(self, conn: Connection[T], greenlet: Any) -> None:
        # Runs in the hub. Throw only while that greenlet is still inside the
        # connector for this connection: anywhere else it would hit innocent code.
        if conn._establisher is greenlet:
            conn.interrupted = True
            greenlet.throw(PoolClearedError.interrupted(self._pool.address))
