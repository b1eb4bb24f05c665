"""A mini runner for the unified test format: exactly the subset the Load Balancer spec
tests (``load-balancers/tests/*.json``) use, against ``greenpool.Client`` behind the
load balancer fixture (tests/lb_proxy.py). The design is in the notes on the LB spec
tests: entities, per-backend initialData, fail points through the test's client (cleared
on every backend by ``LBCluster.reset()``), exact event lists, ``$$type``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gevent
from pymongo.errors import PyMongoError

import greenpool
from greenpool.client.api.cursor import Cursor
from greenpool.client.operations.session import Session
from tests import unified_match
from tests.cmap_runner import SPEC_DIR
from tests.lb_proxy import LBCluster
from tests.unified_match import (
    Recorder,
    check_error,
    check_events,
    close_entities,
    match,
    recorder_for,
    run_test,
)

LB_DIR = SPEC_DIR / "load-balancers" / "tests"
# Short timeouts so that a regression fails instead of hanging.
CLIENT_TIMEOUTS = {"serverSelectionTimeoutMS": 5000, "connectTimeoutMS": 5000,
                   "socketTimeoutMS": 10000}


def load_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(file stem, file, test)`` for every test of every JSON file."""
    return [(path.stem, spec, test) for path in sorted(LB_DIR.glob("*.json"))
            for spec, test in unified_match.load_cases(path)]


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
        run_test(self, spec, test)

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
            recorder = recorder_for(spec.get("observeEvents") or [])
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
        close_entities(self.entities.values())
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
        check_events(self.recorders[expected["client"]], expected)
