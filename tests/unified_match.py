"""What the unified test format runners (tests/unified/, tests/lb_unified.py,
tests/csot_unified.py, tests/logging_unified.py, tests/retryable_unified.py) share: reading a
spec file's tests, event names, the recorder of a client entity's events, and the format's
matching rules (``match``, ``match_event``, ``check_error``, ``check_events``) and the frame
of a test (``run_test``, ``close_entities``).

The rules are the format's "Evaluating Matches", each one exactly as it is defined there:
the special operators ``$$exists``, ``$$type`` (every type name of the ``$type`` query
operator), ``$$matchesEntity``, ``$$matchesHexBytes``, ``$$unsetOrMatches``,
``$$sessionLsid``, ``$$lte``, ``$$matchAsDocument`` and ``$$matchAsRoot``; extra keys only
in root documents; numbers by value (flexible numerics), booleans by identity. Any other
``$$`` operator or expectation key raises, so a spec file that needs more fails instead of
passing.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bson import json_util
from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from pymongo import monitoring as _m
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
)

from greenpool.client.api.cursor import Cursor
from greenpool.client.operations.session import Session
from tests.unified import clientbulk_ops


def load_cases(path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(file, test)`` for every test of one spec file; none if the file is missing."""
    if not path.exists():
        return []
    spec = json.loads(path.read_text())
    return [(spec, test) for test in spec["tests"]]


# -- events -------------------------------------------------------------------------------


#: The events the unified format names otherwise than PyMongo's classes.
_FORMAT_NAMES = {"TopologyOpenedEvent": "topologyOpeningEvent"}


def event_name(event: Any) -> str:
    """The unified format's name of a PyMongo event (``CommandStartedEvent`` ->
    ``commandStartedEvent``, ``TopologyOpenedEvent`` -> ``topologyOpeningEvent``)."""
    return _format_name(type(event))


def _format_name(kind: type) -> str:
    name = kind.__name__
    return _FORMAT_NAMES.get(name) or name[0].lower() + name[1:]


COMMAND_EVENTS = (_m.CommandStartedEvent, _m.CommandSucceededEvent, _m.CommandFailedEvent)


#: The commands whose events carry sensitive information (the Command Logging and
#: Monitoring spec's list): a client entity ignores them unless observeSensitiveCommands.
SENSITIVE_COMMANDS = frozenset({
    "authenticate", "saslstart", "saslcontinue", "getnonce", "createuser", "updateuser",
    "copydbgetnonce", "copydbsaslstart", "copydb"})
#: hello is sensitive only with speculativeAuthenticate, which drivers show redacted:
#: an empty command or reply is how a runner recognises it.
HELLO_COMMANDS = frozenset({"hello", "ismaster"})


def is_sensitive(event: Any) -> bool:
    """Whether a command event is one a client entity ignores unless it observes
    sensitive commands."""
    name = event.command_name.lower()
    if name in SENSITIVE_COMMANDS:
        return True
    if name in HELLO_COMMANDS:
        document = getattr(event, "command", None)
        if document is None:
            document = getattr(event, "reply", None)
        return document is not None and not document
    return False


#: The SDAM events (the format's ``sdam`` eventType): server, topology and heartbeat.
SDAM_EVENTS = (_m.ServerOpeningEvent, _m.ServerDescriptionChangedEvent, _m.ServerClosedEvent,
               _m.TopologyOpenedEvent, _m.TopologyDescriptionChangedEvent,
               _m.TopologyClosedEvent, _m.ServerHeartbeatStartedEvent,
               _m.ServerHeartbeatSucceededEvent, _m.ServerHeartbeatFailedEvent)


