"""Kill sweeps: count the yield points of a scenario, then kill at each one.

A test's listeners and fakes call :meth:`YieldPoints.yield_here` where the
code under test could yield. The first run only counts; each later run picks
one point (``kill_at``) and throws ``kill()`` there, into the greenlet that
reached it (mode "self") or into every other candidate (mode "others").
Invariants are checked before and after every yield.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gevent


class YieldPoints:
    """Counts yield points and kills at the chosen one; subclasses say who
    the other candidates are (:meth:`candidates`)."""

    def __init__(self, kill_at: int | None = None,
                 kill: Callable[[], BaseException] = gevent.GreenletExit,
                 mode: str = "self") -> None:
        self.count = 0
        self.kill_at = kill_at
        self.kill = kill
        self.mode = mode
        self.killed = 0

    def candidates(self) -> Iterable[Any]:
        """The greenlets mode "others" kills (the current one excepted)."""
        return ()

    def yield_here(self, check: Callable[[], None]) -> None:
        check()
        if self.count == self.kill_at:
            current = gevent.getcurrent()
            victims = [current] if self.mode == "self" else [
                g for g in self.candidates() if g is not current]
            for victim in victims:
                gevent.get_hub().loop.run_callback(victim.throw, self.kill())
            self.killed += len(victims)
        self.count += 1
        gevent.sleep(0)
        check()
