"""The collection API with sessions, transactions and retryable writes, on SecantusDB's
one-node replica set: what each command carried, seen through command events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import InsertOne, UpdateOne
from pymongo import monitoring as _m
from pymongo.errors import ConfigurationError
from pymongo.read_concern import ReadConcern

import greenpool
from greenpool.client import monitor
from tests.events import AllEvents
from tests.failpoints import failpoint
from tests.servers import with_options

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _quick_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "MIN_HEARTBEAT_FREQUENCY", 0.01)


@pytest.fixture
def app_name() -> str:
    return f"sessions_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def events() -> AllEvents:
    return AllEvents()


def connect(replset_uri: str, app_name: str, events: AllEvents,
            **options: Any) -> greenpool.Client:
    uri = with_options(replset_uri, directConnection="true", appName=app_name, **options)
    return greenpool.Client(uri, event_listeners=[events])


@pytest.fixture
def client(replset_uri: str, app_name: str, events: AllEvents) -> Iterator[greenpool.Client]:
    with connect(replset_uri, app_name, events, w="majority",
                 readConcernLevel="majority") as made:
        yield made


def started(events: AllEvents, name: str) -> list[dict[str, Any]]:
    return [event.command for event in events.of(_m.CommandStartedEvent)
            if event.command_name == name]


def fail(app_name: str, commands: list[str], **data: Any) -> dict[str, Any]:
    return {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": commands, "appName": app_name, **data}}


def test_a_transaction_carries_no_concern_but_its_commit(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"txn_{uuid.uuid4().hex[:8]}"]
    orders.insert_one({"_id": 0})
    events.clear()
    with client.start_session() as session:
        session.start_transaction()
        orders.insert_one({"_id": 1}, session=session)
        assert orders.find_one({"_id": 1}, session=session) == {"_id": 1}
        orders.update_one({"_id": 1}, {"$set": {"a": 1}}, session=session)
        session.commit_transaction()
    commands = [event.command for event in events.of(_m.CommandStartedEvent)]
    in_transaction = [c for c in commands if "txnNumber" in c and "autocommit" in c]
    assert [next(iter(c)) for c in in_transaction] == ["insert", "find", "update",
                                                       "commitTransaction"]
    assert all("writeConcern" not in c and "readConcern" not in c
               for c in in_transaction[:-1])
    assert in_transaction[0]["startTransaction"] is True
    assert in_transaction[-1]["writeConcern"] == {"w": "majority"}
    assert orders.find_one({"_id": 1}) == {"_id": 1, "a": 1}


def test_outside_a_transaction_the_session_and_concerns_are_sent(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"plain_{uuid.uuid4().hex[:8]}"]
    with client.start_session() as session:
        orders.insert_one({"_id": 1}, session=session)
        orders.find({}, session=session).to_list()
        lsid = session.lsid
    insert, = started(events, "insert")
    find, = started(events, "find")
    assert insert["lsid"] == find["lsid"] == lsid
    assert insert["writeConcern"] == {"w": "majority"}
    assert find["readConcern"] == {"level": "majority"}
    local = orders.with_options(read_concern=ReadConcern("local"))
    local.find_one({})
    assert started(events, "find")[-1]["readConcern"] == {"level": "local"}


def test_insert_many_batches_are_retried_with_their_transaction_id(
        replset_uri: str, app_name: str, events: AllEvents) -> None:
    with connect(replset_uri, app_name, events) as client:
        orders = client.db[f"retry_{uuid.uuid4().hex[:8]}"]
        with failpoint(replset_uri, fail(app_name, ["insert"], closeConnection=True)):
            result = orders.insert_many([{"_id": i} for i in range(3)])
        first, retried = started(events, "insert")
        assert (first["lsid"], first["txnNumber"]) == (retried["lsid"], retried["txnNumber"])
        assert result.inserted_ids == [0, 1, 2]
        assert orders.count_documents({}) == 3


def test_bulk_write_batches_are_retried_and_counted_once(
        replset_uri: str, app_name: str, events: AllEvents) -> None:
    with connect(replset_uri, app_name, events) as client:
        orders = client.db[f"bulk_{uuid.uuid4().hex[:8]}"]
        with failpoint(replset_uri, fail(app_name, ["update"], closeConnection=True)):
            result = orders.bulk_write([InsertOne({"_id": 1}),
                                        UpdateOne({"_id": 1}, {"$inc": {"n": 1}})])
        assert (result.inserted_count, result.modified_count) == (1, 1)
        assert len(started(events, "update")) == 2
        assert orders.find_one({"_id": 1}) == {"_id": 1, "n": 1}


def test_a_transaction_with_w0_is_refused(replset_uri: str, app_name: str,
                                          events: AllEvents) -> None:
    with connect(replset_uri, app_name, events, w=0) as client, \
            client.start_session() as session, pytest.raises(ConfigurationError):
        session.start_transaction()