class Recorder(_m.CommandListener, _m.ConnectionPoolListener):
    """Records the observed events of one client entity (command and CMAP ones; SDAM
    ones too as an :class:`SdamRecorder`, which :func:`recorder_for` gives the entities
    that observe them); counts checked-out and ready
    connections and keeps the started commands whatever is observed. Command events of the
    ignored commands (``ignoreCommandMonitoringEvents``), of configureFailPoint and of
    sensitive commands (unless ``observe_sensitive``) are dropped."""

    def __init__(self, observe: Iterable[str], ignore: Iterable[str] = (), *,
                 observe_sensitive: bool = False) -> None:
        self.observe = set(observe)
        self.ignore = {name.lower() for name in ignore} | {"configurefailpoint"}
        self.observe_sensitive = observe_sensitive
        self.events: list[Any] = []
        self.checked_out = 0
        #: The ids of the established connections that are not closed (awaitMinPoolSizeMS).
        self.ready: set[int] = set()
        self.started_commands: list[Mapping[str, Any]] = []

    def _record(self, event: Any) -> None:
        if isinstance(event, _m.ConnectionCheckedOutEvent):
            self.checked_out += 1
        elif isinstance(event, _m.ConnectionCheckedInEvent):
            self.checked_out -= 1
        elif isinstance(event, _m.ConnectionReadyEvent):
            self.ready.add(event.connection_id)
        elif isinstance(event, _m.ConnectionClosedEvent):
            self.ready.discard(event.connection_id)
        if isinstance(event, COMMAND_EVENTS):
            if event.command_name.lower() in self.ignore:
                return
            if not self.observe_sensitive and is_sensitive(event):
                return
            if isinstance(event, _m.CommandStartedEvent):
                self.started_commands.append(event.command)
        if event_name(event) in self.observe:
            self.events.append(event)

    started = succeeded = failed = _record
    pool_created = pool_ready = pool_cleared = pool_closed = _record
    connection_created = connection_ready = connection_closed = _record
    connection_check_out_started = connection_check_out_failed = _record
    connection_checked_out = connection_checked_in = _record
    # ServerListener and TopologyListener share these names, as the command and heartbeat
    # listeners share started, succeeded and failed.
    opened = description_changed = closed = _record

    def of_family(self, family: str) -> list[Any]:
        if family == "command":
            return [e for e in self.events if isinstance(e, COMMAND_EVENTS)]
        if family == "sdam":
            return [e for e in self.events if isinstance(e, SDAM_EVENTS)]
        return [e for e in self.events if not isinstance(e, (*COMMAND_EVENTS, *SDAM_EVENTS))]


class SdamRecorder(Recorder, _m.ServerListener, _m.TopologyListener, _m.ServerHeartbeatListener):
    """A :class:`Recorder` that the clients also give their SDAM events (server,
    topology and heartbeat): both clients pick a listener's events by its classes."""


def recorder_for(observe: Iterable[str], ignore: Iterable[str] = (), *,
                 observe_sensitive: bool = False) -> Recorder:
    """The recorder of a client entity that observes ``observe``: an :class:`SdamRecorder`
    if that names an SDAM event, else a :class:`Recorder`. PyMongo's MongoClient, given a
    server or topology listener, publishes through a background thread that its close()
    waits for (up to half a second); the format lets a runner leave off the listeners of
    events a test does not observe."""
    observe = set(observe)
    sdam = any(_format_name(kind) in observe for kind in SDAM_EVENTS)
    return (SdamRecorder if sdam else Recorder)(observe, ignore,
                                                 observe_sensitive=observe_sensitive)


def sets_fail_point(test: Mapping[str, Any]) -> bool:
    """Whether a test (anywhere in its operations, nested ones too) sets a fail point."""
    def walk(item: Any) -> bool:
        if isinstance(item, Mapping):
            return (item.get("name") in ("failPoint", "targetedFailPoint")
                    or any(walk(value) for value in item.values()))
        return isinstance(item, list) and any(walk(value) for value in item)
    return walk(test.get("operations") or [])


def with_fail_point_heartbeat(options: Mapping[str, Any], heartbeat_ms: int | None
                              ) -> dict[str, Any]:
    """A client entity's ``uriOptions``, with ``heartbeatFrequencyMS=heartbeat_ms`` added
    unless they name their own (or ``heartbeat_ms`` is None). The format's rule: for a
    test that might set a fail point, a runner MAY reduce a client's heartbeatFrequencyMS
    to speed up its recovery and server selection after a failure, and MUST NOT for a
    client that specifies it."""
    if heartbeat_ms is None or any(key.lower() == "heartbeatfrequencyms" for key in options):
        return dict(options)
    return {**options, "heartbeatFrequencyMS": heartbeat_ms}


# -- matching -----------------------------------------------------------------------------


