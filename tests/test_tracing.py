"""OpenTelemetry tracing on greenpool.Client, beside the spec's unified files
(tests/test_otel_spec.py): the switches (off by default, the environment variables, the
option over them, bad values, a missing OpenTelemetry), the spec's two prose tests, a
greenlet killed mid-operation, and the zero cost of a Client that does not trace.

Spans are read from the SDK's in-memory exporter that tests/unified/tracing.py installs
as the process's tracer provider. Assertions are on names, order and counts, never on
durations.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from gevent.event import Event
from pymongo import monitoring
from pymongo.errors import OperationFailure

import greenpool
from greenpool.client.config.tracing import ENABLED_VARIABLE, QUERY_TEXT_VARIABLE
from greenpool.client.operations import spans
from greenpool.client.operations.operations import Operations
from tests.unified import tracing

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor


class _OpenSpans(SpanProcessor):
    """The spans started and not yet ended, by id."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: Any) -> None:
        self.open.pop(span.context.span_id, None)


_OPEN: _OpenSpans | None = None


@pytest.fixture
def finished(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The exporter, emptied, with neither environment variable set."""
    global _OPEN
    exporter = tracing.exporter()
    if _OPEN is None:
        _OPEN = _OpenSpans()
        trace.get_tracer_provider().add_span_processor(_OPEN)  # type: ignore[attr-defined]
    monkeypatch.delenv(ENABLED_VARIABLE, raising=False)
    monkeypatch.delenv(QUERY_TEXT_VARIABLE, raising=False)
    exporter.clear()
    yield exporter
    exporter.clear()


def _names(exporter: Any) -> list[str]:
    return [span.name for span in exporter.get_finished_spans()]


def _find_once(uri: str, **kwargs: Any) -> None:
    client = greenpool.Client(uri, **kwargs)
    try:
        client["trace_db"]["coll"].find_one({"x": 1})
    finally:
        client.close()


def _command_span(exporter: Any, name: str) -> Any:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


# -- the switches -----------------------------------------------------------------------


def test_off_by_default(finished: Any, mongodb_uri: str) -> None:
    client = greenpool.Client(mongodb_uri)
    try:
        assert type(client._operations) is Operations
        client["trace_db"]["coll"].find_one({})
    finally:
        client.close()
    assert _names(finished) == []


def test_environment_variable_enables(finished: Any, mongodb_uri: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec's prose test 1."""
    monkeypatch.setenv(ENABLED_VARIABLE, "false")
    _find_once(mongodb_uri)
    assert _names(finished) == []
    monkeypatch.setenv(ENABLED_VARIABLE, "true")
    _find_once(mongodb_uri)
    # find, then the close's endSessions: each an operation span around its command.
    assert _names(finished) == ["find", "find trace_db.coll", "endSessions",
                                "endSessions admin"]


@pytest.mark.parametrize("word", ["1", "TRUE", "yes"])
def test_environment_variable_words(finished: Any, mongodb_uri: str,
                                    monkeypatch: pytest.MonkeyPatch, word: str) -> None:
    monkeypatch.setenv(ENABLED_VARIABLE, word)
    _find_once(mongodb_uri)
    assert "find trace_db.coll" in _names(finished)


def test_option_beats_environment(finished: Any, mongodb_uri: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENABLED_VARIABLE, "true")
    _find_once(mongodb_uri, tracing={"enabled": False})
    assert _names(finished) == []
    monkeypatch.setenv(ENABLED_VARIABLE, "false")
    _find_once(mongodb_uri, tracing={"enabled": True})
    assert "find trace_db.coll" in _names(finished)


def test_query_text_from_environment(finished: Any, mongodb_uri: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec's prose test 2, and the option over the variable."""
    monkeypatch.setenv(ENABLED_VARIABLE, "true")
    monkeypatch.setenv(QUERY_TEXT_VARIABLE, "1024")
    _find_once(mongodb_uri)
    text = _command_span(finished, "find").attributes["db.query.text"]
    assert text.startswith('{"find": "coll", "filter": {"x": 1}')
    finished.clear()
    _find_once(mongodb_uri, tracing={"query_text_max_length": 0})
    assert "db.query.text" not in _command_span(finished, "find").attributes
    finished.clear()
    monkeypatch.delenv(QUERY_TEXT_VARIABLE)
    _find_once(mongodb_uri)
    assert "db.query.text" not in _command_span(finished, "find").attributes


def test_query_text_cut_to_length() -> None:
    text = spans.query_text({"find": "coll", "filter": {"x": 1}, "lsid": {"id": 1}}, 10)
    assert text == '{"find": "...'
    assert spans.query_text({"ping": 1, "$clusterTime": {}}, 100) == '{"ping": 1}'


class _Conn:
    id = 7

    def __init__(self, address: Any) -> None:
        self.address = address


def test_command_attributes() -> None:
    getmore = {"getMore": 42, "collection": "coll", "batchSize": 2}
    attributes = spans.command_attributes("db", getmore, _Conn(("/tmp/m.sock", None)), 3)
    assert attributes["network.transport"] == "unix" and "server.port" not in attributes
    assert attributes["server.address"] == "/tmp/m.sock"
    assert (attributes["db.collection.name"], attributes["db.mongodb.cursor_id"]) == ("coll", 42)
    assert (attributes["db.mongodb.driver_connection_id"],
            attributes["db.mongodb.server_connection_id"]) == (7, 3)
    assert attributes["db.query.summary"] == "getMore db.coll"
    ping = spans.command_attributes("admin", {"ping": 1}, _Conn(("h", 27017)), None)
    assert (ping["network.transport"], ping["server.port"]) == ("tcp", 27017)
    assert "db.collection.name" not in ping and "db.mongodb.server_connection_id" not in ping
    assert spans.operation_attributes("db", {"drop": "old"})[0] == "dropCollection db.old"
    assert spans.operation_attributes("db", {"aggregate": 1})[0] == "aggregate db"


_URI = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100"


@pytest.mark.parametrize(("option", "error", "words"), [
    ("yes", TypeError, ["tracing", "'yes'"]),
    ({"enabled": "true"}, TypeError, ["tracing['enabled']", "'true'"]),
    ({"query_text_max_length": "10"}, TypeError, ["query_text_max_length", "'10'"]),
    ({"query_text_max_length": -1}, ValueError, ["query_text_max_length", "-1"]),
    ({"enable": True}, ValueError, ["'enable'", "enabled"]),
])
def test_bad_option(finished: Any, option: Any, error: type[Exception],
                    words: list[str]) -> None:
    with pytest.raises(error) as raised:
        greenpool.Client(_URI, connect=False, tracing=option)
    assert isinstance(raised.value, greenpool.ConfigurationError | greenpool.OptionTypeError)
    for word in words:
        assert word in str(raised.value)


@pytest.mark.parametrize(("variable", "value"), [
    (ENABLED_VARIABLE, "maybe"), (QUERY_TEXT_VARIABLE, "many"), (QUERY_TEXT_VARIABLE, "-5"),
])
def test_bad_environment(finished: Any, monkeypatch: pytest.MonkeyPatch, variable: str,
                         value: str) -> None:
    monkeypatch.setenv(ENABLED_VARIABLE, "true")
    monkeypatch.setenv(variable, value)
    with pytest.raises(greenpool.ConfigurationError) as raised:
        greenpool.Client(_URI, connect=False)
    assert variable in str(raised.value) and repr(value) in str(raised.value)


def test_missing_opentelemetry(finished: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the otel extra were not installed: importing it fails.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "greenpool.client.operations.traced")
    with pytest.raises(ImportError, match=r"pip install 'greenpool\[otel\]'"):
        greenpool.Client(_URI, connect=False, tracing={"enabled": True})
    # Tracing off needs no OpenTelemetry at all.
    greenpool.Client(_URI, connect=False).close()


# -- spans --------------------------------------------------------------------------------


class _Started(monitoring.CommandListener):
    def __init__(self, name: str) -> None:
        self.name = name
        self.event = Event()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == self.name:
            self.event.set()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.timeout(60)
def test_killed_mid_operation_ends_its_spans(finished: Any, mongodb_uri: str) -> None:
    assert _OPEN is not None
    started = _Started("find")
    client = greenpool.Client(mongodb_uri, appname="trace-kill", event_listeners=[started],
                              tracing={"enabled": True})
    admin = greenpool.Client(mongodb_uri)
    admin.admin.command({"configureFailPoint": "failCommand", "mode": "alwaysOn", "data": {
        "failCommands": ["find"], "blockConnection": True, "blockTimeMS": 30_000,
        "appName": "trace-kill"}})
    try:
        worker = gevent.spawn(client["trace_db"]["coll"].find_one, {})
        assert started.event.wait(timeout=30)
        assert sorted(_OPEN.open.values()) == ["find", "find trace_db.coll"]
        worker.kill()
        assert worker.dead and isinstance(worker.value, gevent.GreenletExit)
        assert _OPEN.open == {}  # both ended, by the kill itself
        command, operation = finished.get_finished_spans()
        assert (command.name, operation.name) == ("find", "find trace_db.coll")
        for span in (command, operation):
            assert span.status.status_code is trace.StatusCode.ERROR
            assert [e.attributes["exception.type"] for e in span.events] == [
                "greenlet.GreenletExit"]
    finally:
        admin.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        admin.close()
        client.close()
    assert _OPEN.open == {}


def test_failed_command_records_the_error(finished: Any, mongodb_uri: str) -> None:
    client = greenpool.Client(mongodb_uri, tracing={"enabled": True})
    try:
        with pytest.raises(OperationFailure):
            client["trace_db"].command({"noSuchCommand": 1})
    finally:
        client.close()
    command = _command_span(finished, "noSuchCommand")
    operation = _command_span(finished, "noSuchCommand trace_db")
    assert command.parent.span_id == operation.context.span_id
    assert command.attributes["db.response.status_code"] == "59"
    for span in (command, operation):
        assert span.status.status_code is trace.StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]


def test_nested_in_the_application_span(finished: Any, mongodb_uri: str) -> None:
    client = greenpool.Client(mongodb_uri, tracing={"enabled": True})
    tracer = trace.get_tracer("test")
    try:
        with tracer.start_as_current_span("request") as request:
            client["trace_db"]["coll"].insert_one({"x": 1})
    finally:
        client.close()
    operation = _command_span(finished, "insert trace_db.coll")
    assert operation.parent.span_id == request.get_span_context().span_id


# -- zero cost when off -------------------------------------------------------------------


def test_tracing_off_never_calls_tracing(finished: Any, mongodb_uri: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A Client that does not trace runs none of the tracing code: every function of
    the span module and every tracer OpenTelemetry would give raise here."""

    def breach(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Client that does not trace called into tracing")

    for name in spans.__all__:
        monkeypatch.setattr(spans, name, breach)
    monkeypatch.setattr(trace, "get_tracer", breach)
    monkeypatch.setattr(trace.get_tracer_provider(), "get_tracer", breach)
    client = greenpool.Client(mongodb_uri)
    try:
        assert type(client._operations) is Operations
        coll = client["trace_db"]["coll"]
        coll.insert_one({"x": 2})
        assert coll.find_one({"x": 2}) is not None
        assert list(coll.find({}, batch_size=1).limit(3))
        client["trace_db"].command({"ping": 1})
    finally:
        client.close()
    assert _names(finished) == []


@pytest.mark.timeout(60)
def test_retried_commit_is_one_operation_in_its_transaction(finished: Any,
                                                            replset_uri: str) -> None:
    client = greenpool.Client(replset_uri, tracing={"enabled": True})
    admin = greenpool.Client(replset_uri)
    # A retryable error on the first commit: the session sends it again.
    admin.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1}, "data": {
        "failCommands": ["commitTransaction"], "errorCode": 91,
        "errorLabels": ["RetryableWriteError"]}})
    try:
        with client.start_session() as session:
            session.start_transaction()
            client["trace_db"]["coll"].insert_one({"t": 1}, session=session)
            session.commit_transaction()
    finally:
        admin.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        admin.close()
        client.close()
    ended = finished.get_finished_spans()

    def children(parent: Any) -> list[Any]:
        return [s for s in ended if s.parent and s.parent.span_id == parent.context.span_id]

    (transaction,) = [s for s in ended if s.name == "transaction"]
    assert transaction.parent is None
    insert, commit = children(transaction)
    assert (insert.name, commit.name) == ("insert trace_db.coll", "commitTransaction admin")
    first, second = children(commit)
    assert first.attributes["db.response.status_code"] == "91"
    assert "db.response.status_code" not in second.attributes
    assert commit.status.status_code is not trace.StatusCode.ERROR
