"""A mini runner for the unified test format: exactly the subset the Load Balancer spec
tests (``load-balancers/tests/*.json``) use, against ``greenpool.Client`` behind the
load balancer fixture (tests/lb_proxy.py). The design is in the notes on the LB spec
tests: entities, per-backend initialData, fail points through the test's client (cleared
on every backend by ``LBCluster.reset()``), exact event lists, ``$$type``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gevent
from bson.int64 import Int64
from pymongo import monitoring as _m
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

import greenpool
from greenpool.cursor import Cursor
from greenpool.session import Session
from tests.cmap_runner import SPEC_DIR
from tests.lb_proxy import LBCluster

LB_DIR = SPEC_DIR / "load-balancers" / "tests"
# Short timeouts so that a regression fails instead of hanging.
CLIENT_TIMEOUTS = {"serverSelectionTimeoutMS": 5000, "connectTimeoutMS": 5000,
                   "socketTimeoutMS": 10000}


def load_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(file stem, file, test)`` for every test of every JSON file."""
    cases = []
    for path in sorted(LB_DIR.glob("*.json")):
        spec = json.loads(path.read_text())
        for test in spec["tests"]:
            cases.append((path.stem, spec, test))
    return cases


def skip_reason(test: Mapping[str, Any]) -> str | None:
    """Why a test cannot run here, or None (``serverless: forbid``: we are not serverless;
    ``minServerVersion 4.4.7``: SecantusDB reports 8.2; a ``skipReason`` about servers
    without LB support does not apply: the proxy refuses a non load-balanced hello)."""
    for requirement in test.get("runOnRequirements", []):
        if requirement.get("auth"):
            return ("needs an authenticated load-balanced cluster (auth: true): run by hand in "
                    "test_load_balancers_sdam_error_handling_errors_during_authentication_"
                    "are_processed")
    return None


# -- events -------------------------------------------------------------------------------


def _event_name(event: Any) -> str:
    name = type(event).__name__
    return name[0].lower() + name[1:]


class Recorder(_m.CommandListener, _m.ConnectionPoolListener):
    """Records the observed events of one client entity; counts checked-out connections
    whatever is observed. configureFailPoint command events are dropped."""

    def __init__(self, observe: list[str]) -> None:
        self.observe = set(observe)
        self.events: list[Any] = []
        self.checked_out = 0
        self.started_commands: list[Mapping[str, Any]] = []

    def _record(self, event: Any) -> None:
        if isinstance(event, _m.ConnectionCheckedOutEvent):
            self.checked_out += 1
        elif isinstance(event, _m.ConnectionCheckedInEvent):
            self.checked_out -= 1
        if isinstance(event, (_m.CommandStartedEvent, _m.CommandSucceededEvent,
                              _m.CommandFailedEvent)):
            if event.command_name == "configureFailPoint":
                return
            if isinstance(event, _m.CommandStartedEvent):
                self.started_commands.append(event.command)
        if _event_name(event) in self.observe:
            self.events.append(event)

    started = succeeded = failed = _record
    pool_created = pool_ready = pool_cleared = pool_closed = _record
    connection_created = connection_ready = connection_closed = _record
    connection_check_out_started = connection_check_out_failed = _record
    connection_checked_out = connection_checked_in = _record

    def of_family(self, family: str) -> list[Any]:
        command = (_m.CommandStartedEvent, _m.CommandSucceededEvent, _m.CommandFailedEvent)
        if family == "command":
            return [e for e in self.events if isinstance(e, command)]
        return [e for e in self.events if not isinstance(e, command)]


# -- matching -----------------------------------------------------------------------------


def _type_matches(name: str, value: Any) -> bool:
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "int":
        return (isinstance(value, int) and not isinstance(value, (bool, Int64))
                and -(2**31) <= value < 2**31)
    if name == "long":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "double":
        return isinstance(value, float)
    if name == "bool":
        return isinstance(value, bool)
    raise AssertionError(f"$$type {name!r} is not supported by this runner")


