"""The collection API against PyMongo's own: the same call on greenpool.Client and on
stock pymongo.MongoClient, against the same server, returns the same result or raises the
same error (class, code, details).

Each scenario runs on PyMongo first, then on greenpool, on a fresh collection of the
same name (a server's error messages name the collection), and the two outcomes are
compared whole.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import bson
import pytest
from bson.codec_options import CodecOptions
from bson.errors import BSONError
from bson.raw_bson import RawBSONDocument
from bson.son import SON
from pymongo import (
    ASCENDING,
    DESCENDING,
    CursorType,
    DeleteMany,
    DeleteOne,
    IndexModel,
    InsertOne,
    MongoClient,
    ReplaceOne,
    ReturnDocument,
    UpdateMany,
    UpdateOne,
)
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)
from pymongo.write_concern import WriteConcern

import greenpool
from tests.failpoints import failpoint
from tests.servers import unique, with_options

pytestmark = pytest.mark.timeout(120)

Scenario = Callable[[Any], Any]


@pytest.fixture(scope="module")
def clients(mongodb_uri: str) -> Iterator[tuple[MongoClient[Any], greenpool.Client]]:
    stock: MongoClient[Any] = MongoClient(mongodb_uri)
    with greenpool.Client(mongodb_uri) as client:
        yield stock, client
    stock.close()


def describe(value: Any) -> Any:
    """What a call returned, as comparable data."""
    if isinstance(value, InsertOneResult):
        return ("InsertOneResult", value.acknowledged,
                value.inserted_id if value.acknowledged else None)
    if isinstance(value, InsertManyResult):
        return ("InsertManyResult", value.acknowledged, value.inserted_ids)
    if isinstance(value, UpdateResult | DeleteResult):
        return (type(value).__name__, value.acknowledged, value.raw_result)
    if isinstance(value, BulkWriteResult):
        return ("BulkWriteResult", value.acknowledged,
                value.bulk_api_result if value.acknowledged else None)
    if hasattr(value, "to_list"):
        return ("cursor", value.to_list())
    if isinstance(value, list):
        return [describe(each) for each in value]
    return value


def outcome(scenario: Scenario, collection: Any) -> Any:
    try:
        return ("returned", describe(scenario(collection)))
    except (PyMongoError, BSONError, TypeError, ValueError, IndexError) as error:
        return ("raised", type(error).__name__, getattr(error, "code", None),
                getattr(error, "details", None))


def run_both(clients: tuple[MongoClient[Any], greenpool.Client], scenario: Scenario,
             **options: Any) -> tuple[Any, Any]:
    name = unique("api")
    outcomes = []
    for client in clients:
        collection = client["api"].get_collection(name, **options)
        collection.drop()
        outcomes.append(outcome(scenario, collection))
        collection.drop()
    return outcomes[0], outcomes[1]


def seeded(scenario: Scenario) -> Scenario:
    """``scenario`` on a collection holding five documents, _id 1 to 5."""
    def run(collection: Any) -> Any:
        collection.insert_many([{"_id": i, "x": i % 3, "tag": f"t{i}"} for i in range(1, 6)])
        return scenario(collection)
    return run


def code_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The class and code ``call`` raises (for errors whose messages name random ids)."""
    try:
        return call(*args, **kwargs)
    except PyMongoError as error:
        return type(error).__name__, getattr(error, "code", None)


