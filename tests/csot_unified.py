"""A mini runner for the unified test format: the Client-Side Operations Timeout spec
tests (``client-side-operations-timeout/tests``) whose time limits PyMongo's API does not
express (test_csot_spec.py's ``command_runner_reason`` says which; the others run on the
collection API, through tests/unified/), against ``greenpool.Client`` and SecantusDB
(its one-node replica set, for transactions). tests/retryable_unified.py builds on it.

A database or collection entity is the names plus the timeoutMS it was given, and an
operation on it is the command a driver sends for it (``insertOne`` is an ``insert``,
``countDocuments`` an ``aggregate``...), run with ``timeout=`` from the most specific
level that sets one, which is what the levels mean. Operations greenpool does not offer
(GridFS, change streams...) raise :class:`NotApplicable`; test_csot_spec.py lists them
by file with the reason, and a test that needs one is skipped saying which.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gevent
from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError

import greenpool
from greenpool.client.api.cursor import Cursor
from greenpool.client.operations.session import Session
from tests import unified_match
from tests.cmap_runner import SPEC_DIR
from tests.unified_match import (
    Recorder,
    check_error,
    check_events,
    close_entities,
    event_name,
    match,
    recorder_for,
    run_test,
)

CSOT_DIR = SPEC_DIR / "client-side-operations-timeout" / "tests"


# Until when a command a test's fail point blocked may still be running on the
# server after the client gave up on it (a timed-out drop would otherwise
# land in the next test). Module-wide: it outlives the test that caused it.
_server_busy_until = 0.0


def server_busy_until() -> float:
    """Until when (``time.monotonic()``) a command a fail point held may still run."""
    return _server_busy_until


def server_may_be_busy(began: float, block_ms: float) -> None:
    """A command sent after ``began`` may be held ``block_ms`` (and a little more for the
    server's own work)."""
    global _server_busy_until
    _server_busy_until = max(_server_busy_until, began + block_ms / 1000 + 0.05)


class NotApplicable(Exception):
    """The test needs something greenpool's Client does not offer."""


def load_cases(file_name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(file, test)`` for every test of one file; none if the spec files are missing."""
    return unified_match.load_cases(CSOT_DIR / file_name)


# -- entities -------------------------------------------------------------------------------


@dataclass
class Database:
    client: greenpool.Client
    name: str
    timeout_ms: float | None


@dataclass
class Collection:
    client: greenpool.Client
    db: str
    name: str
    timeout_ms: float | None


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


# -- the runner -----------------------------------------------------------------------------


@dataclass
class Runner:
    uri: str
    entities: dict[str, Any] = field(default_factory=dict)
    recorders: dict[str, Recorder] = field(default_factory=dict)
    clients: list[greenpool.Client] = field(default_factory=list)
    threads: dict[str, list[gevent.Greenlet]] = field(default_factory=dict)
    failpoints: list[str] = field(default_factory=list)
    block_times: list[int] = field(default_factory=list)
    #: Each cursor's (``id()``) timeout= (None: the client's timeoutMS).
    cursor_limits: dict[int, float | None] = field(default_factory=dict)
    #: The clients (``id()``) whose URI sets wTimeoutMS.
    uri_write_concern: set[int] = field(default_factory=set)

    def run(self, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        gevent.sleep(max(0.0, server_busy_until() - time.monotonic()))
        run_test(self, spec, test)

    # -- setup and teardown ---------------------------------------------------------------

    def admin(self) -> MongoClient[dict[str, Any]]:
        return MongoClient(self.uri, directConnection=True, serverSelectionTimeoutMS=10_000)

    def initial_data(self, data: list[Mapping[str, Any]]) -> None:
        if not data:
            return
        with contextlib.closing(self.admin()) as client:
            for item in data:
                database = client[item["databaseName"]]
                database.drop_collection(item["collectionName"])
                database.command({"create": item["collectionName"],
                                  **(item.get("createOptions") or {})})
                if item["documents"]:
                    database[item["collectionName"]].insert_many(item["documents"])

    def client_uri(self, spec: Mapping[str, Any]) -> str:
        options = dict(spec.get("uriOptions") or {})
        options["directConnection"] = True
        query = urlencode({k: str(v).lower() if isinstance(v, bool) else v
                           for k, v in options.items()})
        return f"{self.uri}{'&' if '?' in self.uri else '?'}{query}"

    def create_entity(self, entity: Mapping[str, Any]) -> None:
        ((kind, spec),) = entity.items()
        if kind == "client":
            recorder = recorder_for(spec.get("observeEvents") or [],
                                    spec.get("ignoreCommandMonitoringEvents") or [])
            client = greenpool.Client(self.client_uri(spec), event_listeners=[recorder])
            if "wTimeoutMS" in (spec.get("uriOptions") or {}):
                self.uri_write_concern.add(id(client))
            self.clients.append(client)
            self.recorders[spec["id"]] = recorder
            self.entities[spec["id"]] = client
            if "awaitMinPoolSizeMS" in spec:
                self._await_min_pool_size(client, spec["awaitMinPoolSizeMS"] / 1000)
        elif kind == "database":
            options = spec.get("databaseOptions") or {}
            self.entities[spec["id"]] = Database(self.entities[spec["client"]],
                                                 spec["databaseName"], options.get("timeoutMS"))
        elif kind == "collection":
            database: Database = self.entities[spec["database"]]
            options = spec.get("collectionOptions") or {}
            timeout_ms = options.get("timeoutMS", database.timeout_ms)
            self.entities[spec["id"]] = Collection(database.client, database.name,
                                                   spec["collectionName"], timeout_ms)
        elif kind == "session":
            options = spec.get("sessionOptions") or {}
            unsupported = set(options) - {"defaultTimeoutMS"}
            if unsupported:
                raise NotApplicable(f"session options {sorted(unsupported)}")
            self.entities[spec["id"]] = self.entities[spec["client"]].start_session(
                default_timeout=_seconds(options.get("defaultTimeoutMS")))
        elif kind == "thread":
            self.threads[spec["id"]] = []
        elif kind == "bucket":
            self.entities[spec["id"]] = _BUCKET  # refused when an operation uses it
        else:
            raise AssertionError(f"entity type {kind!r} is not supported by this runner")

    def _await_min_pool_size(self, client: greenpool.Client, limit: float) -> None:
        with gevent.Timeout(limit, AssertionError("minPoolSize was not reached")):
            client.topology.select()
            while client.stats().total < client.settings.pool.min_pool_size:
                gevent.sleep(0.01)

    def close(self) -> None:
        for greenlets in self.threads.values():
            gevent.killall(greenlets)
        close_entities(self.entities.values())
        for client in self.clients:
            client.close()
        if self.failpoints:
            with contextlib.closing(self.admin()) as admin:
                for name in self.failpoints:
                    admin.admin.command({"configureFailPoint": name, "mode": "off"})

    # -- operations -----------------------------------------------------------------------

    def operation(self, operation: Mapping[str, Any], *, in_callback: bool = False) -> Any:
        name = operation["name"]
        arguments = dict(operation.get("arguments") or {})
        target = operation["object"]
        handler: Callable[..., Any] | None = getattr(self, f"op_{name}", None)
        if handler is None:
            raise NotApplicable(f"the {name} operation")
        if self.entities.get(target) is _BUCKET:
            raise NotApplicable("GridFS as commands (the GridFS files run on greenpool.gridfs, "
                                "through tests/unified/)")
        error: BaseException | None = None
        result: Any = None
        began = time.monotonic()
        try:
            if target == "testRunner":
                result = handler(**arguments)
            else:
                result = handler(self.entities[target], **arguments)
        except PyMongoError as caught:
            if caught.timeout:
                self._server_may_be_busy(began)
            if not ("expectError" in operation or operation.get("ignoreResultAndError")):
                raise
            error = caught
        if "expectError" in operation:
            check_error(operation["expectError"], error)
        if error is not None and in_callback:
            raise error  # the unified format: callback errors reach withTransaction
        if "expectResult" in operation:
            match(operation["expectResult"], result)
        if "saveResultAsEntity" in operation:
            self.entities[operation["saveResultAsEntity"]] = result
        return result

    def _server_may_be_busy(self, began: float) -> None:
        server_may_be_busy(began, max(self.block_times, default=0))

    # testRunner

    def op_createEntities(self, *, entities: list[Mapping[str, Any]]) -> None:
        for entity in entities:
            self.create_entity(entity)

    def op_failPoint(self, *, client: str, failPoint: Mapping[str, Any]) -> None:
        self.failpoints.append(failPoint["configureFailPoint"])
        self.block_times.append(failPoint.get("data", {}).get("blockTimeMS", 0))
        self.entities[client].command("admin", dict(failPoint))

    def op_wait(self, *, ms: int) -> None:
        gevent.sleep(ms / 1000)

    def op_runOnThread(self, *, thread: str, operation: Mapping[str, Any]) -> None:
        self.threads[thread].append(gevent.spawn(self.operation, operation))

    def op_waitForThread(self, *, thread: str) -> None:
        for greenlet in self.threads[thread]:
            greenlet.get(timeout=10)

    def op_waitForEvent(self, *, client: str, event: Mapping[str, Any], count: int) -> None:
        ((name, fields),) = event.items()
        deadline = time.monotonic() + 10
        recorder = self.recorders[client]
        while True:
            seen = [e for e in recorder.events if event_name(e) == name and all(
                getattr(e, "command_name", None) == v for k, v in fields.items()
                if k == "commandName")]
            if len(seen) >= count:
                return
            assert time.monotonic() < deadline, f"no {count} {event} on {client}"
            gevent.sleep(0.005)

    # client and database

    def _timeout(self, entity: Any, arguments: dict[str, Any]) -> float | None:
        if "timeoutMS" in arguments:
            return _seconds(arguments.pop("timeoutMS"))
        if isinstance(entity, Database | Collection):
            return _seconds(entity.timeout_ms)
        return None

    def _run(self, entity: Any, db: str, command: dict[str, Any],
             arguments: dict[str, Any]) -> Any:
        session = self._session(arguments)
        timeout = self._timeout(entity, arguments)
        _max_time(command, arguments)
        unknown = set(arguments) - {"timeoutMode"}
        if unknown:
            raise NotApplicable(f"operation options {sorted(unknown)}")
        client = entity if isinstance(entity, greenpool.Client) else entity.client
        if id(client) in self.uri_write_concern and next(iter(command)) in _WRITES:
            raise NotApplicable("a write concern from the URI (greenpool.Client's command "
                                "API sends commands as given)")
        return client.command(db, command, session=session, timeout=timeout)

    def _cursor(self, entity: Any, db: str, command: dict[str, Any],
                arguments: dict[str, Any]) -> Cursor:
        session = self._session(arguments)
        timeout = self._timeout(entity, arguments)
        mode = arguments.pop("timeoutMode", None)
        batch_size = arguments.pop("batchSize", None)
        _max_time(command, arguments)
        cursor_type = arguments.pop("cursorType", None)
        max_await_ms = arguments.pop("maxAwaitTimeMS", None)
        if cursor_type in ("tailable", "tailableAwait"):
            command["tailable"] = True
        if cursor_type == "tailableAwait":
            command["awaitData"] = True
        if batch_size is not None:
            if "find" in command:
                command["batchSize"] = batch_size
            else:
                command.setdefault("cursor", {})["batchSize"] = batch_size
        if arguments:
            raise NotApplicable(f"cursor options {sorted(arguments)}")
        client = entity if isinstance(entity, greenpool.Client) else entity.client
        cursor = client.cursor(db, command, batch_size=batch_size, session=session,
                               timeout=timeout, timeout_mode=_mode(mode),
                               max_await_time_ms=max_await_ms)
        self.cursor_limits[id(cursor)] = timeout
        return cursor

    def _drain(self, entity: Any, db: str, command: dict[str, Any],
               arguments: dict[str, Any]) -> list[Any]:
        with self._cursor(entity, db, command, arguments) as cursor:
            return unified_match.RootDocuments(cursor)

    def _session(self, arguments: dict[str, Any]) -> Session | None:
        name = arguments.pop("session", None)
        return None if name is None else self.entities[name]

    def op_listDatabases(self, client: greenpool.Client, *, filter: Any = None,
                         **arguments: Any) -> Any:
        return self._run(client, "admin", {"listDatabases": 1, "filter": filter or {}},
                         arguments)

    def op_listDatabaseNames(self, client: greenpool.Client, **arguments: Any) -> Any:
        return self._run(client, "admin", {"listDatabases": 1, "nameOnly": True}, arguments)

    def op_runCommand(self, database: Database, *, command: Any, commandName: str,
                      **arguments: Any) -> Any:
        return self._run(database, database.name, dict(command), arguments)

    def op_runCursorCommand(self, database: Database, *, command: Any, commandName: str,
                            **arguments: Any) -> Any:
        return self._drain(database, database.name, dict(command), arguments)

    def op_createCommandCursor(self, database: Database, *, command: Any,
                               commandName: str = "", **arguments: Any) -> Any:
        return self._cursor(database, database.name, dict(command), arguments)

    def op_aggregate(self, target: Database | Collection, *, pipeline: Any,
                     **arguments: Any) -> Any:
        name = target.name if isinstance(target, Collection) else 1
        db = target.db if isinstance(target, Collection) else target.name
        return self._drain(target, db, {"aggregate": name, "pipeline": pipeline, "cursor": {}},
                           arguments)

    def op_listCollections(self, database: Database, *, filter: Any = None,
                           **arguments: Any) -> Any:
        return self._drain(database, database.name,
                           {"listCollections": 1, "filter": filter or {}}, arguments)

    def op_listCollectionNames(self, database: Database, *, filter: Any = None,
                               **arguments: Any) -> Any:
        return self._drain(database, database.name,
                           {"listCollections": 1, "filter": filter or {}, "nameOnly": True},
                           arguments)

    def op_createCollection(self, database: Database, *, collection: str,
                            **arguments: Any) -> Any:
        command = {"create": collection}
        for option in ("capped", "size", "max"):
            if option in arguments:
                command[option] = arguments.pop(option)
        self._run(database, database.name, command, arguments)
        return Collection(database.client, database.name, collection, database.timeout_ms)

    def op_dropCollection(self, database: Database, *, collection: str,
                          **arguments: Any) -> Any:
        with contextlib.suppress(OperationFailure):  # drivers ignore NamespaceNotFound
            return self._run(database, database.name, {"drop": collection}, arguments)
        return None

    # collection

    def op_find(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return self._drain(coll, coll.db, {"find": coll.name, "filter": filter}, arguments)

    def op_createFindCursor(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return self._cursor(coll, coll.db, {"find": coll.name, "filter": filter}, arguments)

    def op_findOne(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        documents = self._drain(coll, coll.db, {"find": coll.name, "filter": filter,
                                                "limit": 1, "singleBatch": True}, arguments)
        return documents[0] if documents else None

    def op_count(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"count": coll.name, "query": filter}, arguments)

    def op_estimatedDocumentCount(self, coll: Collection, **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"count": coll.name}, arguments)

    def op_countDocuments(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        pipeline = [{"$match": filter}, {"$group": {"_id": 1, "n": {"$sum": 1}}}]
        return self._drain(coll, coll.db,
                           {"aggregate": coll.name, "pipeline": pipeline, "cursor": {}},
                           arguments)

    def op_distinct(self, coll: Collection, *, fieldName: str, filter: Any,
                    **arguments: Any) -> Any:
        return self._run(coll, coll.db,
                         {"distinct": coll.name, "key": fieldName, "query": filter}, arguments)

    def op_insertOne(self, coll: Collection, *, document: Any, **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"insert": coll.name, "documents": [document]},
                         arguments)

    def op_insertMany(self, coll: Collection, *, documents: Any, **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"insert": coll.name, "documents": documents},
                         arguments)

    def op_deleteOne(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return self._run(coll, coll.db,
                         {"delete": coll.name, "deletes": [{"q": filter, "limit": 1}]},
                         arguments)

    def op_deleteMany(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return self._run(coll, coll.db,
                         {"delete": coll.name, "deletes": [{"q": filter, "limit": 0}]},
                         arguments)

    def _update(self, coll: Collection, filter: Any, update: Any, multi: bool,
                arguments: dict[str, Any]) -> Any:
        return self._run(coll, coll.db, {"update": coll.name, "updates": [
            {"q": filter, "u": update, "multi": multi}]}, arguments)

    def op_replaceOne(self, coll: Collection, *, filter: Any, replacement: Any,
                      **arguments: Any) -> Any:
        return self._update(coll, filter, replacement, False, arguments)

    def op_updateOne(self, coll: Collection, *, filter: Any, update: Any,
                     **arguments: Any) -> Any:
        return self._update(coll, filter, update, False, arguments)

    def op_updateMany(self, coll: Collection, *, filter: Any, update: Any,
                      **arguments: Any) -> Any:
        return self._update(coll, filter, update, True, arguments)

    def op_findOneAndDelete(self, coll: Collection, *, filter: Any, **arguments: Any) -> Any:
        return self._run(coll, coll.db,
                         {"findAndModify": coll.name, "query": filter, "remove": True},
                         arguments)

    def op_findOneAndReplace(self, coll: Collection, *, filter: Any, replacement: Any,
                             **arguments: Any) -> Any:
        return self._run(coll, coll.db,
                         {"findAndModify": coll.name, "query": filter, "update": replacement},
                         arguments)

    def op_findOneAndUpdate(self, coll: Collection, *, filter: Any, update: Any,
                            **arguments: Any) -> Any:
        return self._run(coll, coll.db,
                         {"findAndModify": coll.name, "query": filter, "update": update},
                         arguments)

    def op_createIndex(self, coll: Collection, *, keys: Any, name: str,
                       **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"createIndexes": coll.name,
                                         "indexes": [{"key": keys, "name": name}]}, arguments)

    def op_dropIndex(self, coll: Collection, *, name: str, **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"dropIndexes": coll.name, "index": name}, arguments)

    def op_dropIndexes(self, coll: Collection, **arguments: Any) -> Any:
        return self._run(coll, coll.db, {"dropIndexes": coll.name, "index": "*"}, arguments)

    def op_listIndexes(self, coll: Collection, **arguments: Any) -> Any:
        return self._drain(coll, coll.db, {"listIndexes": coll.name}, arguments)

    def op_listIndexNames(self, coll: Collection, **arguments: Any) -> Any:
        return [index["name"] for index in self.op_listIndexes(coll, **arguments)]

    # cursors

    def op_iterateUntilDocumentOrError(self, cursor: Cursor) -> Any:
        if not cursor._tailable:
            return next(cursor)
        # The format's iteration is one next() of a driver whose tailable next()
        # waits for a document: here next() until one comes (each stops at an
        # empty batch), all within one iteration's limit.
        with greenpool.timeout(self.cursor_limits.get(id(cursor))):
            while True:
                try:
                    return next(cursor)
                except StopIteration:
                    if not cursor.alive:
                        raise

    def op_iterateOnce(self, cursor: Cursor) -> Any:
        # A tailable cursor's next() sends one getMore when nothing is buffered,
        # and stops if it brings nothing: the format's iterateOnce.
        assert cursor._tailable, "iterateOnce on a cursor that is not tailable"
        return next(cursor, None)

    def op_close(self, cursor: Cursor, **arguments: Any) -> None:
        cursor.close(timeout=_seconds(arguments.pop("timeoutMS", None)))

    # sessions

    def op_startTransaction(self, session: Session, **arguments: Any) -> None:
        if arguments:
            raise NotApplicable(f"transaction options {sorted(arguments)}")
        session.start_transaction()

    def op_commitTransaction(self, session: Session, **arguments: Any) -> None:
        session.commit_transaction(timeout=_seconds(arguments.pop("timeoutMS", None)))

    def op_abortTransaction(self, session: Session, **arguments: Any) -> None:
        session.abort_transaction(timeout=_seconds(arguments.pop("timeoutMS", None)))

    def op_withTransaction(self, session: Session, *, callback: list[Mapping[str, Any]],
                           **arguments: Any) -> None:
        timeout = _seconds(arguments.pop("timeoutMS", None))

        def run(_: Session) -> None:
            for operation in callback:
                self.operation(operation, in_callback=True)

        session.with_transaction(run, timeout=timeout)

    # -- expectations ---------------------------------------------------------------------

    def check_events(self, expected: Mapping[str, Any]) -> None:
        gevent.sleep(0)
        check_events(self.recorders[expected["client"]], expected)


#: A bucket entity: GridFS runs on greenpool.gridfs, through tests/unified/.
_BUCKET = object()
#: The commands that take a write concern, which this runner does not send.
_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "createIndexes",
                     "dropIndexes", "drop", "create"})


def _max_time(command: dict[str, Any], arguments: dict[str, Any]) -> None:
    """The deprecated maxTimeMS option goes on the command, as a driver sends it;
    under a time limit the Client's own maxTimeMS replaces it (the CSOT spec)."""
    if "maxTimeMS" in arguments:
        command["maxTimeMS"] = arguments.pop("maxTimeMS")


def _mode(mode: str | None) -> str | None:
    # The spec files spell it both ways.
    return {"cursor_lifetime": "cursorLifetime", "cursorLifetime": "cursorLifetime",
            "iteration": "iteration", None: None}.get(mode, mode)
