"""greenpool.Client.bulk_write (the server's bulkWrite across namespaces): what goes on
the wire, seen by the fake server (batches cut by count and by size, nsInfo counted in
the size, document sequences, w=0, results cursors and their getMores, a retry after a
network error, a killed call), and what comes back from SecantusDB, beside stock
PyMongo's MongoClient.bulk_write (ordered and unordered errors, verbose and summary
results, refused arguments). The CRUD spec's unified files run in
tests/test_crud_spec.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import bson
import gevent
import gevent.event
import pymongo
import pytest
from bson.int64 import Int64
from pymongo import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo import monitoring as _m
from pymongo.errors import (
    AutoReconnect,
    ClientBulkWriteException,
    ConfigurationError,
    DocumentTooLarge,
    InvalidOperation,
)
from pymongo.write_concern import WriteConcern

import greenpool
from greenpool.client.operations.clientbulk import MESSAGE_OVERHEAD
from tests.events import AllEvents
from tests.fake_server import HANG_UP, MORE_TO_COME, FakeServer, Request

pytestmark = pytest.mark.timeout(60)

# A one-member replica set's primary running MongoDB 8.0 (retryable writes, bulkWrite).
PRIMARY = {"setName": "rs", "maxWireVersion": 25, "logicalSessionTimeoutMinutes": 30}
_COUNTS = {"insert": "nInserted", "update": "nMatched", "delete": "nDeleted"}
_RESULTS_NS = "admin.$cmd.bulkWrite"


def bulk_reply(request: Request) -> dict[str, Any]:
    """Every operation succeeds, each writing one document."""
    ops = request.command["ops"]
    reply: dict[str, Any] = {"ok": 1.0, "nErrors": 0, "nInserted": 0, "nUpserted": 0,
                             "nMatched": 0, "nModified": 0, "nDeleted": 0}
    for op in ops:
        reply[_COUNTS[next(iter(op))]] += 1
    batch = [] if request.command["errorsOnly"] else [
        {"ok": 1.0, "idx": index, "n": 1, **({"nModified": 1} if "update" in op else {})}
        for index, op in enumerate(ops)]
    reply["cursor"] = {"id": Int64(0), "ns": _RESULTS_NS, "firstBatch": batch}
    return reply


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    hello = {**PRIMARY, **getattr(request, "param", {})}
    with FakeServer(hello=hello, handlers={"bulkWrite": bulk_reply}) as fake:
        yield fake


def connect(server: FakeServer, **kwargs: Any) -> greenpool.Client:
    host, port = server.address
    return greenpool.Client(f"mongodb://{host}:{port}/?directConnection=true", **kwargs)


def bulk_writes(server: FakeServer) -> list[Request]:
    return [request for request in server.requests if request.name == "bulkWrite"]


def inserts(count: int, namespace: str = "db.c", **fields: Any) -> list[InsertOne[Any]]:
    return [InsertOne({"_id": index, **fields}, namespace=namespace) for index in range(count)]


# -- batches ---------------------------------------------------------------------------------


@pytest.mark.parametrize("server", [{"maxWriteBatchSize": 3}], indirect=True)
def test_batches_are_cut_by_max_write_batch_size(server: FakeServer) -> None:
    models = [InsertOne({"_id": index}, namespace="db.a" if index < 4 else "db.b")
              for index in range(7)]
    with connect(server) as client:
        result = client.bulk_write(models)
    assert result.inserted_count == 7
    sent = bulk_writes(server)
    assert [len(request.command["ops"]) for request in sent] == [3, 3, 1]
    assert all(request.sequences == ("ops", "nsInfo") for request in sent)
    # Each batch names only its own namespaces, each operation its index among them.
    assert [request.command["nsInfo"] for request in sent] == [
        [{"ns": "db.a"}], [{"ns": "db.a"}, {"ns": "db.b"}], [{"ns": "db.b"}]]
    assert [op["insert"] for op in sent[1].command["ops"]] == [0, 1, 1]
    # Each batch is a retryable write of its own.
    assert len({request.command["txnNumber"] for request in sent}) == 3
    assert len({bson.encode(request.command["lsid"]) for request in sent}) == 1


def _sizes(namespace: str, document: dict[str, Any]) -> int:
    return (len(bson.encode({"insert": 0, "document": document}))
            + len(bson.encode({"ns": namespace})))


@pytest.mark.parametrize("new_namespace", [False, True])
def test_a_new_namespace_counts_in_the_size(new_namespace: bool) -> None:
    """The spec's prose test 11: room for one more operation, not for its new nsInfo entry."""
    big = {"_id": 0, "a": "b" * 2_000}
    small_namespace = "db." + "c" * 200 if new_namespace else "db.c"
    command = len(bson.encode({"bulkWrite": 1, "errorsOnly": True, "ordered": True}))
    room = _sizes("db.c", big) + len(bson.encode({"insert": 0, "document": {"_id": 1}}))
    hello = {**PRIMARY, "maxMessageSizeBytes": MESSAGE_OVERHEAD + command + room}
    with FakeServer(hello=hello, handlers={"bulkWrite": bulk_reply}) as fake, \
            connect(fake) as client:
        result = client.bulk_write([InsertOne(big, namespace="db.c"),
                                    InsertOne({"_id": 1}, namespace=small_namespace)])
        sent = bulk_writes(fake)
    assert result.inserted_count == 2
    if new_namespace:
        assert [request.command["nsInfo"] for request in sent] == [
            [{"ns": "db.c"}], [{"ns": small_namespace}]]
    else:
        assert [len(request.command["ops"]) for request in sent] == [2]


