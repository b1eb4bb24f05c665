"""A mini runner for the Retryable Reads and Retryable Writes spec tests
(``retryable-reads/tests/unified``, ``retryable-writes/tests/unified``), against
``greenpool.Client`` and SecantusDB's one-node replica set.

It is the CSOT runner (tests/csot_unified.py: a database or collection entity
is names, an operation is the command a driver sends for it, run through
``Client.command`` or ``Client.cursor``), with what these files add: results
in the CRUD spec's shapes (``insertedId``, ``matchedCount``... from the raw
reply), the ``outcome`` of a test (the collection's documents afterwards),
``runOnRequirements``, and the CRUD options these files pass (``sort``,
``upsert``, ``returnDocument``, ``ordered``). The initial data and the outcome
go through one PyMongo client for the whole module (``admin``), not one per test.

Operations greenpool's Client does not offer (GridFS, change streams,
bulkWrite, clientBulkWrite, mapReduce) raise :class:`NotApplicable`, as do
requirements the test server cannot meet (authentication); the test module
skips those, saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bson.objectid import ObjectId
from pymongo import MongoClient

import greenpool
from greenpool.client.retries import WRITE_COMMANDS
from tests import csot_unified, unified_match
from tests.cmap_runner import SPEC_DIR
from tests.csot_unified import Collection, Database, NotApplicable
from tests.unified_match import match, run_test

READS_DIR = SPEC_DIR / "retryable-reads" / "tests" / "unified"
WRITES_DIR = SPEC_DIR / "retryable-writes" / "tests" / "unified"

__all__ = ["READS_DIR", "WRITES_DIR", "NotApplicable", "Runner", "load_cases"]

# What the test server is: SecantusDB presenting a one-node replica set.
TOPOLOGY = "replicaset"
# The fail points SecantusDB implements (it accepts any other and ignores it).
FAIL_POINTS = frozenset({"failCommand", "failGetMoreAfterCursorCheckout",
                         "maxTimeAlwaysTimeOut"})


def load_cases(directory: str, file_name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(file, test)`` for every test of one file; none if the spec files are missing."""
    where = READS_DIR if directory == "reads" else WRITES_DIR
    return unified_match.load_cases(where / file_name)


def check_requirements(requirements: list[Mapping[str, Any]] | None) -> None:
    """Raise NotApplicable unless one of ``requirements`` holds for the test
    server (a one-node replica set, a recent version, without auth)."""
    if not requirements:
        return
    reasons = []
    for requirement in requirements:
        unmet = [key for key, value in requirement.items()
                 if not _requirement_met(key, value)]
        if not unmet:
            return
        reasons.append(", ".join(f"{key}={requirement[key]!r}" for key in unmet))
    raise NotApplicable(f"a deployment with {' or '.join(reasons)} (the test server is "
                        f"SecantusDB 8.2.11, a one-node replica set without authentication)")


def _requirement_met(key: str, value: Any) -> bool:
    if key == "topologies":
        return TOPOLOGY in value
    if key == "auth":
        return value is False
    if key == "serverless":
        return value in ("forbid", "allow")
    if key in ("minServerVersion", "maxServerVersion"):
        # SecantusDB presents itself as 8.2.11.
        wanted = tuple(int(part) for part in str(value).split("."))
        have = (8, 2, 11)
        return have >= wanted if key == "minServerVersion" else have <= wanted
    raise AssertionError(f"runOnRequirements.{key} is not supported by this runner")


