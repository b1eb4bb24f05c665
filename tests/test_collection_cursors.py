"""What the collection API's cursors send, seen by the fake server: a find's and an
aggregate's comment on every getMore, the CRUD spec's batch sizes (a find's batch as large
as its limit, a writing aggregate's first batch), tailable and tailable-await cursors
(one getMore per ``next()``, the wait as each getMore's maxTimeMS), a database's
aggregate, ``Database.cursor_command``, and the read preference each command carries to a
replica set member under a direct connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymongo import CursorType, ReadPreference
from pymongo.errors import InvalidOperation, NotPrimaryError

import greenpool
from tests.fake_server import FakeServer, Request

pytestmark = pytest.mark.timeout(60)

MEMBER = {"setName": "rs", "hosts": ["a:1"], "me": "a:1"}  # a replica set's primary


def batches(*batches: list[Any], ns: str = "db.c") -> Callable[[Request], dict[str, Any]]:
    """A handler that answers a cursor's commands with these batches in turn (the
    cursor id 7 until the last, then 0)."""
    left = list(batches)

    def handler(request: Request) -> dict[str, Any]:
        field = "nextBatch" if request.name == "getMore" else "firstBatch"
        batch = left.pop(0) if left else []
        return {"ok": 1.0, "cursor": {"id": 7 if left else 0, "ns": ns, field: batch}}

    return handler


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    hello = {"logicalSessionTimeoutMinutes": 30, **getattr(request, "param", {})}
    with FakeServer(hello=hello) as fake:
        yield fake


def connect(server: FakeServer, options: str = "") -> greenpool.Client:
    host, port = server.address
    return greenpool.Client(f"mongodb://{host}:{port}/?directConnection=true{options}")


def sent(server: FakeServer, name: str) -> list[dict[str, Any]]:
    return [request.command for request in server.requests if request.name == name]


def serve_cursor(server: FakeServer, name: str, *batches_: list[Any], ns: str = "db.c") -> None:
    handler = batches(*batches_, ns=ns)
    server.handlers[name] = server.handlers["getMore"] = handler


# -- comments and batch sizes (the CRUD spec) --------------------------------------------------


def test_a_finds_comment_goes_on_every_get_more(server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}], [{"_id": 2}], [{"_id": 3}])
    with connect(server) as client:
        found = client.db.c.find({}, comment={"why": "audit"}, batch_size=1).to_list()
    assert [doc["_id"] for doc in found] == [1, 2, 3]
    assert sent(server, "find")[0]["comment"] == {"why": "audit"}
    assert [(m["comment"], m["batchSize"]) for m in sent(server, "getMore")] == [
        ({"why": "audit"}, 1), ({"why": "audit"}, 1)]


def test_an_aggregates_comment_goes_on_every_get_more(server: FakeServer) -> None:
    serve_cursor(server, "aggregate", [{"_id": 1}], [{"_id": 2}])
    with connect(server) as client:
        client.db.c.aggregate([], comment="traced", batchSize=1).to_list()
    (get_more,) = sent(server, "getMore")
    assert (get_more["comment"], get_more["batchSize"]) == ("traced", 1)


def test_without_a_comment_get_more_carries_none(server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}], [{"_id": 2}])
    with connect(server) as client:
        client.db.c.find().to_list()
    assert "comment" not in sent(server, "getMore")[0]


def test_a_find_whose_batch_is_its_limit_asks_for_one_more(server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}])
    with connect(server) as client:
        client.db.c.find({}, limit=4, batch_size=4).to_list()
        client.db.c.find({}, limit=4, batch_size=10).to_list()
        client.db.c.find({}, limit=-4, batch_size=4).to_list()
    assert [(f["limit"], f["batchSize"]) for f in sent(server, "find")] == [
        (4, 5), (4, 10), (4, 4)]


@pytest.mark.parametrize("stage", [{"$out": "other"}, {"$merge": {"into": "other"}}])
def test_a_writing_aggregate_leaves_its_first_batch_size_to_the_server(
        server: FakeServer, stage: dict[str, Any]) -> None:
    serve_cursor(server, "aggregate", [])
    with connect(server) as client:
        client.db.c.aggregate([{"$match": {}}, stage], batchSize=0).to_list()
        client.db.c.aggregate([stage], batchSize=5).to_list()
    assert [a["cursor"] for a in sent(server, "aggregate")] == [{}, {}]


def test_an_aggregates_max_await_time_is_each_get_mores_max_time(server: FakeServer) -> None:
    serve_cursor(server, "aggregate", [{"_id": 1}], [{"_id": 2}])
    with connect(server) as client:
        client.db.c.aggregate([], maxAwaitTimeMS=250).to_list()
    assert "maxAwaitTimeMS" not in sent(server, "aggregate")[0]
    assert sent(server, "getMore")[0]["maxTimeMS"] == 250


# -- tailable cursors ---------------------------------------------------------------------


def test_a_tailable_cursor_sends_one_get_more_per_next_and_stays_alive(
        server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}], [], [{"_id": 2}], [])
    with connect(server) as client:
        cursor = client.db.c.find(cursor_type=CursorType.TAILABLE)
        assert next(cursor) == {"_id": 1}
        with pytest.raises(StopIteration):
            next(cursor)  # an empty batch: the data ends for now
        assert cursor.alive
        assert len(sent(server, "getMore")) == 1
        assert next(cursor) == {"_id": 2}
        cursor.close()
    (find,) = sent(server, "find")
    assert find["tailable"] is True and "awaitData" not in find
    assert all("maxTimeMS" not in m for m in sent(server, "getMore"))


def test_a_tailable_await_cursor_waits_max_await_time_ms_per_get_more(
        server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}], [], [])
    with connect(server) as client:
        cursor = client.db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(40)
        assert cursor.to_list() == [{"_id": 1}]
        assert next(cursor, None) is None
    (find,) = sent(server, "find")
    assert (find["tailable"], find["awaitData"]) == (True, True)
    assert [m["maxTimeMS"] for m in sent(server, "getMore")] == [40, 40]


def test_an_await_longer_than_the_time_limit_is_refused(server: FakeServer) -> None:
    with connect(server, "&timeoutMS=50") as client:
        cursor = client.db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(50)
        with pytest.raises(InvalidOperation, match="max_await_time_ms=50"):
            next(cursor)
        with pytest.raises(InvalidOperation, match="max_await_time_ms=60"):
            client.db.c.aggregate([], maxAwaitTimeMS=60)
    assert sent(server, "find") == sent(server, "aggregate") == []


def test_max_await_time_ms_on_a_cursor_that_does_not_wait_warns(server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}], [])
    with connect(server) as client:
        cursor = client.db.c.find(cursor_type=CursorType.TAILABLE)
        with pytest.warns(UserWarning, match="max_await_time_ms=40 is ignored"):
            cursor.max_await_time_ms(40)
        cursor.to_list()
    assert "maxTimeMS" not in sent(server, "getMore")[0]


def test_unknown_cursor_types_are_refused(server: FakeServer) -> None:
    # Exhaust cursors: tests/test_exhaust_cursors.py.
    with connect(server) as client, pytest.raises(ValueError, match="cursor_type must be"):
        client.db.c.find(cursor_type=5)


# -- a database's aggregate and cursor_command --------------------------------------------


def test_a_database_aggregate_runs_on_1_and_reads_on(server: FakeServer) -> None:
    serve_cursor(server, "aggregate", [{"op": 1}], [{"op": 2}], ns="db.$cmd.aggregate")
    with connect(server) as client:
        found = client.db.aggregate([{"$currentOp": {}}], batchSize=1, comment="c",
                                    let={"x": 1}).to_list()
    assert found == [{"op": 1}, {"op": 2}]
    (aggregate,) = sent(server, "aggregate")
    assert next(iter(aggregate.items())) == ("aggregate", 1)
    assert (aggregate["cursor"], aggregate["comment"], aggregate["let"]) == (
        {"batchSize": 1}, "c", {"x": 1})
    (get_more,) = sent(server, "getMore")
    assert (get_more["collection"], get_more["comment"]) == ("$cmd.aggregate", "c")


def test_cursor_command_sends_its_comment_on_get_mores_only(server: FakeServer) -> None:
    serve_cursor(server, "find", [{"_id": 1}], [{"_id": 2}])
    with connect(server) as client:
        cursor = client.db.cursor_command("find", "c", filter={"a": 1}, comment="why")
        assert cursor.batch_size(3) is cursor
        assert cursor.to_list() == [{"_id": 1}, {"_id": 2}]
    (find,) = sent(server, "find")
    assert find["filter"] == {"a": 1} and "comment" not in find
    assert "readConcern" not in find
    (get_more,) = sent(server, "getMore")
    assert (get_more["comment"], get_more["batchSize"]) == ("why", 3)


def test_cursor_command_is_not_retried(server: FakeServer) -> None:
    server.handlers["find"] = lambda request: {
        "ok": 0.0, "code": 10107, "errmsg": "not primary"}
    with connect(server) as client, pytest.raises(NotPrimaryError):
        client.db.cursor_command({"find": "c"})
    assert len(sent(server, "find")) == 1


# -- the read preference on the wire, under a direct connection to a member ----------------


@pytest.mark.parametrize("server", [MEMBER], indirect=True)
def test_writes_carry_no_read_preference_and_reads_carry_primary_preferred(
        server: FakeServer) -> None:
    server.handlers.update({"insert": lambda r: {"ok": 1.0, "n": 1},
                            "createIndexes": lambda r: {"ok": 1.0},
                            "dropDatabase": lambda r: {"ok": 1.0}})
    serve_cursor(server, "find", [])
    with connect(server, "&retryWrites=false") as client:
        client.db.c.insert_one({"_id": 1})
        client.db.c.create_index("a")
        client.drop_database("db")
        client.db.c.find_one()
        client.db.command("ping")
    assert "$readPreference" not in sent(server, "insert")[0]
    assert "$readPreference" not in sent(server, "createIndexes")[0]
    assert "$readPreference" not in sent(server, "dropDatabase")[0]
    assert sent(server, "find")[0]["$readPreference"] == {"mode": "primaryPreferred"}
    assert sent(server, "ping")[0]["$readPreference"] == {"mode": "primaryPreferred"}


@pytest.mark.parametrize(("server", "expected"), [
    ({**MEMBER, "maxWireVersion": 13}, {"mode": "secondaryPreferred"}),
    ({**MEMBER, "maxWireVersion": 12}, {"mode": "primaryPreferred"}),
], indirect=["server"])
def test_a_writing_aggregate_carries_the_collections_read_preference_from_5_0(
        server: FakeServer, expected: dict[str, Any]) -> None:
    serve_cursor(server, "aggregate", [])
    with connect(server) as client:
        collection = client.db.get_collection(
            "c", read_preference=ReadPreference.SECONDARY_PREFERRED)
        collection.aggregate([{"$out": "other"}]).to_list()
    assert sent(server, "aggregate")[0]["$readPreference"] == expected