def test_batches_are_cut_by_max_message_size() -> None:
    document = {"_id": 0, "pad": "x" * 1_000}
    command = len(bson.encode({"bulkWrite": 1, "errorsOnly": True, "ordered": False}))
    hello = {**PRIMARY, "maxMessageSizeBytes": MESSAGE_OVERHEAD + command + 2_500}
    with FakeServer(hello=hello, handlers={"bulkWrite": bulk_reply}) as fake, \
            connect(fake) as client:
        client.bulk_write([InsertOne(dict(document, _id=index), namespace="db.c")
                           for index in range(5)], ordered=False)
        assert [len(request.command["ops"]) for request in bulk_writes(fake)] == [2, 2, 1]


@pytest.mark.parametrize("model", [
    InsertOne({"a": "b" * 2_000}, namespace="db.c"),
    InsertOne({}, namespace="db." + "c" * 2_000)], ids=["document", "namespace"])
def test_an_operation_no_command_can_hold_raises_before_anything_is_sent(model: Any) -> None:
    hello = {**PRIMARY, "maxMessageSizeBytes": MESSAGE_OVERHEAD + 1_500}
    with FakeServer(hello=hello, handlers={"bulkWrite": bulk_reply}) as fake, \
            connect(fake) as client:
        with pytest.raises(DocumentTooLarge, match=r"models\[1\] is \d+ bytes"):
            client.bulk_write([InsertOne({}, namespace="db.c"), model])
        assert bulk_writes(fake) == []


def test_a_generated_id_is_the_first_field(server: FakeServer) -> None:
    document = {"x": 1}
    with connect(server) as client:
        client.bulk_write([InsertOne(document, namespace="db.c")])
    (sent,) = bulk_writes(server)
    assert list(sent.command["ops"][0]["document"]) == ["_id", "x"]
    assert document["_id"] == sent.command["ops"][0]["document"]["_id"]  # the caller's too


# -- what each command carries --------------------------------------------------------------


def test_the_command_carries_the_options_given(server: FakeServer) -> None:
    with connect(server) as client:
        client.bulk_write(inserts(1), ordered=False, verbose_results=True,
                          bypass_document_validation=False, comment="why", let={"v": 1},
                          write_concern=WriteConcern(w=1))
        client.bulk_write(inserts(1))
    first, second = (request.command for request in bulk_writes(server))
    assert first["errorsOnly"] is False and first["ordered"] is False
    assert first["bypassDocumentValidation"] is False and first["comment"] == "why"
    assert first["let"] == {"v": 1} and first["writeConcern"] == {"w": 1}
    assert second["errorsOnly"] is True and second["ordered"] is True
    assert not {"bypassDocumentValidation", "comment", "let", "writeConcern"} & set(second)