SCENARIOS: dict[str, Scenario] = {
    # inserts
    "insert_one": lambda c: c.insert_one({"_id": 1, "a": "b"}),
    "insert_one duplicate": lambda c: [c.insert_one({"_id": 1}), c.insert_one({"_id": 1})],
    "insert_one not a document": lambda c: c.insert_one([1, 2]),
    "insert_one raw": lambda c: [c.insert_one(RawBSONDocument(bson.encode({"_id": 7, "a": 1}))),
                                 c.find_one(7)],
    "insert_one raw without _id": lambda c: [
        c.insert_one(RawBSONDocument(bson.encode({"a": 1}))).inserted_id,
        c.find_one({}, {"_id": 0})],
    "insert_many raw": lambda c: [
        c.insert_many([RawBSONDocument(bson.encode({"_id": 8})), {"_id": 9}]),
        c.find({}).sort("_id", 1).to_list()],
    "insert_one a mapping": lambda c: [type(c.insert_one(SON([("a", 1)])).inserted_id),
                                       c.find_one({"a": 1}, {"_id": 0})],
    "insert_many": lambda c: c.insert_many([{"_id": i} for i in range(3)]),
    "insert_many ordered duplicate": lambda c: c.insert_many(
        [{"_id": 1}, {"_id": 1}, {"_id": 2}]),
    "insert_many unordered duplicates": lambda c: c.insert_many(
        [{"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 2}, {"_id": 3}], ordered=False),
    "insert_many empty": lambda c: c.insert_many([]),
    "insert_one too large": lambda c: c.insert_one({"_id": 1, "pad": "x" * (16 * 1024 * 1024)}),
    "insert_many too large": lambda c: c.insert_many(
        [{"_id": 1, "pad": "x" * (16 * 1024 * 1024)}]),
    "insert_one just within": lambda c: [
        c.insert_one({"_id": 1, "pad": "x" * (16 * 1024 * 1024 - 100)}).inserted_id,
        len(c.find_one()["pad"])],
    # updates and deletes
    "update_one": seeded(lambda c: c.update_one({"x": 1}, {"$set": {"y": 1}})),
    "update_one no match": seeded(lambda c: c.update_one({"x": 9}, {"$set": {"y": 1}})),
    "update_one upsert": seeded(lambda c: c.update_one({"_id": 9}, {"$set": {"y": 1}},
                                                       upsert=True)),
    "update_one pipeline": seeded(lambda c: c.update_one({"_id": 1},
                                                         [{"$set": {"y": "$x"}}])),
    "update_one array_filters": lambda c: [
        c.insert_one({"_id": 1, "a": [1, 2, 3]}),
        describe(c.update_one({"_id": 1}, {"$set": {"a.$[e]": 0}},
                              array_filters=[{"e": {"$gt": 1}}])),
        c.find_one({"_id": 1})],
    "update_one not operators": seeded(lambda c: c.update_one({"x": 1}, {"y": 1})),
    "update_one duplicate": seeded(lambda c: c.update_one({"_id": 1}, {"$set": {"_id": 2}})),
    "update_many": seeded(lambda c: c.update_many({"x": {"$gte": 1}}, {"$inc": {"x": 10}})),
    "replace_one": seeded(lambda c: c.replace_one({"_id": 2}, {"z": 1})),
    "replace_one upsert": seeded(lambda c: c.replace_one({"_id": 7}, {"z": 1}, upsert=True)),
    "replace_one operators": seeded(lambda c: c.replace_one({"_id": 2}, {"$set": {"z": 1}})),
    "delete_one": seeded(lambda c: c.delete_one({"x": 1})),
    "delete_many": seeded(lambda c: c.delete_many({"x": 1})),
    "delete_many all": seeded(lambda c: c.delete_many({})),
    # bulk writes
    "bulk_write mixed": seeded(lambda c: c.bulk_write([
        InsertOne({"_id": 10}), UpdateOne({"_id": 10}, {"$set": {"a": 1}}),
        UpdateMany({"x": 1}, {"$set": {"b": 1}}), ReplaceOne({"_id": 2}, {"r": 1}),
        ReplaceOne({"_id": 11}, {"r": 2}, upsert=True), DeleteOne({"_id": 3}),
        DeleteMany({"x": 2}), InsertOne({"_id": 12})])),
    "bulk_write ordered error": seeded(lambda c: c.bulk_write([
        InsertOne({"_id": 20}), UpdateOne({"_id": 1}, {"$set": {"_id": 2}}),
        InsertOne({"_id": 21})])),
    "bulk_write unordered errors": seeded(lambda c: c.bulk_write([
        InsertOne({"_id": 1}), DeleteOne({"_id": 2}), InsertOne({"_id": 30}),
        UpdateOne({"_id": 3}, {"$set": {"_id": 4}}), InsertOne({"_id": 5})], ordered=False)),
    "bulk_write upserts": lambda c: c.bulk_write([
        UpdateOne({"_id": 1}, {"$set": {"a": 1}}, upsert=True),
        InsertOne({"_id": 2}), UpdateOne({"_id": 3}, {"$set": {"a": 1}}, upsert=True)]),
    "bulk_write empty": lambda c: c.bulk_write([]),
    "bulk_write not a list": lambda c: c.bulk_write(InsertOne({})),
    "bulk_write not an operation": lambda c: c.bulk_write([{"insertOne": {}}]),
    # find_one_and_*
    "find_one_and_update before": seeded(lambda c: c.find_one_and_update(
        {"x": 1}, {"$inc": {"x": 5}}, sort=[("_id", DESCENDING)])),
    "find_one_and_update after": seeded(lambda c: c.find_one_and_update(
        {"x": 1}, {"$inc": {"x": 5}}, projection={"tag": 0},
        return_document=ReturnDocument.AFTER)),
    "find_one_and_update upsert": seeded(lambda c: c.find_one_and_update(
        {"_id": 99}, {"$set": {"x": 5}}, upsert=True, return_document=ReturnDocument.AFTER)),
    "find_one_and_update no match": seeded(lambda c: c.find_one_and_update(
        {"x": 9}, {"$set": {"y": 1}})),
    "find_one_and_replace": seeded(lambda c: c.find_one_and_replace(
        {"_id": 2}, {"new": True}, projection=["new"], return_document=ReturnDocument.AFTER)),
    "find_one_and_delete": seeded(lambda c: c.find_one_and_delete(
        {"x": 0}, sort=[("_id", ASCENDING)])),
    "find_one_and_update duplicate": seeded(lambda c: c.find_one_and_update(
        {"_id": 1}, {"$set": {"_id": 2}})),
    # reads
    "find": seeded(lambda c: c.find({"x": {"$gte": 1}})),
    "find sorted": seeded(lambda c: c.find().sort("tag", DESCENDING).skip(1).limit(3)),
    "find projection list": seeded(lambda c: c.find({}, ["tag"]).sort([("_id", 1)])),
    "find projection document": seeded(lambda c: c.find({}, {"_id": 0, "x": 1}).sort("_id")),
    "find batches": seeded(lambda c: c.find().sort("_id").batch_size(2)),
    "find negative limit": seeded(lambda c: c.find().sort("_id").limit(-2).batch_size(1)),
    "find hint": seeded(lambda c: c.find({"x": 1}).hint([("_id", 1)]).sort("_id")),
    "find options": seeded(lambda c: c.find({}, sort=[("_id", -1)], skip=2,
                                            max_time_ms=5000, comment="hi",
                                            allow_disk_use=True)),
    "find bad filter": lambda c: c.find(5),
    "find_one": seeded(lambda c: c.find_one({"x": 2})),
    "find_one by _id": seeded(lambda c: c.find_one(3)),
    "find_one none": seeded(lambda c: c.find_one({"x": 9})),
    "find_one sorted": seeded(lambda c: c.find_one({}, sort=[("_id", -1)], projection=["x"])),
    "count_documents": seeded(lambda c: c.count_documents({"x": {"$gte": 1}})),
    "count_documents skip limit": seeded(lambda c: c.count_documents({}, skip=1, limit=2)),
    "count_documents empty": lambda c: c.count_documents({}),
    "estimated_document_count": seeded(lambda c: c.estimated_document_count()),
    "distinct": seeded(lambda c: sorted(c.distinct("x"))),
    "distinct filter": seeded(lambda c: sorted(c.distinct("tag", {"x": 1}))),
    "aggregate": seeded(lambda c: c.aggregate([{"$group": {"_id": "$x", "n": {"$sum": 1}}},
                                               {"$sort": {"_id": 1}}])),
    "aggregate $out": seeded(lambda c: [
        c.aggregate([{"$match": {"x": 1}}, {"$out": c.name + "_out"}]).to_list(),
        c.database[c.name + "_out"].find().sort("_id").to_list(),
        c.database.drop_collection(c.name + "_out")["ok"]]),
    "aggregate batch": seeded(lambda c: c.aggregate([{"$sort": {"_id": 1}}], batchSize=2)),
    # indexes and the collection itself
    "create_index": seeded(lambda c: [c.create_index([("x", ASCENDING), ("tag", DESCENDING)]),
                                      c.index_information()]),
    "create_index unique violated": seeded(lambda c: code_of(c.create_index, "x",
                                                             unique=True)),
    "create_indexes": seeded(lambda c: [
        c.create_indexes([IndexModel("x"), IndexModel([("tag", -1)], name="by_tag")]),
        sorted(index["name"] for index in c.list_indexes())]),
    "drop_index": seeded(lambda c: [c.create_index("x"), c.drop_index("x_1"),
                                    list(c.index_information())]),
    "drop_index by keys": seeded(lambda c: [c.create_index([("x", 1)]), c.drop_index([("x", 1)]),
                                            list(c.index_information())]),
    "drop_index missing": seeded(lambda c: c.drop_index("nope_1")),
    "list_indexes missing collection": lambda c: c.list_indexes(),
    "rename": seeded(lambda c: [c.rename(c.name + "_renamed")["ok"],
                                c.database[c.name + "_renamed"].count_documents({}),
                                c.database.drop_collection(c.name + "_renamed")["ok"]]),
    "rename onto existing": seeded(lambda c: [c.database[c.name + "_x"].insert_one({}),
                                              c.rename(c.name + "_x")]),
    "drop and names": seeded(lambda c: [c.name in c.database.list_collection_names(),
                                        c.drop(), c.name in c.database.list_collection_names()]),
    "create_collection": lambda c: [c.database.create_collection(c.name).name,
                                    c.database.create_collection(c.name)],
    "drop_collection missing": lambda c: c.database.drop_collection(c.name + "_none"),
    "database command": lambda c: c.database.command("count", c.name),
    "database command refused": lambda c: c.database.command("noSuchCommand"),
    "list_databases": lambda c: [c.insert_one({}).acknowledged, "api" in [
        each["name"] for each in c.database.client.list_databases()]],
    "list_database_names": lambda c: [c.insert_one({}).acknowledged,
                                      "api" in c.database.client.list_database_names()],
    # cursors: items, slices, clones, and other queries on a cursor's documents
    "cursor index": seeded(lambda c: [c.find().sort("_id")[2], c.find().sort("_id").skip(1)[0]]),
    "cursor index past the end": seeded(lambda c: c.find()[9]),
    "cursor negative index": seeded(lambda c: c.find()[-1]),
    "cursor slice step": seeded(lambda c: c.find()[1:4:2]),
    "cursor slice": seeded(lambda c: [c.find().sort("_id")[1:3].to_list(),
                                      c.find().sort("_id")[3:].to_list(),
                                      c.find()[2:2].to_list()]),
    "cursor clone": seeded(lambda c: [(lambda cursor: [next(cursor), cursor.clone().to_list()])(
        c.find({"x": 1}).sort("_id"))]),
    "cursor retrieved": seeded(lambda c: (lambda cursor: [cursor.retrieved, cursor.to_list(),
                                                          cursor.retrieved])(
        c.find().batch_size(2))),
    "cursor distinct": seeded(lambda c: sorted(c.find({"x": {"$gte": 1}}).distinct("x"))),
    "cursor explain": seeded(lambda c: sorted(set(c.find({"x": 1}).explain()) & {
        "queryPlanner", "ok"})),
    "cursor min max": seeded(lambda c: [c.create_index("x"), c.find().hint([("x", 1)]).min(
        [("x", 1)]).max([("x", 2)]).to_list()]),
    "cursor add_option partial": seeded(lambda c: c.find().add_option(128).sort("_id").to_list()),
    "cursor exhaust": seeded(lambda c: c.find(cursor_type=CursorType.EXHAUST, batch_size=2)
                             .sort("_id").to_list()),
    "cursor exhaust add_option": seeded(lambda c: [
        (lambda cursor: [cursor.to_list(3), cursor.alive, cursor.to_list(), cursor.alive])(
            c.find().add_option(64).batch_size(1).sort("_id"))]),
    "cursor exhaust with a limit": lambda c: c.find(cursor_type=CursorType.EXHAUST, limit=2),
    "cursor exhaust then limit": lambda c: c.find(cursor_type=CursorType.EXHAUST).limit(0),
    "cursor limit then exhaust": lambda c: c.find().limit(2).add_option(64),
    "cursor exhaust removed": seeded(lambda c: c.find(cursor_type=CursorType.EXHAUST)
                                     .remove_option(64).limit(2).sort("_id").to_list()),
    "cursor exhaust index": seeded(lambda c: c.find(cursor_type=CursorType.EXHAUST)[1]),
    "find_one exhaust": seeded(lambda c: c.find_one({}, cursor_type=CursorType.EXHAUST)),
    "cursor address": seeded(lambda c: (lambda cursor: [cursor.address, next(cursor),
                                                        cursor.address is not None])(
        c.find().batch_size(1))),
    # collections, databases and the client
    "collection options": lambda c: [c.database.create_collection(c.name, capped=True,
                                                                  size=4096).name,
                                     c.options()],
    "collection options missing": lambda c: c.options(),
    "dereference": seeded(lambda c: [c.database.dereference(bson.DBRef(c.name, 2)),
                                     c.database.dereference(bson.DBRef(c.name, 99))]),
    "dereference another database": lambda c: code_of(
        lambda: c.database.dereference(bson.DBRef(c.name, 1, "elsewhere"))),
    "validate_collection": seeded(lambda c: c.database.validate_collection(c.name)["valid"]),
    "command allowable_errors": lambda c: c.database.command(
        "noSuchCommand", allowable_errors=[59])["ok"],
    "create_search_index": seeded(lambda c: c.create_search_index(
        {"name": "s", "definition": {"mappings": {"dynamic": True}}})),
    "list_search_indexes": seeded(lambda c: c.list_search_indexes()),
    "server_info": lambda c: sorted({"version", "versionArray", "ok"} & set(
        c.database.client.server_info())),
    "is_primary is_mongos": lambda c: [c.database.client.is_primary,
                                       c.database.client.is_mongos],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_outcome_as_pymongo(clients: Any, name: str) -> None:
    stock, ours = run_both(clients, SCENARIOS[name])
    assert ours == stock


def test_the_scenarios_cover_errors_and_results(clients: Any) -> None:
    """The comparison proves something: scenarios of both kinds run."""
    kinds = {run_both(clients, SCENARIOS[name])[1][0] for name in
             ("insert_one", "insert_one duplicate")}
    assert kinds == {"returned", "raised"}


UNACKNOWLEDGED: dict[str, Scenario] = {
    "insert_one": lambda c: c.insert_one({"_id": 1}),
    "insert_many": lambda c: c.insert_many([{"_id": 1}, {"_id": 2}]),
    "update_one": lambda c: c.update_one({"_id": 1}, {"$set": {"a": 1}}),
    "replace_one": lambda c: c.replace_one({"_id": 1}, {"a": 1}),
    "delete_many": lambda c: c.delete_many({}),
    "bulk_write": lambda c: c.bulk_write([InsertOne({"_id": 1}), DeleteOne({"_id": 1})]),
    "find_one_and_delete": lambda c: c.find_one_and_delete({}),
}


@pytest.mark.parametrize("name", list(UNACKNOWLEDGED))
def test_unacknowledged_results_as_pymongo(clients: Any, name: str) -> None:
    stock, ours = run_both(clients, UNACKNOWLEDGED[name], write_concern=WriteConcern(w=0))
    assert ours == stock


@pytest.mark.parametrize("counted", ["inserted_ids", "matched_count", "deleted_count",
                                     "inserted_count"])
def test_unacknowledged_counts_raise_as_pymongo(clients: Any, counted: str) -> None:
    results = []
    for client in clients:
        collection = client["api"].get_collection(unique("w0"), write_concern=WriteConcern(w=0))
        calls: dict[str, Callable[[Any], Any]] = {
            "inserted_ids": lambda c: c.insert_many([{}]),
            "matched_count": lambda c: c.update_one({}, {"$set": {"a": 1}}),
            "deleted_count": lambda c: c.delete_one({}),
            "inserted_count": lambda c: c.bulk_write([InsertOne({})])}
        result = calls[counted](collection)
        try:
            value = getattr(result, counted)
            # Each client makes its own ObjectIds.
            results.append(("value", [type(each) for each in value]
                            if counted == "inserted_ids" else value))
        except PyMongoError as error:
            results.append(("raised", type(error).__name__))
        client["api"].drop_collection(collection.name)
    assert results[0] == results[1]


def test_an_explicit_session_with_w0_is_refused_as_pymongo(mongodb_uri: str) -> None:
    errors = []
    for make in (MongoClient, greenpool.Client):
        with make(mongodb_uri) as client, client.start_session() as session:
            collection = client["api"].get_collection(unique("w0"),
                                                      write_concern=WriteConcern(w=0))
            with pytest.raises(PyMongoError) as refused:
                collection.insert_one({}, session=session)
            errors.append(type(refused.value))
    assert errors[0] is errors[1]


CODECS: dict[str, dict[str, Any]] = {
    "standard uuids": {"uuidRepresentation": "standard"},
    "python legacy uuids": {"uuidRepresentation": "pythonLegacy"},
    "tz_aware": {"tz_aware": True},
    "SON documents": {"document_class": SON},
    "raw documents": {"document_class": RawBSONDocument, "uuidRepresentation": "standard"},
    "tz_aware with tzinfo": {"tz_aware": True,
                             "tzinfo": datetime.timezone(datetime.timedelta(hours=2))},
}


@pytest.mark.parametrize("name", list(CODECS))
def test_client_codec_keywords_as_pymongo(mongodb_uri: str, name: str) -> None:
    document: dict[str, Any] = {"_id": 1, "when": datetime.datetime(2026, 1, 2, 3, 4),
                                "inner": {"a": 1}}
    if "uuidRepresentation" in CODECS[name]:
        document["u"] = uuid.UUID(int=7)

    def scenario(collection: Any) -> Any:
        collection.insert_one(dict(document))
        found = collection.find_one({"_id": 1, **({"u": document["u"]} if "u" in document
                                                  else {})})
        return (type(found).__name__, found, type(found["inner"]).__name__,
                collection.find({"_id": 1}).to_list())

    with MongoClient(mongodb_uri, **CODECS[name]) as stock, \
            greenpool.Client(mongodb_uri, **CODECS[name]) as ours:
        assert ours.codec_options == stock.codec_options
        expected, got = run_both((stock, ours), scenario)
        assert got == expected and expected[0] == "returned"


def test_uuid_representation_from_the_uri(mongodb_uri: str) -> None:
    uri = mongodb_uri.rstrip("/") + "/?uuidRepresentation=standard"
    with greenpool.Client(uri) as client:
        collection = client["api"][unique("uuids")]
        collection.insert_one({"_id": uuid.UUID(int=1)})
        assert collection.find_one()["_id"] == uuid.UUID(int=1)
        collection.drop()


def test_codec_options_per_collection(clients: Any) -> None:
    options = CodecOptions(document_class=SON, uuid_representation=4)

    def scenario(collection: Any) -> Any:
        collection.insert_many([{"_id": uuid.UUID(int=i), "n": i} for i in range(5)])
        batches = collection.find().sort("n").batch_size(2).to_list()
        return [type(doc).__name__ for doc in batches], batches

    stock, ours = run_both(clients, scenario, codec_options=options)
    assert ours == stock and stock[1][0] == ["SON"] * 5


def test_without_codec_options_a_uuid_is_refused_before_sending(clients: Any) -> None:
    stock, ours = run_both(clients, lambda c: c.insert_one({"u": uuid.uuid4()}))
    assert ours[:2] == stock[:2] == ("raised", "ValueError")


def test_a_bad_codec_keyword_is_named(mongodb_uri: str) -> None:
    with pytest.raises(TypeError, match="'document_klass'"):
        greenpool.Client(mongodb_uri, document_klass=dict)
    with pytest.raises(ValueError, match="uuidRepresentation='java'"):
        greenpool.Client(mongodb_uri, uuidRepresentation="java")


def test_databases_and_collections(mongodb_uri: str) -> None:
    uri = mongodb_uri.rstrip("/") + "/shop?w=majority&readConcernLevel=local"
    with greenpool.Client(uri) as client:
        assert client.shop.name == client["shop"].name == client.get_database().name == "shop"
        assert client.get_default_database().name == "shop"
        orders = client.shop.orders
        assert orders.full_name == "shop.orders" and orders.database == client.shop
        assert orders.write_concern == WriteConcern(w="majority")
        assert orders.read_concern.level == "local"
        changed = orders.with_options(write_concern=WriteConcern(w=1))
        assert changed.write_concern == WriteConcern(w=1)
        assert changed.read_concern.level == "local"
        # The server's defaults override what the database has (the spec's col3).
        defaults = client.shop.get_collection("orders", write_concern=WriteConcern(),
                                              read_concern=ReadConcern())
        assert defaults.write_concern.is_server_default and defaults.read_concern.level is None
        assert orders["archive"].name == "orders.archive" == orders.archive.name
        with pytest.raises(AttributeError):
            client._nothing  # noqa: B018
        with pytest.raises(TypeError, match="write_concern"):
            client.get_database("shop", write_concern={"w": 1})  # type: ignore[arg-type]
        with pytest.raises(NotImplementedError):
            bool(orders)


WRITE_CONCERN_ERRORS: dict[str, Scenario] = {
    "insert_one": lambda c: c.insert_one({"_id": 1}),
    "insert_many": lambda c: c.insert_many([{"_id": 1}, {"_id": 2}]),
    "update_one": lambda c: c.update_one({"_id": 1}, {"$set": {"a": 1}}, upsert=True),
    "delete_many": lambda c: c.delete_many({}),
    "bulk_write": lambda c: c.bulk_write([InsertOne({"_id": 1}), DeleteOne({"_id": 1})]),
    "find_one_and_update": lambda c: c.find_one_and_update({"_id": 1}, {"$set": {"a": 1}},
                                                           upsert=True),
}


@pytest.mark.parametrize("name", list(WRITE_CONCERN_ERRORS))
def test_write_concern_errors_as_pymongo(mongodb_uri: str, name: str) -> None:
    app = unique("wce")
    uri = with_options(mongodb_uri, appName=app)
    failing = {"configureFailPoint": "failCommand", "mode": "alwaysOn",
               "data": {"failCommands": ["insert", "update", "delete", "findAndModify"],
                        "appName": app,
                        "writeConcernError": {"code": 100, "codeName": "UnsatisfiableWriteConcern",
                                              "errmsg": "Not enough data-bearing nodes"}}}
    with MongoClient(uri) as stock, greenpool.Client(uri) as ours, failpoint(mongodb_uri, failing):
        expected, got = run_both((stock, ours), WRITE_CONCERN_ERRORS[name])
    assert got == expected and expected[0] == "raised"
