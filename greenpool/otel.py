"""OpenTelemetry metrics for connection pools: the semantic conventions' DB
client connection metrics, from CMAP events.

Rules of this module: turning CMAP events into OpenTelemetry instruments; it listens to
events only and imports nothing from greenpool but :mod:`greenpool._version`, so it
works on any pool that emits PyMongo's events.

    pip install 'greenpool[otel]'

:class:`ConnectionMetrics` is a :class:`pymongo.monitoring.ConnectionPoolListener`,
so the same object instruments greenpool's pools (``greenpool.Client``,
``greenpool.Pool``) and the pools of ``greenpool.pymongo.MongoClient`` (and
of stock PyMongo)::

    from greenpool.otel import ConnectionMetrics

    client = greenpool.Client(uri, event_listeners=[ConnectionMetrics()])
    client = greenpool.pymongo.MongoClient(uri, event_listeners=[ConnectionMetrics()])

It records, each with the attribute ``db.client.connection.pool.name``
(``host:port`` of the pool's server, after an optional ``prefix``):

* ``db.client.connection.count`` (``db.client.connection.state`` idle or
  used), ``.idle.max`` and ``.max`` (maxPoolSize; none when unlimited),
  ``.idle.min`` (minPoolSize), ``.pending_requests`` (checkouts under way);
* ``db.client.connection.timeouts``: checkouts that failed by timeout;
* histograms ``db.client.connection.create_time`` (ConnectionReady's
  duration), ``.wait_time`` (ConnectionCheckedOut's duration) and
  ``.use_time`` (checked out until checked in), in seconds;
* ``greenpool.connection.long_holds``: connections held longer than the
  pool's ``long_hold_threshold`` (greenpool's own event, not CMAP's, hence
  greenpool's name rather than the conventions'), one per checkout.

Recording never blocks: the SDK's instruments take an uncontended lock and
return, so a listener that records does not add a yield point to the pool.
Use one instance per client: the state it keeps per pool is keyed by address.
"""

from __future__ import annotations

import time
from typing import Any

from pymongo import monitoring

try:
    from opentelemetry import metrics as _otel_metrics
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "greenpool.otel needs the OpenTelemetry API: pip install 'greenpool[otel]'"
    ) from error

__all__ = ["ConnectionMetrics"]

_POOL_NAME = "db.client.connection.pool.name"
_STATE = "db.client.connection.state"
_DEFAULT_MAX_POOL_SIZE = 100  # CMAP defaults: PoolCreatedEvent lists only other values
_DEFAULT_MIN_POOL_SIZE = 0
_PENDING, _IDLE, _USED = "pending", "idle", "used"
# The semantic conventions' advice for these histograms: seconds, from 1 ms
# to 10 s, with sub-millisecond buckets added because a pool's waits usually
# are that short.
_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)


class _PoolTrack:
    """What the listener knows of one pool: its connections' states and the
    limits it reported, so every UpDownCounter returns to zero at close."""

    __slots__ = ("attributes", "idle", "limits", "out_at", "state", "used")

    def __init__(self, name: str) -> None:
        self.attributes = {_POOL_NAME: name}
        self.idle = {_POOL_NAME: name, _STATE: _IDLE}
        self.used = {_POOL_NAME: name, _STATE: _USED}
        self.state: dict[int, str] = {}  # connection id -> pending, idle or used
        self.out_at: dict[int, float] = {}  # connection id -> when it was checked out
        self.limits: list[tuple[Any, int]] = []  # (instrument, value) added at creation


