"""Generations, clearing and interruption.

A clear makes every current connection stale by bumping a generation: the
pool's, or in load-balanced mode one service's (``services.py``). Stale
connections are closed where the pool next meets them (checkin, a grant, the
background run), never searched for, so a clear costs the same however many
connections there are; only ``interrupt_in_use_connections`` walks the in-use
and pending ones, and closes their transports or throws into their
establishing greenlets.

What lives here: :class:`_Clearing`, the pool's piece that owns
``_generation`` and ``_clear_cause`` (the fork reset bumps the generation
too), ``is_stale``, ``clear`` and the interruptions. A clear also pauses the
pool (``_state``), fails the waiters in ``_queue``, and marks connections of
``_in_use`` and ``_pending`` interrupted.

What must not live here: retiring connections (the pieces that meet a
stale connection retire it) and waiting: nothing in a clear yields before
its final ``_settle`` flushes what it reported. Imports: the pool core only.
"""

from __future__ import annotations

from typing import Any, TypeVar

from bson.objectid import ObjectId
from gevent import get_hub

from greenpool.errors import PoolClearedError
from greenpool.pool.connection import Connection, Transport, close_quietly
from greenpool.pool.fields import _PoolFields
from greenpool.pool.poolstate import Action, transition

__all__: list[str] = []

T = TypeVar("T", bound=Transport)


class _Clearing(_PoolFields[T]):
    """Generations, clear and interruption: see the module docstring."""

    @property
    def generation(self) -> int:
        """The pool's generation, incremented by every clear; older connections are stale."""
        return self._generation

    def is_stale(self, conn: Connection[T]) -> bool:
        """Whether ``conn`` belongs to an older generation than the pool's
        (for its serviceId in load-balanced mode). SDAM ignores errors on
        stale connections."""
        if self._load_balanced and conn._counted:
            entry = self._services.get(conn.service_id)
            return entry is None or conn.generation != entry[0]
        # A load-balanced connection takes its service's generation after its
        # hello (handshake_done); before that only a fork reset makes it stale.
        return conn.generation != self._generation

    def clear(
        self,
        interrupt_in_use_connections: bool = False,
        service_id: ObjectId | None = None,
        *,
        error: BaseException | None = None,
    ) -> None:
        """Mark every current connection stale.

        Outside load-balanced mode this also pauses the pool and fails every
        waiting checkout with a retryable :class:`PoolClearedError` that cites
        ``error`` (what made the caller clear). With
        ``interrupt_in_use_connections`` the in-use and pending connections
        of older generations are interrupted now (their transports closed,
        blocked greenlets woken) without waiting for them.

        In load-balanced mode pass the ``service_id`` to clear: only that
        service's generation changes; the pool neither pauses nor fails waiters.
        """
        self._check_owner()
        load_balanced = self.options.load_balanced
        if load_balanced and service_id is None:
            raise ValueError("a load-balanced pool is cleared per service: pass service_id")
        if not load_balanced and service_id is not None:
            raise ValueError(f"service_id={service_id!r} only applies to load-balanced pools")
        if self.closed:
            return
        if load_balanced:
            self._clear_service(service_id)
            self._events.pool_cleared(service_id, interrupt_in_use_connections)
        else:
            self._generation += 1
            self._clear_cause = error
            step = transition(self._state, Action.CLEAR)
            self._state = step.state
            if step.emit:
                self._events.pool_cleared(None, interrupt_in_use_connections)
            # Each waiter raises its own error (its own traceback), but the
            # message is the same: built once, not once per waiter.
            address, message = self.address, PoolClearedError.cleared(self.address, error).message
            self._queue.fail_all(lambda: PoolClearedError(message, address, cause=error))
        if interrupt_in_use_connections:
            self._interrupt(service_id)
        self._alarm.ring()  # the background run closes stale idle connections now
        self._settle()

    def _interrupt(self, service_id: ObjectId | None) -> None:
        """Interrupt the connections a clear just made stale."""
        for conn in list(self._in_use):
            if conn.service_id == service_id and self.is_stale(conn):
                conn.interrupted = True
                conn.mark_errored(PoolClearedError.interrupted(self.address))
                if conn.transport is not None:
                    self._events.later(close_quietly, conn.transport)
        if not self.options.load_balanced:  # a pending connection has no serviceId yet
            self._interrupt_pending()

    def _interrupt_pending(self) -> None:
        hub = get_hub()
        for conn in self._pending:
            if conn._establisher is not None:
                hub.loop.run_callback(self._interrupt_establishment, conn, conn._establisher)

    def _interrupt_establishment(self, conn: Connection[T], greenlet: Any) -> None:
        # Runs in the hub. Throw only while that greenlet is still inside the
        # connector for this connection: anywhere else it would hit innocent code.
        if conn._establisher is greenlet:
            conn.interrupted = True
            greenlet.throw(PoolClearedError.interrupted(self.address))