def test_command_events_show_the_sequences_as_arrays(server: FakeServer) -> None:
    events = AllEvents()
    with connect(server, event_listeners=[events]) as client:
        client.bulk_write([InsertOne({"_id": 1}, namespace="db.c"),
                           DeleteOne({"_id": 1}, namespace="db.d")])
    (started,) = [event for event in events.of(_m.CommandStartedEvent)
                  if event.command_name == "bulkWrite"]
    assert started.database_name == "admin"
    assert started.command["ops"] == [{"insert": 0, "document": {"_id": 1}},
                                      {"delete": 1, "filter": {"_id": 1}, "multi": False}]
    assert started.command["nsInfo"] == [{"ns": "db.c"}, {"ns": "db.d"}]


@pytest.mark.parametrize("server", [{"maxWriteBatchSize": 2}], indirect=True)
def test_unacknowledged_batches_go_with_more_to_come_and_w_0(server: FakeServer) -> None:
    with connect(server) as client:
        result = client.bulk_write(inserts(3), ordered=False,
                                   write_concern=WriteConcern(w=0))
        client.command("admin", {"ping": 1})  # the w=0 messages were read before it
    assert result.acknowledged is False
    with pytest.raises(InvalidOperation):
        result.inserted_count  # noqa: B018 (PyMongo's unacknowledged result raises)
    sent = bulk_writes(server)
    assert [len(request.command["ops"]) for request in sent] == [2, 1]
    assert all(request.flags & MORE_TO_COME for request in sent)
    assert all(request.command["writeConcern"] == {"w": 0} for request in sent)
    assert all("lsid" not in request.command for request in sent)


def test_an_old_server_is_refused_before_anything_is_sent() -> None:
    with FakeServer(hello={**PRIMARY, "maxWireVersion": 21},
                    handlers={"bulkWrite": bulk_reply}) as fake, connect(fake) as client:
        with pytest.raises(InvalidOperation, match=r"MongoDB 8\.0.*wire version is 21"):
            client.bulk_write(inserts(1))
        assert bulk_writes(fake) == []


# -- results cursors -------------------------------------------------------------------------


def _two_updates(request: Request) -> dict[str, Any]:
    return {"ok": 1.0, "nErrors": 0, "nInserted": 0, "nUpserted": 0, "nMatched": 2,
            "nModified": 2, "nDeleted": 0,
            "cursor": {"id": Int64(77), "ns": _RESULTS_NS,
                       "firstBatch": [{"ok": 1.0, "idx": 0, "n": 1, "nModified": 1}]}}


def _second_result(request: Request) -> dict[str, Any]:
    return {"ok": 1.0, "cursor": {"id": Int64(0), "ns": _RESULTS_NS,
                                  "nextBatch": [{"ok": 1.0, "idx": 1, "n": 1, "nModified": 1}]}}


def _refused(request: Request) -> dict[str, Any]:
    return {"ok": 0.0, "code": 8, "errmsg": "getMore refused"}


def _updates() -> list[UpdateOne]:
    return [UpdateOne({"_id": index}, {"$set": {"x": 1}}, namespace="db.c")
            for index in range(2)]


def test_the_results_cursor_is_read_to_its_end_in_the_same_session() -> None:
    handlers = {"bulkWrite": _two_updates, "getMore": _second_result}
    with FakeServer(hello=PRIMARY, handlers=handlers) as fake, connect(fake) as client:
        result = client.bulk_write(_updates(), verbose_results=True)
        requests = {request.name: request.command for request in fake.requests}
    assert sorted(result.update_results) == [0, 1]
    assert result.update_results[1].matched_count == 1
    get_more = requests["getMore"]
    assert get_more["getMore"] == 77 and get_more["collection"] == "$cmd.bulkWrite"
    assert get_more["lsid"] == requests["bulkWrite"]["lsid"]


