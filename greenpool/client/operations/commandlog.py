"""Command log messages: the Command Logging and Monitoring spec's "Command started",
"Command succeeded" and "Command failed", on the ``greenpool.command`` logger at DEBUG.

Rules of this module: building and emitting the three messages; it never sends a
command. :func:`enabled` is what the command path checks first (one call into
:mod:`logging`'s per-level cache), so that with the logger off no message is built.

Each record's ``structured`` attribute (``extra={"structured": {...}}``, as the
``greenpool.connection`` and ``greenpool.topology`` loggers have it) holds the spec's
fields: ``commandName``, ``databaseName``, ``requestId``, ``operationId``,
``driverConnectionId``, ``serverConnectionId``, ``serverHost``, ``serverPort``,
``serviceId`` (load-balanced mode), ``clientId`` (the client's topology ID, which
the ``greenpool.topology`` messages call ``topologyId``: which client sent it), and
``command`` / ``reply`` (relaxed extended JSON, cut to
``MONGODB_LOG_MAX_DOCUMENT_LENGTH`` characters, 1000 by default, then "...") or
``failure``, and ``durationMS``. A sensitive command (authentication, a hello with
speculative authentication) is logged as ``{}``; the server's refusal of one keeps only
its code, codeName and errorLabels.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from bson import json_util
from bson.json_util import RELAXED_JSON_OPTIONS
from bson.objectid import ObjectId

from greenpool.address import Address

__all__ = ["LOGGER", "enabled", "failed", "started", "succeeded"]

LOGGER = logging.getLogger("greenpool.command")
_DEBUG = logging.DEBUG
_DEFAULT_MAX_DOCUMENT_LENGTH = 1000


def enabled() -> bool:
    """Whether command messages are logged now (the logger takes DEBUG)."""
    return LOGGER.isEnabledFor(_DEBUG)


def max_document_length() -> int:
    """MONGODB_LOG_MAX_DOCUMENT_LENGTH (the logging spec), read at each message so that
    a change applies at once; a value that is not a positive integer is an error that
    names it."""
    value = os.environ.get("MONGODB_LOG_MAX_DOCUMENT_LENGTH")
    if value is None:
        return _DEFAULT_MAX_DOCUMENT_LENGTH
    try:
        length = int(value)
    except ValueError:
        length = 0
    if length <= 0:
        raise ValueError(f"MONGODB_LOG_MAX_DOCUMENT_LENGTH must be a positive integer, "
                         f"not {value!r}")
    return length


class Where:
    """The fields every message of one command shares: names, IDs and the server."""

    __slots__ = ("fields", "name", "text")

    def __init__(self, client_id: ObjectId, name: str, db: str, request_id: int,
                 driver_id: int, server_id: int | None, address: Address,
                 service_id: ObjectId | None) -> None:
        self.name = name
        host, port = address
        fields: dict[str, Any] = {"clientId": client_id, "commandName": name, "databaseName": db,
                                  "requestId": request_id, "operationId": request_id,
                                  "driverConnectionId": driver_id, "serverHost": host}
        if port is not None:
            fields["serverPort"] = port
        if server_id is not None:
            fields["serverConnectionId"] = server_id
        if service_id is not None:
            fields["serviceId"] = str(service_id)
        self.fields = fields
        self.text = (f'Command "{name}" {{}} on database "{db}"{{}} using a connection with '
                     f"driver-generated ID {driver_id} and server-generated ID {server_id} "
                     f"to {host}:{port} with service ID {service_id}. The requestID is "
                     f"{request_id} and the operation ID is {request_id}.")


def started(where: Where, command: Mapping[str, Any], sensitive: bool) -> None:
    document = "{}" if sensitive else _json(command)
    _log(where, {"message": "Command started", "command": document},
         "started", "", f" Command: {document}")


def succeeded(where: Where, seconds: float, reply: Mapping[str, Any], sensitive: bool) -> None:
    ms = seconds * 1000
    document = "{}" if sensitive else _json(reply)
    _log(where, {"message": "Command succeeded", "durationMS": ms, "reply": document},
         "succeeded", f" in {ms:.3f} ms", f" Command reply: {document}")


def failed(where: Where, seconds: float, failure: Mapping[str, Any]) -> None:
    """``failure``: the failure document of the CommandFailedEvent (already ``{}`` for a
    sensitive command)."""
    ms = seconds * 1000
    document = _json(failure)
    _log(where, {"message": "Command failed", "durationMS": ms, "failure": document},
         "failed", f" in {ms:.3f} ms", f" Error: {document}")


def _log(where: Where, fields: dict[str, Any], verb: str, took: str, tail: str) -> None:
    LOGGER.debug(where.text.format(verb, took) + tail,
                 extra={"structured": {**where.fields, **fields}})


def _json(document: Mapping[str, Any]) -> str:
    text = json_util.dumps(document, json_options=RELAXED_JSON_OPTIONS)
    limit = max_document_length()
    return text if len(text) <= limit else text[:limit] + "..."
