"""Always-on pool counters, the figures psycopg_pool's ``get_stats()`` gives.

Rules of this module: the counters and their arithmetic, as plain attributes; no locks,
no events, no listeners, no gevent. The pool decides when to bump them.

A pool keeps one :class:`Tally` and bumps it on the paths that run anyway
(checkout, checkin, establishing, closing): plain attribute increments, no
listener, no event objects. Each bump happens between two points where
gevent could switch, in the same step as the state change it counts, so a
kill (GreenletExit, gevent.Timeout) can never leave a change counted twice
or not at all.

:meth:`greenpool.Pool.get_stats` reads the tally with the pool's current
gauges; :meth:`greenpool.Pool.pop_stats` does the same and starts a new
tally (the gauges are not reset: they are the pool's state, not counters).
"""

from __future__ import annotations

__all__ = ["STAT_KEYS", "Tally"]

#: The keys of ``get_stats()``: psycopg_pool's names, plus ``requests_timeouts``.
STAT_KEYS = (
    # Gauges: the pool right now.
    "pool_min", "pool_max", "pool_size", "pool_available", "requests_waiting",
    # Counters since the pool was created or the last pop_stats().
    "requests_num", "requests_queued", "requests_wait_ms", "requests_errors",
    "requests_timeouts", "returns_bad", "usage_ms", "connections_num", "connections_ms",
    "connections_errors", "connections_lost",
)


class Tally:
    """A pool's counters since creation or the last pop (times in seconds)."""

    __slots__ = (
        "connections_errors", "connections_lost", "connections_num", "connections_s",
        "requests_errors", "requests_num", "requests_queued", "requests_timeouts",
        "requests_wait_s", "returns_bad", "usage_s",
    )

    def __init__(self) -> None:
        #: Checkouts asked for (fast path included).
        self.requests_num = 0
        #: Checkouts that had to wait in the queue.
        self.requests_queued = 0
        #: Total time checkouts on the general path spent before they got a
        #: connection or failed (establishing a new one included).
        self.requests_wait_s = 0.0
        #: Checkouts that raised (timeouts, cleared or closed pool, failed
        #: establishment, a kill), timeouts included.
        self.requests_errors = 0
        #: Checkouts that ended by a timeout: waitQueueTimeoutMS, the call's
        #: own timeout, or a gevent.Timeout thrown into the waiting greenlet.
        self.requests_timeouts = 0
        #: Checkins whose connection was closed instead of reused (errored,
        #: stale, or the pool was closed).
        self.returns_bad = 0
        #: Total time connections spent checked out.
        self.usage_s = 0.0
        #: Connections the pool started establishing.
        self.connections_num = 0
        #: Total time spent establishing connections (failed attempts included).
        self.connections_s = 0.0
        #: Establishments that failed.
        self.connections_errors = 0
        #: Established connections closed because of their own error (a
        #: network error in use); clear() makes connections stale, not lost.
        self.connections_lost = 0

    def counters(self) -> dict[str, int]:
        """The counters under their ``get_stats()`` names (times in whole ms)."""
        return {
            "requests_num": self.requests_num,
            "requests_queued": self.requests_queued,
            "requests_wait_ms": int(self.requests_wait_s * 1000),
            "requests_errors": self.requests_errors,
            "requests_timeouts": self.requests_timeouts,
            "returns_bad": self.returns_bad,
            "usage_ms": int(self.usage_s * 1000),
            "connections_num": self.connections_num,
            "connections_ms": int(self.connections_s * 1000),
            "connections_errors": self.connections_errors,
            "connections_lost": self.connections_lost,
        }