def test_a_refused_get_more_ends_the_call_with_what_was_done() -> None:
    handlers = {"bulkWrite": _two_updates, "getMore": _refused,
                "killCursors": lambda request: {"ok": 1.0}}
    with FakeServer(hello=PRIMARY, handlers=handlers) as fake, connect(fake) as client:
        with pytest.raises(ClientBulkWriteException) as raised:
            client.bulk_write(_updates(), verbose_results=True)
        names = fake.names()
    assert raised.value.error.code == 8
    partial = raised.value.partial_result
    assert partial is not None and list(partial.update_results) == [0]
    assert partial.matched_count == 2  # the reply's counts
    assert names[-2:] == ["getMore", "killCursors"]


# -- retries ---------------------------------------------------------------------------------


def _hang_up_once() -> Any:
    calls: list[Request] = []

    def handler(request: Request) -> Any:
        calls.append(request)
        return HANG_UP if len(calls) == 1 else bulk_reply(request)

    return handler


def test_a_batch_is_retried_once_after_a_network_error() -> None:
    with FakeServer(hello=PRIMARY, handlers={"bulkWrite": _hang_up_once()}) as fake, \
            connect(fake) as client:
        assert client.bulk_write(inserts(2)).inserted_count == 2
        first, second = (request.command for request in bulk_writes(fake))
    assert first["txnNumber"] == second["txnNumber"]
    assert first["lsid"] == second["lsid"]


@pytest.mark.parametrize("model", [UpdateMany({}, {"$set": {"x": 1}}, namespace="db.c"),
                                   DeleteMany({}, namespace="db.c")],
                         ids=["UpdateMany", "DeleteMany"])
def test_a_batch_with_a_multi_operation_is_not_retried(model: Any) -> None:
    with FakeServer(hello=PRIMARY, handlers={"bulkWrite": _hang_up_once()}) as fake, \
            connect(fake) as client:
        with pytest.raises(ClientBulkWriteException) as raised:
            client.bulk_write([*inserts(1), model])
        (sent,) = bulk_writes(fake)
    assert isinstance(raised.value.error, AutoReconnect)
    assert raised.value.partial_result is None
    assert "txnNumber" not in sent.command


def test_a_killed_call_leaves_no_connection_checked_out() -> None:
    entered, release = gevent.event.Event(), gevent.event.Event()

    def stall(request: Request) -> Any:
        entered.set()
        release.wait(10)
        return bulk_reply(request)

    with FakeServer(hello=PRIMARY, handlers={"bulkWrite": stall}) as fake, \
            connect(fake) as client:
        call = gevent.spawn(client.bulk_write, inserts(2))
        assert entered.wait(10)
        call.kill(block=True, timeout=10)
        release.set()
        assert client.pool.stats().in_use == 0
        assert client.bulk_write(inserts(1)).inserted_count == 1  # the client still works


# -- against SecantusDB, beside stock PyMongo --------------------------------------------------


@pytest.fixture(params=["pymongo", "greenpool"])
def client(request: pytest.FixtureRequest, replset_uri: str) -> Iterator[Any]:
    make: Any = pymongo.MongoClient if request.param == "pymongo" else greenpool.Client
    with make(replset_uri, directConnection=True) as each:
        each["cbw"].drop_collection("a")
        each["cbw"].drop_collection("b")
        yield each


def _duplicates() -> list[Any]:
    return [InsertOne({"_id": 1}, namespace="cbw.a"), InsertOne({"_id": 1}, namespace="cbw.a"),
            InsertOne({"_id": 2}, namespace="cbw.b")]


def test_an_ordered_bulk_write_stops_at_its_first_error(client: Any) -> None:
    with pytest.raises(ClientBulkWriteException) as raised:
        client.bulk_write(_duplicates())
    assert [error["idx"] for error in raised.value.write_errors] == [1]
    assert raised.value.write_errors[0]["code"] == 11000
    assert raised.value.partial_result.inserted_count == 1
    assert client["cbw"]["b"].count_documents({}) == 0


def test_an_unordered_bulk_write_goes_on_after_an_error(client: Any) -> None:
    with pytest.raises(ClientBulkWriteException) as raised:
        client.bulk_write(_duplicates(), ordered=False, verbose_results=True)
    assert [error["idx"] for error in raised.value.write_errors] == [1]
    partial = raised.value.partial_result
    assert partial.inserted_count == 2 and sorted(partial.insert_results) == [0, 2]
    assert client["cbw"]["b"].count_documents({}) == 1


