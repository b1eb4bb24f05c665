"""``find_raw_batches`` and ``aggregate_raw_batches`` on greenpool.Client beside
stock PyMongo's MongoClient, on the same SecantusDB server and the same data.

Each test makes the same calls on both clients and compares what they give: the
batches (``bytes``, one per batch, compared byte for byte), the commands they
send, what they refuse. The bytes are the server's: a document the default
codec options cannot decode still comes through, and decodes with options
that can.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from typing import Any

import bson
import pytest
from bson.codec_options import CodecOptions, TypeDecoder, TypeRegistry
from bson.decimal128 import Decimal128
from bson.son import SON
from pymongo import CursorType, MongoClient
from pymongo.errors import InvalidOperation

import greenpool
from tests.events import AllEvents

pytestmark = pytest.mark.timeout(60)

Clients = dict[str, Any]
#: Fields that differ between any two runs of the same call.
_PER_RUN = frozenset({"lsid", "$db", "$clusterTime", "getMore", "$readPreference"})


@pytest.fixture
def clients(mongodb_uri: str, request: pytest.FixtureRequest) -> Iterator[Clients]:
    """greenpool's and stock PyMongo's client, each with a command listener, on a
    collection of the test's own holding ten documents of growing size."""
    ours, theirs = AllEvents(), AllEvents()
    name = "raw_" + request.node.name.translate(str.maketrans("[]-.", "____"))[:40]
    with greenpool.Client(mongodb_uri, event_listeners=[ours]) as client, \
            MongoClient(mongodb_uri, directConnection=True, event_listeners=[theirs]) as stock:
        stock.rawdb.drop_collection(name)
        stock.rawdb[name].insert_many([{"_id": i, "s": "x" * i} for i in range(10)])
        ours.clear()
        theirs.clear()
        yield {"greenpool": client.rawdb[name], "pymongo": stock.rawdb[name],
               "events": {"greenpool": ours, "pymongo": theirs}}
        stock.rawdb.drop_collection(name)


