"""Which operations are retried, after which errors: the Retryable Reads and
Retryable Writes specs' rules, as pure functions.

Rules of this module: pure functions of a command document, an error and what
is known of the server; no I/O, no pool, no sessions, no greenlets.
:class:`~greenpool.client.operations.operations.Operations` runs the attempts and applies
these answers.

greenpool's Client is a command runner, so it classifies a command by its name,
as the specs list the operations they retry:

* **retryable reads**: ``find``, ``aggregate`` without ``$out`` or ``$merge``,
  ``distinct``, ``count``, ``listCollections``, ``listIndexes``,
  ``listDatabases`` (unless retryReads=false);
* **retryable writes**: ``insert``, ``update`` without a ``multi: true``
  statement, ``delete`` without a ``limit: 0`` statement, ``findAndModify``,
  ``bulkWrite`` (the client bulk write) without a ``multi: true`` operation,
  each acknowledged (no ``w: 0``), on a server that supports them (sessions,
  and a primary, mongos or load balancer: not a standalone); they carry the
  session's ``lsid`` and a new ``txnNumber`` (unless retryWrites=false);
* nothing else: ``getMore`` (the cursor may have moved), ``mapReduce``,
  ``aggregate`` with a write stage, multi-document writes, commands in a
  transaction (its commit and abort are the session's own retries);
* ``retry=True`` on a call retries any command once after a retryable error
  (the caller vouches that running it twice is harmless), still with a
  transaction ID if it is a retryable write; ``retry=False`` never retries.

A read is retried after a *retryable error*: a network error, a
:class:`~greenpool.PoolClearedError`, or one of the codes in
:data:`RETRYABLE_CODES`. A write is retried after an error labelled
``RetryableWriteError``: the server labels its own errors (4.4 and later);
greenpool labels network errors, PoolClearedError and, from servers older
than 4.4, the listed codes (:func:`label_write_error`).

The Client Backpressure spec adds *retryable overload errors*, labelled both
``SystemOverloadedError`` and ``RetryableError`` (a server shedding load):
any command is retried after one (:func:`overload_retry_allowed`: a read if
retryReads, a write if retryWrites, any other command if both), a getMore
included, after a backoff (:func:`backoff`); once an overload error is seen, an
operation is retried at most maxAdaptiveRetries times in all, under timeoutMS too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.errors import (
    ConnectionFailure,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
)

from greenpool.errors import PoolClearedError
from greenpool.wire.replies import error_code

__all__ = [
    "NO_WRITES_PERFORMED",
    "RETRYABLE_CODES",
    "RETRYABLE_WRITE_ERROR",
    "WRITE_COMMANDS",
    "backoff",
    "has_write_stage",
    "is_network_error",
    "is_overloaded",
    "is_retryable_overload",
    "is_retryable_read",
    "is_retryable_read_error",
    "is_retryable_write",
    "label_write_error",
    "no_attempt_made",
    "overload_retry_allowed",
]

#: The Retryable Reads spec's retryable codes (the Retryable Writes spec's
#: list, and ReadConcernMajorityNotAvailableYet).
RETRYABLE_CODES: frozenset[int] = frozenset({
    262,    # ExceededTimeLimit
    11600,  # InterruptedAtShutdown
    11602,  # InterruptedDueToReplStateChange
    10107,  # NotWritablePrimary
    13435,  # NotPrimaryNoSecondaryOk
    13436,  # NotPrimaryOrSecondary
    189,    # PrimarySteppedDown
    134,    # ReadConcernMajorityNotAvailableYet
    91,     # ShutdownInProgress
    7,      # HostNotFound
    6,      # HostUnreachable
    89,     # NetworkTimeout
    9001,   # SocketException
})
# The codes greenpool labels RetryableWriteError itself, from servers before 4.4.
_WRITE_LABEL_CODES = RETRYABLE_CODES - {134}
# Servers from 4.4 (wire version 9) label their retryable errors themselves.
_LABELS_ITS_OWN_ERRORS = 9

_READ_COMMANDS = frozenset({"find", "aggregate", "distinct", "count", "listCollections",
                            "listIndexes", "listDatabases"})
#: The commands a retryable write can be (if :func:`is_retryable_write` agrees).
WRITE_COMMANDS: frozenset[str] = frozenset({"insert", "update", "delete", "findAndModify",
                                            "findandmodify", "bulkWrite"})

RETRYABLE_WRITE_ERROR = "RetryableWriteError"
NO_WRITES_PERFORMED = "NoWritesPerformed"
# The Client Backpressure spec's labels, backoff (seconds) and MAX_RETRIES.
_OVERLOADED = "SystemOverloadedError"
_RETRYABLE = "RetryableError"
_BASE_BACKOFF = 0.1
_MAX_BACKOFF = 10.0
# Reads for the overload policy: the retryable reads and a cursor's getMore.
_OVERLOAD_READS = _READ_COMMANDS | {"getMore"}


def is_retryable_read(command: Mapping[str, Any]) -> bool:
    """Whether the specs retry ``command`` as a read (by its name)."""
    name = next(iter(command))
    return name in _READ_COMMANDS and not (name == "aggregate" and has_write_stage(command))


def is_retryable_write(command: Mapping[str, Any]) -> bool:
    """Whether ``command`` can be a retryable write: one of the write commands
    that supports it, touching one document per statement, acknowledged."""
    name = next(iter(command))
    if name not in WRITE_COMMANDS or _unacknowledged(command):
        return False
    if name == "update":
        return not any(_field(statement, "multi") is True
                       for statement in _statements(command, "updates"))
    if name == "delete":
        return not any(_field(statement, "limit") == 0
                       for statement in _statements(command, "deletes"))
    if name == "bulkWrite":
        return not any(_field(operation, "multi") is True
                       for operation in _statements(command, "ops"))
    return True


def has_write_stage(command: Mapping[str, Any]) -> bool:
    """Whether ``command`` is an ``aggregate`` whose pipeline writes
    (``$out``, ``$merge``)."""
    pipeline = command.get("pipeline") if next(iter(command)) == "aggregate" else None
    return isinstance(pipeline, list) and any(
        isinstance(stage, Mapping) and ("$out" in stage or "$merge" in stage)
        for stage in pipeline)


def is_network_error(error: BaseException) -> bool:
    """A network error (a socket's failure or timeout), as opposed to the
    ConnectionFailure subclasses PyMongo also uses for a state change
    (NotPrimaryError), an empty selection or wait, or a cleared pool."""
    return isinstance(error, ConnectionFailure) and not isinstance(
        error, NotPrimaryError | ServerSelectionTimeoutError | WaitQueueTimeoutError
        | PoolClearedError)


def is_retryable_read_error(error: PyMongoError) -> bool:
    """The Retryable Reads spec's retryable error: a network error, a
    PoolClearedError, or a server error with one of :data:`RETRYABLE_CODES`."""
    if isinstance(error, PoolClearedError) or is_network_error(error):
        return True
    return (isinstance(error, OperationFailure | NotPrimaryError)
            and error_code(error) in RETRYABLE_CODES)


def label_write_error(error: PyMongoError, max_wire_version: int | None) -> None:
    """Add the RetryableWriteError label where the Retryable Writes spec says
    the driver must: to a network error or a PoolClearedError, and to an
    error with one of the listed codes (top level or write concern error)
    from a server older than 4.4 (``max_wire_version``: the connection's).
    Never to another error from a server that labels its own."""
    if error.has_error_label(RETRYABLE_WRITE_ERROR):
        return
    driver_labels = isinstance(error, PoolClearedError) or is_network_error(error)
    old_server = max_wire_version is not None and max_wire_version < _LABELS_ITS_OWN_ERRORS
    if driver_labels or (old_server and isinstance(error, OperationFailure | NotPrimaryError)
                         and error_code(error) in _WRITE_LABEL_CODES):
        error._add_error_label(RETRYABLE_WRITE_ERROR)


def is_overloaded(error: BaseException) -> bool:
    """Whether ``error`` says the server is overloaded (SystemOverloadedError)."""
    return isinstance(error, PyMongoError) and error.has_error_label(_OVERLOADED)


def is_retryable_overload(error: BaseException) -> bool:
    """A retryable overload error: labelled SystemOverloadedError and RetryableError."""
    return is_overloaded(error) and isinstance(error, PyMongoError) and (
        error.has_error_label(_RETRYABLE))


def overload_retry_allowed(command: Mapping[str, Any], *, retry_reads: bool,
                           retry_writes: bool) -> bool:
    """Whether the overload policy may retry ``command`` (by its name): a read
    if retryReads, a write if retryWrites, any other command only if both."""
    name = next(iter(command))
    if name in _OVERLOAD_READS and not has_write_stage(command):
        return retry_reads
    if name in WRITE_COMMANDS:
        return retry_writes
    return retry_reads and retry_writes


def backoff(attempt: int, error: PyMongoError, jitter: float) -> float:
    """Seconds to wait before retry number ``attempt`` (from 1) after an
    overload ``error``: ``jitter`` (from [0, 1)) times the base backoff
    (100 ms, or the error's positive ``baseBackoffMS``) doubled per attempt,
    at most 10 s."""
    base = _BASE_BACKOFF
    details = getattr(error, "details", None)
    given = details.get("baseBackoffMS") if isinstance(details, Mapping) else None
    if isinstance(given, int | float) and not isinstance(given, bool) and given > 0:
        base = given / 1000
    return jitter * min(_MAX_BACKOFF, base * float(2 ** attempt))


def no_attempt_made(error: PyMongoError) -> bool:
    """Whether ``error`` says the command never reached the server, or the
    server did nothing (the error to report is then an earlier one)."""
    return (isinstance(error, ServerSelectionTimeoutError | WaitQueueTimeoutError
                       | PoolClearedError)
            or error.has_error_label(NO_WRITES_PERFORMED))


def _unacknowledged(command: Mapping[str, Any]) -> bool:
    concern = command.get("writeConcern")
    return isinstance(concern, Mapping) and concern.get("w") == 0


def _statements(command: Mapping[str, Any], field: str) -> list[Any]:
    statements = command.get(field)
    return statements if isinstance(statements, list) else []


def _field(statement: Any, name: str) -> Any:
    return statement.get(name) if isinstance(statement, Mapping) else None
