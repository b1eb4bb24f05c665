"""The runner: one test of a unified format file, on the client a factory makes.

A test runs in the format's order ("Executing a Test"): its requirements and skipReason,
``initialData`` through the runner's own PyMongo client, the entities, the operations,
the fail points turned off, ``expectEvents``, ``outcome`` (read through the runner's
client), and the entities closed whatever happened. Client entities come from
``make_client(uri, event_listeners=[recorder])``, so the same runner drives
``pymongo.MongoClient`` and ``greenpool.Client``; everything else it does to an entity
is that client's public, PyMongo-shaped API.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import parse_qsl, urlencode

import gevent
from pymongo import MongoClient, ReadPreference
from pymongo.client_session import TransactionOptions  # type: ignore[attr-defined]
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.server_api import ServerApi
from pymongo.write_concern import WriteConcern

from tests.unified import arguments, gridfs_ops, logs, session_state, tracing
from tests.unified.deployment import Deployment
from tests.unified.operations import call
from tests.unified.results import as_document, error_result
from tests.unified_match import (
    Recorder,
    check_error,
    check_events,
    event_name,
    match,
    match_event,
    recorder_for,
    sets_fail_point,
    with_fail_point_heartbeat,
)

#: ``make_client(uri, event_listeners=[...])``: a client of the API under test.
ClientFactory = Callable[..., Any]
#: ``timeout(seconds)``: the library's block that bounds the operations in it
#: (``pymongo.timeout``, ``greenpool.timeout``); 0 means no limit.
TimeoutBlock = Callable[[float], AbstractContextManager[Any]]


class NotApplicable(Exception):
    """The test does not apply to the deployment (its runOnRequirements), or says to skip
    it (skipReason)."""


# What an entity of each kind is made from: the options the runner maps, and to what.
_SESSION_OPTIONS = {"causalConsistency": "causal_consistency", "snapshot": "snapshot",
                    "defaultTransactionOptions": "default_transaction_options"}
_TRANSACTION_OPTIONS = {"readConcern": "read_concern", "writeConcern": "write_concern",
                        "readPreference": "read_preference",
                        "maxCommitTimeMS": "max_commit_time_ms"}
_COLLECTION_OPTIONS = {"readConcern": "read_concern", "writeConcern": "write_concern",
                       "readPreference": "read_preference"}
# The operations whose result, saved as an entity, is of that kind.
_SAVED_KINDS = {"createFindCursor": "cursor", "createCommandCursor": "cursor",
                "createCollection": "collection",
                "createChangeStream": "changeStream"}


class Runner:
    """Runs tests on clients from ``make_client``, against the server at ``uri``
    (``deployment`` is that server, with the runner's own PyMongo client). An operation's
    ``timeoutMS`` runs it inside ``timeout``, the client library's timeout block."""

    def __init__(self, make_client: ClientFactory, uri: str, deployment: Deployment, *,
                 timeout: TimeoutBlock | None = None,
                 fail_point_heartbeat_ms: int | None = None) -> None:
        self.make_client = make_client
        self.timeout = timeout
        #: A test that sets a fail point gives its clients this heartbeatFrequencyMS
        #: unless they name their own (unified_match.with_fail_point_heartbeat).
        self.fail_point_heartbeat_ms = fail_point_heartbeat_ms
        #: The running test's: fail_point_heartbeat_ms if it sets a fail point, else None.
        self.client_heartbeat_ms: int | None = None
        self.uri = uri
        self.deployment = deployment
        self.admin: MongoClient[dict[str, Any]] = deployment.admin
        self.entities: dict[str, Any] = {}
        self.kinds: dict[str, str] = {}
        self.recorders: dict[str, Recorder] = {}
        #: Each client entity's observeLogMessages (component: level).
        self.observed_logs: dict[str, Mapping[str, str]] = {}
        self.threads: dict[str, list[gevent.Greenlet]] = {}
        self.failpoints: list[str] = []
        self.transactions = False

    # -- a test ---------------------------------------------------------------------------

    def run(self, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        """One test of the file ``spec``; NotApplicable if it does not apply."""
        for requirements in (spec.get("runOnRequirements"), test.get("runOnRequirements")):
            reason = self.deployment.unmet(requirements)
            if reason is not None:
                raise NotApplicable(reason)
        if "skipReason" in test:
            raise NotApplicable(f"the file says: {test['skipReason']}")
        self.client_heartbeat_ms = (self.fail_point_heartbeat_ms if sets_fail_point(test)
                                    else None)
        tracing.reset()
        with contextlib.ExitStack() as stack:
            capture = (stack.enter_context(logs.Capture().installed())
                       if "expectLogMessages" in test else None)
            self._run_test(spec, test, capture)

    def _run_test(self, spec: Mapping[str, Any], test: Mapping[str, Any],
                  capture: logs.Capture | None) -> None:
        try:
            self.initial_data(spec.get("initialData") or [])
            self.create_entities(spec.get("createEntities") or [])
            for operation in test["operations"]:
                self.operation(operation)
            gevent.sleep(0)  # pool events may be delivered at the next yield
            self.disable_fail_points()
            for expected in test.get("expectEvents") or []:
                check_events(self.recorders[expected["client"]], expected, self.entities)
            for expected in test.get("expectTracingMessages") or []:
                tracing.check_tracing(expected, self.entities)
            for expected in test.get("expectLogMessages") or []:
                assert capture is not None
                logs.check(expected, capture, self.entities[expected["client"]],
                           self.observed_logs[expected["client"]])
            for expected in test.get("outcome") or []:
                self.check_outcome(expected)
        finally:
            self.close()

    def initial_data(self, data: Iterable[Mapping[str, Any]]) -> None:
        majority = WriteConcern(w="majority")
        for item in data:
            database = self.admin.get_database(item["databaseName"], write_concern=majority)
            name = item["collectionName"]
            for dropped in (name, f"enxcol_.{name}.esc", f"enxcol_.{name}.ecoc"):
                database.drop_collection(dropped)
            if "createOptions" in item or not item["documents"]:
                database.create_collection(name, check_exists=False,
                                           **(item.get("createOptions") or {}))
            if item["documents"]:
                database[name].insert_many(item["documents"])

    def check_outcome(self, expected: Mapping[str, Any]) -> None:
        collection = self.admin[expected["databaseName"]].get_collection(
            expected["collectionName"], read_concern=ReadConcern("local"),
            read_preference=ReadPreference.PRIMARY)
        documents = list(collection.find({}, sort=[("_id", 1)]))
        # Exactly the documents (key order aside): nested rules, no operators.
        match(expected["documents"], documents, "outcome", root=False)

    def close(self) -> None:
        """Threads stopped, cursors closed, sessions ended, clients closed, fail points
        off, open transactions killed: whatever the test did, nothing outlives it. Every
        step runs; then the first error that is not the server's (a method the entity
        lacks, say) is raised."""
        errors: list[Exception] = []
        for greenlets in self.threads.values():
            gevent.killall(greenlets)
        for kind, method in (("cursor", "close"), ("changeStream", "close"),
                             ("session", "end_session"),
                             ("client", "close")):
            for name, entity in self.entities.items():
                if self.kinds.get(name) == kind:
                    try:
                        getattr(entity, method)()
                    except PyMongoError:
                        pass  # the test is over; the server's answer does not matter
                    except Exception as error:  # reported once everything is closed
                        errors.append(error)
        self.entities.clear()
        self.disable_fail_points()
        if self.transactions:
            with contextlib.suppress(OperationFailure):
                self.admin.admin.command({"killAllSessions": []})
        if errors:
            raise errors[0]

    def disable_fail_points(self) -> None:
        failpoints, self.failpoints = self.failpoints, []
        for name in failpoints:
            self.admin.admin.command({"configureFailPoint": name, "mode": "off"})

    # -- entities -------------------------------------------------------------------------

    def create_entities(self, entities: Iterable[Mapping[str, Any]]) -> None:
        for entity in entities:
            ((kind, spec),) = entity.items()
            assert spec["id"] not in self.entities, f"entity {spec['id']!r} already exists"
            maker = getattr(self, f"_make_{kind}", None)
            assert maker is not None, f"{kind} entities are not supported by this runner"
            self.entities[spec["id"]] = maker(spec)
            self.kinds[spec["id"]] = kind

    def _make_client(self, spec: Mapping[str, Any]) -> Any:
        unknown = set(spec) - {"id", "uriOptions", "useMultipleMongoses", "observeEvents",
                               "ignoreCommandMonitoringEvents", "observeSensitiveCommands",
                               "awaitMinPoolSizeMS", "serverApi", "observeTracingMessages",
                               "observeLogMessages"}
        assert not unknown, f"client options {sorted(unknown)} are not supported by this runner"
        recorder = recorder_for(spec.get("observeEvents") or [],
                                spec.get("ignoreCommandMonitoringEvents") or [],
                                observe_sensitive=spec.get("observeSensitiveCommands", False))
        self.recorders[spec["id"]] = recorder
        self.observed_logs[spec["id"]] = spec.get("observeLogMessages") or {}
        # useMultipleMongoses: no effect on a deployment without mongoses.
        assert self.deployment.topology != "sharded", "sharded deployments are not supported"
        options = with_fail_point_heartbeat(spec.get("uriOptions") or {},
                                            self.client_heartbeat_ms)
        uri = client_uri(self.uri, options)
        keywords: dict[str, Any] = {"event_listeners": [recorder],
                                    **tracing.client_keywords(spec)}
        if "serverApi" in spec:
            api = spec["serverApi"]
            keywords["server_api"] = ServerApi(api["version"], strict=api.get("strict"),
                                               deprecation_errors=api.get("deprecationErrors"))
        client = self.make_client(uri, **keywords)
        if "awaitMinPoolSizeMS" in spec:
            self._await_min_pool_size(uri, recorder, spec["awaitMinPoolSizeMS"] / 1000)
        return client

    def _await_min_pool_size(self, uri: str, recorder: Recorder, limit: float) -> None:
        options = {key.lower(): value for key, value in parse_qsl(uri.partition("?")[2])}
        minimum = int(options.get("minpoolsize", 0))
        with gevent.Timeout(limit, AssertionError("minPoolSize was not reached in time")):
            while len(recorder.ready) < minimum:
                gevent.sleep(0.005)
        recorder.events.clear()  # the format: events before the pool was filled are ignored

    def _make_database(self, spec: Mapping[str, Any]) -> Any:
        options = _options(spec.get("databaseOptions") or {}, _COLLECTION_OPTIONS)
        return self.entities[spec["client"]].get_database(spec["databaseName"], **options)

    def _make_collection(self, spec: Mapping[str, Any]) -> Any:
        options = _options(spec.get("collectionOptions") or {}, _COLLECTION_OPTIONS)
        return self.entities[spec["database"]].get_collection(spec["collectionName"], **options)

    def _make_bucket(self, spec: Mapping[str, Any]) -> Any:
        options = _options(spec.get("bucketOptions") or {}, gridfs_ops.BUCKET_OPTIONS)
        return gridfs_ops.make_bucket(self.entities[spec["database"]], options)

    def _make_session(self, spec: Mapping[str, Any]) -> Any:
        options = _options(spec.get("sessionOptions") or {}, _SESSION_OPTIONS)
        if "default_transaction_options" in options:
            options["default_transaction_options"] = TransactionOptions(**_options(
                options["default_transaction_options"], _TRANSACTION_OPTIONS))
        session = self.entities[spec["client"]].start_session(**options)
        # Saved now: the format's $$sessionLsid still names it once the session ends.
        self.entities[("lsid", spec["id"])] = session.session_id
        return session

    def _make_thread(self, spec: Mapping[str, Any]) -> list[gevent.Greenlet]:
        return self.threads.setdefault(spec["id"], [])

    # -- operations -----------------------------------------------------------------------

    def operation(self, operation: Mapping[str, Any], *, in_callback: bool = False) -> Any:
        """Run one operation and check its result or error as it says."""
        if operation["object"] == "testRunner":
            handler = getattr(self, f"_test_{operation['name']}", None)
            assert handler is not None, (
                f"the test runner operation {operation['name']!r} is not supported")
            handler(**(operation.get("arguments") or {}))
            return None
        error: BaseException | None = None
        result: Any = None
        try:
            result = self._entity_operation(operation)
        except (PyMongoError, ValueError) as caught:
            if not ("expectError" in operation or operation.get("ignoreResultAndError")
                    or in_callback):
                raise
            error = caught
        if "expectError" in operation and not operation.get("ignoreResultAndError"):
            check_error(operation["expectError"], error, result=error_result,
                        entities=self.entities)
        if error is not None and in_callback:
            # A callback operation's error fails the callback, whatever the operation
            # expected or ignored (the format's withTransaction).
            raise error
        if operation.get("ignoreResultAndError"):
            return None
        if "expectResult" in operation:
            match(operation["expectResult"], as_document(result), "result",
                  entities=self.entities)
        if "saveResultAsEntity" in operation:
            name = operation["saveResultAsEntity"]
            assert name not in self.entities, f"entity {name!r} already exists"
            self.entities[name] = result
            self.kinds[name] = _SAVED_KINDS.get(operation["name"], "value")
        return result

    def _entity_operation(self, operation: Mapping[str, Any]) -> Any:
        name, target = operation["name"], operation["object"]
        assert target in self.entities, f"no entity {target!r}"
        entity, kind = self.entities[target], self.kinds[target]
        given = dict(operation.get("arguments") or {})
        if name in ("startTransaction", "withTransaction"):
            self.transactions = True
        if "timeoutMS" in given:
            assert self.timeout is not None, "timeoutMS needs the library's timeout block"
            with self.timeout(given.pop("timeoutMS") / 1000):
                return self._dispatch(entity, kind, name, given)
        return self._dispatch(entity, kind, name, given)

    def _dispatch(self, entity: Any, kind: str, name: str, given: dict[str, Any]) -> Any:
        if kind == "session" and name == "withTransaction":
            return self._with_transaction(entity, given)
        if kind in ("cursor", "changeStream") and name == "iterateUntilDocumentOrError":
            return next(entity)
        if kind in ("cursor", "changeStream") and name == "iterateOnce":
            return entity.try_next()
        if kind in ("cursor", "changeStream", "client") and name == "close":
            return entity.close()
        return call(f"{kind}.{name}", entity, arguments.convert(given, self.entities))

    def _with_transaction(self, session: Any, given: dict[str, Any]) -> Any:
        callback = given.pop("callback")
        options = _options(given, _TRANSACTION_OPTIONS)

        def run(_: Any) -> None:
            for operation in callback:
                self.operation(operation, in_callback=True)

        return session.with_transaction(run, **options)

    # -- test runner operations -----------------------------------------------------------

    def _test_failPoint(self, *, client: str, failPoint: Mapping[str, Any]) -> None:
        self.failpoints.append(failPoint["configureFailPoint"])
        self.entities[client].admin.command(dict(failPoint))

    def _test_createEntities(self, *, entities: list[Mapping[str, Any]]) -> None:
        self.create_entities(entities)

    def _test_wait(self, *, ms: int) -> None:
        gevent.sleep(ms / 1000)

    def _test_runOnThread(self, *, thread: str, operation: Mapping[str, Any]) -> None:
        self.threads[thread].append(gevent.spawn(self.operation, operation))

    def _test_recordTopologyDescription(self, *, client: str, id: str) -> None:
        assert id not in self.entities, f"entity {id!r} already exists"
        self.entities[id] = self.entities[client].topology_description
        self.kinds[id] = "topologyDescription"

    def _test_assertTopologyType(self, *, topologyDescription: str, topologyType: str) -> None:
        actual = self.entities[topologyDescription].topology_type_name
        assert actual == topologyType, f"topology type {actual}, expected {topologyType}"

    def _test_waitForPrimaryChange(self, *, client: str, priorTopologyDescription: str,
                                   timeoutMS: int = 10_000) -> None:
        """Until the client's topology has a primary that is not the prior one's (any
        primary if the prior description had none)."""
        prior = _primary(self.entities[priorTopologyDescription])
        deadline = time.monotonic() + timeoutMS / 1000
        while _primary(self.entities[client].topology_description) in (None, prior):
            assert time.monotonic() < deadline, (
                f"the primary of {client} did not change from {prior} in {timeoutMS} ms")
            gevent.sleep(0.005)

    def _test_waitForThread(self, *, thread: str) -> None:
        for greenlet in self.threads[thread]:
            greenlet.get(timeout=10)

    def _count(self, client: str, event: Mapping[str, Any]) -> int:
        count = 0
        for index, actual in enumerate(self.recorders[client].events):
            try:
                match_event(event, actual, index, self.entities)
            except AssertionError:
                continue
            count += 1
        return count

    def _test_waitForEvent(self, *, client: str, event: Mapping[str, Any], count: int) -> None:
        deadline = time.monotonic() + 10
        while self._count(client, event) < count:
            assert time.monotonic() < deadline, f"no {count} {event} on {client} in 10 s"
            gevent.sleep(0.005)

    def _test_assertEventCount(self, *, client: str, event: Mapping[str, Any],
                               count: int) -> None:
        gevent.sleep(0)
        seen = self._count(client, event)
        assert seen == count, f"{event}: {seen} events on {client}, expected {count}"

    def _test_assertNumberConnectionsCheckedOut(self, *, client: str, connections: int) -> None:
        gevent.sleep(0)
        checked_out = self.recorders[client].checked_out
        assert checked_out == connections, f"{checked_out} connections checked out"

    def _test_assertCollectionExists(self, *, databaseName: str, collectionName: str) -> None:
        names = self.admin[databaseName].list_collection_names()
        assert collectionName in names, f"no collection {collectionName} in {names}"

    def _test_assertCollectionNotExists(self, *, databaseName: str,
                                        collectionName: str) -> None:
        names = self.admin[databaseName].list_collection_names()
        assert collectionName not in names, f"collection {collectionName} exists"

    def _test_assertIndexExists(self, *, databaseName: str, collectionName: str,
                                indexName: str) -> None:
        names = [i["name"] for i in self.admin[databaseName][collectionName].list_indexes()]
        assert indexName in names, f"no index {indexName} in {names}"

    def _test_assertIndexNotExists(self, *, databaseName: str, collectionName: str,
                                   indexName: str) -> None:
        names = [i["name"] for i in self.admin[databaseName][collectionName].list_indexes()]
        assert indexName not in names, f"index {indexName} exists"

    def _lsids(self, client: str) -> list[Any]:
        started = [e for e in self.recorders[client].events
                   if event_name(e) == "commandStartedEvent"]
        assert len(started) >= 2, f"fewer than two commands observed on {client}"
        return [e.command.get("lsid") for e in started[-2:]]

    def _test_assertSameLsidOnLastTwoCommands(self, *, client: str) -> None:
        first, second = self._lsids(client)
        assert first == second, f"different lsids {first} and {second}"

    def _test_assertDifferentLsidOnLastTwoCommands(self, *, client: str) -> None:
        first, second = self._lsids(client)
        assert first != second, f"the same lsid {first} twice"


    def _test_assertSessionTransactionState(self, *, session: str, state: str) -> None:
        actual = session_state.transaction_state(self.entities[session])
        assert actual == state, f"{session} is in transaction state {actual}, not {state}"

    def _test_assertSessionDirty(self, *, session: str) -> None:
        assert session_state.dirty(self.entities[session]), f"{session} is not dirty"

    def _test_assertSessionNotDirty(self, *, session: str) -> None:
        assert not session_state.dirty(self.entities[session]), f"{session} is dirty"

    def _test_assertSessionPinned(self, *, session: str) -> None:
        assert session_state.pinned(self.entities[session]), f"{session} is not pinned"

    def _test_assertSessionUnpinned(self, *, session: str) -> None:
        assert not session_state.pinned(self.entities[session]), f"{session} is pinned"


def _primary(description: Any) -> Any:
    """The address of a topology description's primary, None if it has none."""
    primaries = [server.address for server in description.server_descriptions().values()
                 if server.server_type_name == "RSPrimary"]
    return primaries[0] if primaries else None


def _options(given: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """Entity options as PyMongo's keywords, concerns and preferences as its objects."""
    unknown = sorted(set(given) - set(names))
    assert not unknown, f"options {unknown} are not supported by this runner"
    converted = arguments.convert(given, {})
    return {names[key]: value for key, value in converted.items()}


def client_uri(base: str, options: Mapping[str, Any]) -> str:
    """``base`` with a client entity's ``uriOptions``, which override its own."""
    head, _, query = base.partition("?")
    overridden = {key.lower() for key in options}
    pairs = [(key, value) for key, value in parse_qsl(query) if key.lower() not in overridden]
    for key, value in options.items():
        values = value if key == "readPreferenceTags" else [value]
        pairs += [(key, _uri_value(item)) for item in values]
    return f"{head if head.endswith('/') else head + '/'}?{urlencode(pairs)}"


def _uri_value(value: Any) -> str:
    assert not (isinstance(value, Mapping) and "$$placeholder" in value), (
        "$$placeholder URI options are not supported by this runner")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{_uri_value(v)}" for k, v in value.items())
    return str(value)