class Runner(csot_unified.Runner):
    """The CSOT runner with results, outcomes and the CRUD options of these files."""

    def __init__(self, uri: str, admin: MongoClient[dict[str, Any]]) -> None:
        super().__init__(uri)
        self._admin = admin
        # A collection entity's writeConcern option, by (database, collection).
        self._write_concerns: dict[tuple[str, str], Any] = {}

    def run(self, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        check_requirements(spec.get("runOnRequirements"))
        check_requirements(test.get("runOnRequirements"))
        run_test(self, spec, test)
        for expected in test.get("outcome") or []:
            collection = self._admin[expected["databaseName"]][expected["collectionName"]]
            match(expected["documents"], list(collection.find({}, sort=[("_id", 1)])),
                  "outcome", root=False)

    # -- setup and teardown: one client for the module --------------------------------

    def initial_data(self, data: list[Mapping[str, Any]]) -> None:
        for item in data:
            database = self._admin[item["databaseName"]]
            database.drop_collection(item["collectionName"])
            database.create_collection(item["collectionName"])
            if item["documents"]:
                database[item["collectionName"]].insert_many(item["documents"])

    def close(self) -> None:
        failpoints, self.failpoints = self.failpoints, []
        super().close()
        for name in failpoints:
            self._admin.admin.command({"configureFailPoint": name, "mode": "off"})

    def create_entity(self, entity: Mapping[str, Any]) -> None:
        ((kind, spec),) = entity.items()
        if kind == "bucket":
            raise NotApplicable("GridFS (greenpool has no GridFS API)")
        options = dict(spec.get("collectionOptions") or {}) if kind == "collection" else {}
        concern = options.pop("writeConcern", None)
        if options.keys() - {"timeoutMS"}:
            raise NotApplicable(f"collection options {sorted(options)}")
        super().create_entity(entity)
        if concern is not None:
            collection: Collection = self.entities[spec["id"]]
            self._write_concerns[collection.db, collection.name] = concern

    def _run(self, entity: Any, db: str, command: dict[str, Any],
             arguments: dict[str, Any]) -> Any:
        # A collection's write concern goes into its write commands, as a
        # driver's collection object would send it.
        if isinstance(entity, Collection) and next(iter(command)) in WRITE_COMMANDS:
            concern = self._write_concerns.get((entity.db, entity.name))
            if concern is not None:
                command["writeConcern"] = concern
        return super()._run(entity, db, command, arguments)

    # -- operations, with the CRUD spec's results ---------------------------------------

    def op_failPoint(self, *, client: str, failPoint: Mapping[str, Any]) -> None:
        name = failPoint["configureFailPoint"]
        if name not in FAIL_POINTS:
            raise NotApplicable(f"the {name} fail point (SecantusDB accepts it and does "
                                f"nothing)")
        super().op_failPoint(client=client, failPoint=failPoint)

    def op_createChangeStream(self, target: Any, **arguments: Any) -> Any:
        raise NotApplicable("change streams (greenpool has no change stream API)")

    def op_bulkWrite(self, target: Any, **arguments: Any) -> Any:
        raise NotApplicable("bulkWrite (greenpool.Client runs one command per call)")

    def op_clientBulkWrite(self, target: Any, **arguments: Any) -> Any:
        raise NotApplicable("clientBulkWrite (greenpool.Client runs one command per call)")

    def op_mapReduce(self, target: Any, **arguments: Any) -> Any:
        raise NotApplicable("mapReduce (greenpool has no mapReduce helper, and SecantusDB "
                            "no mapReduce command)")

    def op_download(self, target: Any, **arguments: Any) -> Any:
        raise NotApplicable("GridFS (greenpool has no GridFS API)")

    op_downloadByName = op_download

    def op_listDatabaseObjects(self, client: greenpool.Client, **arguments: Any) -> Any:
        return self.op_listDatabases(client, **arguments)

    def op_listCollectionObjects(self, database: Database, **arguments: Any) -> Any:
        return self.op_listCollections(database, **arguments)

    def op_count(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return super().op_count(coll, filter=filter, **arguments)["n"]

    def op_estimatedDocumentCount(self, coll: Collection, **arguments: Any) -> Any:
        return super().op_estimatedDocumentCount(coll, **arguments)["n"]

    def op_countDocuments(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        batch = super().op_countDocuments(coll, filter=filter, **arguments)
        return batch[0]["n"] if batch else 0

    def op_distinct(self, coll: Collection, *, fieldName: str, filter: Any,
                    **arguments: Any) -> Any:
        return super().op_distinct(coll, fieldName=fieldName, filter=filter,
                                   **arguments)["values"]

    def op_insertOne(self, coll: Collection, *, document: Any, **arguments: Any) -> Any:
        document = _with_id(document)
        super().op_insertOne(coll, document=document, **arguments)
        return {"insertedId": document["_id"]}

    def op_insertMany(self, coll: Collection, *, documents: Any, **arguments: Any) -> Any:
        documents = [_with_id(document) for document in documents]
        command = {"insert": coll.name, "documents": documents,
                   "ordered": arguments.pop("ordered", True)}
        self._write(coll, command, arguments)
        return {"insertedIds": {str(i): d["_id"] for i, d in enumerate(documents)}}

    def op_deleteOne(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return {"deletedCount": super().op_deleteOne(coll, filter=filter, **arguments)["n"]}

    def op_deleteMany(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return {"deletedCount": super().op_deleteMany(coll, filter=filter, **arguments)["n"]}

    def _update(self, coll: Collection, filter: Any, update: Any, multi: bool,
                arguments: dict[str, Any]) -> Any:
        statement = {"q": filter, "u": update, "multi": multi}
        if "upsert" in arguments:
            statement["upsert"] = arguments.pop("upsert")
        reply = self._write(coll, {"update": coll.name, "updates": [statement]}, arguments)
        upserted = reply.get("upserted") or []
        result = {"matchedCount": reply["n"] - len(upserted),
                  "modifiedCount": reply["nModified"], "upsertedCount": len(upserted)}
        if upserted:
            result["upsertedId"] = upserted[0]["_id"]
        return result

    def op_findOneAndDelete(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        command = {"findAndModify": coll.name, "query": filter, "remove": True}
        return self._find_and_modify(coll, command, arguments)

    def op_findOneAndReplace(self, coll: Collection, *, filter: Any, replacement: Any,
                             **arguments: Any) -> Any:
        command = {"findAndModify": coll.name, "query": filter, "update": replacement}
        return self._find_and_modify(coll, command, arguments)

    def op_findOneAndUpdate(self, coll: Collection, *, filter: Any, update: Any,
                            **arguments: Any) -> Any:
        command = {"findAndModify": coll.name, "query": filter, "update": update}
        return self._find_and_modify(coll, command, arguments)

    def _find_and_modify(self, coll: Collection, command: dict[str, Any],
                         arguments: dict[str, Any]) -> Any:
        if "sort" in arguments:
            command["sort"] = arguments.pop("sort")
        if "returnDocument" in arguments:
            command["new"] = arguments.pop("returnDocument") == "After"
        return self._write(coll, command, arguments).get("value")

    def _write(self, coll: Collection, command: dict[str, Any],
               arguments: dict[str, Any]) -> Any:
        reply = self._run(coll, coll.db, command, arguments)
        if reply.get("writeErrors"):
            raise AssertionError(f"unexpected write errors: {reply['writeErrors']!r}")
        return reply

    def op_find(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        command: dict[str, Any] = {"find": coll.name, "filter": filter}
        for option in ("sort", "limit"):
            if option in arguments:
                command[option] = arguments.pop(option)
        return self._drain(coll, coll.db, command, arguments)


def _with_id(document: Mapping[str, Any]) -> dict[str, Any]:
    # Drivers add an _id client-side, so that the insertedId is known.
    return {"_id": ObjectId(), **document} if "_id" not in document else dict(document)
