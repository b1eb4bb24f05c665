"""What a member of the replica set emulator says (see :mod:`greenpool.testing.replset`).

Rules of this module: pure functions and values, no I/O: a member's state and the
documents it answers with (hello, the ``replSet*`` commands, the errors of a member in the
wrong state), what each command is by name, and the bytes of messages. Standard library
and ``bson`` only, and no greenpool import: the member process
(:mod:`greenpool.testing._replmember`) loads it without the greenpool package.

A member's *view* is what the controller tells it, as JSON::

    {"set": "rs0", "version": 1, "term": 3, "me": "127.0.0.1:5001", "lag": 0.0,
     "backend": ["127.0.0.1", 5000], "limits": {...the backend's hello limits...},
     "members": [{"_id": 0, "host": "127.0.0.1:5001", "priority": 1.0, "hidden": false,
                  "arbiterOnly": false, "tags": {}, "state": "PRIMARY"}, ...]}

and a :class:`State` is a view at one topologyVersion counter.
"""

from __future__ import annotations

import datetime
import itertools
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013
CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1
EXHAUST_ALLOWED = 1 << 16
#: OP_REPLY's AwaitCapable flag, which mongod sets on every reply.
REPLY_AWAIT_CAPABLE = 1 << 3

HEADER = struct.Struct("<iiii")
INT32 = struct.Struct("<i")
_REPLY_PREFIX = struct.Struct("<iqii")

# -- what each command is, by name (mongod's "secondaryAllowed" of each) ------------------

HELLO = frozenset({b"hello", b"isMaster", b"ismaster"})
#: Answered by the member whatever its state, with every ``replSet*`` command.
LOCAL = HELLO | {b"shutdown"}
#: Refused off the primary with NotWritablePrimary (never allowed on a secondary).
WRITES = frozenset({
    b"insert", b"update", b"delete", b"findAndModify", b"findandmodify", b"bulkWrite",
    b"create", b"drop", b"dropDatabase", b"createIndexes", b"dropIndexes", b"deleteIndexes",
    b"collMod", b"renameCollection", b"convertToCapped", b"cloneCollectionAsCapped",
    b"commitTransaction", b"abortTransaction", b"applyOps",
    b"createUser", b"updateUser", b"dropUser", b"dropAllUsersFromDatabase",
    b"grantRolesToUser", b"revokeRolesFromUser", b"createRole", b"updateRole", b"dropRole",
    b"dropAllRolesFromDatabase", b"grantRolesToRole", b"revokeRolesFromRole",
    b"grantPrivilegesToRole", b"revokePrivilegesFromRole",
    b"createSearchIndexes", b"updateSearchIndex", b"dropSearchIndex",
})
#: Allowed on a secondary only with secondaryOk (a read preference other than primary).
READS = frozenset({
    b"find", b"aggregate", b"count", b"distinct", b"listCollections", b"listIndexes",
    b"listDatabases", b"dbStats", b"collStats", b"dataSize", b"explain", b"mapReduce",
    b"listSearchIndexes", b"dbHash", b"validate",
})
# Every other command (getMore, killCursors, ping, buildInfo, endSessions...) runs anywhere.

Error = tuple[int, str, str]
"""A command error: ``(code, codeName, errmsg)``."""

NOT_WRITABLE_PRIMARY: Error = (10107, "NotWritablePrimary", "not primary")
NOT_PRIMARY_NO_SECONDARY_OK: Error = (
    13435, "NotPrimaryNoSecondaryOk", "not primary and secondaryOk=false")
NOT_PRIMARY_OR_SECONDARY: Error = (
    13436, "NotPrimaryOrSecondary", "node is not in primary or recovering state")

# -- messages ------------------------------------------------------------------------------

_request_ids = itertools.count(1)


def op_msg(document: Mapping[str, Any], response_to: int, flags: int = 0) -> tuple[int, bytes]:
    """An OP_MSG reply (one body section) and its requestID."""
    body = bson.encode(document)
    request_id = next(_request_ids) % 0x7FFFFFFF + 1
    header = HEADER.pack(21 + len(body), request_id, response_to, OP_MSG)
    return request_id, header + INT32.pack(flags) + b"\x00" + body


def op_reply(document: Mapping[str, Any], response_to: int) -> bytes:
    """An OP_REPLY to an OP_QUERY command: one document."""
    body = bson.encode(document)
    request_id = next(_request_ids) % 0x7FFFFFFF + 1
    header = HEADER.pack(36 + len(body), request_id, response_to, OP_REPLY)
    return header + _REPLY_PREFIX.pack(REPLY_AWAIT_CAPABLE, 0, 0, 1) + body


def request_id(message: bytes) -> int:
    return int(INT32.unpack_from(message, 4)[0])


