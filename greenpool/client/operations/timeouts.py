"""Client-side operation timeouts (timeoutMS, the CSOT spec).

Rules of this module: deadlines: where an operation's time limit comes from and how much
is left; pure arithmetic over a clock and a context variable. The code that waits (pool,
link, topology) asks this module for the time left and does its own waiting.

An operation's *deadline* bounds all of its blocking work: server
selection, the wait for a connection, establishing one, and each round
trip. It comes, innermost first, from

* ``timeout=`` on the call (seconds; ``0`` means no limit),
* an enclosing :func:`timeout` block (blocks nest; an inner one can only
  shorten the time left, as with :func:`pymongo.timeout`),
* the client's ``timeoutMS`` from the connection string.

Without any of them the client keeps its legacy timeouts
(serverSelectionTimeoutMS, waitQueueTimeoutMS, socketTimeoutMS) unchanged.

::

    with greenpool.timeout(0.5):
        client.command("shop", {"ping": 1})     # at most 0.5 s in all
        with greenpool.timeout(5):
            client.command("shop", {"ping": 1})  # still within the 0.5 s

The scope lives in a context variable, so it belongs to the greenlet that
entered it: greenlets spawned inside the block do not inherit it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from pymongo.errors import ExecutionTimeout

__all__ = ["Deadline", "current", "resolve", "timeout"]

_NO_DEADLINE = math.inf
# The innermost enclosing scope's absolute deadline (time.monotonic()),
# math.inf for a scope without a limit.
_SCOPE: ContextVar[float | None] = ContextVar("greenpool_timeout_scope", default=None)
# The deadline of the operation the current greenlet is running, for the
# connector (establishment happens inside the pool, which knows nothing of it).
_OPERATION: ContextVar[Deadline | None] = ContextVar("greenpool_operation_deadline",
                                                     default=None)
# The server's reply code for an operation over its time limit.
MAX_TIME_MS_EXPIRED = 50


def check_seconds(name: str, value: object) -> float | None:
    """``value`` as seconds (None: not given); a clear error for anything
    but None or a finite number >= 0."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not value >= 0 or math.isinf(value)):
        raise ValueError(f"{name} must be None or a finite number of seconds >= 0, "
                         f"not {value!r}")
    return float(value)


@contextlib.contextmanager
def timeout(seconds: float | None) -> Iterator[None]:
    """Bound every operation in the block by ``seconds`` from now, together.

    ``None`` or ``0`` adds no limit of its own; an enclosing block's limit
    still holds, since a nested block can only shorten the time left.

    >>> with timeout(0.2):  # doctest: +SKIP
    ...     client.command("db", {"ping": 1})

    :raises ValueError: ``seconds`` is not None or a number >= 0.
    """
    limit = check_seconds("timeout", seconds)
    outer = _SCOPE.get()
    own = time.monotonic() + limit if limit else _NO_DEADLINE
    token = _SCOPE.set(own if outer is None else min(outer, own))
    try:
        yield
    finally:
        _SCOPE.reset(token)


@dataclass(frozen=True, slots=True)
class Deadline:
    """One operation's deadline: ``expires`` (``time.monotonic()``; math.inf
    for timeoutMS=0) and the limit it came from, for messages."""

    expires: float
    limit: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """A deadline ``seconds`` from now; 0 means none."""
        return cls(time.monotonic() + seconds if seconds else _NO_DEADLINE, seconds)

    @property
    def bounded(self) -> bool:
        return self.expires != _NO_DEADLINE

    def remaining(self) -> float:
        """Seconds left (math.inf without a limit; <= 0 once expired)."""
        return self.expires - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def bound(self, seconds: float | None) -> float | None:
        """``seconds`` (None: no limit) shortened to the time left, never below 0."""
        left = max(self.remaining(), 0.0)
        if not self.bounded:
            return seconds
        return left if seconds is None else min(seconds, left)

    def max_time_ms(self, min_round_trip: float, left: float | None = None) -> int:
        """The ``maxTimeMS`` to send (the CSOT spec: time left minus the
        server's minimum round trip); raises the spec's timeout error when
        that leaves nothing, before anything is sent. ``left``: the time left
        as the caller read it (default: now)."""
        if left is None:
            left = self.remaining()
        budget = left - min_round_trip
        if budget <= 0:
            raise self.exceeded(f"{max(left, 0) * 1000:.0f} ms left is not more than the "
                                f"server's minimum round trip of "
                                f"{min_round_trip * 1000:.0f} ms")
        return max(1, int(budget * 1000))

    def exceeded(self, what: str) -> ExecutionTimeout:
        """The error for an operation whose time ran out before a round trip
        (PyMongo raises ExecutionTimeout, code 50, here too)."""
        message = f"operation would exceed its time limit of {self.limit * 1000:g} ms: {what}"
        return ExecutionTimeout(message, MAX_TIME_MS_EXPIRED,
                                {"ok": 0, "errmsg": message, "code": MAX_TIME_MS_EXPIRED})


def resolve(call: float | None, default: float | None) -> Deadline | None:
    """The deadline of an operation starting now: ``call`` (the call's
    ``timeout=``, validated by the caller) within the enclosing scope, else
    the scope, else ``default`` (the client's timeoutMS); None when none of
    them is set (the legacy timeouts apply)."""
    scope = _SCOPE.get()
    if call is None and scope is None:
        return None if default is None else Deadline.after(default)
    if call is None:
        return Deadline(scope if scope is not None else _NO_DEADLINE, _limit_of(scope))
    own = Deadline.after(call)
    if scope is not None and scope < own.expires:
        return Deadline(scope, _limit_of(scope))
    return own


def _limit_of(expires: float | None) -> float:
    if expires is None or expires == _NO_DEADLINE:
        return 0.0
    return max(expires - time.monotonic(), 0.0)


def current() -> Deadline | None:
    """The deadline of the operation this greenlet is running, if it has one."""
    return _OPERATION.get()


@contextlib.contextmanager
def running(deadline: Deadline | None) -> Iterator[None]:
    """Mark ``deadline`` as the current operation's for the block (see :func:`current`)."""
    token = _OPERATION.set(deadline)
    try:
        yield
    finally:
        _OPERATION.reset(token)
