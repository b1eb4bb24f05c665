"""The pool's always-on counters: get_stats() and pop_stats(), with no listener."""

from __future__ import annotations

from typing import Any

import gevent
import pytest
from pymongo import errors as pymongo_errors

from greenpool import Client, Pool, PoolClearedError, WaitQueueTimeoutError
from greenpool.pool.metrics import STAT_KEYS
from tests.events import QuietPoolListener
from tests.listening import listened
from tests.mock import MockConnector

ADDRESS = ("db.test", 27017)


# Every test twice: with a listener, and without one (the pool's fast paths).
pytestmark = pytest.mark.usefixtures("listening")


class Quiet(QuietPoolListener):
    """A listener that does nothing: it only takes the pool off its fast paths."""


def make_pool(options: dict[str, Any] | None = None, connector: Any = None) -> Pool[Any]:
    pool: Pool[Any] = Pool(ADDRESS, options or {}, connector=connector or MockConnector(),
                           listeners=(Quiet(),) if listened() else ())
    pool.ready()
    return pool


def counters(stats: dict[str, int]) -> dict[str, int]:
    """The counts, without the times (which depend on the machine)."""
    return {key: value for key, value in stats.items() if not key.endswith("_ms")}


def test_get_stats_has_psycopg_pools_keys_and_starts_at_zero() -> None:
    pool = make_pool({"minPoolSize": 0, "maxPoolSize": 7})
    stats = pool.get_stats()
    assert tuple(stats) == STAT_KEYS
    assert stats["pool_min"] == 0 and stats["pool_max"] == 7
    assert all(stats[key] == 0 for key in STAT_KEYS if key not in ("pool_min", "pool_max"))


def test_checkouts_checkins_and_usage_are_counted() -> None:
    pool = make_pool()
    for _ in range(3):
        with pool.checkout():
            pass
    with pool.checkout():
        gevent.sleep(0.05)  # usage time: at least 50 ms in all
    stats = pool.get_stats()
    assert counters(stats) == {
        "pool_min": 0, "pool_max": 100, "pool_size": 1, "pool_available": 1,
        "requests_waiting": 0, "requests_num": 4, "requests_queued": 0, "requests_errors": 0,
        "requests_timeouts": 0, "returns_bad": 0, "connections_num": 1,
        "connections_errors": 0, "connections_lost": 0,
    }
    assert 45 <= stats["usage_ms"] < 5000
    assert stats["requests_wait_ms"] >= 0 and stats["connections_ms"] >= 0


def test_a_queued_checkout_is_counted_with_its_wait() -> None:
    pool = make_pool({"maxPoolSize": 1})
    held = pool.checkout()
    waiter = gevent.spawn(lambda: pool.checkout())
    gevent.sleep(0)
    assert pool.get_stats()["requests_waiting"] == 1
    gevent.sleep(0.05)
    pool.checkin(held)
    conn = waiter.get(timeout=5)
    stats = pool.get_stats()
    assert stats["requests_num"] == 2 and stats["requests_queued"] == 1
    assert stats["requests_waiting"] == 0
    assert 45 <= stats["requests_wait_ms"] < 5000
    pool.checkin(conn)


def test_timeouts_and_other_checkout_errors_are_counted() -> None:
    pool = make_pool({"maxPoolSize": 1, "waitQueueTimeoutMS": 20})
    held = pool.checkout()
    with pytest.raises(WaitQueueTimeoutError):
        pool.checkout()
    with pytest.raises(WaitQueueTimeoutError):
        pool.checkout(timeout=0)
    pool.clear()  # paused: the next checkout fails at once, not by timeout
    with pytest.raises(PoolClearedError):
        pool.checkout()
    stats = pool.get_stats()
    assert (stats["requests_num"], stats["requests_errors"], stats["requests_timeouts"]) == (
        4, 3, 2)
    assert stats["requests_queued"] == 2  # the zero timeout queued too, and left at once
    assert stats["requests_wait_ms"] >= 15
    pool.checkin(held)
    assert pool.get_stats()["returns_bad"] == 1  # stale after the clear: closed, not reused


def test_a_gevent_timeout_thrown_into_a_waiting_checkout_counts_as_a_timeout() -> None:
    pool = make_pool({"maxPoolSize": 1})
    held = pool.checkout()
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.02):
        pool.checkout()
    stats = pool.get_stats()
    assert (stats["requests_errors"], stats["requests_timeouts"]) == (1, 1)
    assert stats["requests_waiting"] == 0
    pool.checkin(held)


def test_failed_establishments_and_lost_connections_are_counted() -> None:
    failures = iter([pymongo_errors.AutoReconnect("refused"), None, None])
    pool = make_pool(connector=MockConnector(fail=lambda conn: next(failures)))
    with pytest.raises(pymongo_errors.AutoReconnect):
        pool.checkout()
    conn = pool.checkout()
    conn.mark_errored(pymongo_errors.AutoReconnect("reset by peer"))
    pool.checkin(conn)  # closed: lost, and a bad return
    with pool.checkout():
        pass
    stats = pool.get_stats()
    assert counters(stats) == {
        "pool_min": 0, "pool_max": 100, "pool_size": 1, "pool_available": 1,
        "requests_waiting": 0, "requests_num": 3, "requests_queued": 0, "requests_errors": 1,
        "requests_timeouts": 0, "returns_bad": 1, "connections_num": 3,
        "connections_errors": 1, "connections_lost": 1,
    }


def test_an_interrupted_connection_is_a_bad_return_but_not_lost() -> None:
    """clear() interrupted it: it closes as stale (CMAP), not as broken."""
    pool = make_pool()
    conn = pool.checkout()
    pool.clear(interrupt_in_use_connections=True)
    pool.checkin(conn)
    stats = pool.get_stats()
    assert (stats["connections_lost"], stats["returns_bad"]) == (0, 1)


def test_pop_stats_returns_the_counters_and_starts_them_again() -> None:
    pool = make_pool({"maxPoolSize": 3})
    held = pool.checkout()
    with pool.checkout():
        gevent.sleep(0.01)
    popped = pool.pop_stats()
    assert popped["requests_num"] == 2 and popped["connections_num"] == 2
    assert popped["usage_ms"] >= 5
    after = pool.get_stats()
    # The gauges describe the pool now; the counters start again.
    assert (after["pool_size"], after["pool_available"], after["pool_max"]) == (2, 1, 3)
    assert all(value == 0 for key, value in after.items()
               if key not in ("pool_size", "pool_available", "pool_max"))
    pool.checkin(held)  # checked out before the pop: its usage counts after it
    assert pool.get_stats()["usage_ms"] >= 5 and pool.get_stats()["requests_num"] == 0


def test_background_establishments_are_counted_as_connections_not_requests() -> None:
    pool = make_pool({"minPoolSize": 2, "backgroundThreadIntervalMS": 5})
    with gevent.Timeout(5):
        while pool.get_stats()["pool_available"] < 2:
            gevent.sleep(0.005)
    stats = pool.get_stats()
    assert (stats["connections_num"], stats["requests_num"], stats["pool_min"]) == (2, 0, 2)
    pool.close()


def test_the_client_forwards_its_pools_stats(mongodb_uri: str) -> None:
    with Client(mongodb_uri) as client:
        for _ in range(3):
            client.command("admin", {"ping": 1})
        stats = client.get_stats()
        assert stats["requests_num"] >= 3 and stats["connections_num"] >= 1
        assert client.pop_stats()["requests_num"] == stats["requests_num"]
        assert client.get_stats()["requests_num"] == 0
