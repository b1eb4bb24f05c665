"""Listeners for tests: one that records every event PyMongo's listener
interfaces define, and a pool listener base that ignores every event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
from pymongo import monitoring as _m


class AllEvents(
    _m.CommandListener, _m.ConnectionPoolListener, _m.ServerListener,
    _m.ServerHeartbeatListener, _m.TopologyListener,
):
    """Records events in order; ``wait_for`` blocks until one of a type arrives."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._changed = gevent.event.Event()

    def _record(self, event: Any) -> None:
        self.events.append(event)
        self._changed.set()

    # Every callback of every interface records its event.
    started = succeeded = failed = _record
    pool_created = pool_ready = pool_cleared = pool_closed = _record
    connection_created = connection_ready = connection_closed = _record
    connection_check_out_started = connection_check_out_failed = _record
    connection_checked_out = connection_checked_in = _record
    opened = description_changed = closed = _record

    def of(self, *kinds: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kinds)]

    def names(self, *kinds: type) -> list[str]:
        return [type(e).__name__ for e in self.of(*kinds)]

    def clear(self) -> None:
        self.events.clear()

    def until(self, predicate: Callable[[], object], what: str,
              timeout: float = 30.0) -> None:
        """Wait until ``predicate()`` is true, checked after each event."""
        with gevent.Timeout(timeout, AssertionError(
                f"not {what} within {timeout}s; saw {self.names(object)}")):
            while not predicate():
                self._changed.clear()
                self._changed.wait()

    def wait_for(self, kind: type, count: int = 1, timeout: float = 10.0) -> list[Any]:
        with gevent.Timeout(timeout, AssertionError(
                f"no {count} {kind.__name__} within {timeout}s; saw {self.names(object)}")):
            while len(self.of(kind)) < count:
                self._changed.clear()
                self._changed.wait()
        return self.of(kind)


class QuietPoolListener(_m.ConnectionPoolListener):
    """Ignores every CMAP event. PyMongo's own MongoClient calls every method
    of a pool listener (they are abstract there), so a test's listener that
    cares for one or two events subclasses this and overrides those."""

    def _ignore(self, event: object) -> None:
        pass

    pool_created = pool_ready = pool_cleared = pool_closed = _ignore
    connection_created = connection_ready = connection_closed = _ignore
    connection_check_out_started = connection_check_out_failed = _ignore
    connection_checked_out = connection_checked_in = _ignore
