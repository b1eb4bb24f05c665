"""What the collection API puts on the wire, seen by the fake server: document sequences,
batches cut to the limits the server's hello gives, moreToCome for w=0 (no reply read, no
session), and the write and read concern the connection string asks for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import DeleteMany, DeleteOne, InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, DocumentTooLarge
from pymongo.write_concern import WriteConcern

import greenpool
from tests.fake_server import MORE_TO_COME, FakeServer, Request

pytestmark = pytest.mark.timeout(60)


def write_reply(request: Request) -> dict[str, Any]:
    field = {"insert": "documents", "update": "updates", "delete": "deletes"}[request.name]
    count = len(request.command[field])
    reply: dict[str, Any] = {"ok": 1.0, "n": count}
    if request.name == "update":
        reply["nModified"] = count
    return reply


def find_reply(request: Request) -> dict[str, Any]:
    return {"ok": 1.0, "cursor": {"id": 7, "ns": "db.c", "firstBatch": [{"_id": 1}]}}


def get_more_reply(request: Request) -> dict[str, Any]:
    return {"ok": 1.0, "cursor": {"id": 0, "ns": "db.c", "nextBatch": [{"_id": 2}]}}


HANDLERS = {"insert": write_reply, "update": write_reply, "delete": write_reply,
            "find": find_reply, "getMore": get_more_reply}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    hello = {"logicalSessionTimeoutMinutes": 30, **getattr(request, "param", {})}
    with FakeServer(hello=hello, handlers=dict(HANDLERS)) as fake:
        yield fake


def connect(server: FakeServer, options: str = "") -> greenpool.Client:
    host, port = server.address
    return greenpool.Client(f"mongodb://{host}:{port}/?directConnection=true{options}")


def sent(server: FakeServer, name: str) -> list[Request]:
    return [request for request in server.requests if request.name == name]


# -- batches ---------------------------------------------------------------------------------


@pytest.mark.parametrize("server", [{"maxWriteBatchSize": 2}], indirect=True)
def test_insert_many_is_cut_by_max_write_batch_size(server: FakeServer) -> None:
    with connect(server) as client:
        result = client.db.c.insert_many([{"_id": i} for i in range(5)])
    assert result.inserted_ids == list(range(5))
    inserts = sent(server, "insert")
    assert [[doc["_id"] for doc in r.command["documents"]] for r in inserts] == [
        [0, 1], [2, 3], [4]]
    assert all(r.sequences == ("documents",) for r in inserts)
    assert all(r.command["ordered"] is True for r in inserts)


@pytest.mark.parametrize("server", [{"maxMessageSizeBytes": 16_382 + 2_500}], indirect=True)
def test_batches_are_cut_by_max_message_size(server: FakeServer) -> None:
    documents = [{"_id": i, "pad": "x" * 1_000} for i in range(5)]
    with connect(server) as client:
        client.db.c.insert_many(documents, ordered=False)
    assert [len(r.command["documents"]) for r in sent(server, "insert")] == [2, 2, 1]


@pytest.mark.parametrize("server", [{"maxBsonObjectSize": 1_000}], indirect=True)
def test_unacknowledged_a_document_over_the_limit_is_refused_before_anything_is_sent(
        server: FakeServer) -> None:
    with connect(server, "&w=0") as client:
        with pytest.raises(DocumentTooLarge):
            client.db.c.insert_many([{"_id": 1}, {"_id": 2, "pad": "x" * 1_000}])
        with pytest.raises(DocumentTooLarge):
            client.db.c.bulk_write([InsertOne({"_id": 3}),
                                    InsertOne({"_id": 4, "pad": "x" * 1_000})],
                                   ordered=False)
    assert sent(server, "insert") == []


@pytest.mark.parametrize("server", [{"maxBsonObjectSize": 1_000,
                                     "maxMessageSizeBytes": 16_382 + 2_000}], indirect=True)
def test_acknowledged_the_server_judges_a_large_document_but_not_an_unsendable_one(
        server: FakeServer) -> None:
    with connect(server) as client:
        client.db.c.insert_many([{"_id": 1}, {"_id": 2, "pad": "x" * 1_000}])
        assert [len(r.command["documents"]) for r in sent(server, "insert")] == [2]
        with pytest.raises(DocumentTooLarge):
            client.db.c.insert_many([{"_id": 3}, {"_id": 4, "pad": "x" * 2_000}])
    assert len(sent(server, "insert")) == 1  # nothing more


@pytest.mark.parametrize("server", [{"maxWriteBatchSize": 2}], indirect=True)
def test_bulk_write_runs_and_sequences(server: FakeServer) -> None:
    with connect(server) as client:
        result = client.db.c.bulk_write([
            InsertOne({"_id": 1}), InsertOne({"_id": 2}), InsertOne({"_id": 3}),
            UpdateOne({"_id": 1}, {"$set": {"a": 1}}), DeleteOne({"_id": 2}),
            DeleteMany({})])
    assert [(r.name, r.sequences) for r in server.requests
            if r.name in ("insert", "update", "delete")] == [
        ("insert", ("documents",)), ("insert", ("documents",)), ("update", ("updates",)),
        ("delete", ("deletes",))]
    assert sent(server, "delete")[0].command["deletes"] == [{"q": {"_id": 2}, "limit": 1},
                                                            {"q": {}, "limit": 0}]
    assert (result.inserted_count, result.modified_count, result.deleted_count) == (3, 1, 2)


def test_a_batchs_write_errors_carry_their_index_in_the_whole_request(
        server: FakeServer) -> None:
    def refuse_second(request: Request) -> dict[str, Any]:
        return {"ok": 1.0, "n": 1, "writeErrors": [{"index": 1, "code": 11000,
                                                    "errmsg": "dup"}]}

    server.handlers["insert"] = refuse_second
    with connect(server) as client, pytest.raises(BulkWriteError) as failed:
        client.db.c.bulk_write([DeleteOne({}), InsertOne({"_id": 1}), InsertOne({"_id": 1})])
    assert failed.value.details["writeErrors"] == [
        {"index": 2, "code": 11000, "errmsg": "dup", "op": {"_id": 1}}]
    assert failed.value.details["nRemoved"] == 1


# -- unacknowledged writes -----------------------------------------------------------------


def test_w0_goes_with_more_to_come_and_no_session(server: FakeServer) -> None:
    with connect(server, "&w=0") as client:
        result = client.db.c.insert_one({"_id": 1})
        client.db.c.update_one({"_id": 1}, {"$set": {"a": 1}})
        client.command("admin", {"ping": 1})  # the connection still serves
    assert not result.acknowledged
    writes = sent(server, "insert") + sent(server, "update")
    assert [r.flags & MORE_TO_COME for r in writes] == [MORE_TO_COME] * 2
    assert all(r.command["writeConcern"] == {"w": 0} and "lsid" not in r.command
               for r in writes)
    assert "lsid" in sent(server, "ping")[0].command  # acknowledged: in a session


@pytest.mark.parametrize("server", [{"maxWriteBatchSize": 2}], indirect=True)
def test_w0_ordered_batches_are_acknowledged_but_the_last(server: FakeServer) -> None:
    with connect(server) as client:
        collection = client.db.get_collection("c", write_concern=WriteConcern(w=0))
        collection.insert_many([{"_id": i} for i in range(5)])
        collection.insert_many([{"_id": i} for i in range(5)], ordered=False)
    inserts = sent(server, "insert")
    assert [(r.flags & MORE_TO_COME, r.command.get("writeConcern")) for r in inserts] == [
        (0, None), (0, None), (MORE_TO_COME, {"w": 0}),
        (MORE_TO_COME, {"w": 0}), (MORE_TO_COME, {"w": 0}), (MORE_TO_COME, {"w": 0})]


# -- write and read concern ------------------------------------------------------------------


def test_the_uris_write_and_read_concern_are_sent(server: FakeServer) -> None:
    options = "&w=majority&journal=true&wTimeoutMS=100&readConcernLevel=majority"
    with connect(server, options) as client:
        client.db.c.insert_one({"_id": 1})
        client.db.c.insert_many([{"_id": 2}])
        client.db.c.find().to_list()
        client.command("db", {"insert": "c", "documents": [{}]})  # the generic command
        client.db.command("find", "c")
        client.db.get_collection("c", write_concern=WriteConcern()).delete_one({})
    inserts = sent(server, "insert")
    assert [r.command.get("writeConcern") for r in inserts] == [
        {"w": "majority", "j": True, "wtimeout": 100}] * 2 + [None]
    finds = sent(server, "find")
    assert [r.command.get("readConcern") for r in finds] == [{"level": "majority"}, None]
    assert "readConcern" not in sent(server, "getMore")[0].command
    assert "writeConcern" not in sent(server, "delete")[0].command  # the server's default


def test_the_server_default_concerns_are_not_sent(server: FakeServer) -> None:
    with connect(server) as client:
        client.db.c.insert_one({"_id": 1})
        client.db.c.find().to_list()
        client.db.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({})
    inserts = sent(server, "insert")
    assert [r.command.get("writeConcern") for r in inserts] == [None, {"w": 1}]
    assert "readConcern" not in sent(server, "find")[0].command


# -- write concern errors in bulk writes ------------------------------------------------------


MONGOS = {"msg": "isdbgrid"}  # a server that supports retryable writes


def concern_error(code: int, *labels: str) -> dict[str, Any]:
    reply: dict[str, Any] = {"ok": 1.0, "writeConcernError": {"code": code, "errmsg": "wce"}}
    if labels:
        reply["errorLabels"] = list(labels)
    return reply


@pytest.mark.parametrize("server", [MONGOS], indirect=True)
def test_a_batch_with_a_retryable_write_concern_error_is_retried(server: FakeServer) -> None:
    replies = iter([concern_error(91, "RetryableWriteError"), {"ok": 1.0}])

    def insert(request: Request) -> dict[str, Any]:
        return {**next(replies), "n": len(request.command["documents"])}

    server.handlers["insert"] = insert
    with connect(server) as client:
        result = client.db.c.insert_many([{"_id": 1}, {"_id": 2}])
    first, retried = sent(server, "insert")
    assert (first.command["txnNumber"], first.command["lsid"]) == (
        retried.command["txnNumber"], retried.command["lsid"])
    assert result.inserted_ids == [1, 2]


@pytest.mark.parametrize("server", [{**MONGOS, "maxWriteBatchSize": 1}], indirect=True)
def test_a_write_concern_error_is_reported_with_the_counts_and_the_bulk_goes_on(
        server: FakeServer) -> None:
    server.handlers["insert"] = lambda request: {**concern_error(100), "n": 1}
    with connect(server) as client, pytest.raises(BulkWriteError) as failed:
        client.db.c.insert_many([{"_id": 1}, {"_id": 2}])
    details = failed.value.details
    assert (details["nInserted"], len(details["writeConcernErrors"])) == (2, 2)
    assert len(sent(server, "insert")) == 2  # not retried: not labelled
