"""The Retryable Reads and Writes specs' rules as a table: no server, no pool."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import errors

from greenpool import PoolClearedError, WaitQueueTimeoutError
from greenpool.client.operations import retries
from greenpool.wire import replies

ADDRESS = ("db.test", 27017)


def failure(code: int, labels: list[str] | None = None) -> errors.OperationFailure:
    details: dict[str, Any] = {"ok": 0, "code": code, "errmsg": "boom"}
    if labels:
        details["errorLabels"] = labels
    return errors.OperationFailure("boom", code, details)


@pytest.mark.parametrize(("command", "read"), [
    ({"find": "c", "filter": {}}, True),
    ({"aggregate": "c", "pipeline": [{"$match": {}}], "cursor": {}}, True),
    ({"aggregate": "c", "pipeline": [{"$out": "d"}], "cursor": {}}, False),
    ({"aggregate": "c", "pipeline": [{"$merge": {"into": "d"}}], "cursor": {}}, False),
    ({"distinct": "c", "key": "x"}, True),
    ({"count": "c"}, True),
    ({"listCollections": 1}, True),
    ({"listIndexes": "c"}, True),
    ({"listDatabases": 1}, True),
    # not in the specs' lists: a generic command, a getMore, mapReduce, a write
    ({"ping": 1}, False),
    ({"getMore": 5, "collection": "c"}, False),
    ({"mapReduce": "c", "map": "", "reduce": "", "out": {"inline": 1}}, False),
    ({"insert": "c", "documents": [{}]}, False),
])
def test_retryable_reads_by_name(command: dict[str, Any], read: bool) -> None:
    assert retries.is_retryable_read(command) is read


@pytest.mark.parametrize(("command", "write"), [
    ({"insert": "c", "documents": [{}, {}]}, True),
    ({"update": "c", "updates": [{"q": {}, "u": {"$set": {"x": 1}}}]}, True),
    ({"update": "c", "updates": [{"q": {}, "u": {}, "multi": False}]}, True),
    ({"update": "c", "updates": [{"q": {}, "u": {}}, {"q": {}, "u": {}, "multi": True}]},
     False),
    ({"delete": "c", "deletes": [{"q": {}, "limit": 1}]}, True),
    ({"delete": "c", "deletes": [{"q": {}, "limit": 1}, {"q": {}, "limit": 0}]}, False),
    ({"findAndModify": "c", "query": {}, "remove": True}, True),
    ({"findandmodify": "c", "query": {}, "remove": True}, True),
    ({"insert": "c", "documents": [{}], "writeConcern": {"w": 0}}, False),
    ({"insert": "c", "documents": [{}], "writeConcern": {"w": 1}}, True),
    ({"insert": "c", "documents": [{}], "writeConcern": {"w": "majority"}}, True),
    ({"aggregate": "c", "pipeline": [{"$out": "d"}], "cursor": {}}, False),
    ({"createIndexes": "c", "indexes": []}, False),
    ({"find": "c"}, False),
    # malformed statements are the server's to refuse, not a crash here
    ({"update": "c", "updates": "nonsense"}, True),
    ({"delete": "c", "deletes": [5]}, True),
])
def test_retryable_writes_by_name(command: dict[str, Any], write: bool) -> None:
    assert retries.is_retryable_write(command) is write


@pytest.mark.parametrize(("error", "retryable"), [
    (errors.AutoReconnect("connection reset"), True),
    (errors.NetworkTimeout("timed out"), True),
    (PoolClearedError.cleared(ADDRESS, None), True),
    (PoolClearedError.interrupted(ADDRESS), True),
    (errors.NotPrimaryError("not primary", {"code": 10107}), True),
    (errors.NotPrimaryError("node is recovering", {"errmsg": "node is recovering"}), True),
    (failure(91), True),
    (failure(11600), True),
    (failure(134), True),
    (failure(262), True),
    (failure(9001), True),
    (failure(2), False),
    (failure(50), False),  # MaxTimeMSExpired: the time is up, not a transient state
    (failure(11000), False),
    (errors.ServerSelectionTimeoutError("no server"), False),
    (WaitQueueTimeoutError(ADDRESS, "no connection"), False),
    (errors.WriteConcernError("shutting down", 91, {"code": 91}), True),
])
def test_retryable_read_errors(error: errors.PyMongoError, retryable: bool) -> None:
    assert retries.is_retryable_read_error(error) is retryable


@pytest.mark.parametrize(("error", "wire_version", "labelled"), [
    # greenpool labels what only the driver can know
    (errors.AutoReconnect("connection reset"), 27, True),
    (errors.NetworkTimeout("timed out"), None, True),
    (PoolClearedError.cleared(ADDRESS, None), None, True),
    # a 4.4+ server labels its own errors: greenpool adds none
    (failure(91), 27, False),
    (errors.NotPrimaryError("not primary", {"code": 10107}), 9, False),
    # before 4.4, the listed codes get the label from greenpool
    (failure(91), 8, True),
    (errors.NotPrimaryError("not primary", {"code": 10107}), 8, True),
    (errors.WriteConcernError("shutting down", 91, {"code": 91}), 8, True),
    (failure(134), 8, False),  # a read-only code
    (failure(2), 8, False),
    (failure(91), None, False),  # the connection's version unknown: not "before 4.4"
    (errors.ServerSelectionTimeoutError("no server"), 27, False),
    (WaitQueueTimeoutError(ADDRESS, "no connection"), 27, False),
])
def test_retryable_write_labels(error: errors.PyMongoError, wire_version: int | None,
                                labelled: bool) -> None:
    retries.label_write_error(error, wire_version)
    assert error.has_error_label("RetryableWriteError") is labelled


def test_a_label_is_added_once() -> None:
    error = failure(91, ["RetryableWriteError"])
    retries.label_write_error(error, 8)
    assert error._error_labels == {"RetryableWriteError"}


@pytest.mark.parametrize(("error", "no_attempt"), [
    (errors.ServerSelectionTimeoutError("no server"), True),
    (WaitQueueTimeoutError(ADDRESS, "no connection"), True),
    (PoolClearedError.cleared(ADDRESS, None), True),
    (failure(64, ["NoWritesPerformed", "RetryableWriteError"]), True),
    (failure(64, ["RetryableWriteError"]), False),
    (errors.AutoReconnect("connection reset"), False),
])
def test_errors_that_say_no_attempt_was_made(error: errors.PyMongoError,
                                             no_attempt: bool) -> None:
    assert retries.no_attempt_made(error) is no_attempt


def test_error_codes() -> None:
    assert replies.error_code(failure(91)) == 91
    assert replies.error_code(errors.NotPrimaryError("not master", {})) == 10107
    assert replies.error_code(errors.NotPrimaryError("x", {"code": 13436})) == 13436
    assert replies.error_code(errors.OperationFailure("no code")) is None
    assert replies.error_code(errors.OperationFailure("odd", None, {"code": "91"})) is None


# -- Client Backpressure: overload errors ------------------------------------------------------

OVERLOAD = ["SystemOverloadedError", "RetryableError"]


@pytest.mark.parametrize(("labels", "overloaded", "retryable"), [
    (OVERLOAD, True, True),
    (["SystemOverloadedError"], True, False),
    (["RetryableError"], False, False),
    (None, False, False),
])
def test_overload_errors_by_label(labels: list[str] | None, overloaded: bool,
                                  retryable: bool) -> None:
    error = failure(462, labels)
    assert retries.is_overloaded(error) is overloaded
    assert retries.is_retryable_overload(error) is retryable


@pytest.mark.parametrize(("command", "reads", "writes", "both"), [
    ({"find": "c"}, True, False, True),  # a read: retryReads alone decides
    ({"getMore": 5, "collection": "c"}, True, False, True),
    ({"insert": "c", "documents": [{}]}, False, True, True),  # a write: retryWrites
    ({"update": "c", "updates": [{"q": {}, "u": {}, "multi": True}]}, False, True, True),
    ({"aggregate": "c", "pipeline": [{"$out": "d"}]}, False, False, True),  # both
    ({"ping": 1}, False, False, True),  # any other command: both
    ({"createIndexes": "c", "indexes": []}, False, False, True),
])
def test_which_commands_the_overload_policy_retries(
        command: dict[str, Any], reads: bool, writes: bool, both: bool) -> None:
    allowed = retries.overload_retry_allowed
    assert allowed(command, retry_reads=True, retry_writes=False) is reads
    assert allowed(command, retry_reads=False, retry_writes=True) is writes
    assert allowed(command, retry_reads=True, retry_writes=True) is both
    assert allowed(command, retry_reads=False, retry_writes=False) is False


def test_backoff_doubles_from_its_base_up_to_ten_seconds() -> None:
    error = failure(462, OVERLOAD)
    assert [retries.backoff(n, error, 1.0) for n in (1, 2, 3)] == [0.2, 0.4, 0.8]
    assert retries.backoff(1, error, 0.5) == 0.1
    assert retries.backoff(1, error, 0.0) == 0.0
    assert retries.backoff(20, error, 1.0) == 10.0
    given = errors.OperationFailure("busy", 462, {"code": 462, "baseBackoffMS": 50,
                                                 "errorLabels": OVERLOAD})
    assert [retries.backoff(n, given, 1.0) for n in (1, 2)] == [0.1, 0.2]
    for bad in (0, -5, "50", True):
        odd = errors.OperationFailure("busy", 462, {"code": 462, "baseBackoffMS": bad})
        assert retries.backoff(1, odd, 1.0) == 0.2, bad