def flags(message: bytes) -> int:
    """An OP_MSG's flag bits."""
    return int(INT32.unpack_from(message, 16)[0])


def body_span(message: bytes) -> tuple[int, int]:
    """Where an OP_MSG's body document starts and ends; (-1, -1) if it has none.

    Drivers put the body first; document sequences may precede it all the same.
    """
    end = len(message) - (4 if message[16] & CHECKSUM_PRESENT else 0)
    offset = 20
    while offset + 5 <= end:
        size = INT32.unpack_from(message, offset + 1)[0]
        if size < 5:
            break
        if message[offset] == 0:
            return offset + 1, min(offset + 1 + size, end)
        offset += 1 + size
    return -1, -1


def command_name(message: bytes, start: int, end: int) -> bytes:
    """The first key of the document ``message[start:end]``, as bytes (b"" if none)."""
    if start < 0 or end - start <= 5:
        return b""
    stop = message.find(b"\x00", start + 5, end)
    return message[start + 5 : stop] if stop > 0 else b""


def query_command(message: bytes) -> Mapping[str, Any] | None:
    """An OP_QUERY's command document (its ``$query`` unwrapped); None if not a command."""
    namespace_end = message.find(b"\x00", 20)
    if namespace_end < 0 or not message[20:namespace_end].endswith(b".$cmd"):
        return None
    try:
        query = bson.decode(message[namespace_end + 9 :])
    except Exception:
        return None  # the backend refuses what cannot be read
    command = query.get("$query", query)
    return command if isinstance(command, Mapping) else None


# -- a member's state ----------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """What a hello says, at one topologyVersion. Frozen: a waiter keeps the one it woke to."""

    counter: int
    view: Mapping[str, Any]
    #: "PRIMARY", "SECONDARY", "ARBITER", or "STEPPING_DOWN": a primary that stopped
    #: accepting writes and is not yet a secondary (mongod bumps the counter for both).
    role: str

    @property
    def me(self) -> str:
        return str(self.view["me"])

    @property
    def config(self) -> Mapping[str, Any]:
        """This member's entry in the view's members."""
        me = self.me
        return next(m for m in self.view["members"] if m["host"] == me)

    @property
    def primary(self) -> str | None:
        return next((str(m["host"]) for m in self.view["members"] if m["state"] == "PRIMARY"),
                    None)

    @property
    def data_members(self) -> int:
        return sum(1 for m in self.view["members"] if not m["arbiterOnly"])

    @property
    def max_message_size(self) -> int:
        return int(self.view["limits"]["maxMessageSizeBytes"])

    def fingerprint(self) -> tuple[Any, ...]:
        """Everything a hello shows that a change may alter (localTime and the like aside)."""
        view = self.view
        listed = tuple((m["host"], m["priority"], m["hidden"], m["arbiterOnly"])
                       for m in view["members"])
        return (self.role, view["set"], view["version"], view["term"], self.primary, listed,
                tuple(sorted(self.config["tags"].items())), view["lag"])


def role_of(view: Mapping[str, Any]) -> str:
    """The state the view gives its own member."""
    me = view["me"]
    return str(next(m["state"] for m in view["members"] if m["host"] == me))


def election_id(term: int) -> ObjectId:
    """mongod's electionId for a term: 0x7fffffff, then the term as 8 bytes."""
    return ObjectId(b"\x7f\xff\xff\xff" + term.to_bytes(8, "big"))


def hello_document(state: State, process_id: ObjectId, command: str,
                   request: Mapping[str, Any], connection_id: int) -> dict[str, Any]:
    """A hello reply, in mongod's field order, for a member in ``state``."""
    view = state.view
    me = state.config
    reply: dict[str, Any] = {
        "topologyVersion": {"processId": process_id, "counter": Int64(state.counter)}}
    reply.update(_member_lists(view["members"]))
    reply["setName"] = view["set"]
    reply["setVersion"] = view["version"]
    writable = state.role == "PRIMARY"
    reply["isWritablePrimary" if command == "hello" else "ismaster"] = writable
    reply["secondary"] = state.role == "SECONDARY"
    if state.primary is not None and state.role != "STEPPING_DOWN":
        reply["primary"] = state.primary
    if me["arbiterOnly"]:
        reply["arbiterOnly"] = True
    elif me["priority"] == 0:
        reply["passive"] = True
    if me["hidden"]:
        reply["hidden"] = True
    if me["tags"]:
        reply["tags"] = dict(me["tags"])
    reply["me"] = state.me
    if writable:
        reply["electionId"] = election_id(view["term"])
    now = time.time()
    if not me["arbiterOnly"]:
        reply["lastWrite"] = last_write(now - view["lag"], view["term"])
    limits = view["limits"]
    for key in ("maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize"):
        reply[key] = limits[key]
    reply["localTime"] = bson_date(now)
    reply["logicalSessionTimeoutMinutes"] = limits["logicalSessionTimeoutMinutes"]
    reply["connectionId"] = connection_id
    reply["minWireVersion"] = limits["minWireVersion"]
    reply["maxWireVersion"] = limits["maxWireVersion"]
    reply["readOnly"] = False
    if request.get("helloOk") is True:
        reply["helloOk"] = True
    reply["ok"] = 1.0
    return reply


