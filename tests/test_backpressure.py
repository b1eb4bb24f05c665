"""The Client Backpressure spec on greenpool.Client, against tests/fake_server.py: overload
errors are retried after a backoff, at most maxAdaptiveRetries times, by the commands'
policies; they clear no pool and mark no server Unknown; a network error in a new
connection's hello is one of them. What the client sent is counted server side.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from bson.int64 import Int64
from pymongo import monitoring as _m
from pymongo.errors import OperationFailure

from greenpool import Client
from tests.events import AllEvents
from tests.fake_server import HANG_UP, FakeServer, Request

pytestmark = pytest.mark.timeout(60)

OVERLOADED = {"ok": 0.0, "code": 462, "codeName": "IngressRequestRateLimitExceeded",
              "errmsg": "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
              "errorLabels": ["SystemOverloadedError", "RetryableError"]}
SET = {"setName": "rs", "hosts": None, "logicalSessionTimeoutMinutes": 30}


@pytest.fixture
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoffs of zero: counts are what these tests look at."""
    monkeypatch.setattr(random, "random", lambda: 0.0)


def uri(server: FakeServer, options: str = "") -> str:
    host, port = server.address
    return f"mongodb://{host}:{port}/?directConnection=true{'&' if options else ''}{options}"


def always(reply: dict[str, Any]) -> Any:
    return lambda request: dict(reply)


def test_an_overloaded_read_is_retried_twice_after_growing_backoffs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "random", lambda: 1.0)  # the longest backoffs: 0.2 + 0.4 s
    events = AllEvents()
    with (FakeServer(hello=SET, handlers={"find": always(OVERLOADED)}) as server,
          Client(uri(server), event_listeners=[events]) as client):
        client.command("admin", {"ping": 1})
        started = time.monotonic()
        with pytest.raises(OperationFailure) as caught:
            client.command("db", {"find": "c", "filter": {}})
        assert time.monotonic() - started >= 0.6  # it waited both backoffs
        assert caught.value.has_error_label("SystemOverloadedError")
        assert caught.value.has_error_label("RetryableError")
        assert server.names().count("find") == 3  # MAX_RETRIES + 1
        assert not events.of(_m.PoolClearedEvent)
        (known,) = client.topology.servers.values()
        assert known.description.is_server_type_known


@pytest.mark.usefixtures("no_jitter")
@pytest.mark.parametrize(("options", "command", "attempts"), [
    ("maxAdaptiveRetries=1", {"find": "c", "filter": {}}, 2),
    ("maxAdaptiveRetries=0", {"find": "c", "filter": {}}, 1),
    ("retryReads=false", {"find": "c", "filter": {}}, 1),
    ("", {"ping": 1}, 3),  # any other command: retried when both are allowed
    ("retryWrites=false", {"ping": 1}, 1),
    ("retryReads=false", {"ping": 1}, 1),
    ("retryReads=false", {"insert": "c", "documents": [{}]}, 3),  # a write: retryWrites
    ("retryWrites=false", {"insert": "c", "documents": [{}]}, 1),
])
def test_each_policy_retries_what_it_allows(options: str, command: dict[str, Any],
                                            attempts: int) -> None:
    name = next(iter(command))
    with (FakeServer(hello=SET, handlers={name: always(OVERLOADED)}) as server,
          Client(uri(server, options)) as client):
        with pytest.raises(OperationFailure):
            client.command("db", command)
        assert server.names().count(name) == attempts


@pytest.mark.usefixtures("no_jitter")
def test_a_retryable_write_keeps_its_transaction_id_across_overload_retries() -> None:
    replies = [OVERLOADED, OVERLOADED, {"ok": 1.0, "n": 1}]
    with (FakeServer(hello=SET, handlers={"insert": lambda request: dict(replies.pop(0))})
          as server, Client(uri(server)) as client):
        assert client.command("db", {"insert": "c", "documents": [{}]})["n"] == 1
        inserts = [r.command for r in server.requests if r.name == "insert"]
        assert len(inserts) == 3
        assert len({(i["lsid"]["id"], i["txnNumber"]) for i in inserts}) == 1


@pytest.mark.usefixtures("no_jitter")
def test_a_get_more_is_retried_after_overload_errors_only() -> None:
    replies = [OVERLOADED, OVERLOADED,
               {"ok": 1.0, "cursor": {"id": Int64(0), "ns": "db.c", "nextBatch": [{"n": 2}]}}]

    def find(request: Request) -> dict[str, Any]:
        return {"ok": 1.0, "cursor": {"id": Int64(7), "ns": "db.c", "firstBatch": [{"n": 1}]}}

    with (FakeServer(hello=SET, handlers={"find": find, "killCursors": always({"ok": 1.0}),
                                          "getMore": lambda request: dict(replies.pop(0))})
          as server, Client(uri(server)) as client):
        with client.find("db", "c", {}) as cursor:
            assert list(cursor) == [{"n": 1}, {"n": 2}]
        assert server.names().count("getMore") == 3
        replies[:] = [{"ok": 0.0, "code": 2, "errmsg": "bad value"}]
        with client.find("db", "c", {}) as cursor, pytest.raises(OperationFailure):
            list(cursor)
        assert server.names().count("getMore") == 4  # not retried


@pytest.mark.usefixtures("no_jitter")
def test_a_network_error_in_a_new_connections_hello_clears_nothing() -> None:
    """The connection after the monitor's is dropped in its hello, as a server shedding
    connections does: labelled an overload error, the pool is not cleared, the server
    stays known, and the ping is retried on a new connection."""
    def hello(request: Request) -> Any:
        if request.connection == 2:
            return HANG_UP
        return server._hello(request)

    events = AllEvents()
    server = FakeServer(hello=SET, handlers={"isMaster": hello})
    with server, Client(uri(server), event_listeners=[events]) as client:
        client.topology.select()
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        assert not events.of(_m.PoolClearedEvent)
        assert [e for e in events.of(_m.ServerDescriptionChangedEvent)
                if e.new_description.server_type_name == "Unknown"] == []
        handshakes = [r for r in server.requests if r.name == "isMaster"]
        assert [r.connection for r in handshakes][:3] == [1, 2, 3]
        # Every handshake says greenpool backs off from overload errors.
        assert all(r.command["backpressure"] is True for r in handshakes)
