"""PyMongo 4.9-4.17: their pool, made to look like 4.18's where GreenPool relies on it.

Rules of this module: the one shim for the releases before 4.18, and nothing else. It
gives :class:`~greenpool.pymongo.pool.GreenPool` the base it is written against
(:data:`BasePool`): PyMongo's ``Pool`` itself on 4.18 and later, and on 4.9-4.17 a
subclass with what 4.18 added (``_telemetry``, ``_pinned_sockets``, a ``checkout()``
shaped like 4.19's). When 4.17 leaves ``SUPPORTED_PYMONGO``, delete this module and
base GreenPool on ``internals.Pool``.

What differs in those releases:

* no ``pool._telemetry``: each pool method publishes its events itself, so the
  reports GreenPool makes itself go through :class:`LegacyEvents`, published and
  logged as those releases' own pool does (``durationMS`` included, which they
  log in seconds);
* the pinned set is name-mangled (``_Pool__pinned_sockets``);
* their ``checkout()`` is a generator that leaks the connection when a kill lands
  in the checked-out event or log (nothing checks it in), and that runs SDAM error
  handling (which may yield: a pool clear, listeners) and then the checkin with no
  ``finally`` between, so a kill landing in the handling lost the pool a slot for
  good. :class:`LegacyCheckout` checks out and in the way 4.19 does.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from greenpool.pymongo.internals import (
    _CONNECTION_LOGGER,
    Connection,
    Pool,
    _ConnectionStatusMessage,
    _debug_log,
    _verbose_connection_error_reason,
)
from greenpool.pymongo.versions import RELEASE

APPLIES = RELEASE < (4, 18)
"""Whether the installed PyMongo needs this shim."""


class LegacyEvents:
    """What 4.18's ``pool._telemetry`` does for the reports GreenPool makes itself."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def _publish(self) -> Any:
        pool: Any = self._pool
        return pool.opts._event_listeners if pool.enabled_for_cmap else None

    def _log(self, message: str, **fields: Any) -> None:
        pool: Any = self._pool
        if pool.enabled_for_logging and _CONNECTION_LOGGER.isEnabledFor(logging.DEBUG):
            _debug_log(_CONNECTION_LOGGER, clientId=pool._client_id, message=message,
                       serverHost=pool.address[0], serverPort=pool.address[1], **fields)

    def checkout_started(self) -> float:
        started = time.monotonic()
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_check_out_started(self._pool.address)
        self._log(_ConnectionStatusMessage.CHECKOUT_STARTED)
        return started

    def checkout_succeeded(self, conn_id: int, start: float) -> None:
        duration = time.monotonic() - start
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_checked_out(self._pool.address, conn_id, duration)
        self._log(_ConnectionStatusMessage.CHECKOUT_SUCCEEDED, driverConnectionId=conn_id,
                  durationMS=duration)

    def checkout_failed(self, reason: str, error: str, start: float) -> None:
        duration = time.monotonic() - start
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_check_out_failed(self._pool.address, error, duration)
        self._log(_ConnectionStatusMessage.CHECKOUT_FAILED, reason=reason, error=error,
                  durationMS=duration)

    def checked_in(self, conn_id: int) -> None:
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_checked_in(self._pool.address, conn_id)
        self._log(_ConnectionStatusMessage.CHECKEDIN, driverConnectionId=conn_id)

    def connection_closed(self, conn_id: int, reason: str) -> None:
        listeners = self._publish()
        if listeners is not None:
            listeners.publish_connection_closed(self._pool.address, conn_id, reason)
        self._log(_ConnectionStatusMessage.CONN_CLOSED, driverConnectionId=conn_id,
                  reason=_verbose_connection_error_reason(reason), error=reason)


class LegacyCheckout:
    """``checkout()`` on PyMongo 4.9-4.17, in the shape of 4.19's: a failure
    while reporting the checkout checks the connection in, and the checkin after
    an error runs in a ``finally`` after the SDAM error handling."""

    __slots__ = ("_conn", "_handler", "_pool")

    def __init__(self, pool: Pool, handler: Any = None) -> None:
        self._pool = pool
        self._handler = handler
        self._conn: Connection | None = None

    def __enter__(self) -> Connection:
        pool = self._pool
        events = pool._telemetry
        started = events.checkout_started()
        conn = pool._get_conn(started, handler=self._handler)
        try:
            events.checkout_succeeded(conn.id, started)
        except BaseException:
            pool.checkin(conn)
            raise
        self._conn = conn
        return conn

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        pool = self._pool
        if exc_type is not None:
            # The session owns a pinned connection and checks it in itself.
            pinned = conn.pinned_txn or conn.pinned_cursor
            try:
                if self._handler is not None:  # while the connection is still out
                    self._handler.handle(exc_type, exc_val)
            finally:
                if not pinned and conn.active:
                    pool.checkin(conn)
        elif conn.pinned_txn:
            pool._pinned_sockets.add(conn)
            pool.ntxns += 1
        elif conn.pinned_cursor:
            pool._pinned_sockets.add(conn)
            pool.ncursors += 1
        elif conn.active:
            pool.checkin(conn)


class LegacyPool(Pool):
    """PyMongo 4.9-4.17's ``Pool`` with 4.18's ``_telemetry``, ``_pinned_sockets``
    and a 4.19-shaped ``checkout()``. Only GreenPool builds on it: monitor pools
    stay PyMongo's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._telemetry = LegacyEvents(self)  # type: ignore[assignment]
        # The same set the stock methods of these releases use.
        self._pinned_sockets = vars(self)["_Pool__pinned_sockets"]

    def checkout(self, handler: Any = None) -> LegacyCheckout:  # type: ignore[override]
        return LegacyCheckout(self, handler)


#: What GreenPool subclasses: 4.18's Pool, or the older releases' made to look like it
#: (to the type checker, which reads the installed PyMongo's types, always Pool).
if TYPE_CHECKING:
    BasePool = Pool
else:
    BasePool = LegacyPool if APPLIES else Pool
