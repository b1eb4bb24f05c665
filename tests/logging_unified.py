"""A mini runner for the unified test format's log message tests: exactly what the CMAP
logging files (``connection-monitoring-and-pooling/tests/logging/*.json``) and SDAM's
``logging-loadbalanced.json`` use, against ``greenpool.Client``.

What it supports: ``createEntities`` (file level and as an operation) of clients with
``uriOptions``, ``observeEvents`` and ``observeLogMessages``; the operations
``waitForEvent``, ``failPoint``, ``listDatabases`` and ``close``; ``expectError``;
``expectLogMessages`` matched exactly and in order (``$$type``, ``$$exists``), after the
messages ``ignoreMessages`` names are left out.

Log messages are captured from the ``greenpool.connection`` and ``greenpool.topology``
loggers (the ``connection`` and ``topology`` components) with a handler on each, and
compared when the operations are over, before any client is closed by the runner (a
test that wants the closing messages closes its client itself). A client's topology
messages are those carrying its topologyId; its connection messages are all of
``greenpool.connection`` (the runner never makes a second greenpool client).

The ``failPointClient`` (SDAM's ``setupClient``) the files declare is the runner's own
tool, a PyMongo client straight to the server (not a greenpool client, whose pool would
log too).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gevent
import gevent.event
from pymongo import MongoClient
from pymongo import monitoring as _m
from pymongo.errors import PyMongoError

import greenpool
from tests.unified.logs import LEVELS, capturing
from tests.unified_match import (
    check_error,
    event_name,
    match,
    sets_fail_point,
    with_fail_point_heartbeat,
)

COMPONENTS = {"connection": "greenpool.connection", "topology": "greenpool.topology"}
#: The client entities the files set fail points with (CMAP's ``failPointClient``,
#: SDAM's ``setupClient``): the runner's own PyMongo client stands for them.
FAIL_POINT_CLIENTS = frozenset({"failPointClient", "setupClient"})
# Short timeouts so that a regression fails instead of hanging.
CLIENT_TIMEOUTS = {"serverSelectionTimeoutMS": 5000, "connectTimeoutMS": 5000,
                   "socketTimeoutMS": 10000}


class EventWaiter(_m.ConnectionPoolListener, _m.TopologyListener, _m.ServerListener,
                  _m.ServerHeartbeatListener):
    """Counts the events a client entity observes, for ``waitForEvent``."""

    def __init__(self, observe: list[str]) -> None:
        self.observe = set(observe)
        self.names: list[str] = []
        self._changed = gevent.event.Event()

    def _record(self, event: Any) -> None:
        name = event_name(event)
        if name in self.observe:
            self.names.append(name)
            self._changed.set()

    pool_created = pool_ready = pool_cleared = pool_closed = _record
    connection_created = connection_ready = connection_closed = _record
    connection_check_out_started = connection_check_out_failed = _record
    connection_checked_out = connection_checked_in = _record
    opened = description_changed = closed = _record
    started = succeeded = failed = _record  # heartbeats

    def wait_for(self, name: str, count: int, timeout: float = 10) -> None:
        with gevent.Timeout(timeout, AssertionError(
                f"no {count} {name} within {timeout} s; saw {self.names}")):
            while self.names.count(name) < count:
                self._changed.clear()
                self._changed.wait()


class LogCapture(logging.Handler):
    """Every record of the components' loggers, with its component."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, logging.LogRecord]] = []

    def emit(self, record: logging.LogRecord) -> None:
        for component, name in COMPONENTS.items():
            if record.name == name:
                self.records.append((component, record))

    def installed(self) -> contextlib.AbstractContextManager[LogCapture]:
        return capturing(self, COMPONENTS.values())


@dataclass
class ClientEntity:
    client: greenpool.Client
    waiter: EventWaiter
    observe_logs: dict[str, int]