class ConnectionMetrics(monitoring.ConnectionPoolListener):
    """A pool listener that records the semantic-convention connection metrics.

    :param meter_provider: the OpenTelemetry ``MeterProvider`` to use; the
        global one when None.
    :param prefix: put before ``host:port`` in the pool name attribute (to
        tell apart two clients of the same server).
    """

    def __init__(self, meter_provider: Any = None, prefix: str = "") -> None:
        from greenpool._version import __version__

        meter = _otel_metrics.get_meter("greenpool", __version__, meter_provider)
        self.prefix = prefix
        self._pools: dict[Any, _PoolTrack] = {}
        self._count = meter.create_up_down_counter(
            "db.client.connection.count", unit="{connection}",
            description="The number of connections that are currently in the state "
                        "described by the state attribute.")
        self._idle_max = meter.create_up_down_counter(
            "db.client.connection.idle.max", unit="{connection}",
            description="The maximum number of idle open connections allowed.")
        self._idle_min = meter.create_up_down_counter(
            "db.client.connection.idle.min", unit="{connection}",
            description="The minimum number of idle open connections allowed.")
        self._max = meter.create_up_down_counter(
            "db.client.connection.max", unit="{connection}",
            description="The maximum number of open connections allowed.")
        self._pending_requests = meter.create_up_down_counter(
            "db.client.connection.pending_requests", unit="{request}",
            description="The number of current pending requests for an open connection.")
        self._timeouts = meter.create_counter(
            "db.client.connection.timeouts", unit="{timeout}",
            description="The number of connection timeouts that have occurred trying to "
                        "obtain a connection from the pool.")
        self._create_time = meter.create_histogram(
            "db.client.connection.create_time", unit="s",
            explicit_bucket_boundaries_advisory=_BUCKETS,
            description="The time it took to create a new connection.")
        self._wait_time = meter.create_histogram(
            "db.client.connection.wait_time", unit="s",
            explicit_bucket_boundaries_advisory=_BUCKETS,
            description="The time it took to obtain an open connection from the pool.")
        self._use_time = meter.create_histogram(
            "db.client.connection.use_time", unit="s",
            explicit_bucket_boundaries_advisory=_BUCKETS,
            description="The time between borrowing a connection and returning it to the pool.")
        self._long_holds = meter.create_counter(
            "greenpool.connection.long_holds", unit="{hold}",
            description="The number of connections held longer than the pool's "
                        "long_hold_threshold, counted once per checkout.")

    def _track(self, address: Any) -> _PoolTrack:
        track = self._pools.get(address)
        if track is None:
            host, port = address
            name = f"{self.prefix}{host}" if port is None else f"{self.prefix}{host}:{port}"
            track = self._pools[address] = _PoolTrack(name)
        return track

    def _move(self, track: _PoolTrack, conn_id: int, to: str | None) -> None:
        """Connection ``conn_id`` moves to state ``to`` (None: it is gone)."""
        state = track.state
        was = state.get(conn_id)
        if was == to:
            return
        if was == _IDLE:
            self._count.add(-1, track.idle)
        elif was == _USED:
            self._count.add(-1, track.used)
        if to is None:
            state.pop(conn_id, None)
            return
        state[conn_id] = to
        if to == _IDLE:
            self._count.add(1, track.idle)
        elif to == _USED:
            self._count.add(1, track.used)

    # -- pool events ------------------------------------------------------------------

    def pool_created(self, event: monitoring.PoolCreatedEvent) -> None:
        track = self._track(event.address)
        options = event.options or {}
        max_size = options.get("maxPoolSize", _DEFAULT_MAX_POOL_SIZE)
        min_size = options.get("minPoolSize", _DEFAULT_MIN_POOL_SIZE)
        limits: list[tuple[Any, int]] = [(self._idle_min, min_size)]
        if max_size:  # 0 is no limit: nothing to report
            limits += [(self._max, max_size), (self._idle_max, max_size)]
        for instrument, value in limits:
            instrument.add(value, track.attributes)
        track.limits += limits
        # Zero points, so a dashboard shows the series before the first event.
        self._pending_requests.add(0, track.attributes)
        self._timeouts.add(0, track.attributes)
        self._long_holds.add(0, track.attributes)
        self._count.add(0, track.idle)
        self._count.add(0, track.used)

    def pool_ready(self, event: monitoring.PoolReadyEvent) -> None:
        pass

    def pool_cleared(self, event: monitoring.PoolClearedEvent) -> None:
        pass

    def pool_closed(self, event: monitoring.PoolClosedEvent) -> None:
        track = self._pools.get(event.address)
        if track is None:
            return
        for instrument, value in track.limits:
            instrument.add(-value, track.attributes)
        track.limits = []

    # -- connection events --------------------------------------------------------------

    def connection_created(self, event: monitoring.ConnectionCreatedEvent) -> None:
        self._move(self._track(event.address), event.connection_id, _PENDING)

    def connection_ready(self, event: monitoring.ConnectionReadyEvent) -> None:
        track = self._track(event.address)
        self._move(track, event.connection_id, _IDLE)
        duration = getattr(event, "duration", None)
        if duration is not None:
            self._create_time.record(duration, track.attributes)

    def connection_closed(self, event: monitoring.ConnectionClosedEvent) -> None:
        track = self._track(event.address)
        self._move(track, event.connection_id, None)
        track.out_at.pop(event.connection_id, None)

    def connection_check_out_started(
            self, event: monitoring.ConnectionCheckOutStartedEvent) -> None:
        self._pending_requests.add(1, self._track(event.address).attributes)

    def connection_check_out_failed(self, event: monitoring.ConnectionCheckOutFailedEvent) -> None:
        attributes = self._track(event.address).attributes
        self._pending_requests.add(-1, attributes)
        if event.reason == monitoring.ConnectionCheckOutFailedReason.TIMEOUT:
            self._timeouts.add(1, attributes)

    def connection_checked_out(self, event: monitoring.ConnectionCheckedOutEvent) -> None:
        track = self._track(event.address)
        self._pending_requests.add(-1, track.attributes)
        self._move(track, event.connection_id, _USED)
        track.out_at[event.connection_id] = time.monotonic()
        duration = getattr(event, "duration", None)
        if duration is not None:
            self._wait_time.record(duration, track.attributes)

    def connection_held_too_long(self, event: Any) -> None:
        """greenpool's ``ConnectionHeldTooLongEvent`` (greenpool.pool.longholds)."""
        self._long_holds.add(1, self._track(event.address).attributes)

    def connection_checked_in(self, event: monitoring.ConnectionCheckedInEvent) -> None:
        track = self._track(event.address)
        out_at = track.out_at.pop(event.connection_id, None)
        if out_at is not None:
            self._use_time.record(time.monotonic() - out_at, track.attributes)
        if track.state.get(event.connection_id) == _USED:
            self._move(track, event.connection_id, _IDLE)
