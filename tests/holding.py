"""What the tests of hold tracking share: the caller's line, waiting for a condition,
named greenlets, printing an error as a user sees it, and a long-hold listener."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gevent

from greenpool.pool.longholds import ConnectionHeldTooLongEvent
from tests.events import QuietPoolListener


def here() -> int:
    """The caller's current line."""
    return sys._getframe(1).f_lineno


def until(predicate: Callable[[], object], timeout: float = 10) -> None:
    """Wait until ``predicate()`` is true, failing the test after ``timeout`` seconds."""
    with gevent.Timeout(timeout, AssertionError("condition not reached")):
        while not predicate():
            gevent.sleep(0.001)


def named(name: str, run: Callable[..., Any], *args: Any) -> gevent.Greenlet:
    """A started greenlet called ``name`` (what holders are shown by)."""
    greenlet = gevent.Greenlet(run, *args)
    greenlet.name = name
    greenlet.start()
    return greenlet


def show(error: BaseException) -> None:
    """Print ``error`` as a user would see it (pytest -s shows it; the docs quote it)."""
    print(f"\n{type(error).__module__}.{type(error).__qualname__}: {error}")


class HoldListener(QuietPoolListener):
    """A PyMongo pool listener that keeps the long-hold events and ignores the rest."""

    def __init__(self) -> None:
        self.long_holds: list[ConnectionHeldTooLongEvent] = []

    def connection_held_too_long(self, event: ConnectionHeldTooLongEvent) -> None:
        self.long_holds.append(event)