def _member_lists(members: list[Mapping[str, Any]]) -> dict[str, list[str]]:
    """hosts, passives (priority 0) and arbiters; hidden members are in none of them."""
    lists: dict[str, list[str]] = {"hosts": [], "passives": [], "arbiters": []}
    for member in members:
        if member["arbiterOnly"]:
            lists["arbiters"].append(member["host"])
        elif not member["hidden"]:
            lists["hosts" if member["priority"] > 0 else "passives"].append(member["host"])
    return {key: hosts for key, hosts in lists.items() if hosts or key == "hosts"}


def last_write(when: float, term: int) -> dict[str, Any]:
    """``lastWrite`` as of ``when``: the member has applied every write up to then."""
    op_time = {"ts": Timestamp(int(when), 1), "t": Int64(term)}
    date = bson_date(when)
    return {"opTime": op_time, "lastWriteDate": date, "majorityOpTime": op_time,
            "majorityWriteDate": date}


def bson_date(when: float) -> datetime.datetime:
    """``when`` (seconds since the epoch) to the millisecond, as BSON dates hold it."""
    return datetime.datetime.fromtimestamp(int(when * 1000) / 1000, datetime.UTC)


_STATE_CODES = {"PRIMARY": 1, "SECONDARY": 2, "ARBITER": 7, "DOWN": 8}


def status_document(state: State) -> dict[str, Any]:
    """``replSetGetStatus``: each member's state, as this member knows it."""
    members = []
    for config in state.view["members"]:
        member_state = config["state"]
        entry: dict[str, Any] = {
            "_id": config["_id"], "name": config["host"],
            "health": 0.0 if member_state == "DOWN" else 1.0,
            "state": _STATE_CODES[member_state],
            "stateStr": "(not reachable/healthy)" if member_state == "DOWN" else member_state}
        if config["host"] == state.me:
            entry["self"] = True
        members.append(entry)
    return {"set": state.view["set"], "date": bson_date(time.time()),
            "myState": _STATE_CODES.get(state.role, 2), "term": Int64(state.view["term"]),
            "members": members, "ok": 1.0}


def config_document(state: State) -> dict[str, Any]:
    """``replSetGetConfig``: the set's configuration."""
    members = [{"_id": m["_id"], "host": m["host"], "arbiterOnly": m["arbiterOnly"],
                "buildIndexes": True, "hidden": m["hidden"], "priority": m["priority"],
                "tags": dict(m["tags"]), "secondaryDelaySecs": Int64(0), "votes": 1}
               for m in state.view["members"]]
    config = {"_id": state.view["set"], "version": state.view["version"],
              "term": state.view["term"], "members": members, "protocolVersion": Int64(1)}
    return {"config": config, "ok": 1.0}


# -- errors --------------------------------------------------------------------------------


