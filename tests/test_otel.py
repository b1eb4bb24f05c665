"""greenpool.otel: the semantic-convention connection metrics, read back
through the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

import gevent
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from greenpool import Client, Pool, WaitQueueTimeoutError
from greenpool.otel import ConnectionMetrics
from tests.mock import MockConnector

POOL = "db.client.connection.pool.name"
STATE = "db.client.connection.state"


def provider() -> tuple[MeterProvider, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]), reader


def read(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
    """Every data point by (metric name, sorted attributes): a number for
    counters, the point itself for histograms."""
    points: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "greenpool"
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted(point.attributes.items())))
                    points[key] = getattr(point, "value", point)
    return points


def of(name: str, pool: str, state: str | None = None) -> tuple[str, tuple[tuple[str, Any], ...]]:
    attributes = {POOL: pool} if state is None else {POOL: pool, STATE: state}
    return (name, tuple(sorted(attributes.items())))


def test_a_pools_metrics_follow_its_checkouts_and_return_to_zero_at_close() -> None:
    meters, reader = provider()
    name = "db.test:27017"
    pool: Pool[Any] = Pool(("db.test", 27017), {"maxPoolSize": 2, "minPoolSize": 1,
                                                 "waitQueueTimeoutMS": 20},
                           connector=MockConnector(), listeners=[ConnectionMetrics(meters)])
    pool.ready()
    first, second = pool.checkout(), pool.checkout()
    waiter = gevent.spawn(pool.checkout)
    gevent.sleep(0)
    points = read(reader)
    assert points[of("db.client.connection.pending_requests", name)] == 1
    assert points[of("db.client.connection.count", name, "used")] == 2
    with pytest.raises(WaitQueueTimeoutError):
        waiter.get(timeout=5)
    gevent.sleep(0.03)
    pool.checkin(first)
    points = read(reader)
    assert points[of("db.client.connection.count", name, "used")] == 1
    assert points[of("db.client.connection.count", name, "idle")] == 1
    assert points[of("db.client.connection.max", name)] == 2
    assert points[of("db.client.connection.idle.max", name)] == 2
    assert points[of("db.client.connection.idle.min", name)] == 1
    assert points[of("db.client.connection.pending_requests", name)] == 0
    assert points[of("db.client.connection.timeouts", name)] == 1
    assert points[of("db.client.connection.create_time", name)].count == 2
    waits = points[of("db.client.connection.wait_time", name)]
    assert waits.count == 2 and waits.sum >= 0
    uses = points[of("db.client.connection.use_time", name)]
    assert uses.count == 1 and 0.025 <= uses.sum < 5
    pool.close()
    pool.checkin(second)
    points = read(reader)
    for metric in ("db.client.connection.max", "db.client.connection.idle.max",
                   "db.client.connection.idle.min"):
        assert points[of(metric, name)] == 0
    assert points[of("db.client.connection.count", name, "used")] == 0
    assert points[of("db.client.connection.count", name, "idle")] == 0


def test_a_client_reports_its_pool_under_the_servers_address(mongodb_uri: str) -> None:
    meters, reader = provider()
    with Client(mongodb_uri + "?maxPoolSize=3",
                event_listeners=[ConnectionMetrics(meters, prefix="app ")]) as client:
        gevent.joinall([gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(20)],
                       raise_error=True)
        host, port = client.address
        name = f"app {host}:{port}"
        points = read(reader)
        assert points[of("db.client.connection.wait_time", name)].count == 20
        assert points[of("db.client.connection.use_time", name)].count == 20
        assert points[of("db.client.connection.count", name, "used")] == 0
        idle = points[of("db.client.connection.count", name, "idle")]
        assert idle == client.stats().available and 1 <= idle <= 3
        assert points[of("db.client.connection.max", name)] == 3
        assert points[of("db.client.connection.create_time", name)].count == idle
        assert points[of("db.client.connection.pending_requests", name)] == 0


def test_the_same_instrumentation_works_for_greenpool_pymongo_pools(mongodb_uri: str) -> None:
    greenpool_pymongo = pytest.importorskip("greenpool.pymongo")
    meters, reader = provider()
    client = greenpool_pymongo.MongoClient(mongodb_uri, maxPoolSize=2,
                                           event_listeners=[ConnectionMetrics(meters)])
    try:
        gevent.joinall([gevent.spawn(client.admin.command, "ping") for _ in range(10)],
                       raise_error=True)
        (server,) = client._topology._servers.values()
        assert isinstance(server.pool, greenpool_pymongo.GreenPool)
        host, port = server.description.address
        name = f"{host}:{port}"
        points = read(reader)
        assert points[of("db.client.connection.wait_time", name)].count >= 10
        assert points[of("db.client.connection.use_time", name)].count >= 10
        assert points[of("db.client.connection.count", name, "used")] == 0
        assert 1 <= points[of("db.client.connection.count", name, "idle")] <= 2
        assert points[of("db.client.connection.max", name)] == 2
        assert points[of("db.client.connection.pending_requests", name)] == 0
        assert points[of("db.client.connection.create_time", name)].count >= 1
    finally:
        client.close()


def test_long_holds_are_counted_once_per_hold() -> None:
    meters, reader = provider()
    name = "db.test:27017"
    pool: Pool[Any] = Pool(("db.test", 27017), connector=MockConnector(),
                           listeners=[ConnectionMetrics(meters)], long_hold_threshold=0.02)
    pool.ready()
    assert read(reader)[of("greenpool.connection.long_holds", name)] == 0
    for _ in range(2):
        with pool.checkout():
            gevent.sleep(0.1)
    with pool.checkout():
        pass  # not long
    assert read(reader)[of("greenpool.connection.long_holds", name)] == 2
    pool.close()
