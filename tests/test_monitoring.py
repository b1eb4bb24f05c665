"""The spec's log messages on ``greenpool.connection`` and the event fields."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from bson.objectid import ObjectId
from pymongo import errors as pymongo_errors

from greenpool import Pool, PoolClearedError
from tests.cmap_runner import EVENT_TYPES, Recorder
from tests.mock import MockConnector

ADDRESS = ("db.test", 27017)


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "greenpool.connection"]


def test_every_message_in_both_forms(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.connection")
    pool: Pool[Any] = Pool(ADDRESS, {"maxPoolSize": 5, "maxIdleTimeMS": 500},
                           connector=MockConnector())
    pool.ready()
    conn = pool.checkout()
    pool.clear(error=pymongo_errors.AutoReconnect("boom"))
    pool.checkin(conn)
    with pytest.raises(PoolClearedError):
        pool.checkout()
    pool.close()

    texts = [r.getMessage() for r in records(caplog)]
    texts = [re.sub(r"\d+\.\d+ ms", "N ms", text) for text in texts]
    assert texts == [
        "Connection pool created for db.test:27017 using options maxIdleTimeMS=500, "
        "maxPoolSize=5",
        "Connection pool ready for db.test:27017",
        "Checkout started for connection to db.test:27017",
        "Connection created: address=db.test:27017, driver-generated ID=1",
        "Connection ready: address=db.test:27017, driver-generated ID=1, established in=N ms",
        "Connection checked out: address=db.test:27017, driver-generated ID=1, duration=N ms",
        "Connection pool for db.test:27017 cleared",
        "Connection checked in: address=db.test:27017, driver-generated ID=1",
        "Connection closed: address=db.test:27017, driver-generated ID=1. Reason: Connection "
        "became stale because the pool was cleared.",
        "Checkout started for connection to db.test:27017",
        "Checkout failed for connection to db.test:27017. Reason: An error occurred while "
        "trying to establish a new connection. Error: PoolClearedError: Connection pool for "
        "db.test:27017 was cleared because another operation failed with: "
        "AutoReconnect('boom'). Duration: N ms",
        "Connection pool closed for db.test:27017",
    ]
    structured = [r.structured for r in records(caplog)]  # type: ignore[attr-defined]
    for fields in structured:
        assert fields["serverHost"] == "db.test" and fields["serverPort"] == 27017
    assert [f["message"] for f in structured] == [
        "Connection pool created", "Connection pool ready", "Connection checkout started",
        "Connection created", "Connection ready", "Connection checked out",
        "Connection pool cleared", "Connection checked in", "Connection closed",
        "Connection checkout started", "Connection checkout failed", "Connection pool closed",
    ]
    assert structured[0]["maxPoolSize"] == 5 and structured[0]["maxIdleTimeMS"] == 500
    assert structured[3]["driverConnectionId"] == 1
    assert isinstance(structured[4]["durationMS"], float)
    assert structured[8]["reason"] == "Connection became stale because the pool was cleared"
    assert "error" not in structured[8]
    assert structured[10]["reason"] == (
        "An error occurred while trying to establish a new connection")
    assert structured[10]["error"].startswith("PoolClearedError: ")
    assert all(r.levelno == logging.DEBUG for r in records(caplog))


def test_closed_reasons_and_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.connection")
    pool: Pool[Any] = Pool(ADDRESS, {"maxIdleTimeMS": 1}, connector=MockConnector())
    pool.ready()
    conn = pool.checkout()
    conn.mark_errored(pymongo_errors.AutoReconnect("reset"))
    pool.checkin(conn)
    idle = pool.checkout()
    pool.checkin(idle)
    import time
    time.sleep(0.005)
    pool.checkin(pool.checkout())  # closes the idle one on the way
    pool.close()
    closed = [r.structured for r in records(caplog)  # type: ignore[attr-defined]
              if r.structured["message"] == "Connection closed"]  # type: ignore[attr-defined]
    assert [(c["driverConnectionId"], c["reason"], c.get("error")) for c in closed] == [
        (1, "An error occurred while using the connection", "AutoReconnect: reset"),
        (2, "Connection has been available but unused for longer than the configured max "
            "idle time", None),
        (3, "Connection pool was closed", None),
    ]


def test_timeout_and_closed_checkout_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.connection")
    pool: Pool[Any] = Pool(ADDRESS, {"maxPoolSize": 1}, connector=MockConnector())
    pool.ready()
    pool.checkout()
    with pytest.raises(pymongo_errors.WaitQueueTimeoutError):
        pool.checkout(timeout=0)
    pool.close()
    with pytest.raises(pymongo_errors.PyMongoError):
        pool.checkout()
    failed = [r.structured for r in records(caplog)  # type: ignore[attr-defined]
              if r.structured["message"] == "Connection checkout failed"]  # type: ignore[attr-defined]
    assert [f["reason"] for f in failed] == [
        "Wait queue timeout elapsed without a connection becoming available",
        "Connection pool was closed",
    ]
    assert all("error" not in f for f in failed), "error is only for connection errors"


def test_load_balanced_clear_names_the_service(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.connection")
    service = ObjectId()
    recorder = Recorder()
    pool: Pool[Any] = Pool(ADDRESS, {"loadBalanced": True}, listeners=[recorder],
                           connector=MockConnector(service_ids=lambda conn: service))
    pool.ready()
    pool.checkin(pool.checkout())
    pool.clear(service_id=service)
    cleared = [r for r in records(caplog) if r.structured["message"] ==  # type: ignore[attr-defined]
               "Connection pool cleared"]
    assert cleared[0].getMessage() == (
        f"Connection pool for db.test:27017 cleared for serviceId {service}")
    assert cleared[0].structured["serviceId"] == str(service)  # type: ignore[attr-defined]
    event = next(e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionPoolCleared")
    assert event.service_id == service and event.interrupt_connections is False


def test_unix_socket_addresses_have_no_port(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="greenpool.connection")
    pool: Pool[Any] = Pool("/tmp/mongodb-27017.sock", connector=MockConnector())
    pool.ready()
    messages = records(caplog)
    assert messages[1].getMessage() == "Connection pool ready for /tmp/mongodb-27017.sock"
    assert "serverPort" not in messages[1].structured  # type: ignore[attr-defined]


def test_no_events_built_without_listeners_or_logging() -> None:
    pool: Pool[Any] = Pool(ADDRESS, connector=MockConnector())
    assert not pool._events.active
    pool.ready()
    pool.checkin(pool.checkout())
    assert not pool._events.outbox


def test_a_listener_gets_only_the_events_it_implements(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # PyMongo's ConnectionPoolListener methods raise NotImplementedError: one
    # it does not override is never called (nothing logged), and its event
    # is not built for anybody.
    from pymongo import monitoring

    seen: list[object] = []
    built: list[object] = []

    class CheckedIn(monitoring.ConnectionCheckedInEvent):
        def __init__(self, *args: Any) -> None:
            built.append(self)
            super().__init__(*args)

    monkeypatch.setattr(monitoring, "ConnectionCheckedInEvent", CheckedIn)

    class Waits(monitoring.ConnectionPoolListener):
        def connection_checked_out(self, event: Any) -> None:
            seen.append(event)

    pool: Pool[Any] = Pool(ADDRESS, connector=MockConnector(), listeners=[Waits()])
    pool.ready()
    with caplog.at_level(logging.ERROR, logger="greenpool"):
        pool.checkin(pool.checkout())
        pool.checkin(pool.checkout())
    assert [type(event).__name__ for event in seen] == ["ConnectionCheckedOutEvent"] * 2
    assert not caplog.records
    assert not built
    pool._events.listeners = (*pool._events.listeners, Recorder())
    pool.checkin(pool.checkout())
    assert len(built) == 1  # now somebody implements it
