"""Both paths of the pool for every test: with a listener attached, and without.

A pool takes its fast paths (a checkout that finds a fresh idle connection, a
checkin the pool keeps) in fewer steps when nobody listens: no listener
attached and the ``greenpool.connection`` log off. The pool's test modules run
each test both ways through the ``listening`` fixture (psycopg's tests run
their shared suite once per pool class the same way).

Without a listener the tests still read the pool's events: :func:`overhear`
gives the pool a publisher that has no listener (so the pool takes its silent
paths) but hands every event the pool reports through it to a recorder, at the
flush, in order. A run without listeners reports no checkout events
(CheckOutStarted, CheckedOut, CheckedIn): the recorder sees every other event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from greenpool import Pool
from greenpool.pool.monitoring import Publisher

#: The events a pool without listeners does not report (spec names).
CHECKOUT_EVENTS = ("ConnectionCheckOutStarted", "ConnectionCheckedOut", "ConnectionCheckedIn")


class Overhearing(Publisher):
    """A publisher without listeners that builds every event it is asked to
    and hands it to ``heard`` where it would notify listeners."""

    __slots__ = ("heard",)

    def __init__(self, publisher: Publisher, heard: Callable[[object], None]) -> None:
        super().__init__(publisher.address, ())
        self.heard = heard

    @property
    def active(self) -> bool:
        return True

    def _notify(self, method: str, event: object) -> None:
        self.heard(event)


def overhear(pool: Pool[Any], heard: Callable[[object], None]) -> None:
    """From now on, hand ``heard`` every event ``pool`` reports, with no
    listener attached."""
    assert not pool._events.listeners and not pool._events.outbox
    pool._events = Overhearing(pool._events, heard)


_now = {"listening": True}


def listened() -> bool:
    """Whether the test running now attaches its listeners (see ``listening``)."""
    return _now["listening"]


@pytest.fixture(params=[False, True], ids=["no-listener", "listener"])
def listening(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run the test twice: its pools without a listener (overheard), then
    with one. A module opts in with ``pytestmark = pytest.mark.usefixtures("listening")``
    and builds its pools through helpers that ask :func:`listened`."""
    _now["listening"] = bool(request.param)
    try:
        yield _now["listening"]
    finally:
        _now["listening"] = True
