"""The unified format's tracing: a client entity's ``observeTracingMessages`` and a
test's ``expectTracingMessages`` (the OpenTelemetry spec's tests), on the OpenTelemetry
SDK's in-memory exporter.

A client that observes tracing messages gets ``tracing={"enabled": True,
"query_text_max_length": ...}`` (``enableCommandPayload``: a length that fits the files'
commands; else 0, no ``db.query.text``). Its spans go to the process's one tracer
provider (:func:`exporter` installs it once: OpenTelemetry allows one global provider),
which the runner clears before each test. Only one client of a file traces, so every
span a test produced is that client's.

Matching, as the format says: the expected spans in order, with their names, their
attributes (by the format's rules for a root document: extra attributes allowed) and,
where given, their ``nested`` spans; without ``ignoreExtraSpans`` the spans at each
level must be exactly those. Two readings of the SDK's shapes: an exception the
OpenTelemetry API records is an ``exception`` event whose attributes
(``exception.message``, ``.type``, ``.stacktrace``) count as the span's; and
``db.mongodb.lsid``, a string (the lsid in extended JSON), is read back as the document
``$$sessionLsid`` compares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bson import json_util

from tests.unified_match import match

__all__ = ["check_tracing", "client_keywords", "exporter", "reset"]

# db.query.text's length for enableCommandPayload: longer than any command of the files.
_PAYLOAD_LENGTH = 10_000
_EXPORTER: Any = None


def exporter() -> Any:
    """The in-memory exporter of the global tracer provider, installed at the first call."""
    global _EXPORTER
    if _EXPORTER is None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        _EXPORTER = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    return _EXPORTER


def reset() -> None:
    """Forget the spans finished so far (a test starts)."""
    if _EXPORTER is not None:
        _EXPORTER.clear()


def client_keywords(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The client keywords a client entity's ``observeTracingMessages`` asks for."""
    observe = spec.get("observeTracingMessages")
    if observe is None:
        return {}
    exporter()
    length = _PAYLOAD_LENGTH if observe.get("enableCommandPayload") else 0
    return {"tracing": {"enabled": True, "query_text_max_length": length}}


def check_tracing(expected: Mapping[str, Any], entities: Mapping[str, Any]) -> None:
    """Assert that the spans finished so far are ``expected`` (one
    ``expectTracingMessages`` item)."""
    finished = sorted(exporter().get_finished_spans(), key=lambda span: span.start_time)
    ids = {span.context.span_id for span in finished}
    roots = [span for span in finished if span.parent is None or span.parent.span_id not in ids]
    _match_level(expected["spans"], roots, finished,
                 bool(expected.get("ignoreExtraSpans", False)), entities, "spans")


def _match_level(expected: Sequence[Mapping[str, Any]], actual: Sequence[Any],
                 finished: Sequence[Any], ignore_extra: bool, entities: Mapping[str, Any],
                 path: str) -> None:
    names = [span.name for span in actual]
    if not ignore_extra:
        assert len(actual) == len(expected), (
            f"{path}: expected spans {[e['name'] for e in expected]}, got {names}")
        for index, (want, span) in enumerate(zip(expected, actual, strict=True)):
            _match_span(want, span, finished, ignore_extra, entities, f"{path}[{index}]")
        return
    # Extra spans allowed: the expected ones in order, each the next span that matches.
    remaining = list(actual)
    for index, want in enumerate(expected):
        failures = []
        while remaining:
            span = remaining.pop(0)
            try:
                _match_span(want, span, finished, ignore_extra, entities, f"{path}[{index}]")
                break
            except AssertionError as error:
                failures.append(str(error))
        else:
            raise AssertionError(
                f"{path}[{index}]: no span matches {want['name']!r} among {names}: "
                + "; ".join(failures))


def _match_span(expected: Mapping[str, Any], span: Any, finished: Sequence[Any],
                ignore_extra: bool, entities: Mapping[str, Any], path: str) -> None:
    assert span.name == expected["name"], (
        f"{path}: expected {expected['name']!r}, got {span.name!r}")
    match(expected["attributes"], attributes_of(span), f"{path}({span.name})", root=True,
          entities=entities)
    if "nested" in expected:
        children = [each for each in finished
                    if each.parent is not None and each.parent.span_id == span.context.span_id]
        _match_level(expected["nested"], children, finished, ignore_extra, entities,
                     f"{path}({span.name}).nested")


def attributes_of(span: Any) -> dict[str, Any]:
    """A span's attributes as the files see them (see the module's docstring)."""
    attributes = dict(span.attributes or {})
    for event in span.events:
        if event.name == "exception":
            attributes.update(event.attributes or {})
    lsid = attributes.get("db.mongodb.lsid")
    if isinstance(lsid, str):
        attributes["db.mongodb.lsid"] = json_util.loads(lsid)
    return attributes