class RootDocuments(list[Any]):
    """The documents of an iterated cursor (find, aggregate...): the format matches each
    one as a root-level document, where a plain array's documents are nested ones."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: ``$$type``'s names: those of the ``$type`` query operator, as bson decodes each type.
_TYPES: dict[str, Callable[[Any], bool]] = {
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "binData": lambda v: isinstance(v, bytes | Binary),
    "undefined": lambda v: v is None,
    "objectId": lambda v: isinstance(v, ObjectId),
    "bool": lambda v: isinstance(v, bool),
    "date": lambda v: isinstance(v, datetime.datetime),
    "null": lambda v: v is None,
    "regex": lambda v: isinstance(v, Regex | re.Pattern),
    "dbPointer": lambda v: isinstance(v, DBRef),
    "javascript": lambda v: isinstance(v, Code) and v.scope is None,
    "symbol": lambda v: isinstance(v, str),
    "javascriptWithScope": lambda v: isinstance(v, Code) and v.scope is not None,
    "int": lambda v: (isinstance(v, int) and not isinstance(v, bool | Int64)
                      and -(2**31) <= v < 2**31),
    "timestamp": lambda v: isinstance(v, Timestamp),
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "decimal": lambda v: isinstance(v, Decimal128),
    "minKey": lambda v: isinstance(v, MinKey),
    "maxKey": lambda v: isinstance(v, MaxKey),
    "number": lambda v: _is_number(v) or isinstance(v, Decimal128),
}


def _type_matches(name: str, value: Any) -> bool:
    if name not in _TYPES:
        raise AssertionError(f"$$type {name!r} is not a type name of the unified format")
    return _TYPES[name](value)


def _operator(expected: Any) -> str | None:
    """The special operator ``expected`` is (a document whose only key starts with $$)."""
    if isinstance(expected, Mapping) and len(expected) == 1:
        (key,) = expected
        if isinstance(key, str) and key.startswith("$$"):
            return key
    return None


def match(expected: Any, actual: Any, path: str = "", *, root: bool = True,
          entities: Mapping[str, Any] | None = None) -> None:
    """Assert that ``actual`` matches ``expected`` by the unified format's rules. ``actual``
    None stands for an unset value (a result the operation does not have); ``entities``
    is the test's entity map, for ``$$matchesEntity`` and ``$$sessionLsid``."""
    operator = _operator(expected)
    if operator is not None:
        _match_operator(operator, expected[operator], actual, path, root, entities)
        return
    if isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), f"{path}: expected a document, got {actual!r}"
        for key, value in expected.items():
            inner = _operator(value)
            if inner == "$$exists":
                assert (key in actual) is value[inner], (
                    f"{path}: {key!r} should {'' if value[inner] else 'not '}exist in "
                    f"{dict(actual)!r}")
                continue
            if inner == "$$unsetOrMatches" and key not in actual:
                continue
            assert key in actual, f"{path}: no {key!r} in {dict(actual)!r}"
            match(value, actual[key], f"{path}.{key}", root=False, entities=entities)
        if not root:
            extra = set(actual) - set(expected)
            assert not extra, f"{path}: unexpected fields {sorted(extra)} in {dict(actual)!r}"
        return
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (
            f"{path}: expected {expected!r}, got {actual!r}")
        roots = isinstance(actual, RootDocuments)
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            match(e, a, f"{path}[{i}]", root=roots, entities=entities)
        return
    if isinstance(expected, bool) or isinstance(actual, bool):
        assert expected is actual, f"{path}: expected {expected!r}, got {actual!r}"
        return
    if _is_number(expected):
        assert _is_number(actual) and expected == actual, (
            f"{path}: expected {expected!r}, got {actual!r}")
        return
    assert type(expected) is type(actual) or (
        isinstance(expected, str) and isinstance(actual, str)), (
        f"{path}: expected {expected!r} ({type(expected).__name__}), got {actual!r} "
        f"({type(actual).__name__})")
    assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


def _match_operator(operator: str, operand: Any, actual: Any, path: str, root: bool,
                    entities: Mapping[str, Any] | None) -> None:
    where = path or "value"
    if operator == "$$unsetOrMatches":
        if actual is not None:
            match(operand, actual, path, root=root, entities=entities)
    elif operator == "$$exists":  # a value's, as $$unsetOrMatches' operand
        assert (actual is not None) is operand, (
            f"{where}: should {'' if operand else 'not '}exist, got {actual!r}")
    elif operator == "$$type":
        types = [operand] if isinstance(operand, str) else operand
        assert any(_type_matches(t, actual) for t in types), (
            f"{where}: {actual!r} is not of type {types}")
    elif operator == "$$lte":
        assert _is_number(actual) and actual <= operand, f"{where}: {actual!r} is not <= {operand}"
    elif operator == "$$matchesEntity":
        match(_entity(entities, operand), actual, path, root=root, entities=entities)
    elif operator == "$$sessionLsid":
        # The lsid a runner saved when it made the session (the format: an ended
        # session may no longer say it), else the session's own.
        saved = entities.get(("lsid", operand)) if entities is not None else None
        lsid = saved or getattr(_entity(entities, operand), "session_id", None)
        assert lsid is not None, f"{where}: entity {operand!r} is not a session"
        match(lsid, actual, path, root=False, entities=entities)
    elif operator == "$$matchesHexBytes":
        assert isinstance(operand, str) and re.fullmatch(r"(?:[0-9a-fA-F]{2})*", operand), (
            f"{where}: $$matchesHexBytes {operand!r} is not hexadecimal bytes")
        assert isinstance(actual, bytes) and actual == bytes.fromhex(operand), (
            f"{where}: {actual!r} is not the bytes {operand}")
    elif operator == "$$matchAsDocument":
        assert isinstance(actual, str), f"{where}: {actual!r} is not extended JSON"
        match(operand, json_util.loads(actual), path, root=False, entities=entities)
    elif operator == "$$matchAsRoot":
        match(operand, actual, path, root=True, entities=entities)
    else:
        raise AssertionError(f"{where}: {operator} is not a special operator of the unified "
                             f"format (or it is only valid as a field's value: $$exists)")


