"""The serviceId map: per-service generations and counts (load-balanced mode).

Behind a load balancer one pool reaches many services, and the Load Balancer
spec clears them one at a time: each serviceId has its own generation. A
connection joins its service's count once its handshake names the service
(``conn._counted``), and leaves it when it closes; an entry goes when its count
reaches zero, except while SDAM judges an establishment error, which needs the
entry's generation.

What lives here: :class:`ServiceMap`, a part of :class:`greenpool.Pool` (its
``_services``). It owns ``entries`` and each connection's ``_counted`` flag, and
gives a counted connection its service's generation. The pool calls it only in
load-balanced mode: ``join`` when a handshake names the service, ``leave`` when
a counted connection closes, ``judging`` around the SDAM handling of a failed
establishment, ``clear`` for a clear of one service, ``is_current`` for the
staleness verdict (``clearing.py``) and ``start_over`` after a fork.

What must not live here: anything outside load-balanced mode, anything that
moves a connection between the pool's sets, and any reference to the pool: the
map is plain bookkeeping. Imports: the pool core only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from bson.objectid import ObjectId

from greenpool.pool.connection import Connection

__all__ = ["ServiceMap"]


class ServiceMap:
    """Per-service generations and counts: see the module docstring."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        #: serviceId -> [generation, connection count]; read it, never change
        #: it outside this class.
        self.entries: dict[ObjectId | None, list[int]] = {}

    def join(self, conn: Connection[Any]) -> None:
        """Count ``conn`` (not yet counted) in its service and give it the
        service's generation."""
        entry = self.entries.setdefault(conn.service_id, [0, 0])
        conn.generation = entry[0]
        entry[1] += 1
        conn._counted = True

    def leave(self, conn: Connection[Any]) -> None:
        """A counted connection closes: its service counts one fewer."""
        conn._counted = False
        entry = self.entries[conn.service_id]
        entry[1] -= 1
        if entry[1] == 0:
            del self.entries[conn.service_id]

    @contextlib.contextmanager
    def judging(self, conn: Connection[Any]) -> Iterator[None]:
        """A connection failed to establish: if it was counted, it no longer
        counts in its service, but the entry stays (even at zero) until the
        block, where SDAM judges the error by the entry's generation, ends."""
        entry = self.entries.get(conn.service_id) if conn._counted else None
        if entry is not None:
            entry[1] -= 1
        try:
            yield
        finally:
            if entry is not None:
                conn._counted = False
                if entry[1] == 0 and self.entries.get(conn.service_id) is entry:
                    del self.entries[conn.service_id]

    def clear(self, service_id: ObjectId | None) -> None:
        """Make every connection of ``service_id`` stale."""
        entry = self.entries.get(service_id)
        if entry is not None:
            entry[0] += 1

    def is_current(self, conn: Connection[Any]) -> bool:
        """Whether counted ``conn`` has its service's current generation."""
        entry = self.entries.get(conn.service_id)
        return entry is not None and conn.generation == entry[0]

    def counts(self) -> dict[ObjectId | None, int]:
        """Connections per service, without the entries kept at zero while
        SDAM judges an error."""
        return {service: entry[1] for service, entry in self.entries.items() if entry[1]}

    def start_over(self) -> None:
        """After a fork: the parent's services count nothing here."""
        self.entries.clear()
