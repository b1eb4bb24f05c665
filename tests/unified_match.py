"""What the unified test format runners (tests/lb_unified.py, tests/csot_unified.py,
tests/logging_unified.py, tests/retryable_unified.py) share: reading a spec file's tests,
event names, the recorder of a client entity's events, and the format's matching rules
(``match``, ``match_event``, ``check_error``, ``check_events``) and the frame of a test
(``run_test``, ``close_entities``).

The rules are the union of what the Load Balancer, CSOT, logging and retryable reads and
writes spec files use, each one exactly as the format defines it: ``$$type`` (the BSON types
named below), ``$$exists``, ``$$lte``, ``$$unsetOrMatches``, extra keys only in root
documents, numbers by value, booleans by identity. Any other operator or key raises, so a
spec file that needs more fails instead of passing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bson.int64 import Int64
from pymongo import monitoring as _m
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from greenpool.client.cursor import Cursor
from greenpool.client.session import Session


def load_cases(path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(file, test)`` for every test of one spec file; none if the file is missing."""
    if not path.exists():
        return []
    spec = json.loads(path.read_text())
    return [(spec, test) for test in spec["tests"]]


# -- events -------------------------------------------------------------------------------


def event_name(event: Any) -> str:
    """The unified format's name of a PyMongo event (``CommandStartedEvent`` ->
    ``commandStartedEvent``)."""
    name = type(event).__name__
    return name[0].lower() + name[1:]


COMMAND_EVENTS = (_m.CommandStartedEvent, _m.CommandSucceededEvent, _m.CommandFailedEvent)


class Recorder(_m.CommandListener, _m.ConnectionPoolListener):
    """Records the observed events of one client entity; counts checked-out connections and
    keeps the started commands whatever is observed. Command events of the ignored commands
    (``ignoreCommandMonitoringEvents``) and of configureFailPoint are dropped."""

    def __init__(self, observe: Iterable[str], ignore: Iterable[str] = ()) -> None:
        self.observe = set(observe)
        self.ignore = set(ignore) | {"configureFailPoint"}
        self.events: list[Any] = []
        self.checked_out = 0
        self.started_commands: list[Mapping[str, Any]] = []

    def _record(self, event: Any) -> None:
        if isinstance(event, _m.ConnectionCheckedOutEvent):
            self.checked_out += 1
        elif isinstance(event, _m.ConnectionCheckedInEvent):
            self.checked_out -= 1
        if isinstance(event, COMMAND_EVENTS):
            if event.command_name in self.ignore:
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

    def of_family(self, family: str) -> list[Any]:
        if family == "command":
            return [e for e in self.events if isinstance(e, COMMAND_EVENTS)]
        return [e for e in self.events if not isinstance(e, COMMAND_EVENTS)]


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


class Documents(list[Any]):
    """The documents of an iterable result (``find``, ``aggregate``): each is matched
    as a root-level document (the unified format's rule), unlike the values of an
    array result (``distinct``)."""


def match(expected: Any, actual: Any, path: str = "", *, root: bool = True) -> None:
    """Assert that ``actual`` matches ``expected`` (unified format rules: extra keys only in
    the root document; ``$$type``; ``$$exists``; ``$$lte``; ``$$unsetOrMatches``; numbers by
    value). ``actual`` None stands for an unset value (a result the operation does not have)."""
    if isinstance(expected, Mapping) and set(expected) == {"$$unsetOrMatches"}:
        if actual is not None:
            match(expected["$$unsetOrMatches"], actual, path, root=root)
        return
    if isinstance(expected, Mapping) and set(expected) == {"$$type"}:
        types = expected["$$type"]
        types = [types] if isinstance(types, str) else types
        assert any(_type_matches(t, actual) for t in types), (
            f"{path or 'value'}: {actual!r} is not of type {types}")
        return
    if isinstance(expected, Mapping) and set(expected) == {"$$lte"}:
        assert isinstance(actual, int) and actual <= expected["$$lte"], (
            f"{path or 'value'}: {actual!r} is not <= {expected['$$lte']}")
        return
    if isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), f"{path}: expected a document, got {actual!r}"
        for key, value in expected.items():
            if isinstance(value, Mapping) and set(value) == {"$$exists"}:
                assert (key in actual) is value["$$exists"], (
                    f"{path}: {key!r} should {'' if value['$$exists'] else 'not '}exist in "
                    f"{dict(actual)!r}")
                continue
            if isinstance(value, Mapping) and set(value) == {"$$unsetOrMatches"} and (
                    key not in actual):
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
            match(e, a, f"{path}[{i}]", root=isinstance(actual, Documents))
        return
    if isinstance(expected, bool) or isinstance(actual, bool):
        assert expected is actual, f"{path}: expected {expected!r}, got {actual!r}"
        return
    assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


def match_event(expected: Mapping[str, Any], event: Any, index: int) -> None:
    ((name, fields),) = expected.items()
    where = f"event {index} ({event_name(event)})"
    assert event_name(event) == name, f"{where}: expected {name}"
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


def check_events(recorder: Recorder, expected: Mapping[str, Any]) -> None:
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
        f"{[next(iter(w)) for w in wanted]}, got {names}")
    for index, (want, event) in enumerate(zip(wanted, actual, strict=True)):
        match_event(want, event, index)


def check_error(expected: Mapping[str, Any], error: BaseException | None) -> None:
    assert error is not None, f"expected an error ({expected}), the operation succeeded"
    assert isinstance(error, PyMongoError), f"expected a PyMongoError, got {error!r}"
    for key, value in expected.items():
        if key == "isError":
            continue
        if key == "isTimeoutError":
            assert error.timeout is value, f"isTimeoutError {value} but got {error!r}"
        elif key == "isClientError":
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