def both(clients: Clients, call: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``call`` on greenpool's collection and on PyMongo's."""
    return call(clients["greenpool"]), call(clients["pymongo"])


def names(clients: Clients, library: str) -> list[str]:
    return [event.command_name for event in clients["events"][library].events
            if type(event).__name__ == "CommandStartedEvent"]


def commands(clients: Clients, library: str) -> list[dict[str, Any]]:
    """The commands ``library`` sent, without the fields that differ per run."""
    return [{key: value for key, value in event.command.items() if key not in _PER_RUN}
            for event in clients["events"][library].events
            if type(event).__name__ == "CommandStartedEvent"]


# -- batches ----------------------------------------------------------------------------------

FINDS = {
    "everything": ((), {}),
    "batches of three": (({},), {"batch_size": 3, "sort": [("_id", 1)]}),
    "a limit across batches": (({"_id": {"$gte": 2}},), {"batch_size": 3, "limit": 7}),
    "skip and projection": (({}, {"s": 0}), {"skip": 4, "batch_size": 2}),
    "one batch": (({},), {"limit": -4}),
    "nothing matches": (({"_id": -1},), {}),
}


@pytest.mark.parametrize("args, kwargs", FINDS.values(), ids=list(FINDS))
def test_find_raw_batches_gives_pymongos_bytes_batch_by_batch(
        clients: Clients, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    ours, theirs = both(clients, lambda c: list(c.find_raw_batches(*args, **kwargs)))
    assert ours == theirs
    assert all(isinstance(batch, bytes) and batch for batch in ours)
    assert commands(clients, "greenpool") == commands(clients, "pymongo")
    documents = clients["greenpool"].find(*args, **kwargs).to_list()
    assert [doc for batch in ours for doc in bson.decode_all(batch)] == documents


def test_find_raw_batches_sends_what_pymongo_sends(clients: Clients) -> None:
    both(clients, lambda c: c.find_raw_batches({"_id": {"$lt": 8}}, batch_size=3,
                                               comment="raw").to_list())
    assert names(clients, "greenpool") == ["find", "getMore", "getMore"]
    assert commands(clients, "greenpool") == commands(clients, "pymongo")


@pytest.mark.parametrize("kwargs", [{}, {"batchSize": 4}, {"batchSize": 3, "comment": "raw"}])
def test_aggregate_raw_batches_asks_for_an_empty_first_batch_as_pymongo_does(
        clients: Clients, kwargs: dict[str, Any]) -> None:
    pipeline = [{"$sort": {"_id": -1}}, {"$project": {"n": {"$strLenCP": "$s"}}}]
    ours, theirs = both(clients, lambda c: list(c.aggregate_raw_batches(pipeline, **kwargs)))
    assert ours == theirs
    decoded = [doc for batch in ours for doc in bson.decode_all(batch)]
    assert decoded == [{"_id": i, "n": i} for i in range(9, -1, -1)]
    sent = commands(clients, "greenpool")
    assert sent == commands(clients, "pymongo")
    assert sent[0]["cursor"] == {"batchSize": 0}
    assert names(clients, "greenpool")[1:] == ["getMore"] * len(ours)


def test_a_writing_aggregate_leaves_its_first_batch_to_the_server(clients: Clients) -> None:
    target = {"greenpool": "out_g", "pymongo": "out_p"}
    ours = list(clients["greenpool"].aggregate_raw_batches([{"$out": target["greenpool"]}]))
    theirs = list(clients["pymongo"].aggregate_raw_batches([{"$out": target["pymongo"]}]))
    assert ours == theirs == []
    (sent,) = commands(clients, "greenpool")
    assert sent["cursor"] == {} == commands(clients, "pymongo")[0]["cursor"]
    database = clients["pymongo"].database
    assert database["out_g"].count_documents({}) == database["out_p"].count_documents({}) == 10
    for name in target.values():
        database.drop_collection(name)


def test_a_batch_is_one_bytes_and_retrieved_counts_batches(clients: Clients) -> None:
    def read(collection: Any) -> tuple[Any, ...]:
        cursor = collection.find_raw_batches(batch_size=4)
        first = next(cursor)
        return type(first), cursor.retrieved, len(cursor.to_list()), cursor.alive

    ours, theirs = both(clients, read)
    assert ours == theirs == (bytes, 1, 2, False)


# -- the server's bytes, never decoded ------------------------------------------------------


class _Refused(TypeDecoder):
    """Decodes no Decimal128: a batch decoded with it fails."""

    bson_type = Decimal128

    def transform_bson(self, value: Any) -> Any:
        raise ValueError(f"decoded {value!r}")


def test_the_documents_are_not_decoded_on_the_way(clients: Clients) -> None:
    # The collection's codec options refuse to decode a Decimal128: find() fails on
    # the document, a raw batch holds it as the server sent it.
    clients["pymongo"].insert_one({"_id": 100, "price": Decimal128("1.10")})
    refusing = CodecOptions(type_registry=TypeRegistry([_Refused()]))

    def read(collection: Any) -> list[bytes]:
        return list(collection.with_options(codec_options=refusing).find_raw_batches(
            {"_id": 100}))

    with pytest.raises(Exception, match="decoded Decimal128"):
        clients["greenpool"].with_options(codec_options=refusing).find({"_id": 100}).to_list()
    ours, theirs = both(clients, read)
    assert ours == theirs
    assert bson.decode_all(ours[0]) == [{"_id": 100, "price": Decimal128("1.10")}]


def test_the_collections_codec_options_do_not_change_the_bytes(clients: Clients) -> None:
    options = CodecOptions(document_class=SON, tz_aware=True,
                           tzinfo=datetime.timezone(datetime.timedelta(hours=5)))
    clients["pymongo"].insert_one({"_id": 100, "when": datetime.datetime(2020, 1, 2, 3)})

    def read(collection: Any) -> list[bytes]:
        return list(collection.with_options(codec_options=options).find_raw_batches(
            {"_id": 100}))

    ours, theirs = both(clients, read)
    assert ours == theirs == list(clients["pymongo"].find_raw_batches({"_id": 100}))


# -- cursors: explain, tailable, sessions, what is refused ------------------------------------


def test_explain_gives_the_plan_decoded(clients: Clients) -> None:
    ours, theirs = both(clients, lambda c: c.find_raw_batches({"_id": 3}).explain())
    assert isinstance(ours, dict)
    assert sorted(ours) == sorted(theirs)
    assert commands(clients, "greenpool") == commands(clients, "pymongo")


@pytest.mark.parametrize("read", [
    lambda c: c.find_raw_batches()[0],
    lambda c: c.find_raw_batches()[1:3],
    lambda c: c.aggregate_raw_batches([])[0],
], ids=["find index", "find slice", "aggregate index"])
def test_indexing_is_refused_as_pymongo_refuses_it(clients: Clients,
                                                  read: Callable[[Any], Any]) -> None:
    messages = []
    for library in ("greenpool", "pymongo"):
        with pytest.raises(InvalidOperation) as caught:
            read(clients[library])
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("Cannot call __getitem__ on RawBatch")


@pytest.mark.parametrize("option, call", [
    ("batch_size", lambda c: c.find_raw_batches(batch_size=-1)),
    ("limit", lambda c: c.find_raw_batches(limit="3")),
    ("cursor_type", lambda c: c.find_raw_batches({}, cursor_type=99)),
    ("pipeline", lambda c: c.aggregate_raw_batches({"$match": {}})),
], ids=["batch_size", "limit", "cursor_type", "pipeline"])
def test_bad_arguments_get_pymongos_error_class_naming_the_option(
        clients: Clients, option: str, call: Callable[[Any], Any]) -> None:
    errors = []
    for library in ("greenpool", "pymongo"):
        with pytest.raises(Exception) as caught:
            call(clients[library])
        errors.append(caught.value)
    assert type(errors[0]) is type(errors[1])
    assert option in str(errors[0])


def test_a_tailable_cursor_stops_at_the_end_and_gives_new_batches_later(
        clients: Clients) -> None:
    database = clients["pymongo"].database
    database.drop_collection("capped_raw")
    database.create_collection("capped_raw", capped=True, size=10_000)
    database.capped_raw.insert_many([{"_id": 1}, {"_id": 2}])
    seen = {}
    for library in ("greenpool", "pymongo"):
        collection = clients[library].database.capped_raw
        with collection.find_raw_batches(cursor_type=CursorType.TAILABLE) as cursor:
            first = list(cursor)  # stops at the end; the cursor stays open
            alive = cursor.alive
            database.capped_raw.insert_one({"_id": library})
            later = list(cursor)
        seen[library] = ([bson.decode_all(batch) for batch in first], alive,
                         [bson.decode_all(batch) for batch in later])
    assert seen["greenpool"] == ([[{"_id": 1}, {"_id": 2}]], True, [[{"_id": "greenpool"}]])
    assert seen["pymongo"] == ([[{"_id": 1}, {"_id": 2}, {"_id": "greenpool"}]], True,
                               [[{"_id": "pymongo"}]])
    database.drop_collection("capped_raw")


def test_the_batches_come_in_the_given_session(clients: Clients) -> None:
    client = clients["greenpool"].database.client
    with client.start_session() as session:
        batches = list(clients["greenpool"].find_raw_batches(batch_size=5, session=session))
        more = list(clients["greenpool"].aggregate_raw_batches([], session=session))
        lsids = {event.command["lsid"]["id"] for event in clients["events"]["greenpool"].events
                 if type(event).__name__ == "CommandStartedEvent"}
        assert lsids == {session.session_id["id"]}
    assert len(batches) == 2
    assert sum(len(bson.decode_all(batch)) for batch in more) == 10