@dataclass
class LoggingRunner:
    """Runs one test. ``uri`` is the server's (or the balancer's) URI, credentials
    included when the test needs them; ``fail_point_client`` makes the runner's own
    client for ``failPoint``."""

    uri: str
    fail_point_client: Callable[[], MongoClient[dict[str, Any]]] | None = None
    #: How long ``waitForEvent`` waits (the format's 10 s unless a caller says why not).
    event_timeout: float = 10
    #: A test that sets a fail point gives its clients this heartbeatFrequencyMS unless
    #: they name their own (unified_match.with_fail_point_heartbeat).
    fail_point_heartbeat_ms: int | None = None
    #: The running test's: fail_point_heartbeat_ms if it sets a fail point, else None.
    client_heartbeat_ms: int | None = None
    clients: dict[str, ClientEntity] = field(default_factory=dict)
    _tools: list[MongoClient[dict[str, Any]]] = field(default_factory=list)
    _fail_points: list[tuple[MongoClient[dict[str, Any]], str]] = field(default_factory=list)

    def run(self, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        self.client_heartbeat_ms = (self.fail_point_heartbeat_ms if sets_fail_point(test)
                                    else None)
        with LogCapture().installed() as capture:
            try:
                for entity in spec.get("createEntities") or []:
                    self.create_entity(entity)
                for operation in test["operations"]:
                    self.operation(operation)
                gevent.sleep(0)  # messages of the last yield
                for expected in test.get("expectLogMessages") or []:
                    self.check_messages(expected, capture)
            finally:
                self.close()

    # -- entities -------------------------------------------------------------------------

    def client_uri(self, options: Mapping[str, Any]) -> str:
        given = {**CLIENT_TIMEOUTS, **options}
        query = urlencode({k: str(v).lower() if isinstance(v, bool) else v
                           for k, v in given.items()})
        return f"{self.uri}{'&' if '?' in self.uri else '?'}{query}"

    def create_entity(self, entity: Mapping[str, Any]) -> None:
        ((kind, spec),) = entity.items()
        assert kind == "client", f"entity type {kind!r} is not supported by this runner"
        if spec["id"] in FAIL_POINT_CLIENTS:
            return  # the runner's own PyMongo client, made when a failPoint needs it
        waiter = EventWaiter(spec.get("observeEvents") or [])
        observe = {component: LEVELS[level]
                   for component, level in (spec.get("observeLogMessages") or {}).items()}
        options = with_fail_point_heartbeat(spec.get("uriOptions") or {},
                                            self.client_heartbeat_ms)
        client = greenpool.Client(self.client_uri(options), event_listeners=[waiter])
        assert not self.clients, "one greenpool client per test: connection logs are global"
        self.clients[spec["id"]] = ClientEntity(client, waiter, observe)

    def close(self) -> None:
        for tool, name in self._fail_points:
            with contextlib.suppress(PyMongoError):
                tool.admin.command({"configureFailPoint": name, "mode": "off"})
        for tool in self._tools:
            tool.close()
        for entity in self.clients.values():
            entity.client.close()

    # -- operations -----------------------------------------------------------------------

    def operation(self, operation: Mapping[str, Any]) -> None:
        name = operation["name"]
        arguments = dict(operation.get("arguments") or {})
        target = operation["object"]
        error: BaseException | None = None
        try:
            if target == "testRunner":
                getattr(self, f"op_{name}")(**arguments)
            else:
                getattr(self, f"op_{name}")(self.clients[target].client, **arguments)
        except PyMongoError as caught:
            if "expectError" not in operation:
                raise
            error = caught
        if "expectError" in operation:
            check_error(operation["expectError"], error)

    def op_createEntities(self, *, entities: list[Mapping[str, Any]]) -> None:
        for entity in entities:
            self.create_entity(entity)

    def op_waitForEvent(self, *, client: str, event: Mapping[str, Any], count: int) -> None:
        ((name, fields),) = event.items()
        assert not fields, f"waitForEvent with fields {fields} is not supported by this runner"
        self.clients[client].waiter.wait_for(name, count, self.event_timeout)

    def op_failPoint(self, *, client: str, failPoint: Mapping[str, Any]) -> None:
        assert client in FAIL_POINT_CLIENTS, client
        assert self.fail_point_client is not None, "this test's server takes no fail points"
        tool = self.fail_point_client()
        self._tools.append(tool)
        tool.admin.command(dict(failPoint))
        self._fail_points.append((tool, failPoint["configureFailPoint"]))

    def op_listDatabases(self, client: greenpool.Client, *, filter: Any) -> Any:
        return client.command("admin", {"listDatabases": 1, "filter": filter})

    def op_close(self, client: greenpool.Client) -> None:
        client.close()

    # -- expectations ---------------------------------------------------------------------

    def check_messages(self, expected: Mapping[str, Any], capture: LogCapture) -> None:
        entity = self.clients[expected["client"]]
        topology_id = entity.client.topology.topology_id
        actual = []
        for component, record in capture.records:
            level = entity.observe_logs.get(component)
            if level is None or record.levelno < level:
                continue
            data: dict[str, Any] = record.structured  # type: ignore[attr-defined]
            if component == "topology" and data.get("topologyId") != topology_id:
                continue  # another client's topology
            if not any(_matches(ignored, component, record, data)
                       for ignored in expected.get("ignoreMessages") or []):
                actual.append((component, record, data))
        wanted = expected["messages"]
        if expected.get("ignoreExtraMessages"):
            actual = actual[:len(wanted)]
        seen = [data["message"] for _, _, data in actual]
        assert len(actual) == len(wanted), (
            f"{expected['client']}: expected {[w['data']['message'] for w in wanted]}, "
            f"got {seen}")
        for index, (want, (component, record, data)) in enumerate(
                zip(wanted, actual, strict=True)):
            where = f"message {index} ({data.get('message')!r})"
            assert component == want["component"], f"{where}: component {component}"
            assert record.levelno == LEVELS[want["level"]], f"{where}: level {record.levelname}"
            match(want["data"], data, where)


def _matches(expected: Mapping[str, Any], component: str, record: logging.LogRecord,
             data: Mapping[str, Any]) -> bool:
    """Whether a message matches an expected one (``ignoreMessages``: the same rules)."""
    try:
        match(expected["data"], data)
    except AssertionError:
        return False
    return component == expected["component"] and record.levelno == LEVELS[expected["level"]]
