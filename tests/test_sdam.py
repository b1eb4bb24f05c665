"""SDAM's error rules as a table: no server, no pool."""

from __future__ import annotations

from typing import Any

import pytest
from bson.objectid import ObjectId
from pymongo import errors

from greenpool import PoolClearedError, WaitQueueTimeoutError
from greenpool.client.topology.sdam import (
    IGNORE,
    ErrorContext,
    Phase,
    Verdict,
    check_failed,
    is_stale_description,
    judge,
)

CONNECT, AUTH, OP = Phase.CONNECT, Phase.AUTHENTICATE, Phase.OPERATION

ADDRESS = ("db.test", 27017)
UNKNOWN_AND_CLEAR = Verdict(mark_unknown=True, clear=True)


def failure(code: int, message: str = "boom") -> errors.OperationFailure:
    return errors.OperationFailure(message, code, {"ok": 0, "code": code, "errmsg": message})


def not_primary(code: int | None, message: str = "not primary") -> errors.NotPrimaryError:
    details = {"ok": 0, "errmsg": message} | ({"code": code} if code is not None else {})
    return errors.NotPrimaryError(message, details)


@pytest.mark.parametrize(("error", "phase", "verdict"), [
    # network errors
    (errors.AutoReconnect("connection reset"), OP, UNKNOWN_AND_CLEAR),
    (errors.AutoReconnect("connection refused"), CONNECT, UNKNOWN_AND_CLEAR),
    (errors.NetworkTimeout("timed out"), OP, IGNORE),
    (errors.NetworkTimeout("timed out"), CONNECT, UNKNOWN_AND_CLEAR),
    # state changes: keep the pool unless shutting down
    (not_primary(10107), OP, Verdict(mark_unknown=True, request_check=True)),
    (not_primary(13436, "node is recovering"), OP,
     Verdict(mark_unknown=True, request_check=True)),
    (not_primary(None, "not master"), OP, Verdict(mark_unknown=True, request_check=True)),
    (not_primary(91, "shutting down"), OP,
     Verdict(mark_unknown=True, clear=True, request_check=True)),
    (failure(11600, "interrupted at shutdown"), OP,
     Verdict(mark_unknown=True, clear=True, request_check=True)),
    (failure(91, "shutting down"), CONNECT,
     Verdict(mark_unknown=True, clear=True, request_check=True)),
    # other command errors: only during the handshake
    (failure(18, "Authentication failed."), AUTH, UNKNOWN_AND_CLEAR),
    (errors.NetworkTimeout("timed out"), AUTH, UNKNOWN_AND_CLEAR),
    (failure(18, "Authentication failed."), OP, IGNORE),
    (failure(2, "bad value"), OP, IGNORE),
    (errors.WriteError("duplicate", 11000, {}), OP, IGNORE),
    # write concern errors carrying a state change code
    (errors.WriteConcernError("not primary", 10107, {"code": 10107}), OP,
     Verdict(mark_unknown=True, request_check=True)),
    # the pool's own errors say nothing about the server
    (PoolClearedError.cleared(ADDRESS, None), OP, IGNORE),
    (PoolClearedError.interrupted(ADDRESS), OP, IGNORE),
    (WaitQueueTimeoutError(ADDRESS, "timed out"), OP, IGNORE),
    (ValueError("a bug"), OP, IGNORE),
])
def test_application_errors(error: BaseException, phase: Phase, verdict: Verdict) -> None:
    assert judge(ErrorContext(error, phase)) == verdict


def test_stale_generation_is_ignored() -> None:
    context = ErrorContext(errors.AutoReconnect("reset"), OP, stale=True)
    assert judge(context) == IGNORE


def test_old_servers_clear_on_any_state_change() -> None:
    context = ErrorContext(not_primary(10107), OP, max_wire_version=7)
    assert judge(context) == Verdict(mark_unknown=True, clear=True, request_check=True)


@pytest.mark.parametrize(("error", "phase", "verdict"), [
    (errors.AutoReconnect("refused"), CONNECT, IGNORE),  # before or during the hello
    (failure(91, "shutting down"), CONNECT, IGNORE),
    (failure(18, "Authentication failed."), AUTH, Verdict(clear=True)),  # that service only
    (errors.AutoReconnect("reset"), OP, Verdict(clear=True)),
    (not_primary(91, "shutting down"), OP, Verdict(clear=True, request_check=True)),
    (errors.NetworkTimeout("timed out"), OP, IGNORE),
])
def test_load_balanced_mode_never_marks_unknown(error: BaseException, phase: Phase,
                                                verdict: Verdict) -> None:
    context = ErrorContext(error, phase, load_balanced=True)
    assert judge(context) == verdict


def test_monitor_check_failures() -> None:
    assert check_failed(errors.AutoReconnect("refused")) == UNKNOWN_AND_CLEAR
    assert check_failed(errors.NetworkTimeout("timed out")) == Verdict(
        mark_unknown=True, clear=True, interrupt=True)


PROCESS = ObjectId()


def versioned(counter: int, process: ObjectId = PROCESS) -> dict[str, Any]:
    return {"processId": process, "counter": counter}


def not_primary_at(version: object) -> errors.NotPrimaryError:
    return errors.NotPrimaryError("not primary", {"ok": 0, "code": 10107,
                                                  "errmsg": "not primary",
                                                  "topologyVersion": version})


@pytest.mark.parametrize(("known", "error_version", "ignored"), [
    (versioned(3), versioned(3), True),   # the change the description already has
    (versioned(4), versioned(3), True),   # an older one
    (versioned(3), versioned(4), False),  # a newer one
    (versioned(3), versioned(3, ObjectId()), False),  # another process: a restart
    (None, versioned(3), False),          # nothing known to compare with
    (versioned(3), None, False),
    (versioned(3), {"processId": PROCESS, "counter": "3"}, False),  # malformed: not stale
    (versioned(3), {"counter": 3}, False),
    ({"processId": PROCESS, "counter": True}, versioned(3), False),
])
def test_errors_are_stale_by_topology_version(known: Any, error_version: Any,
                                               ignored: bool) -> None:
    context = ErrorContext(not_primary_at(error_version), OP, topology_version=known)
    expected = IGNORE if ignored else Verdict(mark_unknown=True, request_check=True)
    assert judge(context) == expected


def test_a_stale_network_error_version_does_not_matter() -> None:
    # Network errors carry no topologyVersion: never stale by it.
    context = ErrorContext(errors.AutoReconnect("reset"), OP, topology_version=versioned(9))
    assert judge(context) == UNKNOWN_AND_CLEAR


def test_the_connection_wire_version_decides_whether_a_state_change_clears() -> None:
    # A 4.2+ connection keeps its pool on "not primary" whatever the
    # description says (an Unknown description has no wire version).
    modern = ErrorContext(not_primary(10107), OP, max_wire_version=27)
    assert judge(modern) == Verdict(mark_unknown=True, request_check=True)
    unknown = ErrorContext(not_primary(10107), OP, max_wire_version=None)
    assert judge(unknown) == Verdict(mark_unknown=True, request_check=True)


@pytest.mark.parametrize(("current", "new", "stale"), [
    (versioned(3), versioned(2), True),
    (versioned(3), versioned(3), False),
    (versioned(3), versioned(4), False),
    (versioned(3), versioned(1, ObjectId()), False),
    (None, versioned(1), False),
    (versioned(3), None, False),
    (versioned(3), {"processId": PROCESS, "counter": 2.0}, False),
])
def test_check_replies_are_stale_by_topology_version(current: Any, new: Any,
                                                      stale: bool) -> None:
    assert is_stale_description(current, new) is stale
