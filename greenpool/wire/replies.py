"""What a command's reply means: success, or the error PyMongo would raise.

What lives here: :func:`check_reply`, which returns a successful reply and
raises PyMongo's own errors for a refused command (``OperationFailure`` and
its subclasses by code, ``NotPrimaryError``, ``WriteConcernError``), so
``except OperationFailure`` and ``has_error_label()`` work as with PyMongo;
:func:`check_reply_fields`, which refuses error fields of types no server
sends; :func:`error_code`, the server's code of a refused command, whichever
error carries it; and the SDAM spec's state-change codes (:func:`is_state_change_error`).

What must not: bytes. Replies arrive here already decoded
(:mod:`greenpool.wire.messages`), and nothing here touches a socket or a
connection. It imports nothing of greenpool but :mod:`greenpool.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

from pymongo.errors import (
    CursorNotFound,
    DuplicateKeyError,
    ExecutionTimeout,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
    WTimeoutError,
)
from pymongo.helpers_shared import _NOT_PRIMARY_CODES, _SHUTDOWN_CODES

from greenpool.errors import ProtocolError

__all__ = [
    "NOT_PRIMARY_CODES",
    "SHUTDOWN_CODES",
    "check_reply",
    "check_reply_fields",
    "error_code",
    "is_state_change_error",
]

#: The SDAM spec's "not writable primary" and "node is recovering" codes.
NOT_PRIMARY_CODES: frozenset[int] = _NOT_PRIMARY_CODES
#: The SDAM spec's "node is shutting down" codes (a subset of NOT_PRIMARY_CODES).
SHUTDOWN_CODES: frozenset[int] = _SHUTDOWN_CODES

# Codes PyMongo raises a more specific OperationFailure for; keeping its
# classes lets `except DuplicateKeyError` and `error.timeout` work unchanged.
_ERROR_CLASSES: Mapping[int, type[OperationFailure]] = {
    11000: DuplicateKeyError,
    11001: DuplicateKeyError,
    12582: DuplicateKeyError,
    50: ExecutionTimeout,
    43: CursorNotFound,
}


_Reply = TypeVar("_Reply", bound=Mapping[str, Any])


def is_state_change_error(code: int | None, message: str) -> bool:
    """Whether a command error is the SDAM spec's "not writable primary" or
    "node is recovering": by its code when it has one, else by its message.
    """
    if code is not None:
        return code in NOT_PRIMARY_CODES
    return "not master" in message or "node is recovering" in message


def error_code(error: PyMongoError) -> int | None:
    """The server's code of a refused command (a state change raised as
    NotPrimaryError without one counts as NotWritablePrimary)."""
    code = getattr(error, "code", None)
    details = getattr(error, "details", None)
    if code is None and isinstance(details, Mapping):
        code = details.get("code")
    if code is None and isinstance(error, NotPrimaryError):
        return 10107
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def check_reply(reply: _Reply, *, raise_write_concern_error: bool = True) -> _Reply:
    """Return ``reply`` if the command succeeded; raise PyMongo's error if not.

    ``ok: 0`` raises :class:`~pymongo.errors.NotPrimaryError` for the SDAM
    spec's state-change errors (see :func:`is_state_change_error`; its
    ``details`` is the reply, so ``details["code"]`` gives the code), else
    :class:`~pymongo.errors.OperationFailure` (or PyMongo's subclass for the
    code: ``DuplicateKeyError``, ``ExecutionTimeout``, ``CursorNotFound``)
    with ``code`` and ``details``. Either way ``has_error_label()`` sees the
    reply's ``errorLabels``.

    A ``writeConcernError`` in a successful reply raises
    :class:`~pymongo.errors.WriteConcernError` (``WTimeoutError`` for a
    wtimeout) whose ``details`` is that error with the reply's
    ``errorLabels``: the write happened but not as durably as asked, and
    returning the reply would let that go unnoticed, as PyMongo does for
    commands. Callers that aggregate per-write results themselves (bulk
    writes, which need ``n`` and ``writeErrors`` too) pass
    ``raise_write_concern_error=False`` and inspect the reply.
    ``writeErrors`` are per-document results and are never raised here.
    """
    if "ok" not in reply:
        message = str(reply.get("$err", "the server's reply has no 'ok' field"))
        raise OperationFailure(message, reply.get("code"), reply)
    if not reply["ok"]:
        _raise_command_error(reply)
    if raise_write_concern_error and reply.get("writeConcernError"):
        _raise_write_concern_error(reply)
    return reply


def check_reply_fields(reply: Mapping[str, Any]) -> None:
    """Refuse a reply whose error fields have types no server sends, raising
    :class:`ProtocolError` naming the field: ``errorLabels`` (a list of
    strings), ``code`` (an integer), ``writeConcernError`` (a document, with
    an integer ``code`` and a document ``errInfo``). Such a reply would
    otherwise make :func:`check_reply` raise a ``TypeError`` instead of
    PyMongo's error."""
    labels = reply.get("errorLabels")
    if labels is not None and not (
            isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
        _malformed("errorLabels", labels, "a list of strings")
    _check_code("code", reply.get("code"))
    concern = reply.get("writeConcernError")
    if concern is not None:
        if not isinstance(concern, Mapping):
            _malformed("writeConcernError", concern, "a document")
        _check_code("writeConcernError.code", concern.get("code"))
        info = concern.get("errInfo")
        if info is not None and not isinstance(info, Mapping):
            _malformed("writeConcernError.errInfo", info, "a document")


def _check_code(name: str, code: object) -> None:
    if code is None:
        return
    if isinstance(code, bool) or not isinstance(code, int | float) or (
            isinstance(code, float) and not code.is_integer()):
        _malformed(name, code, "an integer")


def _malformed(name: str, value: object, wanted: str) -> NoReturn:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise ProtocolError(f"malformed reply: {name} must be {wanted}, not {shown}")


def _raise_command_error(reply: Mapping[str, Any]) -> NoReturn:
    message = str(reply.get("errmsg") or "command failed")
    code = reply.get("code")
    if is_state_change_error(code, message):
        raise NotPrimaryError(message, dict(reply))
    error_class = OperationFailure if code is None else _ERROR_CLASSES.get(code, OperationFailure)
    raise error_class(message, code, reply)


def _raise_write_concern_error(reply: Mapping[str, Any]) -> NoReturn:
    error = dict(reply["writeConcernError"])
    # Servers put the labels (RetryableWriteError...) at the top level.
    if "errorLabels" in reply:
        error["errorLabels"] = reply["errorLabels"]
    message = str(error.get("errmsg") or "write concern error")
    code = error.get("code")
    timed_out = code == 50 or bool(error.get("errInfo", {}).get("wtimeout"))
    raise (WTimeoutError if timed_out else WriteConcernError)(message, code, error)
