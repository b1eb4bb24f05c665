"""Command monitoring: PyMongo's command events for the Client's commands.

Rules of this module: building and publishing command-monitoring events, and their
redaction; it never sends a command.

Listeners are :class:`pymongo.monitoring.CommandListener` objects, so code
that already watches PyMongo's commands watches greenpool's the same way.
Security-sensitive commands (authentication, user management) and a hello
carrying speculative authentication are redacted: their command, reply and
failure documents are published empty, as the Command Logging and Monitoring
spec requires. A listener that raises is logged and otherwise ignored.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import OperationFailure

from greenpool.address import Address

__all__ = ["CommandPublisher", "failure_document", "is_sensitive"]

_LOG = logging.getLogger("greenpool")

# The Command Logging and Monitoring spec's security-sensitive commands.
SENSITIVE_COMMANDS = frozenset({
    "authenticate", "saslstart", "saslcontinue", "getnonce", "createuser", "updateuser",
    "copydbgetnonce", "copydbsaslstart", "copydb",
})
_HELLO_COMMANDS = frozenset({"hello", "ismaster"})


def is_sensitive(name: str, document: Mapping[str, Any]) -> bool:
    """Whether a command (or its reply) must be redacted from events."""
    name = name.lower()
    return name in SENSITIVE_COMMANDS or (
        name in _HELLO_COMMANDS and "speculativeAuthenticate" in document)


def failure_document(error: BaseException) -> dict[str, Any]:
    """The failure document of a CommandFailedEvent, as PyMongo builds it."""
    if isinstance(error, OperationFailure) and error.details is not None:
        return dict(error.details)
    return {"errmsg": str(error), "errtype": type(error).__name__}


class CommandPublisher:
    """Delivers command started / succeeded / failed events to listeners."""

    __slots__ = ("listeners",)

    def __init__(self, listeners: Iterable[object]) -> None:
        self.listeners = tuple(x for x in listeners if isinstance(x, _m.CommandListener))

    def started(self, command: Mapping[str, Any], db: str, request_id: int, address: Address,
                service_id: ObjectId | None, server_connection_id: int | None) -> None:
        self._emit("started", _m.CommandStartedEvent(
            dict(command), db, request_id, address, request_id,
            service_id=service_id, server_connection_id=server_connection_id))

    def succeeded(self, seconds: float, reply: Mapping[str, Any], name: str, db: str,
                  request_id: int, address: Address, service_id: ObjectId | None,
                  server_connection_id: int | None) -> None:
        self._emit("succeeded", _m.CommandSucceededEvent(
            datetime.timedelta(seconds=seconds), dict(reply), name, request_id, address,
            request_id, service_id=service_id, database_name=db,
            server_connection_id=server_connection_id))

    def failed(self, seconds: float, error: BaseException, command: Mapping[str, Any],
               db: str, request_id: int, address: Address, service_id: ObjectId | None,
               server_connection_id: int | None) -> None:
        name = next(iter(command))
        failure = {} if is_sensitive(name, command) else failure_document(error)
        self._emit("failed", _m.CommandFailedEvent(
            datetime.timedelta(seconds=seconds), failure, name, request_id, address,
            request_id, service_id=service_id, database_name=db,
            server_connection_id=server_connection_id))

    def _emit(self, method: str, event: object) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(event)
            except Exception:
                _LOG.exception("greenpool: command listener %r raised in %s", listener, method)