def test_verbose_and_summary_results(client: Any) -> None:
    models = [InsertOne({"_id": 1}, namespace="cbw.a"),
              UpdateOne({"_id": 1}, {"$set": {"x": 1}}, namespace="cbw.a"),
              ReplaceOne({"_id": 9}, {"y": 1}, upsert=True, namespace="cbw.b"),
              DeleteOne({"_id": 1}, namespace="cbw.a")]
    verbose = client.bulk_write(models, verbose_results=True)
    assert (verbose.inserted_count, verbose.matched_count, verbose.modified_count,
            verbose.upserted_count, verbose.deleted_count) == (1, 1, 1, 1, 1)
    assert verbose.insert_results[0].inserted_id == 1
    assert verbose.update_results[2].upserted_id == 9
    assert verbose.delete_results[3].deleted_count == 1
    summary = client.bulk_write([InsertOne({"_id": 2}, namespace="cbw.a")])
    assert summary.inserted_count == 1 and not summary.has_verbose_results
    with pytest.raises(InvalidOperation):
        summary.insert_results  # noqa: B018 (PyMongo's summary result raises)


# Each refused call (on any client), the error class both raise, and what greenpool's
# message names.
_NS = "cbw.a"
REFUSED = [
    ({"models": []}, InvalidOperation, "models is empty"),
    ({"models": (InsertOne({}, namespace=_NS),)}, TypeError, r"not \(InsertOne"),
    ({"models": [{"insertOne": {}}]}, TypeError, r"models\[0\] is \{'insertOne': \{\}\}"),
    ({"models": [InsertOne({})]}, InvalidOperation, r"models\[0\] InsertOne\(\{\}\)"),
    ({"models": [InsertOne([1], namespace=_NS)]}, TypeError, r"not \[1\]"),
    ({"models": [UpdateOne({}, {"x": 1}, namespace=_NS)]}, ValueError, "not 'x'"),
    ({"models": [ReplaceOne({}, {"$set": {}}, namespace=_NS)]}, ValueError, r"'\$set'"),
    ({"models": [InsertOne({}, namespace=_NS)], "let": [1]}, TypeError, r"not \[1\]"),
    ({"models": [InsertOne({}, namespace=_NS)], "ordered": False, "verbose_results": True,
      "write_concern": WriteConcern(w=0)}, InvalidOperation,
     "Cannot request unacknowledged write concern and verbose results"),
    ({"models": [InsertOne({}, namespace=_NS)], "write_concern": WriteConcern(w=0)},
     InvalidOperation, "Cannot request unacknowledged write concern and ordered writes"),
]


@pytest.mark.parametrize(("arguments", "kind", "names"), REFUSED,
                         ids=[str(index) for index in range(len(REFUSED))])
def test_a_refused_call_raises_what_pymongo_raises(client: Any, arguments: dict[str, Any],
                                                   kind: type[Exception], names: str) -> None:
    with pytest.raises(kind) as raised:
        client.bulk_write(**arguments)
    if isinstance(client, greenpool.Client):
        assert raised.match(names)


def test_greenpool_names_what_pymongo_leaves_to_the_server(replset_uri: str) -> None:
    with greenpool.Client(replset_uri, directConnection=True) as client:
        with pytest.raises(TypeError, match="not 5"):
            client.bulk_write([InsertOne({}, namespace=5)])  # type: ignore[arg-type]
        with pytest.raises(InvalidOperation, match="not 'nodot'"):
            client.bulk_write([InsertOne({}, namespace="nodot")])
        with pytest.raises(TypeError, match="ordered must be True or False, not 'yes'"):
            client.bulk_write([InsertOne({}, namespace=_NS)], ordered="yes")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"not \{'w': 1\}"):
            client.bulk_write([InsertOne({}, namespace=_NS)],
                              write_concern={"w": 1})  # type: ignore[arg-type]
        with client.start_session() as session, pytest.raises(ConfigurationError):
            client.bulk_write([InsertOne({}, namespace=_NS)], session=session,
                              ordered=False, write_concern=WriteConcern(w=0))