def _entity(entities: Mapping[str, Any] | None, name: Any) -> Any:
    assert entities is not None and name in entities, f"no entity {name!r} in this test"
    return entities[name]


def match_event(expected: Mapping[str, Any], event: Any, index: int,
                entities: Mapping[str, Any] | None = None) -> None:
    ((name, fields),) = expected.items()
    where = f"event {index} ({event_name(event)})"
    assert event_name(event) == name, f"{where}: expected {name}"
    for key, value in fields.items():
        if key == "command":
            match(value, event.command, f"{where}.command", entities=entities)
        elif key == "reply":
            match(value, event.reply, f"{where}.reply", entities=entities)
        elif key == "commandName":
            assert event.command_name == value, f"{where}: commandName {event.command_name!r}"
        elif key == "databaseName":
            assert event.database_name == value, f"{where}: databaseName {event.database_name!r}"
        elif key == "hasServiceId":
            assert (event.service_id is not None) is value, (
                f"{where}: serviceId {event.service_id!r}")
        elif key == "hasServerConnectionId":
            assert (event.server_connection_id is not None) is value, (
                f"{where}: serverConnectionId {event.server_connection_id!r}")
        elif key == "reason":
            assert event.reason == value, f"{where}: reason {event.reason!r}, expected {value!r}"
        elif key in ("newDescription", "previousDescription"):
            _match_description(value, getattr(event, _DESCRIPTIONS[key]), f"{where}.{key}")
        elif key == "interruptInUseConnections":
            assert event.interrupt_connections is value, (
                f"{where}: interruptInUseConnections {event.interrupt_connections!r}")
        elif key == "awaited":
            assert event.awaited is value, f"{where}: awaited {event.awaited!r}"
        else:
            raise AssertionError(f"{where}: {key!r} is not supported by this runner")


_DESCRIPTIONS = {"newDescription": "new_description",
                 "previousDescription": "previous_description"}


def _match_description(expected: Mapping[str, Any], description: Any, where: str) -> None:
    """A server's or topology's description: the format's fields of it (``type``, the
    only one the files use, is the server type's or topology type's name)."""
    for key, value in expected.items():
        assert key == "type", f"{where}: {key!r} is not supported by this runner"
        kind = getattr(description, "server_type_name", None) or (
            description.topology_type_name)
        assert kind == value, f"{where}: type {kind!r}, expected {value!r}"


def check_events(recorder: Recorder, expected: Mapping[str, Any],
                 entities: Mapping[str, Any] | None = None) -> None:
    """One ``expectEvents`` entry against the client's recorder (call after a yield: pool
    events may be delivered at the next one)."""
    family = expected.get("eventType", "command")
    actual = recorder.of_family(family)
    wanted = expected["events"]
    if expected.get("ignoreExtraEvents"):
        actual = actual[:len(wanted)]
    names = [event_name(e) for e in actual]
    assert len(actual) == len(wanted), (
        f"{expected['client']} {family} events: expected "
        f"{[next(iter(w)) for w in wanted]}, got {names}"
        + "".join(f"\n  {event_name(e)} {getattr(e, 'command', '')}" for e in actual))
    for index, (want, event) in enumerate(zip(wanted, actual, strict=True)):
        match_event(want, event, index, entities)


def is_client_error(error: BaseException) -> bool:
    """Whether an error comes from the client rather than from a server's reply: a network
    error, an error the driver raised before sending, or a ValueError from argument
    validation (PyMongo's own for an update document without operators, for one)."""
    if isinstance(error, ValueError):
        return True
    if isinstance(error, OperationFailure | NotPrimaryError):
        return False
    return isinstance(error, ConnectionFailure) or not getattr(error, "details", None)


