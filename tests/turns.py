"""Turns instead of seconds: fair turns of greenlets spawned together, what the order of
their turns shows, and how many turns of the hub something takes.

A busy machine makes every turn slower but changes neither their order nor their number,
so these are what the tests assert rather than wall-clock bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import gevent
import greenlet


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
    of one greenlet, the spread of the greenlets' last turns as a fraction of
    all turns (how many turns ended between the first greenlet's last turn and
    the last greenlet's: counted in turns, so a busy machine, which slows every
    turn alike, does not change it), how many turns had ended before the last
    greenlet ended its first, and the run's time (a figure, not a bound).
    """
    order: list[int] = []

    def worker(number: int) -> None:
        for _ in range(turns):
            operation()
            order.append(number)

    started = time.monotonic()
    gevent.joinall([gevent.spawn(worker, n) for n in range(greenlets)], raise_error=True)
    total = time.monotonic() - started
    assert len(order) == greenlets * turns
    last_turns = {number: position for position, number in enumerate(order)}.values()
    return {
        "order": order,
        "total_s": round(total, 3),
        "spread": round((max(last_turns) - min(last_turns)) / len(order), 3),
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


def switches_during(call: Callable[[], Any]) -> int:
    """How many times the calling greenlet switched away while ``call()`` ran: 0 means it
    never yielded (it returned without letting any other greenlet, or the hub, run); 1,
    that it waited for one turn of the hub. Other greenlets' switches meanwhile do not
    count."""
    switches = 0
    caller = greenlet.getcurrent()

    def trace(event: str, args: Any) -> None:
        nonlocal switches
        if event in ("switch", "throw") and args[0] is caller:
            switches += 1

    previous = greenlet.settrace(trace)
    try:
        call()
    finally:
        greenlet.settrace(previous)
    return switches


def hub_turns_until(condition: Callable[[], bool], limit: int = 50) -> int:
    """How many turns of the hub (``gevent.sleep(0)``: one loop iteration, its callbacks
    and the I/O ready now) pass before ``condition()`` holds; AssertionError past
    ``limit``. Something woken "at once" (a callback, a closed socket's waiter) takes one
    or two; a timer or the server's reply would take many."""
    for turn in range(limit + 1):
        if condition():
            return turn
        gevent.sleep(0)
    raise AssertionError(f"still not so after {limit} turns of the hub")

