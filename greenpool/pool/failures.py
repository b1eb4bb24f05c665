"""How a checkout fails: the refusal, the error, its event and its counts.

What lives here: :class:`_CheckoutFailures`, the base of the hot path
(``checkout.py``): why the pool refuses a checkout now, the timeout error
with the pool's counts and the connections' holders, and the reporting of
a failed or killed checkout.
Every failure counts in the tally and emits ConnectionCheckOutFailed; a
killed checkout reports without yielding (``flush_later``), so that no
other exception can replace the kill.

What must not live here: anything that holds or hands on a connection; the
hot path undoes what it holds before it calls in here. Imports: the pool
core only.
"""

from __future__ import annotations

import time
from typing import NoReturn, TypeVar

import gevent
from pymongo.monitoring import ConnectionCheckOutFailedReason as _Failed

from greenpool.address import format_address
from greenpool.errors import PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from greenpool.pool.connection import Transport
from greenpool.pool.fields import _PoolFields
from greenpool.pool.holds import LISTED_HOLDERS, describe_holders, snapshot
from greenpool.pool.poolstate import PoolState

__all__: list[str] = []

T = TypeVar("T", bound=Transport)

_now = time.monotonic
_READY = PoolState.READY  # one global lookup, not a global and a class attribute
_CLOSED = PoolState.CLOSED


class _CheckoutFailures(_PoolFields[T]):
    """A checkout's refusal and failure reports: see the module docstring."""

    def _refusal(self) -> BaseException | None:
        if self._state is _READY:
            return None
        if self._state is _CLOSED:
            return PoolClosedError(self.address)
        if self._generation == 0:
            return PoolClearedError.not_ready(self.address)
        return PoolClearedError.cleared(self.address, self._clear_cause)

    def _fail_checkout(
        self, started: float, error: BaseException, reason: str | None = None
    ) -> NoReturn:
        if reason is None:
            closed = isinstance(error, PoolClosedError)
            reason = _Failed.POOL_CLOSED if closed else _Failed.CONN_ERROR
        detail = error if reason == _Failed.CONN_ERROR else None
        waited = _now() - started
        self._count_failed_request(waited, reason)
        self._events.checkout_failed(reason, waited, detail)
        self._events.flush()
        try:
            raise error
        finally:
            # The traceback holds this frame: without its locals, the error
            # makes no cycle through it and dies without the collector.
            del error, detail

    def _report_killed_checkout(self, started: float, kill: BaseException) -> None:
        """Report a checkout ended by a kill, without yielding: a yield here
        would let another exception (the greenlet's own timeout) replace it."""
        reason = _Failed.TIMEOUT if isinstance(kill, gevent.Timeout) else _Failed.CONN_ERROR
        waited = _now() - started
        self._count_failed_request(waited, reason)
        self._events.checkout_failed(reason, waited, None)
        self._events.flush_later()

    def _count_failed_request(self, waited: float, reason: str | None) -> None:
        tally = self._tally
        tally.requests_errors += 1
        tally.requests_wait_s += waited
        if reason == _Failed.TIMEOUT:
            tally.requests_timeouts += 1

    def _timeout_error(self, started: float) -> WaitQueueTimeoutError:
        stats = self.stats()
        waited = _now() - started
        holds = list(self._holds())
        holders = snapshot(holds, LISTED_HOLDERS)
        if self.options.load_balanced:
            counts = stats.in_use_by_purpose
            text = (
                "Timeout waiting for connection from the connection pool. "
                f"maxPoolSize: {stats.max_pool_size}, "
                f"connections in use by cursors: {counts['cursor']}, "
                f"connections in use by transactions: {counts['transaction']}, "
                f"connections in use by other operations: {counts['other']}"
            )
        else:
            text = (
                f"{WaitQueueTimeoutError.message} {format_address(self.address)} after "
                f"{waited * 1000:.0f} ms (maxPoolSize: {stats.max_pool_size}, in use: "
                f"{stats.in_use}, available: {stats.available}, pending: {stats.pending}, "
                f"waiting: {stats.waiting})"
            )
        return WaitQueueTimeoutError(
            self.address, text + describe_holders(holders, len(holds)), holders=holders,
            waited=waited, max_pool_size=stats.max_pool_size,
            in_use=stats.in_use, in_use_by_purpose=dict(stats.in_use_by_purpose),
            available=stats.available, pending=stats.pending, waiting=stats.waiting,
        )