def _has_label(error: BaseException, label: str) -> bool:
    return isinstance(error, PyMongoError) and error.has_error_label(label)


def check_error(expected: Mapping[str, Any], error: BaseException | None, *,
                result: Callable[[BaseException], Any] | None = None,
                entities: Mapping[str, Any] | None = None) -> None:
    """One ``expectError`` against the error an operation raised. ``result`` gives the
    result an error carries (a bulk write's), for ``expectError.expectResult``. A client
    bulk write's error is looked at through its top-level error, but for its write
    errors, write concern errors and result (the format's clientBulkWrite)."""
    assert error is not None, f"expected an error ({expected}), the operation succeeded"
    assert isinstance(error, PyMongoError | ValueError), (
        f"expected a PyMongoError (or a ValueError from argument validation), got {error!r}")
    whole, error = error, clientbulk_ops.top_level(error)
    details = getattr(error, "details", None) or {}
    for key, value in expected.items():
        if key == "isError":
            continue
        if key == "isTimeoutError":
            assert getattr(error, "timeout", False) is value, (
                f"isTimeoutError {value} but got {error!r}")
        elif key == "isClientError":
            assert is_client_error(error) is value, f"isClientError {value} but got {error!r}"
        elif key == "errorCode":
            code = getattr(error, "code", None)
            if code is None or isinstance(error, BulkWriteError):
                code = details.get("code", code)
            assert code == value, f"errorCode {value} but got {code!r}: {error!r}"
        elif key == "errorCodeName":
            name = details.get("codeName")
            assert isinstance(name, str) and name.lower() == value.lower(), (
                f"errorCodeName {value} but got {name!r}: {error!r}")
        elif key == "errorContains":
            # A bulk write error's message is its write and write concern errors' too.
            text = f"{error} {details}" if isinstance(error, BulkWriteError) else str(error)
            assert value.lower() in text.lower(), f"{value!r} not in {text!r}"
        elif key == "errorLabelsContain":
            for label in value:
                assert _has_label(error, label), f"no label {label} on {error!r}"
        elif key == "errorLabelsOmit":
            for label in value:
                assert not _has_label(error, label), f"label {label} on {error!r}"
        elif key == "errorResponse":
            assert details, f"errorResponse: {error!r} carries no server response"
            match(value, details, "errorResponse", entities=entities)
        elif key == "expectResult":
            carried = result(whole) if result is not None else None
            assert carried is not None or _operator(value) == "$$unsetOrMatches", (
                f"expectResult: {whole!r} carries no result")
            match(value, carried, "expectError.expectResult", entities=entities)
        elif key == "writeErrors":
            actual = clientbulk_ops.write_errors(whole)
            assert set(actual) == set(value), (
                f"writeErrors at {sorted(actual)}, expected at {sorted(value)}")
            for index, wanted in value.items():
                match(wanted, actual[index], f"writeErrors.{index}", entities=entities)
        elif key == "writeConcernErrors":
            actual_list = clientbulk_ops.write_concern_errors(whole)
            assert len(actual_list) == len(value), (
                f"{len(actual_list)} writeConcernErrors, expected {len(value)}: {actual_list}")
            for index, (wanted, got) in enumerate(zip(value, actual_list, strict=True)):
                match(wanted, got, f"writeConcernErrors.{index}", entities=entities)
        else:
            raise AssertionError(f"expectError.{key} is not supported by this runner")


# -- running ------------------------------------------------------------------------------


def run_test(runner: Any, spec: Mapping[str, Any], test: Mapping[str, Any]) -> None:
    """One test in the unified format's order: ``initialData``, ``createEntities``, the
    operations, ``expectEvents``; ``runner.close()`` whatever happens. The runner supplies
    ``initial_data``, ``create_entity``, ``operation``, ``check_events`` and ``close``."""
    try:
        runner.initial_data(spec.get("initialData") or [])
        for entity in spec.get("createEntities") or []:
            runner.create_entity(entity)
        for operation in test["operations"]:
            runner.operation(operation)
        for expected in test.get("expectEvents") or []:
            runner.check_events(expected)
    finally:
        runner.close()


def close_entities(entities: Iterable[Any]) -> None:
    """Close the cursor entities, then end the session entities (errors ignored: the
    test is over)."""
    entities = list(entities)
    for entity in entities:
        if isinstance(entity, Cursor):
            with contextlib.suppress(PyMongoError):
                entity.close()
    for entity in entities:
        if isinstance(entity, Session):
            with contextlib.suppress(PyMongoError):
                entity.end()
