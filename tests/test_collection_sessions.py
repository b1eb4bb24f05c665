"""The collection API with sessions, transactions and retryable writes, on SecantusDB's
one-node replica set: what each command carried, seen through command events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from pymongo import InsertOne, ReadPreference, UpdateOne
from pymongo import monitoring as _m
from pymongo.client_session import TransactionOptions  # type: ignore[attr-defined]
from pymongo.errors import ConfigurationError, InvalidOperation
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

import greenpool
from greenpool.client.topology import monitor
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
    assert all("writeConcern" not in c for c in in_transaction[:-1])
    # The transaction's read concern (the client's here) on its first command only.
    assert in_transaction[0]["readConcern"] == {"level": "majority"}
    assert all("readConcern" not in c for c in in_transaction[1:])
    assert in_transaction[0]["startTransaction"] is True
    assert in_transaction[-1]["writeConcern"] == {"w": "majority"}
    assert orders.find_one({"_id": 1}) == {"_id": 1, "a": 1}


def test_outside_a_transaction_the_session_and_concerns_are_sent(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"plain_{uuid.uuid4().hex[:8]}"]
    with client.start_session() as session:
        orders.insert_one({"_id": 1}, session=session)
        # The insert's operationTime: the find's reply may carry a later one
        # when the server wrote anything in between.
        operation_time = session.operation_time
        orders.find({}, session=session).to_list()
        lsid = session.lsid
    insert, = started(events, "insert")
    find, = started(events, "find")
    assert insert["lsid"] == find["lsid"] == lsid
    assert insert["writeConcern"] == {"w": "majority"}
    # Causally consistent: the read comes after the insert.
    assert find["readConcern"] == {"level": "majority", "afterClusterTime": operation_time}
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


# -- causal consistency, snapshots, transaction options ------------------------------------


def test_a_causally_consistent_sessions_reads_follow_its_last_operation(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"causal_{uuid.uuid4().hex[:8]}"]
    with client.start_session() as session:
        assert session.options.causal_consistency is True
        orders.find_one({}, session=session)  # no operationTime yet: nothing to follow
        first = session.operation_time
        orders.insert_one({"_id": 1}, session=session)
        after_insert = session.operation_time
        orders.count_documents({}, session=session)
        orders.distinct("_id", session=session)
        orders.aggregate([], session=session).to_list()
        client.db.command("ping", session=session)  # the generic method adds nothing
    assert first is not None and after_insert is not None and after_insert >= first
    find, = started(events, "find")
    assert find["readConcern"] == {"level": "majority"}
    # A write follows the session's last operation too, by afterClusterTime alone.
    assert started(events, "insert")[0]["readConcern"] == {"afterClusterTime": first}
    reads = started(events, "aggregate") + started(events, "distinct")
    assert [r["readConcern"]["afterClusterTime"] for r in reads] == [after_insert] * 3
    assert "readConcern" not in started(events, "ping")[0]


def test_a_session_that_is_not_causally_consistent_reads_without_a_time(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"loose_{uuid.uuid4().hex[:8]}"]
    with client.start_session(causal_consistency=False) as session:
        orders.insert_one({"_id": 1}, session=session)
        orders.find_one({}, session=session)
        session.advance_operation_time(session.operation_time)
    assert started(events, "find")[0]["readConcern"] == {"level": "majority"}


def test_a_snapshot_session_reads_at_its_first_reads_time(
        replset_uri: str, app_name: str, events: AllEvents) -> None:
    with connect(replset_uri, app_name, events) as client:
        orders = client.db[f"snap_{uuid.uuid4().hex[:8]}"]
        orders.insert_one({"_id": 1})
        with client.start_session(snapshot=True) as session:
            assert session.options.causal_consistency is False
            orders.find({}, session=session).to_list()
            orders.find_one({}, session=session)
            with pytest.raises(InvalidOperation, match="snapshot"):
                session.start_transaction()
        with pytest.raises(ConfigurationError, match="snapshot"):
            client.start_session(snapshot=True, causal_consistency=True)
    first, second = started(events, "find")
    assert first["readConcern"] == {"level": "snapshot"}
    assert second["readConcern"]["level"] == "snapshot"
    assert "atClusterTime" in second["readConcern"]


def test_a_transactions_options_come_from_the_call_the_session_then_the_client(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"options_{uuid.uuid4().hex[:8]}"]
    orders.insert_one({"_id": 0})
    defaults = TransactionOptions(write_concern=WriteConcern(w=1), max_commit_time_ms=5000)
    with client.start_session(default_transaction_options=defaults) as session:
        events.clear()
        with session.start_transaction(read_concern=ReadConcern("snapshot")):
            orders.insert_one({"_id": 1}, session=session)
        with session.start_transaction(write_concern=WriteConcern(w="majority"),
                                       max_commit_time_ms=7000):
            orders.insert_one({"_id": 2}, session=session)
    first, second = started(events, "insert")
    assert first["readConcern"] == {"level": "snapshot"}
    assert second["readConcern"]["level"] == "majority"  # the client's, causally after
    commits = started(events, "commitTransaction")
    assert [(c["writeConcern"], c["maxTimeMS"]) for c in commits] == [
        ({"w": 1}, 5000), ({"w": "majority"}, 7000)]
    assert orders.count_documents({}) == 3


def test_a_transaction_block_aborts_when_it_raises(client: greenpool.Client,
                                                  events: AllEvents) -> None:
    orders = client.db[f"abort_{uuid.uuid4().hex[:8]}"]
    with client.start_session() as session:
        with pytest.raises(KeyError), session.start_transaction():
            orders.insert_one({"_id": 1}, session=session)
            raise KeyError("the block failed")
        assert not session.in_transaction
        assert session.session_id == session.lsid
    assert len(started(events, "abortTransaction")) == 1
    assert orders.find_one({"_id": 1}) is None


def test_a_transactions_reads_must_be_primary(client: greenpool.Client) -> None:
    orders = client.db[f"primary_{uuid.uuid4().hex[:8]}"]
    with client.start_session() as session:
        session.start_transaction(read_preference=ReadPreference.SECONDARY)
        with pytest.raises(InvalidOperation, match="must be primary"):
            orders.find_one({}, session=session)
        session.abort_transaction()
        with pytest.raises(ConfigurationError, match="unacknowledged"):
            session.start_transaction(write_concern=WriteConcern(w=0))
        with pytest.raises(TypeError, match="TransactionOptions"):
            client.start_session(default_transaction_options={"w": 1})  # type: ignore[arg-type]


# -- the server session pool: explicit sessions share it, dirty ones leave it ---------------


def lsids(events: AllEvents, name: str) -> list[Any]:
    return [command["lsid"] for command in started(events, name)]


def test_an_ended_sessions_lsid_serves_the_next_implicit_session(
        client: greenpool.Client, events: AllEvents) -> None:
    orders = client.db[f"pooled_{uuid.uuid4().hex[:8]}"]
    with client.start_session() as session:
        orders.insert_one({"_id": 1}, session=session)
        assert session.dirty is False
    orders.find_one({})
    orders.insert_one({"_id": 2})  # a retryable write: txnNumber after the session's
    (insert_in_session, retryable), (find,) = lsids(events, "insert"), lsids(events, "find")
    assert insert_in_session == find == retryable
    numbers = [command["txnNumber"] for command in started(events, "insert")]
    assert numbers == [1, 2]


def test_a_session_killed_mid_command_is_dirty_and_never_lent_again(
        client: greenpool.Client, events: AllEvents, replset_uri: str, app_name: str) -> None:
    orders = client.db[f"dirty_{uuid.uuid4().hex[:8]}"]
    orders.insert_one({"_id": 0})
    block = {"configureFailPoint": "failCommand", "mode": {"times": 1},
             "data": {"failCommands": ["insert"], "appName": app_name,
                      "blockConnection": True, "blockTimeMS": 2000}}
    with failpoint(replset_uri, block):
        session = client.start_session()
        writer = gevent.spawn(orders.insert_one, {"_id": 1}, session=session)
        while len(started(events, "insert")) < 2:  # the blocked insert went out
            gevent.sleep(0.01)
        writer.kill()  # mid-command: the server may still run it in the session
        assert session.dirty is True
        session.end_session()
    # The session had the implicit insert's lsid, from the pool; it does not go back.
    assert lsids(events, "insert") == [session.lsid, session.lsid]
    orders.find_one({})
    assert lsids(events, "find") != [session.lsid]
