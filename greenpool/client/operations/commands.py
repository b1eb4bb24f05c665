"""Command monitoring: PyMongo's command events for the Client's commands.

Rules of this module: building and publishing command-monitoring events, and their
redaction; it never sends a command.

Listeners are :class:`pymongo.monitoring.CommandListener` objects, so code
that already watches PyMongo's commands watches greenpool's the same way: each
gets the calls PyMongo would make on it, decided per listener object
(:mod:`greenpool.pool.listeners`), and an event no listener takes is not built.
Security-sensitive commands (authentication, user management) and a hello
carrying speculative authentication are redacted: their command, reply and
failure documents are published empty, as the Command Logging and Monitoring
spec requires. A listener that raises is logged and otherwise ignored.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import OperationFailure

from greenpool.address import Address
from greenpool.client.operations import commandlog
from greenpool.pool.listeners import Subscribers

__all__ = ["CommandPublisher", "failure_document", "is_sensitive"]

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

    __slots__ = ("_subscribers", "listeners")

    def __init__(self, listeners: Iterable[object]) -> None:
        subscribers = Subscribers(
            (x for x in listeners if isinstance(x, _m.CommandListener)), _METHODS)
        self._subscribers = subscribers
        #: The command listeners that may take any of the three events
        #: (empty: the Client publishes no command events at all).
        self.listeners = tuple(x for x in subscribers.listeners
                               if any(x in subscribers.takers(m) for m in _METHODS))

    def started(self, command: Mapping[str, Any], db: str, request_id: int, address: Address,
                service_id: ObjectId | None, server_connection_id: int | None,
                log: commandlog.Where | None = None) -> None:
        """``log``: the command's log message fields, when command messages are logged."""
        if log is not None:
            commandlog.started(log, {**command, "$db": db}, is_sensitive(log.name, command))
        if self._subscribers.takers("started"):
            # The command as it goes out, with the $db the wire layer adds (PyMongo's
            # events carry it too).
            self._subscribers.notify("started", _m.CommandStartedEvent(
                {**command, "$db": db}, db, request_id, address, request_id,
                service_id=service_id, server_connection_id=server_connection_id))

    def succeeded(self, seconds: float, reply: Mapping[str, Any], name: str, db: str,
                  request_id: int, address: Address, service_id: ObjectId | None,
                  server_connection_id: int | None, log: commandlog.Where | None = None
                  ) -> None:
        """``reply`` is redacted already for a sensitive command."""
        if log is not None:
            commandlog.succeeded(log, seconds, reply, False)
        if self._subscribers.takers("succeeded"):
            self._subscribers.notify("succeeded", _m.CommandSucceededEvent(
                datetime.timedelta(seconds=seconds), dict(reply), name, request_id, address,
                request_id, service_id=service_id, database_name=db,
                server_connection_id=server_connection_id))

    def failed(self, seconds: float, error: BaseException, command: Mapping[str, Any],
               db: str, request_id: int, address: Address, service_id: ObjectId | None,
               server_connection_id: int | None, log: commandlog.Where | None = None) -> None:
        takers = self._subscribers.takers("failed")
        if not takers and log is None:
            return
        name = next(iter(command))
        failure = failure_document(error)
        if is_sensitive(name, command) and isinstance(error, OperationFailure):
            # The server's refusal of a sensitive command keeps only what says why
            # (the spec's Security section); a network error is not the server's.
            failure = {key: failure[key] for key in _KEPT_OF_SENSITIVE if key in failure}
        if log is not None:
            commandlog.failed(log, seconds, failure)
        if not takers:
            return
        self._subscribers.notify("failed", _m.CommandFailedEvent(
            datetime.timedelta(seconds=seconds), failure, name, request_id, address,
            request_id, service_id=service_id, database_name=db,
            server_connection_id=server_connection_id))


_METHODS = ("started", "succeeded", "failed")
#: What a redacted failure keeps.
_KEPT_OF_SENSITIVE = ("code", "codeName", "errorLabels")
