"""CMAP events and log messages: one funnel for everything a pool reports.

Rules of this module: the only place that builds CMAP events and log messages and calls
listeners; the pool decides *what* happened and hands it here. No pool state lives here,
and nothing here may switch greenlets while the pool is mid-change.

Events are PyMongo's own event classes, delivered to objects implementing
:class:`pymongo.monitoring.ConnectionPoolListener`, so a listener written for
PyMongo works unchanged: greenpool calls what PyMongo would call on it, decided
per listener object (``listeners.py``: a method of its class, one set on the
instance, one its ``__getattr__`` answers), except PyMongo's abstract stubs, and
an event no listener takes is not built.
Each event also produces the spec's log message on the ``greenpool.connection``
logger at DEBUG: the record's message is the spec's unstructured form, and
``record.structured`` holds the structured form (a dict with ``message``,
``serverHost``, ``serverPort``, ...).

Ordering and safety. The pool changes its state without yielding and only
then reports. Reports go into an outbox that is emptied in order at the end
of each pool operation (``flush``), so

* a listener that blocks (yields) or raises never sees, or leaves, the pool
  half-changed, and a listener's exception is logged, never propagated;
* events come out in the order the changes happened, whichever greenlet
  flushes them, and a greenlet killed while flushing loses nothing: the next
  flush delivers the rest.

Deferred side effects that must not run inside a state change (closing a
connection's transport) go through the same outbox.

Beyond the spec: a long hold (``longholds.py``) is a WARNING on the
``greenpool`` logger, and goes to the listeners that define
``connection_held_too_long`` (PyMongo's listener classes do not, so
:func:`report_long_hold` asks each one).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from bson.objectid import ObjectId
from pymongo import monitoring as _m

from greenpool.address import Address
from greenpool.pool.listeners import Subscribers

__all__ = ["DEBUG", "LOGGER", "EventCounter", "Publisher", "check_listeners", "logs",
           "report_long_hold"]

LOGGER = logging.getLogger("greenpool.connection")
_ERRORS = logging.getLogger("greenpool")
# ``logs(DEBUG)``: whether the log is on. Asked on every use, never cached
# here: the level may change at any time, and the logger's own cache (cleared
# by setLevel) keeps the answer cheap. The hot path asks it directly, with
# ``Publisher.listeners``, rather than through ``Publisher.active``.
logs = LOGGER.isEnabledFor
DEBUG = logging.DEBUG

# The spec's log message reasons, by event reason.
CLOSED_REASONS = {
    _m.ConnectionClosedReason.STALE: "Connection became stale because the pool was cleared",
    _m.ConnectionClosedReason.IDLE: (
        "Connection has been available but unused for longer than the configured max idle time"
    ),
    _m.ConnectionClosedReason.ERROR: "An error occurred while using the connection",
    _m.ConnectionClosedReason.POOL_CLOSED: "Connection pool was closed",
}
CHECKOUT_FAILED_REASONS = {
    _m.ConnectionCheckOutFailedReason.TIMEOUT: (
        "Wait queue timeout elapsed without a connection becoming available"
    ),
    _m.ConnectionCheckOutFailedReason.CONN_ERROR: (
        "An error occurred while trying to establish a new connection"
    ),
    _m.ConnectionCheckOutFailedReason.POOL_CLOSED: "Connection pool was closed",
}

Effect = tuple[Callable[..., None], tuple[Any, ...]]


def check_listeners(listeners: Iterable[object]) -> tuple[_m.ConnectionPoolListener, ...]:
    """Validate pool listeners: each must be a ConnectionPoolListener."""
    checked = []
    for listener in listeners:
        if not isinstance(listener, _m.ConnectionPoolListener):
            raise TypeError(
                f"pool listeners must implement pymongo.monitoring.ConnectionPoolListener, "
                f"not {listener!r}"
            )
        checked.append(listener)
    return tuple(checked)


class EventCounter(_m.ConnectionPoolListener):
    """A listener that counts CMAP events by class name (``counts``)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def _count(self, event: Any) -> None:
        self.counts[type(event).__name__] += 1

    pool_created = pool_ready = pool_cleared = pool_closed = _count
    connection_created = connection_ready = connection_closed = _count
    connection_check_out_started = connection_check_out_failed = _count
    connection_checked_out = connection_checked_in = _count


