"""The format's log messages for the unified runner: a client entity's
``observeLogMessages`` and a test's ``expectLogMessages``, for the ``command`` component.

Records come from each library's own logger (``greenpool.command``, ``pymongo.command``)
through a handler installed while a test runs; a record's fields are greenpool's
``structured`` attribute, or PyMongo's message's fields (its ``LogMessage``, redacted and
cut as PyMongo logs it). A client's messages are those carrying its ``clientId`` (the
client's topology ID, in both libraries), so that another client entity's (a
``failPointClient``'s) are not counted.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pymongo import MongoClient

from tests.unified_match import match

H = TypeVar("H", bound=logging.Handler)

#: Each component's loggers: greenpool's and PyMongo's.
LOGGERS = {"command": ("greenpool.command", "pymongo.command")}
_KEPT_OF_SENSITIVE = {"code", "codeName", "errorLabels"}
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
          "warn": logging.WARNING, "error": logging.ERROR}


class Capture(logging.Handler):
    """Every record of the components' loggers: ``(component, level, fields)``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        for component, names in LOGGERS.items():
            if record.name in names:
                self.records.append((component, record.levelno, _fields(record)))

    def installed(self) -> contextlib.AbstractContextManager[Capture]:
        return capturing(self, [name for names in LOGGERS.values() for name in names])


@contextlib.contextmanager
def capturing(handler: H, names: Iterable[str]) -> Iterator[H]:
    """``handler`` on the loggers ``names``, at DEBUG, for the block; then each logger as
    it was."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    structured = getattr(record, "structured", None)
    if structured is not None:
        return dict(structured)
    message = record.msg  # PyMongo's LogMessage: its fields once redacted and cut
    message._redact()
    return dict(message._kwargs)


def client_id(client: Any) -> Any:
    """The ID a client's messages carry: its topology's."""
    if isinstance(client, MongoClient):
        return client._topology._topology_id
    return client.topology.topology_id


def check(expected: Mapping[str, Any], capture: Capture, client: Any,
          observed: Mapping[str, str]) -> None:
    """``expected`` (one client's ``expectLogMessages`` entry) against what ``client``
    logged at the levels it ``observed``: in order, exactly, unless ignoreExtraMessages."""
    ident = client_id(client)
    actual = [(component, level, data) for component, level, data in capture.records
              if component in observed and level >= LEVELS[observed[component]]
              and data.get("clientId") == ident]
    wanted = expected["messages"]
    if expected.get("ignoreExtraMessages"):
        actual = actual[:len(wanted)]
    assert len(actual) == len(wanted), (
        f"{expected['client']}: expected {[w['data'].get('message') for w in wanted]}, "
        f"got {[data.get('message') for _, _, data in actual]}")
    for index, (want, (component, level, data)) in enumerate(zip(wanted, actual, strict=True)):
        where = f"log message {index} ({data.get('message')!r})"
        assert component == want["component"], f"{where}: component {component}"
        assert level == LEVELS[want["level"]], f"{where}: level {level}"
        if want.get("failureIsRedacted") is not None:
            _check_redacted(data, want["failureIsRedacted"], where)
        match(want["data"], data, where)


def _check_redacted(data: Mapping[str, Any], redacted: bool, where: str) -> None:
    """A redacted failure keeps at most its code, codeName and errorLabels (the spec's
    Security section); one not redacted says more (its message)."""
    assert "failure" in data, f"{where}: no failure"
    failure = data["failure"]
    fields = json.loads(failure) if isinstance(failure, str) else failure
    assert isinstance(fields, Mapping), f"{where}: failure {failure!r} is not a document"
    is_redacted = set(fields) <= _KEPT_OF_SENSITIVE
    assert is_redacted == redacted, (
        f"{where}: failure {failure!r} is {'not ' if redacted else ''}redacted")
