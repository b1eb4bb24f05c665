"""What an error means for a server and its pool: SDAM's rules, as data.

Rules of this module: pure functions of an error and its context, no I/O,
no pool, no greenlets. The caller applies the verdict (mark the server
Unknown, clear the pool, request an immediate check).

Application errors (from an operation, or from establishing a pooled
connection) follow the "Error handling" section of the Server Discovery and
Monitoring spec, which the CMAP spec defers to, with the Load Balancer spec's
changes:

* an error on a connection of an older generation is ignored (a clear has
  already dealt with it), and so is a command error whose ``topologyVersion``
  is not newer than the server's (the server description already reflects
  that state change: concurrent operations failing with the same "not
  primary" change nothing after the first);
* in load-balanced mode the server is never marked Unknown, errors before or
  during the hello are ignored, and a clear applies to the connection's
  serviceId only;
* a network timeout after the handshake is ignored (the connection is
  closed, the server may be fine);
* "not primary" and "node is recovering" (state change) errors mark the
  server Unknown and request a check; they clear the pool only when the node
  is shutting down or is older than 4.2 (wire version < 8), whose state
  changes closed connections anyway. The wire version is that of the
  connection that got the error, never the server description's (which is
  0 once an earlier error has marked the server Unknown);
* an error labelled ``SystemOverloadedError`` (the Client Backpressure spec:
  a network error of a new connection's hello, where a server shedding load
  drops connections, or a server's overload error) is ignored;
* any other command error during the handshake (authentication, or a hello
  refused) marks Unknown and clears;
* other network errors mark Unknown and clear;
* errors the pool itself raised (PoolClearedError, WaitQueueTimeoutError)
  say nothing new about the server and are ignored.

Monitor check failures (``check_failed``) always mark Unknown and clear,
interrupting in-use connections when the check timed out (CMAP's
interruptInUseConnections). A check whose reply carries an older
``topologyVersion`` than the server description's is stale and ignored
(``is_stale_description``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard

from pymongo.errors import (
    ConnectionFailure,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    WriteError,
)
from pymongo.errors import WaitQueueTimeoutError as _PyMongoWaitQueueTimeoutError

from greenpool.errors import PoolClearedError
from greenpool.wire.connector import is_overloaded
from greenpool.wire.replies import SHUTDOWN_CODES, error_code, is_state_change_error

__all__ = ["IGNORE", "ErrorContext", "Phase", "Verdict", "check_failed", "is_stale_description",
           "judge"]

# Servers older than this close every connection on a state change.
_KEEPS_CONNECTIONS_ON_STATE_CHANGE = 8


class Verdict(NamedTuple):
    """What to do about an error."""

    mark_unknown: bool = False
    clear: bool = False
    interrupt: bool = False
    request_check: bool = False


IGNORE = Verdict()


class Phase(enum.Enum):
    """Where in a connection's life an error happened."""

    CONNECT = "connect"  # the socket, TLS, or the hello
    AUTHENTICATE = "authenticate"  # after the hello, before the connection is ready
    OPERATION = "operation"  # an application operation on an established connection


@dataclass(frozen=True)
class ErrorContext:
    """An application error and where it happened."""

    error: BaseException
    phase: Phase
    #: Whether the connection belongs to an older generation than its pool's.
    stale: bool = False
    load_balanced: bool = False
    #: The maxWireVersion of the connection that got the error, if its
    #: handshake told it.
    max_wire_version: int | None = None
    #: The server description's topologyVersion, if it has one.
    topology_version: Mapping[str, Any] | None = None


def judge(context: ErrorContext) -> Verdict:
    """SDAM's verdict on an application error."""
    error, phase = context.error, context.phase
    if context.stale or _is_stale_error(context):
        return IGNORE
    if context.load_balanced and phase is Phase.CONNECT:
        return IGNORE
    if isinstance(error, (PoolClearedError, _PyMongoWaitQueueTimeoutError, WriteError)):
        return IGNORE
    if isinstance(error, NetworkTimeout) and phase is Phase.OPERATION:
        return IGNORE
    if isinstance(error, OperationFailure | NotPrimaryError):
        return _judge_command_error(context, error)
    if isinstance(error, ConnectionFailure) and not is_overloaded(error):
        return _unknown_and_clear(context)
    return IGNORE


def is_stale_description(current: Mapping[str, Any] | None,
                         new: Mapping[str, Any] | None) -> bool:
    """Whether a check's reply is older than what the server description
    already says: both topologyVersions from the same server process, the
    new counter lower (SDAM ignores such a reply)."""
    counters = _counters(current, new)
    return counters is not None and counters[0] > counters[1]


def check_failed(error: BaseException) -> Verdict:
    """The verdict on a failed monitor check: Unknown, cleared, and in-use
    connections interrupted if the check timed out."""
    return Verdict(mark_unknown=True, clear=True, interrupt=isinstance(error, NetworkTimeout))


def _judge_command_error(
    context: ErrorContext, error: OperationFailure | NotPrimaryError
) -> Verdict:
    code, message = _code_and_message(error)
    if is_state_change_error(code, message):
        old_server = (context.max_wire_version is not None
                      and context.max_wire_version < _KEEPS_CONNECTIONS_ON_STATE_CHANGE)
        return Verdict(
            mark_unknown=not context.load_balanced,
            clear=code in SHUTDOWN_CODES or old_server,
            request_check=True,
        )
    if context.phase is not Phase.OPERATION and not is_overloaded(error):
        return _unknown_and_clear(context)  # the hello or authentication was refused
    return IGNORE


def _is_stale_error(context: ErrorContext) -> bool:
    """SDAM: a command error whose topologyVersion is not newer than the
    server description's says nothing new."""
    details = getattr(context.error, "details", None)
    if not isinstance(details, Mapping):
        return False
    counters = _counters(context.topology_version, details.get("topologyVersion"))
    return counters is not None and counters[0] >= counters[1]


def _counters(current: object, other: object) -> tuple[int, int] | None:
    """The counters of two topologyVersions, if they can be compared: both
    well formed and from the same server process (a restarted server counts
    afresh). Anything a server sends can be wrong: a malformed one compares
    as unknown (never stale) rather than raising."""
    if not (isinstance(current, Mapping) and isinstance(other, Mapping)):
        return None
    first, second = current.get("counter"), other.get("counter")
    if not (_is_int(first) and _is_int(second)):
        return None
    if "processId" not in current or current["processId"] != other.get("processId"):
        return None
    return first, second


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _unknown_and_clear(context: ErrorContext) -> Verdict:
    return Verdict(mark_unknown=not context.load_balanced, clear=True)


def _code_and_message(error: OperationFailure | NotPrimaryError) -> tuple[int | None, str]:
    details = getattr(error, "details", None)
    message = details.get("errmsg") if isinstance(details, Mapping) else None
    return error_code(error), message or str(error)
