"""What an error means for a server and its pool: SDAM's rules, as data.

Rules of this module: pure functions of an error and its context, no I/O,
no pool, no greenlets. The caller applies the verdict (mark the server
Unknown, clear the pool, request an immediate check).

Application errors (from an operation, or from establishing a pooled
connection) follow the "Error handling" section of the Server Discovery and
Monitoring spec, which the CMAP spec defers to, with the Load Balancer spec's
changes:

* an error on a connection of an older generation is ignored (a clear has
  already dealt with it);
* in load-balanced mode the server is never marked Unknown, errors before or
  during the hello are ignored, and a clear applies to the connection's
  serviceId only;
* a network timeout after the handshake is ignored (the connection is
  closed, the server may be fine);
* "not primary" and "node is recovering" (state change) errors mark the
  server Unknown and request a check; they clear the pool only when the node
  is shutting down or is older than 4.2 (wire version < 8), whose state
  changes closed connections anyway;
* any other command error during the handshake (authentication, or a hello
  refused) marks Unknown and clears;
* other network errors mark Unknown and clear;
* errors the pool itself raised (PoolClearedError, WaitQueueTimeoutError)
  say nothing new about the server and are ignored.

Monitor check failures (``check_failed``) always mark Unknown and clear,
interrupting in-use connections when the check timed out (CMAP's
interruptInUseConnections).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from pymongo.errors import (
    ConnectionFailure,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    WriteError,
)
from pymongo.errors import WaitQueueTimeoutError as _PyMongoWaitQueueTimeoutError

from greenpool.errors import PoolClearedError
from greenpool.wire.replies import SHUTDOWN_CODES, is_state_change_error

__all__ = ["IGNORE", "ErrorContext", "Phase", "Verdict", "check_failed", "judge"]

# Servers older than this close every connection on a state change.
_KEEPS_CONNECTIONS_ON_STATE_CHANGE = 8
# NotPrimaryError raised from a message, without a code.
_DEFAULT_NOT_PRIMARY_CODE = 10107


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
    #: The server's maxWireVersion, if known.
    max_wire_version: int | None = None


def judge(context: ErrorContext) -> Verdict:
    """SDAM's verdict on an application error."""
    error, phase = context.error, context.phase
    if context.stale:
        return IGNORE
    if context.load_balanced and phase is Phase.CONNECT:
        return IGNORE
    if isinstance(error, (PoolClearedError, _PyMongoWaitQueueTimeoutError, WriteError)):
        return IGNORE
    if isinstance(error, NetworkTimeout) and phase is Phase.OPERATION:
        return IGNORE
    if isinstance(error, OperationFailure | NotPrimaryError):
        return _judge_command_error(context, error)
    if isinstance(error, ConnectionFailure):
        return _unknown_and_clear(context)
    return IGNORE


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
    if context.phase is not Phase.OPERATION:  # the hello or authentication was refused
        return _unknown_and_clear(context)
    return IGNORE


def _unknown_and_clear(context: ErrorContext) -> Verdict:
    return Verdict(mark_unknown=not context.load_balanced, clear=True)


def _code_and_message(error: OperationFailure | NotPrimaryError) -> tuple[int | None, str]:
    details = getattr(error, "details", None) or {}
    code = getattr(error, "code", None)
    if code is None:
        code = details.get("code")
    if code is None and isinstance(error, NotPrimaryError):
        code = _DEFAULT_NOT_PRIMARY_CODE
    message = details.get("errmsg") or str(error)
    return code, message