def match(expected: Any, actual: Any, path: str = "", *, root: bool = True) -> None:
    """Assert that ``actual`` matches ``expected`` (unified format rules: extra keys only in
    the root document; ``$$type``; ``$$exists``; numbers by value)."""
    if isinstance(expected, Mapping):
        if set(expected) == {"$$type"}:
            types = expected["$$type"]
            types = [types] if isinstance(types, str) else types
            assert any(_type_matches(t, actual) for t in types), (
                f"{path or 'value'}: {actual!r} is not of type {types}")
            return
        assert isinstance(actual, Mapping), f"{path}: expected a document, got {actual!r}"
        for key, value in expected.items():
            if isinstance(value, Mapping) and set(value) == {"$$exists"}:
                assert (key in actual) is value["$$exists"], (
                    f"{path}: {key!r} should {'' if value['$$exists'] else 'not '}exist in "
                    f"{dict(actual)!r}")
                continue
            assert key in actual, f"{path}: no {key!r} in {dict(actual)!r}"
            match(value, actual[key], f"{path}.{key}", root=False)
        if not root:
            extra = set(actual) - set(expected)
            assert not extra, f"{path}: unexpected fields {sorted(extra)} in {dict(actual)!r}"
        return
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (
            f"{path}: expected {expected!r}, got {actual!r}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            match(e, a, f"{path}[{i}]", root=False)
        return
    if isinstance(expected, bool) or isinstance(actual, bool):
        assert expected is actual, f"{path}: expected {expected!r}, got {actual!r}"
        return
    assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


def match_event(expected: Mapping[str, Any], event: Any, index: int) -> None:
    ((name, fields),) = expected.items()
    where = f"event {index} ({_event_name(event)})"
    assert _event_name(event) == name, f"{where}: expected {name}"
    for key, value in fields.items():
        if key == "command":
            match(value, event.command, f"{where}.command")
        elif key == "reply":
            match(value, event.reply, f"{where}.reply")
        elif key == "commandName":
            assert event.command_name == value, f"{where}: commandName {event.command_name!r}"
        elif key == "databaseName":
            assert event.database_name == value, f"{where}: databaseName {event.database_name!r}"
        elif key == "hasServiceId":
            assert (event.service_id is not None) is value, (
                f"{where}: serviceId {event.service_id!r}")
        elif key == "reason":
            assert event.reason == value, f"{where}: reason {event.reason!r}, expected {value!r}"
        else:
            raise AssertionError(f"{where}: {key!r} is not supported by this runner")


def check_error(expected: Mapping[str, Any], error: BaseException | None) -> None:
    assert error is not None, f"expected an error ({expected}), the operation succeeded"
    assert isinstance(error, PyMongoError), f"expected a PyMongoError, got {error!r}"
    for key, value in expected.items():
        if key == "isError":
            continue
        if key == "isClientError":
            is_client = not isinstance(error, OperationFailure) and (
                isinstance(error, ConnectionFailure) or not getattr(error, "details", None))
            assert is_client is value, f"isClientError {value} but got {error!r}"
        elif key == "errorCode":
            code = getattr(error, "code", None)
            if code is None:
                code = (getattr(error, "details", None) or {}).get("code")
            assert code == value, f"errorCode {value} but got {code!r}: {error!r}"
        elif key == "errorContains":
            assert value.lower() in str(error).lower(), f"{value!r} not in {str(error)!r}"
        elif key == "errorLabelsContain":
            for label in value:
                assert error.has_error_label(label), f"no label {label} on {error!r}"
        elif key == "errorLabelsOmit":
            for label in value:
                assert not error.has_error_label(label), f"label {label} on {error!r}"
        else:
            raise AssertionError(f"expectError.{key} is not supported by this runner")


# -- the runner ---------------------------------------------------------------------------


@dataclass
class Runner:
    lb: LBCluster
    single_uri: str
    #: non-lb-connection-establishment: clients go to backend 0 directly, not to a balancer.
    non_lb: bool = False
    entities: dict[str, Any] = field(default_factory=dict)
    recorders: dict[str, Recorder] = field(default_factory=dict)
    clients: list[greenpool.Client] = field(default_factory=list)

    def run(self, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        try:
            self.initial_data(spec.get("initialData") or [])
            for entity in spec.get("createEntities") or []:
                self.create_entity(entity)
            for operation in test["operations"]:
                self.operation(operation)
            for expected in test.get("expectEvents") or []:
                self.check_events(expected)
        finally:
            self.close()

    # -- setup and teardown ---------------------------------------------------------------

    def initial_data(self, data: list[Mapping[str, Any]]) -> None:
        # Each backend is a separate database: the data goes to every one of them.
        for index in range(len(self.lb.servers)):
            with self.lb.direct_client(index) as client:
                for item in data:
                    database = client[item["databaseName"]]
                    database.drop_collection(item["collectionName"])
                    database.create_collection(item["collectionName"])
                    if item["documents"]:
                        database[item["collectionName"]].insert_many(item["documents"])

    def client_uri(self, spec: Mapping[str, Any]) -> str:
        options = dict(spec.get("uriOptions") or {})
        if options.get("loadBalanced") is False:
            if self.non_lb:
                host, port = self.lb.servers[0].address
            else:
                host, port = self.lb.proxy.address  # the balancer, without loadBalanced=true
            base = f"mongodb://{host}:{port}/"
        elif self.non_lb:
            host, port = self.lb.servers[0].address  # a server that is not a balancer
            base = f"mongodb://{host}:{port}/"
        else:
            base = self.lb.uri if spec.get("useMultipleMongoses") else self.single_uri
            options.pop("loadBalanced", None)
        for key, value in CLIENT_TIMEOUTS.items():
            options.setdefault(key, value)
        query = urlencode({k: str(v).lower() if isinstance(v, bool) else v
                           for k, v in options.items()})
        return f"{base}{'&' if '?' in base else '?'}{query}"

    def create_entity(self, entity: Mapping[str, Any]) -> None:
        ((kind, spec),) = entity.items()
        if kind == "client":
            recorder = Recorder(spec.get("observeEvents") or [])
            client = greenpool.Client(self.client_uri(spec), event_listeners=[recorder])
            self.clients.append(client)
            self.recorders[spec["id"]] = recorder
            self.entities[spec["id"]] = client
        elif kind == "database":
            self.entities[spec["id"]] = (self.entities[spec["client"]], spec["databaseName"])
        elif kind == "collection":
            client, db = self.entities[spec["database"]]
            options = spec.get("collectionOptions") or {}
            self.entities[spec["id"]] = (client, db, spec["collectionName"], options)
        elif kind == "session":
            self.entities[spec["id"]] = self.entities[spec["client"]].start_session()
        else:
            raise AssertionError(f"entity type {kind!r} is not supported by this runner")

    def close(self) -> None:
        for entity in self.entities.values():
            if isinstance(entity, Cursor):
                with contextlib.suppress(PyMongoError):
                    entity.close()
        for entity in self.entities.values():
            if isinstance(entity, Session):
                with contextlib.suppress(PyMongoError):
                    entity.end()
        for client in self.clients:
            client.close()

    # -- operations -----------------------------------------------------------------------

    def operation(self, operation: Mapping[str, Any]) -> None:
        name = operation["name"]
        arguments = dict(operation.get("arguments") or {})
        target = operation["object"]
        error: BaseException | None = None
        result: Any = None
        try:
            if target == "testRunner":
                result = getattr(self, f"op_{name}")(**arguments)
            else:
                result = getattr(self, f"op_{name}")(self.entities[target], **arguments)
        except PyMongoError as caught:
            if not ("expectError" in operation or operation.get("ignoreResultAndError")):
                raise
            error = caught
        if "expectError" in operation:
            check_error(operation["expectError"], error)
        if "expectResult" in operation:
            match(operation["expectResult"], result)
        if "saveResultAsEntity" in operation:
            self.entities[operation["saveResultAsEntity"]] = result

    def _session(self, arguments: dict[str, Any]) -> Session | None:
        name = arguments.pop("session", None)
        return None if name is None else self.entities[name]

    def op_insertOne(self, collection: Any, **arguments: Any) -> Any:
        client, db, coll, _ = collection
        session = self._session(arguments)
        return client.command(db, {"insert": coll, "documents": [arguments["document"]]},
                              session=session)

    def op_find(self, collection: Any, *, filter: Any, **arguments: Any) -> Any:
        client, db, coll, options = collection
        session = self._session(arguments)
        # The collection's read preference is the Client's find() argument;
        # whether and how it reaches the server is the Client's decision.
        with client.find(db, coll, filter, batch_size=arguments.get("batchSize"),
                         session=session, read_preference=options.get("readPreference"),
                         ) as cursor:
            return list(cursor)

    def op_createFindCursor(self, collection: Any, *, filter: Any, **arguments: Any) -> Any:
        client, db, coll, _ = collection
        session = self._session(arguments)
        return client.find(db, coll, filter, batch_size=arguments.get("batchSize"),
                           session=session)

    def _drain(self, client: greenpool.Client, db: str, command: dict[str, Any],
               batch_size: int | None) -> list[Any]:
        if batch_size is not None:
            command["cursor"] = {"batchSize": batch_size}
        with client.cursor(db, command, batch_size=batch_size) as cursor:
            return list(cursor)

    def op_aggregate(self, collection: Any, *, pipeline: Any, batchSize: Any = None) -> Any:
        client, db, coll, _ = collection
        return self._drain(client, db, {"aggregate": coll, "pipeline": pipeline, "cursor": {}},
                           batchSize)

    def op_listCollections(self, database: Any, *, filter: Any, batchSize: Any = None) -> Any:
        client, db = database
        return self._drain(client, db, {"listCollections": 1, "filter": filter}, batchSize)

    def op_listIndexes(self, collection: Any, *, batchSize: Any = None) -> Any:
        client, db, coll, _ = collection
        return self._drain(client, db, {"listIndexes": coll}, batchSize)

    def op_createIndex(self, collection: Any, *, keys: Any, name: str) -> Any:
        client, db, coll, _ = collection
        return client.command(db, {"createIndexes": coll,
                                   "indexes": [{"key": keys, "name": name}]})

    def op_createChangeStream(self, collection: Any, *, pipeline: Any) -> Any:
        client, db, coll, _ = collection
        return client.cursor(db, {"aggregate": coll,
                                  "pipeline": [{"$changeStream": {}}, *pipeline],
                                  "cursor": {}})

    def op_iterateUntilDocumentOrError(self, cursor: Cursor) -> Any:
        return next(cursor)

    def op_close(self, cursor: Cursor) -> None:
        cursor.close()

    def op_runCommand(self, database: Any, *, command: Any, commandName: str) -> Any:
        client, db = database
        return client.command(db, command)

    def op_startTransaction(self, session: Session) -> None:
        session.start_transaction()

    def op_commitTransaction(self, session: Session) -> None:
        session.commit_transaction()

    def op_abortTransaction(self, session: Session) -> None:
        session.abort_transaction()

    def op_endSession(self, session: Session) -> None:
        session.end()

    def op_failPoint(self, *, client: str, failPoint: Mapping[str, Any]) -> None:
        # Through the test's own client, as the spec says; lb.reset() turns failCommand off
        # on every backend after the test.
        self.entities[client].command("admin", failPoint)

    def op_assertNumberConnectionsCheckedOut(self, *, client: str, connections: int) -> None:
        gevent.sleep(0)  # pool events may be delivered at the next yield
        count = self.recorders[client].checked_out
        assert count == connections, (
            f"{client}: {count} connections checked out, expected {connections}")

    def op_assertSameLsidOnLastTwoCommands(self, *, client: str) -> None:
        commands = self.recorders[client].started_commands
        assert len(commands) >= 2, f"{client}: fewer than two commands"
        for command in commands[-2:]:
            assert "lsid" in command, f"{client}: no lsid in {command!r}"
        assert commands[-1]["lsid"] == commands[-2]["lsid"], (
            f"lsids differ: {commands[-2]['lsid']} and {commands[-1]['lsid']}")

    # -- expectations ---------------------------------------------------------------------

    def check_events(self, expected: Mapping[str, Any]) -> None:
        gevent.sleep(0)
        family = expected.get("eventType", "command")
        actual = self.recorders[expected["client"]].of_family(family)
        wanted = expected["events"]
        if expected.get("ignoreExtraEvents"):
            actual = actual[:len(wanted)]
        names = [_event_name(e) for e in actual]
        assert len(actual) == len(wanted), (
            f"{expected['client']} {family} events: expected "
            f"{[next(iter(w)) for w in wanted]}, got {names}")
        for index, (want, event) in enumerate(zip(wanted, actual, strict=True)):
            match_event(want, event, index)