def error_document(error: Error, *, state: State | None = None,
                   process_id: ObjectId | None = None,
                   labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """A command error reply; a state change error carries the topologyVersion."""
    code, code_name, message = error
    reply: dict[str, Any] = {"ok": 0.0, "errmsg": message, "code": code,
                             "codeName": code_name}
    if state is not None and process_id is not None:
        reply["topologyVersion"] = {"processId": process_id, "counter": Int64(state.counter)}
    if labels:
        reply["errorLabels"] = list(labels)
    return reply


#: The errors that carry a topologyVersion (SDAM's state change errors), by code.
STATE_CHANGE_ERRORS = {
    91: "ShutdownInProgress", 189: "PrimarySteppedDown", 10058: "LegacyNotPrimary",
    10107: "NotWritablePrimary", 11600: "InterruptedAtShutdown",
    11602: "InterruptedDueToReplStateChange", 13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
}


def error_labels(command: Mapping[str, Any], name: bytes) -> tuple[str, ...]:
    """The labels mongod puts on a not-primary error (a retriable error) of ``command``.

    A retryable write (a ``txnNumber``, no ``autocommit``) and a transaction's commit or
    abort get RetryableWriteError; any other command in a transaction gets
    TransientTransactionError.
    """
    if "txnNumber" not in command:
        return ()
    if "autocommit" not in command or name in (b"commitTransaction", b"abortTransaction"):
        return ("RetryableWriteError",)
    return ("TransientTransactionError",)


def refusal(state: State, name: bytes, message: bytes, start: int, end: int) -> Error | None:
    """The error a member that is not primary answers the command ``name`` with, if any."""
    if name in WRITES:
        return NOT_WRITABLE_PRIMARY
    if name not in READS:
        return None
    if state.role == "ARBITER":
        return NOT_PRIMARY_OR_SECONDARY
    return None if secondary_ok(message, start, end) else NOT_PRIMARY_NO_SECONDARY_OK


def secondary_ok(message: bytes, start: int, end: int) -> bool:
    """Whether an OP_MSG's ``$readPreference`` lets it run on a secondary (not primary)."""
    if message.find(b"$readPreference\x00", start, end) < 0:
        return False
    preference = RawBSONDocument(message[start:end]).get("$readPreference")
    return isinstance(preference, Mapping) and preference.get("mode", "primary") != "primary"


def satisfiable(message: bytes, start: int, end: int, data_members: int) -> bytes:
    """The write with ``w: <n>`` up to ``data_members`` as ``w: "majority"``.

    The backend is a one-node set: it would refuse ``w: 2`` that the emulated set
    satisfies. Any other message comes back as it is.
    """
    command = RawBSONDocument(message[start:end])
    concern = command.get("writeConcern")
    w = concern.get("w") if isinstance(concern, Mapping) else None
    if not isinstance(w, int) or isinstance(w, bool) or not 1 < w <= data_members:
        return message
    assert isinstance(concern, Mapping)
    rewritten = {key: (dict(concern, w="majority") if key == "writeConcern" else value)
                 for key, value in command.items()}
    return with_body(message, start, end, rewritten)


def with_body(message: bytes, start: int, end: int, document: Mapping[str, Any]) -> bytes:
    """The OP_MSG ``message`` with ``document`` for its body (at ``message[start:end]``):
    the same header fields, flags and document sequences; no checksum."""
    body = bson.encode(document)
    end_of_sections = len(message) - (4 if message[16] & CHECKSUM_PRESENT else 0)
    rest = (INT32.pack(flags(message) & ~CHECKSUM_PRESENT) + message[20:start] + body
            + message[end:end_of_sections])
    _, request, response_to, _ = HEADER.unpack_from(message)
    return HEADER.pack(16 + len(rest), request, response_to, OP_MSG) + rest


# -- awaitable hello -----------------------------------------------------------------------


class CommandError(Exception):
    """A command refused with mongod's code (a malformed awaitable hello, a bad fail point)."""

    def __init__(self, code: int, code_name: str, message: str) -> None:
        super().__init__(message)
        self.error: Error = (code, code_name, message)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(value: object) -> float | None:
    """``value`` as a float if it is a BSON number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def awaitable(request: Mapping[str, Any]) -> tuple[ObjectId, int, float] | None:
    """The (processId, counter, seconds) an awaitable hello waits on; None for a plain one.

    Raises :class:`CommandError` with mongod's code for a malformed request.
    """
    has_version = "topologyVersion" in request
    has_wait = "maxAwaitTimeMS" in request
    if not has_version and not has_wait:
        return None
    if has_version != has_wait:
        raise CommandError(31368, "Location31368",
                         "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'"
                         if has_version else
                         "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'")
    process_id, counter = _topology_version(request["topologyVersion"])
    wait = number(request["maxAwaitTimeMS"])
    if wait is None:
        raise CommandError(14, "TypeMismatch", "maxAwaitTimeMS must be a number")
    if wait < 0:
        raise CommandError(31373, "Location31373", "maxAwaitTimeMS must be a non-negative integer")
    return process_id, counter, wait / 1000


def _topology_version(version: object) -> tuple[ObjectId, int]:
    if not isinstance(version, Mapping):
        raise CommandError(10065, "Location10065", "topologyVersion must be an object")
    fields = {"processId", "counter"}
    if missing := sorted(fields - set(version)):
        raise CommandError(40414, "Location40414", f"topologyVersion is missing {missing[0]!r}")
    if extra := sorted(set(version) - fields):
        raise CommandError(40415, "Location40415",
                         f"topologyVersion has an unknown field {extra[0]!r}")
    process_id, counter = version["processId"], version["counter"]
    if not isinstance(process_id, ObjectId) or not is_int(counter):
        raise CommandError(14, "TypeMismatch",
                         "topologyVersion needs an ObjectId processId and a long counter")
    if counter < 0:
        raise CommandError(31372, "Location31372", "topologyVersion counter cannot be negative")
    return process_id, int(counter)


def higher_counter() -> CommandError:
    """The error for a topologyVersion ahead of the member's own (same processId)."""
    return CommandError(31382, "Location31382", "Received a topology version with the same "
                      "process ID and a higher counter. This is not supported.")
