"""The serviceId map: per-service generations and counts (load-balanced mode).

Behind a load balancer one pool reaches many services, and the Load Balancer
spec clears them one at a time: each serviceId has its own generation, and
the map ``_services`` holds ``serviceId -> [generation, connection count]``.
A connection joins its service's count once its handshake names the service
(``_counted``), and leaves it when it closes; an entry goes when its count
reaches zero, except while SDAM judges an establishment error, which needs
the entry's generation.

What lives here: :class:`_ServiceMap`, the pool's piece that owns
``_services`` and every change to it (the fork reset empties it).
``is_stale`` (``clearing.py``) reads the generations.

What must not live here: anything outside load-balanced mode, and anything
that moves a connection between the pool's sets. Imports: the pool core only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

from bson.objectid import ObjectId

from greenpool.pool.connection import Connection, Transport
from greenpool.pool.fields import _PoolFields

__all__: list[str] = []

T = TypeVar("T", bound=Transport)


class _ServiceMap(_PoolFields[T]):
    """Per-service generations and counts: see the module docstring."""

    def _take_service_generation(self, conn: Connection[T]) -> None:
        """Count ``conn`` in its service and give it the service's generation
        (once, and only in load-balanced mode)."""
        if not self.options.load_balanced or conn._counted or conn._pid != self._pid:
            return
        entry = self._services.setdefault(conn.service_id, [0, 0])
        conn.generation = entry[0]
        entry[1] += 1
        conn._counted = True

    def _leave_service(self, conn: Connection[T]) -> None:
        """A counted connection closes: its service counts one fewer."""
        conn._counted = False
        entry = self._services[conn.service_id]
        entry[1] -= 1
        if entry[1] == 0:
            del self._services[conn.service_id]

    @contextlib.contextmanager
    def _judged_in_service(self, conn: Connection[T]) -> Iterator[None]:
        """A counted connection failed to establish: it no longer counts in
        its service, but the entry stays (even at zero) until the block,
        where SDAM judges the error by the entry's generation, ends."""
        entry = self._services.get(conn.service_id) if conn._counted else None
        if entry is not None:
            entry[1] -= 1
        try:
            yield
        finally:
            if entry is not None:
                conn._counted = False
                if entry[1] == 0 and self._services.get(conn.service_id) is entry:
                    del self._services[conn.service_id]

    def _clear_service(self, service_id: ObjectId | None) -> None:
        """Make every connection of ``service_id`` stale."""
        entry = self._services.get(service_id)
        if entry is not None:
            entry[0] += 1
