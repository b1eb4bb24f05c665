"""Fair turns: greenlets spawned together, each doing the same number of
operations, and what the order of their turns shows."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import gevent


def longest_run(order: Sequence[Any]) -> int:
    """The most consecutive turns one greenlet took with nobody in between."""
    best = run = 0
    previous: Any = object()
    for who in order:
        run = run + 1 if who == previous else 1
        previous = who
        best = max(best, run)
    return best


def take_turns(operation: Callable[[], Any], greenlets: int, turns: int) -> dict[str, Any]:
    """Spawn ``greenlets`` at once, each running ``operation`` ``turns`` times.

    Returns the order in which turns ended (greenlet numbers), the longest run
    of one greenlet, the spread of the greenlets' finish times as a fraction
    of the whole run, and how many turns had ended before the last greenlet
    ended its first.
    """
    order: list[int] = []
    finished: list[float] = []

    def worker(number: int) -> None:
        for _ in range(turns):
            operation()
            order.append(number)
        finished.append(time.monotonic())

    started = time.monotonic()
    gevent.joinall([gevent.spawn(worker, n) for n in range(greenlets)], raise_error=True)
    total = time.monotonic() - started
    assert len(order) == greenlets * turns
    return {
        "order": order,
        "total_s": round(total, 3),
        "spread": round((max(finished) - min(finished)) / total, 3) if total else 0.0,
        "longest_run": longest_run(order),
        "turns_before_everyone_started": max(order.index(n) for n in range(greenlets)),
    }


def assert_fair_turns(pool: Any) -> None:
    """20 greenlets spawned together, each checking a connection out of ``pool`` and in
    again 10 times (connections that never block): nobody takes more than two turns in a
    row, and everybody has had one within the first 40."""

    def turn() -> None:
        with pool.checkout():
            pass

    result = take_turns(turn, greenlets=20, turns=10)
    assert result["longest_run"] <= 2, result["order"]
    assert result["turns_before_everyone_started"] < 40, result["order"]
