"""A pooled connection and the verdicts on it.

What lives here: :class:`Connection` (the pool's bookkeeping around one
transport), its :class:`ConnectionState` and :class:`Purpose`, the
:class:`Transport` protocol a connector returns, the :class:`PoolStats`
snapshot, and the two verdicts on a connection, :func:`broken` and
:func:`perished`. The verdicts are pure functions of their arguments, like
Go's ``connectionPerished``: they say why a connection must close and change
nothing; the pool acts on them.

What must not live here: any change to a pool's sets, counts or events. A
connection calls only its pool's checkin (``checkin_after_error`` while an
exception propagates) and the serviceId map's
``_take_service_generation``, which the :class:`Owner` protocol names; the
pool's pieces import this module, never the other way round.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from bson.objectid import ObjectId
from pymongo.monitoring import ConnectionClosedReason as _Closed

from greenpool.address import Address, format_address
from greenpool.pool.holds import RawSite

__all__ = [
    "Connection", "ConnectionState", "Connector", "ErrorHandler", "Owner", "PoolStats", "Purpose",
    "Transport", "broken", "close_quietly", "perished",
]

_now = time.monotonic


class Transport(Protocol):
    """What the pool needs from an established connection's transport."""

    def close(self) -> None:
        """Release the transport. Must not block, must be idempotent, and must
        wake any greenlet blocked on it (gevent sockets do all three)."""


T = TypeVar("T", bound=Transport)


class ConnectionState(enum.Enum):
    """Where a pooled connection is in its life: pending, available, in use, closed."""

    PENDING = "pending"
    AVAILABLE = "available"
    IN_USE = "in use"
    CLOSED = "closed"


class Purpose(enum.Enum):
    """Why a connection is checked out (the Load Balancer spec's tracking)."""

    OTHER = "other"
    CURSOR = "cursor"
    TRANSACTION = "transaction"


class Owner(Protocol):
    """What a connection uses of its pool: the pool (``greenpool.Pool``) is one."""

    address: Address
    _pid: int

    def checkin(self, conn: Connection[Any]) -> None: ...
    def checkin_after_error(self, conn: Connection[Any]) -> None: ...
    def _take_service_generation(self, conn: Connection[Any]) -> None: ...


class Connection(Generic[T]):
    """A pooled connection: the pool's bookkeeping around one transport.

    Use it as a context manager to check it back in::

        with pool.checkout() as conn:
            conn.transport.command(...)
    """

    __slots__ = (
        "__weakref__", "_counted", "_created_at", "_establisher", "_holder", "_idle_since",
        "_out_at", "_pid", "_pool", "_site", "error", "generation", "id", "interrupted",
        "pinned", "purpose", "service_id", "state", "transport",
    )

    def __init__(self, pool: Owner, conn_id: int, generation: int) -> None:
        self.id = conn_id
        self.generation = generation
        #: The serviceId the handshake reported (load-balanced mode only);
        #: the connector sets it.
        self.service_id: ObjectId | None = None
        self.transport: T | None = None
        self.state = ConnectionState.PENDING
        self.purpose = Purpose.OTHER
        #: Kept checked out past its operation by a cursor or a transaction
        #: (load-balanced mode); checkin clears it.
        self.pinned = False
        #: The error that made this connection unusable, if any.
        self.error: BaseException | None = None
        #: Whether clear(interrupt_in_use_connections=True) interrupted it.
        self.interrupted = False
        self._pool = pool
        self._pid = pool._pid
        self._created_at = _now()
        self._idle_since = 0.0
        self._out_at = 0.0  # when the current checkout handed it out (usage time)
        # The hold record (holds.py), set at hand-out, cleared at checkin: the
        # greenlet that checked it out and where (None between holds).
        self._holder: Any = None
        self._site: RawSite | None = None
        self._establisher: Any = None
        self._counted = False

    @property
    def address(self) -> Address:
        """The address of the pool this connection belongs to."""
        return self._pool.address

    @property
    def pool(self) -> Owner:
        """The pool this connection belongs to: check it in there."""
        return self._pool

    @property
    def errored(self) -> bool:
        """Perished by error: it will be closed at checkin, not reused."""
        return self.error is not None

    def mark_errored(self, error: BaseException) -> None:
        """Record that this connection failed; checkin will close it."""
        if self.error is None:
            self.error = error

    def handshake_done(self, service_id: ObjectId | None) -> None:
        """The connector's hello reply named ``service_id``: in load-balanced
        mode the connection takes its service's generation now, before
        authentication (Load Balancer spec), so that a clear of the service
        while it authenticates makes it stale."""
        self.service_id = service_id
        self._pool._take_service_generation(self)

    def __enter__(self) -> Connection[T]:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is None:
            self._pool.checkin(self)
        else:
            self._pool.checkin_after_error(self)  # never yield while an exception propagates

    def __repr__(self) -> str:
        return (f"<greenpool.Connection {self.id} to {format_address(self.address)}, "
                f"{self.state.value}, generation {self.generation}>")


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool's counts, for dashboards and tests."""

    address: Address
    state: str
    generation: int
    total: int
    available: int
    pending: int
    in_use: int
    in_use_by_purpose: Mapping[str, int]
    waiting: int
    max_pool_size: int


Connector = Callable[[Connection[T]], T]
ErrorHandler = Callable[[Exception, Connection[T]], None]


def broken(conn: Connection[Any], stale: bool) -> str | None:
    """Why ``conn`` must be closed however recently used, or None.

    Its own error comes ahead of staleness (the error is usually why the pool
    was cleared), except for an interrupted connection: a clear interrupted
    it, so it closes as stale.
    """
    if conn.error is not None and not conn.interrupted:
        return _Closed.ERROR
    if stale:
        return _Closed.STALE
    if conn.error is not None:
        return _Closed.ERROR
    return None


def perished(conn: Connection[Any], stale: bool, max_idle: float | None,
             now: float) -> str | None:
    """Why an available connection must be closed, or None: :func:`broken`,
    or idle for longer than ``max_idle`` seconds at ``now``."""
    reason = broken(conn, stale)
    if reason is None and max_idle is not None and now - conn._idle_since > max_idle:
        return _Closed.IDLE
    return reason


def close_quietly(transport: Transport) -> None:
    """Close ``transport``, ignoring its errors."""
    with contextlib.suppress(Exception):  # a transport that cannot close is gone anyway
        transport.close()
