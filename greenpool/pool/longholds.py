"""Long holds: a connection checked out for longer than ``long_hold_threshold``.

What lives here: the opt-in watch for connections held too long, HikariCP's
``leakDetectionThreshold`` on greenlets. A pool with a threshold runs one
watcher greenlet (:func:`watch`). It sleeps until the oldest hold it has not
reported yet reaches the threshold, then reports each such hold once: a
warning on the ``greenpool`` logger, with the holder's acquire site and its
current stack (what a thread pool cannot show cheaply: where the holder is
*now*), and a :class:`ConnectionHeldTooLongEvent` to the pool's listeners
that have a ``connection_held_too_long`` method (``greenpool.otel`` counts
them). The checkout path pays nothing for it: the watcher reads the hold
records the pool keeps anyway (``holds.py``).

What must not live here: the hold records themselves, and delivery (the
pool's funnel, ``monitoring.py``, logs and notifies). The watcher's only
wait is the maintenance alarm's sleep (``waitqueue.py``). Imports: the pool
core only.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Iterable
from typing import Any, Protocol

from greenpool.address import Address, format_address
from greenpool.pool.holds import Hold, Holder, current_stack, holder_of
from greenpool.pool.waitqueue import Alarm

__all__ = ["ConnectionHeldTooLongEvent", "Watched", "check_threshold", "describe", "watch"]

_now = time.monotonic


def check_threshold(value: object) -> float | None:
    """``long_hold_threshold`` as seconds; a clear error for anything but
    None or a finite number of seconds > 0."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not value > 0 or math.isinf(value)):
        raise ValueError(f"long_hold_threshold must be None or a finite number of seconds > 0, "
                         f"not {value!r}")
    return float(value)


class ConnectionHeldTooLongEvent:
    """A connection has been checked out for longer than the pool's
    ``long_hold_threshold``; sent once per checkout, to the listeners that
    define ``connection_held_too_long(event)``."""

    __slots__ = ("address", "connection_id", "duration", "holder", "threshold")

    def __init__(self, address: Address, holder: Holder, threshold: float) -> None:
        #: The pool's server.
        self.address = address
        self.connection_id = holder.connection_id
        #: Seconds held so far.
        self.duration = holder.held_for
        #: The :class:`~greenpool.pool.holds.Holder` record: greenlet, sites.
        self.holder = holder
        #: The pool's ``long_hold_threshold``, in seconds.
        self.threshold = threshold

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {format_address(self.address)} connection "
                f"{self.connection_id} held {self.duration:.3f} s>")


def describe(event: ConnectionHeldTooLongEvent, stack: str) -> tuple[str, dict[str, Any]]:
    """The log message of a long hold: its text, and its structured fields
    (the CMAP logging spec's names, plus greenpool's own)."""
    holder = event.holder
    host, port = event.address
    fields: dict[str, Any] = {
        "message": "Connection held longer than long_hold_threshold",
        "serverHost": host,
        "driverConnectionId": event.connection_id,
        "durationMS": event.duration * 1000,
        "thresholdMS": event.threshold * 1000,
        "holder": holder.greenlet,
        "acquireSite": None if holder.acquired_at is None else str(holder.acquired_at),
        "currentSite": None if holder.now_at is None else str(holder.now_at),
        "purpose": holder.purpose,
        "pinned": holder.pinned,
        "currentStack": stack,
    }
    if port is not None:
        fields["serverPort"] = port
    text = (f"Connection held longer than long_hold_threshold ({event.threshold:g} s): "
            f"address={format_address(event.address)}, {holder}\n"
            f"Current stack of {holder.greenlet} (most recent call last):\n{stack}").rstrip()
    return text, fields


class Watched(Protocol):
    """What the watcher needs of a pool (both routes' pools have it)."""

    address: Address

    @property
    def closed(self) -> bool: ...
    @property
    def long_hold_threshold(self) -> float | None: ...
    def _holds(self) -> Iterable[Hold]: ...
    def _report_long_hold(self, event: ConnectionHeldTooLongEvent, stack: str) -> None: ...


def watch(pool_ref: weakref.ref[Any], alarm: Alarm) -> None:
    """The watcher greenlet: report each hold once it passes the threshold.

    It holds the pool weakly, like the maintenance greenlet, and ends when
    the pool is closed or collected (or when it is killed).
    """
    reported: set[tuple[int, float]] = set()  # (connection id, since) of each hold reported
    while True:
        pool: Watched | None = pool_ref()
        if pool is None or pool.closed or pool.long_hold_threshold is None:
            return
        threshold = pool.long_hold_threshold
        now = _now()
        sleep = threshold  # a hold that starts now is due no sooner than this
        due: list[Hold] = []
        current: set[tuple[int, float]] = set()
        for hold in pool._holds():
            key = (hold.connection_id, hold.since)
            current.add(key)
            if key in reported:
                continue
            left = hold.since + threshold - now
            if left <= 0:
                due.append(hold)
            else:
                sleep = min(sleep, left)
        reported &= current  # holds that ended are forgotten
        for hold in due:
            reported.add((hold.connection_id, hold.since))
            holder = holder_of(hold, _now())
            event = ConnectionHeldTooLongEvent(pool.address, holder, threshold)
            pool._report_long_hold(event, current_stack(hold.greenlet))
        del pool
        alarm.sleep(sleep)