class Publisher:
    """Builds, queues and delivers one pool's events and log messages."""

    __slots__ = ("_by_method", "_flush_pending", "_sorted", "_subscribers", "address", "host",
                 "listeners", "outbox", "port")

    def __init__(self, address: Address, listeners: Iterable[object] = ()) -> None:
        self.address = address
        self.host, self.port = address
        self.listeners = check_listeners(listeners)
        self._sorted: tuple[object, ...] | None = None
        self._subscribers = Subscribers((), _CMAP_METHODS)
        self._by_method: dict[str, tuple[object, ...]] = {}
        #: What the next flush delivers, in order. Callers may test it to
        #: skip a flush with nothing to do (the pool's hot path does); only
        #: this class changes it.
        self.outbox: deque[Effect] = deque()
        self._flush_pending = False

    @property
    def active(self) -> bool:
        """Whether anyone listens: events are only built when this is true."""
        return True if self.listeners else logs(DEBUG)

    def implementers(self, method: str) -> tuple[object, ...]:
        """The listeners that may take ``method``'s events (``listeners.py``
        decides, per listener object); none: the event is not built. Sorted
        again whenever ``listeners`` is replaced."""
        by = self._by_method if self._sorted is self.listeners else self._sort()
        return by[method]

    def _sort(self) -> dict[str, tuple[object, ...]]:
        # The three checkout events ask inline, as implementers does: a call less each.
        subscribers = Subscribers(self.listeners, _CMAP_METHODS)
        self._subscribers = subscribers
        self._by_method = {name: subscribers.takers(name) for name in _CMAP_METHODS}
        self._sorted = self.listeners
        return self._by_method

    # -- the outbox -----------------------------------------------------------

    def later(self, effect: Callable[..., None], *args: Any) -> None:
        """Run ``effect(*args)`` at the next flush, after the state change."""
        self.outbox.append((effect, args))

    def flush_later(self) -> None:
        """Flush from a new greenlet, for code that must not yield.

        While an exception (a kill) propagates, a yield (into a listener)
        would let a second exception, such as the greenlet's own
        gevent.Timeout, replace it, and the kill would be lost.
        """
        if self.outbox and not self._flush_pending:
            self._flush_pending = True
            gevent.spawn(self._flush_pending_now)

    def _flush_pending_now(self) -> None:
        self._flush_pending = False
        self.flush()

    def flush(self) -> None:
        """Deliver everything queued, in order."""
        outbox = self.outbox
        while outbox:
            effect, args = outbox.popleft()
            try:
                effect(*args)
            except Exception:
                name = getattr(effect, "__name__", effect)
                _ERRORS.exception("greenpool: %s%r failed", name, args)

    # -- the 11 CMAP events ---------------------------------------------------

    def pool_created(self, options: dict[str, Any]) -> None:
        if self.active:
            where = self._where()
            listed = ", ".join(f"{name}={value}" for name, value in options.items())
            self._post(
                "pool_created", _m.PoolCreatedEvent(self.address, options),
                {"message": "Connection pool created", **options},
                f"Connection pool created for {where} using options {listed}".rstrip(),
            )

    def pool_ready(self) -> None:
        if self.active:
            self._post("pool_ready", _m.PoolReadyEvent(self.address),
                       {"message": "Connection pool ready"},
                       f"Connection pool ready for {self._where()}")

    def pool_cleared(self, service_id: ObjectId | None, interrupt: bool) -> None:
        if self.active:
            fields: dict[str, Any] = {"message": "Connection pool cleared"}
            text = f"Connection pool for {self._where()} cleared"
            if service_id is not None:
                fields["serviceId"] = str(service_id)
                text += f" for serviceId {service_id}"
            event = _m.PoolClearedEvent(self.address, service_id, interrupt)
            self._post("pool_cleared", event, fields, text)

    def pool_closed(self) -> None:
        if self.active:
            self._post("pool_closed", _m.PoolClosedEvent(self.address),
                       {"message": "Connection pool closed"},
                       f"Connection pool closed for {self._where()}")

    def connection_created(self, conn_id: int) -> None:
        if self.active:
            self._post("connection_created", _m.ConnectionCreatedEvent(self.address, conn_id),
                       {"message": "Connection created", "driverConnectionId": conn_id},
                       f"Connection created: address={self._where()}, "
                       f"driver-generated ID={conn_id}")

    def connection_ready(self, conn_id: int, duration: float) -> None:
        if self.active:
            ms = duration * 1000
            self._post(
                "connection_ready", _m.ConnectionReadyEvent(self.address, conn_id, duration),
                {"message": "Connection ready", "driverConnectionId": conn_id, "durationMS": ms},
                f"Connection ready: address={self._where()}, driver-generated ID={conn_id}, "
                f"established in={ms:.3f} ms",
            )

    def connection_closed(self, conn_id: int, reason: str, error: BaseException | None) -> None:
        if self.active:
            text_reason = CLOSED_REASONS[reason]
            fields: dict[str, Any] = {
                "message": "Connection closed", "driverConnectionId": conn_id,
                "reason": text_reason,
            }
            text = (f"Connection closed: address={self._where()}, driver-generated ID={conn_id}. "
                    f"Reason: {text_reason}.")
            if error is not None:
                fields["error"] = _describe(error)
                text += f" Error: {fields['error']}"
            event = _m.ConnectionClosedEvent(self.address, conn_id, reason)
            self._post("connection_closed", event, fields, text)

    # The three events of every checkout skip the log message's text and
    # fields when the logger is off, and build the event only for listeners.

    def checkout_started(self) -> bool:
        """Report that a checkout started; whether anyone listens to this
        checkout (``active``): its checked-out and checked-in events are
        reported only then, so that they come in pairs."""
        if not logs(DEBUG):
            by = self._by_method if self._sorted is self.listeners else self._sort()
            if by["connection_check_out_started"]:
                self.outbox.append((self._subscribers.notify, (
                    "connection_check_out_started",
                    _m.ConnectionCheckOutStartedEvent(self.address))))
            return bool(self.listeners)
        self._post("connection_check_out_started",
                   _m.ConnectionCheckOutStartedEvent(self.address),
                   {"message": "Connection checkout started"},
                   f"Checkout started for connection to {self._where()}")
        return True

    def checkout_failed(self, reason: str, duration: float, error: BaseException | None) -> None:
        if self.active:
            ms = duration * 1000
            text_reason = CHECKOUT_FAILED_REASONS[reason]
            fields: dict[str, Any] = {
                "message": "Connection checkout failed", "reason": text_reason, "durationMS": ms,
            }
            error_text = ""
            if error is not None:
                fields["error"] = _describe(error)
                error_text = f" Error: {fields['error']}."
            event = _m.ConnectionCheckOutFailedEvent(self.address, reason, duration)
            self._post(
                "connection_check_out_failed", event, fields,
                f"Checkout failed for connection to {self._where()}. Reason: {text_reason}."
                f"{error_text} Duration: {ms:.3f} ms",
            )

    def checked_out(self, conn_id: int, duration: float) -> None:
        if not logs(DEBUG):
            by = self._by_method if self._sorted is self.listeners else self._sort()
            if by["connection_checked_out"]:
                self.outbox.append((self._subscribers.notify, (
                    "connection_checked_out",
                    _m.ConnectionCheckedOutEvent(self.address, conn_id, duration))))
        else:
            ms = duration * 1000
            self._post(
                "connection_checked_out",
                _m.ConnectionCheckedOutEvent(self.address, conn_id, duration),
                {"message": "Connection checked out", "driverConnectionId": conn_id,
                 "durationMS": ms},
                f"Connection checked out: address={self._where()}, driver-generated ID={conn_id}, "
                f"duration={ms:.3f} ms",
            )

    def checked_in(self, conn_id: int) -> None:
        if not logs(DEBUG):
            by = self._by_method if self._sorted is self.listeners else self._sort()
            if by["connection_checked_in"]:
                self.outbox.append((self._subscribers.notify, (
                    "connection_checked_in", _m.ConnectionCheckedInEvent(self.address, conn_id))))
        else:
            self._post("connection_checked_in", _m.ConnectionCheckedInEvent(self.address, conn_id),
                       {"message": "Connection checked in", "driverConnectionId": conn_id},
                       f"Connection checked in: address={self._where()}, "
                       f"driver-generated ID={conn_id}")

    # -- beyond the spec ------------------------------------------------------

    def long_hold(self, event: object, text: str, fields: dict[str, Any]) -> None:
        """A connection held too long (see ``longholds.py``)."""
        self.outbox.append((report_long_hold, (self.listeners, event, text, fields)))

    # -- delivery -------------------------------------------------------------

    def _where(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"

    def _post(self, method: str, event: object, fields: dict[str, Any], text: str) -> None:
        fields["serverHost"] = self.host
        if self.port is not None:
            fields["serverPort"] = self.port
        self.outbox.append((self._deliver, (method, event, fields, text)))

    def _deliver(self, method: str, event: object, fields: dict[str, Any], text: str) -> None:
        if logs(DEBUG):
            LOGGER.debug(text, extra={"structured": fields})
        self._notify(method, event)

    def _notify(self, method: str, event: object) -> None:
        # The three checkout events post their listeners' notify directly
        # (sorted when posted): a call less each.
        if self._sorted is not self.listeners:
            self._sort()
        self._subscribers.notify(method, event)


#: The ConnectionPoolListener methods, one per CMAP event.
_CMAP_METHODS = (
    "pool_created", "pool_ready", "pool_cleared", "pool_closed", "connection_created",
    "connection_ready", "connection_closed", "connection_check_out_started",
    "connection_check_out_failed", "connection_checked_out", "connection_checked_in")


def report_long_hold(listeners: Iterable[object], event: object, text: str,
                     fields: dict[str, Any]) -> None:
    """Log a long hold, then hand ``event`` to the listeners that listen for it."""
    _ERRORS.warning(text, extra={"structured": fields})
    for listener in listeners:
        method = getattr(listener, "connection_held_too_long", None)
        if method is None:
            continue
        try:
            method(event)
        except Exception:
            _ERRORS.exception("greenpool: listener %r raised in connection_held_too_long",
                              listener)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
