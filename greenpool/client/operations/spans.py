"""What the OpenTelemetry spec's spans say: their names and attributes, from a command
document, its connection and its outcome.

Rules of this module: pure functions from greenpool's objects to span names and
attribute dicts, and the one function that records an error on a span; it creates no
span and imports nothing of OpenTelemetry (:mod:`~greenpool.client.operations.traced`
does both), so it can be tested without the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from bson import json_util
from bson.json_util import RELAXED_JSON_OPTIONS
from pymongo.errors import PyMongoError

from greenpool.address import Address
from greenpool.wire.replies import error_code

__all__ = ["command_attributes", "error_attributes", "operation_attributes",
           "operation_name", "query_text", "reply_attributes", "sent_attributes"]

SYSTEM: Final = {"db.system.name": "mongodb"}
# The operation of a command whose driver operation has another name (the spec's
# covered operations: dropCollection sends drop, createCollection create).
_OPERATION_NAMES: Final = {"drop": "dropCollection", "create": "createCollection"}
# Commands whose first value is a string that names no collection.
_NOT_COLLECTIONS: Final = frozenset({"configureFailPoint", "renameCollection", "explain"})
# Left out of db.query.text (the spec): session and cluster plumbing, not the query.
_NOT_QUERY: Final = frozenset({"lsid", "$db", "$clusterTime", "signature"})


class _Connection(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def address(self) -> Address: ...


def collection_of(command: Mapping[str, Any]) -> str | None:
    """The collection ``command`` is about, if it names one."""
    name, value = next(iter(command.items()))
    if name == "getMore":
        collection = command.get("collection")
        return collection if isinstance(collection, str) else None
    if isinstance(value, str) and name not in _NOT_COLLECTIONS:
        return value
    return None


def operation_name(command: Mapping[str, Any]) -> str:
    """The driver operation a command is the (first) command of."""
    name = next(iter(command))
    return _OPERATION_NAMES.get(name, name)


def _summary(name: str, dbname: str, collection: str | None) -> str:
    return f"{name} {dbname}" if collection is None else f"{name} {dbname}.{collection}"


def operation_attributes(dbname: str, command: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """An operation span's name and attributes, for the operation whose first command
    is ``command`` on database ``dbname``."""
    name = operation_name(command)
    collection = collection_of(command)
    summary = _summary(name, dbname, collection)
    attributes: dict[str, Any] = {**SYSTEM, "db.namespace": dbname, "db.operation.name": name,
                                  "db.operation.summary": summary}
    if collection is not None:
        attributes["db.collection.name"] = collection
    return summary, attributes


def command_attributes(dbname: str, command: Mapping[str, Any], conn: _Connection,
                       server_connection_id: int | None) -> dict[str, Any]:
    """A command span's attributes known before it is sent."""
    name = next(iter(command))
    collection = collection_of(command)
    host, port = conn.address
    attributes: dict[str, Any] = {
        **SYSTEM, "db.namespace": dbname, "db.command.name": name,
        "db.query.summary": _summary(name, dbname, collection),
        "server.address": host, "network.transport": "unix" if port is None else "tcp",
        "db.mongodb.driver_connection_id": conn.id,
    }
    if port is not None:
        attributes["server.port"] = port
    if collection is not None:
        attributes["db.collection.name"] = collection
    if server_connection_id is not None:
        attributes["db.mongodb.server_connection_id"] = server_connection_id
    if name == "getMore" and command["getMore"]:
        attributes["db.mongodb.cursor_id"] = int(command["getMore"])
    return attributes


def sent_attributes(command: Mapping[str, Any], query_text_max_length: int) -> dict[str, Any]:
    """A command span's attributes from the command as it went out: its session and
    transaction number, which the send itself adds, and ``db.query.text`` if asked for."""
    attributes: dict[str, Any] = {}
    lsid = command.get("lsid")
    if lsid is not None:
        attributes["db.mongodb.lsid"] = json_util.dumps(lsid, json_options=RELAXED_JSON_OPTIONS)
    txn_number = command.get("txnNumber")
    if txn_number is not None:
        attributes["db.mongodb.txn_number"] = int(txn_number)
    if query_text_max_length:
        text = query_text(command, query_text_max_length)
        if text is not None:
            attributes["db.query.text"] = text
    return attributes


def query_text(command: Mapping[str, Any], max_length: int) -> str | None:
    """``command`` in relaxed extended JSON, without its session and cluster fields, cut
    to ``max_length`` characters with ``...`` after, as the Logging spec cuts documents;
    None if a value has no extended JSON form (a custom type of the client's codecs)."""
    shown = {key: value for key, value in command.items() if key not in _NOT_QUERY}
    try:
        text = json_util.dumps(shown, json_options=RELAXED_JSON_OPTIONS)
    except (TypeError, ValueError):
        return None
    return text if len(text) <= max_length else text[:max_length] + "..."


def reply_attributes(reply: Mapping[str, Any]) -> dict[str, Any]:
    """A command span's attributes from the reply: the cursor it opened or continued."""
    cursor = reply.get("cursor")
    if isinstance(cursor, Mapping):
        cursor_id = cursor.get("id")
        if cursor_id:
            return {"db.mongodb.cursor_id": int(cursor_id)}
    return {}


def error_attributes(error: BaseException) -> dict[str, Any]:
    """A failed command span's attributes: the server's error code, as a string."""
    code = error_code(error) if isinstance(error, PyMongoError) else None
    return {} if code is None else {"db.response.status_code": str(code)}
