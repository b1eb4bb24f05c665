"""Client sessions and transactions.

A :class:`Session` carries a logical session id (``lsid``) and, for
transactions, a transaction number and a small state machine (the
Transactions spec's states). It decorates the commands run in it; the
client's :class:`~greenpool.client.operations.Operations` do the I/O.
``with_transaction`` implements the spec's convenient API: retry the whole
transaction on ``TransientTransactionError``, and the commit on
``UnknownTransactionCommitResult``, for up to 120 seconds.

In load-balanced mode a transaction keeps one connection from its first
command to its commit or abort (``pinned``), so that every command reaches
the same service behind the balancer; on a sharded cluster it keeps the
mongos its first command went to (``pinned_address``), until a transient
error or the next transaction unpins it (Transactions spec).

A session keeps the highest ``$clusterTime`` its commands have seen
(:attr:`Session.cluster_time`); each command carries the later of it and the
client's (Sessions spec).

Rules. A session reaches the rest of the client only through the public
methods of the Operations it is given (run its commit or abort, unpin, say it
ended); it holds no connection of its own but the pinned one. This module
never imports :mod:`greenpool.client.client` nor :mod:`greenpool.client.cursor`,
not even lazily.
"""

from __future__ import annotations

import contextlib
import enum
import time
import uuid
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, TypeVar

from bson.binary import UUID_SUBTYPE, Binary
from bson.timestamp import Timestamp
from pymongo.errors import ConnectionFailure, InvalidOperation, OperationFailure, PyMongoError

from greenpool.client.timeouts import Deadline, check_seconds, resolve

if TYPE_CHECKING:
    from greenpool.address import Address
    from greenpool.client.operations import Operations
    from greenpool.pool.connection import Connection
    from greenpool.wire.link import Link

__all__ = ["Session", "TransactionState"]

R = TypeVar("R")

# The convenient API gives up retrying after this long (Transactions spec).
WITH_TRANSACTION_TIMEOUT = 120.0
# Code 50: a commit that exceeded maxTimeMS is not retried as "unknown".
_MAX_TIME_MS_EXPIRED = 50
# Retried commits use majority write concern so the retry cannot double-apply.
_RETRY_COMMIT_WRITE_CONCERN = {"w": "majority", "wtimeout": 10_000}


class TransactionState(enum.Enum):
    """Where a session is in the Transactions spec's state machine."""

    NONE = "none"
    STARTING = "starting"
    IN_PROGRESS = "in progress"
    COMMITTED = "committed"
    COMMITTED_EMPTY = "committed empty"
    ABORTED = "aborted"


class Session:
    """A client session; use it as a context manager to end it.

    >>> with client.start_session() as session:  # doctest: +SKIP
    ...     session.with_transaction(lambda s: client.command("db", {...}, session=s))
    """

    def __init__(self, operations: Operations, *,
                 default_timeout: float | None = None) -> None:
        self._operations = operations
        #: defaultTimeoutMS in seconds (None: the client's timeoutMS applies).
        self.default_timeout = default_timeout
        # The with_transaction call's deadline, which every operation in the
        # session shares while it runs (the CSOT spec; read-only outside:
        # changing it mid-transaction would break the time limit).
        self._deadline: Deadline | None = None
        self.lsid: dict[str, Any] = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
        self.txn_number = 0
        self.state = TransactionState.NONE
        self.ended = False
        #: The connection a load-balanced transaction is pinned to.
        self.pinned: Connection[Link] | None = None
        #: The mongos a sharded transaction is pinned to.
        self.pinned_address: Address | None = None
        self._cluster_time: dict[str, Any] | None = None
        self._commit_attempts = 0

    @property
    def operations(self) -> Operations:
        """The operations of the client that started this session."""
        return self._operations

    @property
    def deadline(self) -> Deadline | None:
        """The deadline every operation in this session shares while
        :meth:`with_transaction` runs with a time limit; None otherwise."""
        return self._deadline

    @property
    def cluster_time(self) -> dict[str, Any] | None:
        """The highest ``$clusterTime`` seen in this session (None before any)."""
        return self._cluster_time

    def advance_cluster_time(self, cluster_time: Mapping[str, Any]) -> None:
        """Advance :attr:`cluster_time` to ``cluster_time`` (a ``$clusterTime``
        document, as a reply carries it) if it is later; an earlier one
        changes nothing (PyMongo's ``ClientSession.advance_cluster_time``)."""
        if not isinstance(cluster_time, Mapping) or not isinstance(
                cluster_time.get("clusterTime"), Timestamp):
            raise TypeError(f"cluster_time must be a $clusterTime document (with a "
                            f"Timestamp clusterTime), not {cluster_time!r}")
        current = self._cluster_time
        if current is None or cluster_time["clusterTime"] > current["clusterTime"]:
            self._cluster_time = dict(cluster_time)

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is starting or in progress."""
        return self.state in (TransactionState.STARTING, TransactionState.IN_PROGRESS)

    # -- the state machine ------------------------------------------------------

    def start_transaction(self) -> None:
        """Begin a transaction; the next command in this session starts it."""
        self._check_not_ended()
        if self.in_transaction:
            raise InvalidOperation("Transaction already in progress")
        self._unpin()
        self.txn_number += 1
        self.state = TransactionState.STARTING
        self._commit_attempts = 0

    def decorate(self, command: MutableMapping[str, Any]) -> None:
        """Add what this session and its transaction require to ``command``,
        before a connection is chosen for it (see :meth:`sending`)."""
        self._check_not_ended()
        command["lsid"] = self.lsid
        if self.in_transaction:
            command["txnNumber"] = self.txn_number
            command["autocommit"] = False
        elif self.state in (TransactionState.COMMITTED, TransactionState.COMMITTED_EMPTY,
                            TransactionState.ABORTED):
            # An operation after a finished transaction starts afresh (spec).
            self.state = TransactionState.NONE
            self._unpin()

    def sending(self, command: MutableMapping[str, Any]) -> None:
        """``command`` is about to go out: the transaction's first command
        carries ``startTransaction``. Done at the last moment, so that a
        command that never left (no connection, a kill in the wait) leaves
        the transaction still to be started."""
        if (self.state is TransactionState.STARTING
                and command.get("txnNumber") == self.txn_number):
            command["startTransaction"] = True
            self.state = TransactionState.IN_PROGRESS

    def next_txn_number(self) -> int:
        """A transaction number not used before in this session, for a
        retryable write outside a transaction (the Retryable Writes spec)."""
        self._check_not_ended()
        self.txn_number += 1
        return self.txn_number

    def commit_transaction(self, *, timeout: float | None = None) -> None:
        """Commit; a commit of a transaction that ran nothing sends nothing.

        ``timeout`` (seconds) overrides the session's default_timeout and the
        client's timeoutMS for the commit."""
        state = self.state
        if state is TransactionState.NONE:
            raise InvalidOperation("No transaction started")
        if state is TransactionState.ABORTED:
            raise InvalidOperation("Cannot call commitTransaction after calling abortTransaction")
        if state in (TransactionState.STARTING, TransactionState.COMMITTED_EMPTY):
            self.state = TransactionState.COMMITTED_EMPTY
            return
        # Committing again (COMMITTED) is allowed: it retries the commit.
        command: dict[str, Any] = {"commitTransaction": 1}
        if self._commit_attempts:
            command["writeConcern"] = _RETRY_COMMIT_WRITE_CONCERN
        self._commit_attempts += 1
        deadline = self._finishing_deadline(timeout)
        try:
            self._run_finishing(command, deadline)
        except PyMongoError as error:
            if isinstance(error, ConnectionFailure) or (
                    isinstance(error, OperationFailure) and _is_unknown_commit_result(error)):
                _label(error, "UnknownTransactionCommitResult")
            self.forget_pin_after(error)
            raise
        finally:
            # A committed transaction stays pinned so the commit can be retried.
            self.state = TransactionState.COMMITTED

    def abort_transaction(self, *, timeout: float | None = None) -> None:
        """Abort; errors from the server are ignored, as the spec says.
        ``timeout`` is as for :meth:`commit_transaction`."""
        state = self.state
        if state is TransactionState.NONE:
            raise InvalidOperation("No transaction started")
        if state in (TransactionState.COMMITTED, TransactionState.COMMITTED_EMPTY):
            raise InvalidOperation("Cannot call abortTransaction after calling commitTransaction")
        if state is TransactionState.ABORTED:
            raise InvalidOperation("Cannot call abortTransaction twice")
        deadline = self._finishing_deadline(timeout)
        self._check_pin_idle()
        self.state = TransactionState.ABORTED
        try:
            if state is TransactionState.IN_PROGRESS:
                with contextlib.suppress(PyMongoError):
                    self._run_finishing({"abortTransaction": 1}, deadline)
        finally:
            self._unpin()  # even after a kill mid-abort: the link is broken then

    def forget_pin_after(self, error: PyMongoError) -> None:
        """Unpin after a transient error: the transaction will be retried,
        possibly elsewhere (the sharded transactions "when to unpin" rule)."""
        if (error.has_error_label("TransientTransactionError")
                or error.has_error_label("UnknownTransactionCommitResult")):
            self._unpin()

    def with_transaction(self, callback: Callable[[Session], R], *,
                         timeout: float | None = None) -> R:
        """Run ``callback(session)`` in a transaction and commit, retrying as
        the Transactions spec's convenient API does; return its result.

        With a time limit (``timeout`` in seconds, else the session's
        default_timeout, else the client's timeoutMS) the whole call, retries
        included, is bounded by it: every operation the callback runs in this
        session shares the one deadline (giving one of them its own
        ``timeout`` raises InvalidOperation), and retrying stops when it
        runs out, with an error whose ``timeout`` is true (its ``__cause__``
        the last transient error). An abort after the callback failed gets
        the full limit afresh. Operations the callback runs outside the
        session are not bounded by it. Without a limit, retrying stops after
        120 seconds."""
        call = check_seconds("timeout", timeout)
        deadline = resolve(call if call is not None else self.default_timeout,
                           self._operations.timeout)
        if self._deadline is not None:
            raise InvalidOperation("with_transaction is already running in this session")
        started = time.monotonic()

        def time_left() -> bool:
            if deadline is not None:
                return not deadline.expired()
            return time.monotonic() - started < WITH_TRANSACTION_TIMEOUT

        self._deadline = deadline
        try:
            while True:
                self.start_transaction()
                try:
                    result = callback(self)
                except BaseException as error:
                    if self.in_transaction:
                        self._abort_afresh(deadline)
                    if (isinstance(error, PyMongoError)
                            and error.has_error_label("TransientTransactionError")):
                        if time_left():
                            continue
                        _raise_timed_out(deadline, error)
                    raise
                if not self.in_transaction:
                    return result  # the callback committed or aborted itself
                while True:
                    try:
                        self.commit_transaction()
                        return result
                    except PyMongoError as error:
                        if (error.has_error_label("UnknownTransactionCommitResult")
                                and not _is_max_time_expired(error)):
                            if time_left():
                                continue
                            _raise_timed_out(deadline, error)
                        if error.has_error_label("TransientTransactionError"):
                            if time_left():
                                break  # retry the whole transaction
                            _raise_timed_out(deadline, error)
                        raise
        finally:
            self._deadline = None

    def _abort_afresh(self, deadline: Deadline | None) -> None:
        """Abort inside with_transaction with the full limit again (the
        CSOT spec: the abort after a failed callback refreshes timeoutMS)."""
        if deadline is None:
            self.abort_transaction()
            return
        self._deadline = Deadline.after(deadline.limit)
        try:
            self.abort_transaction()
        finally:
            self._deadline = deadline

    def _finishing_deadline(self, timeout: float | None) -> Deadline | None:
        call = check_seconds("timeout", timeout)
        if self._deadline is not None:
            if call is not None:
                raise InvalidOperation(
                    f"timeout={timeout!r} cannot be given inside with_transaction, whose "
                    f"time limit bounds the whole transaction")
            return self._deadline
        return resolve(call if call is not None else self.default_timeout,
                       self._operations.timeout)

    def end(self) -> None:
        """End the session: abort an open transaction, return the lsid."""
        if self.ended:
            return
        if self.in_transaction:
            self.abort_transaction()  # unpins, even if killed
        else:
            self._check_pin_idle()
            self._unpin()
        self.ended = True
        self._operations.session_ended(self)

    #: PyMongo's name for :meth:`end`.
    end_session = end

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()

    # -- helpers ----------------------------------------------------------------

    def _run_finishing(self, command: dict[str, Any], deadline: Deadline | None) -> None:
        """Run commitTransaction or abortTransaction, retried once after a
        retryable error (as retryable writes are, unless retryWrites=false);
        the retry may use another connection, so the pin is dropped first."""
        command["lsid"] = self.lsid
        command["txnNumber"] = self.txn_number
        command["autocommit"] = False
        try:
            self._operations.run_in_session(self, "admin", command, deadline)
        except PyMongoError as error:
            if not (self._operations.retry_writes and _is_retryable(error)):
                raise
            if deadline is not None and deadline.bounded and deadline.expired():
                raise  # no time left to retry in
            self._unpin()
            if "commitTransaction" in command:
                command["writeConcern"] = _RETRY_COMMIT_WRITE_CONCERN
            command.pop("maxTimeMS", None)  # the retry computes its own
            self._operations.run_in_session(self, "admin", command, deadline)

    def _unpin(self) -> None:
        self.pinned_address = None
        pinned, self.pinned = self.pinned, None
        if pinned is not None:
            self._operations.unpin(pinned)

    def _check_pin_idle(self) -> None:
        """Refuse to finish a transaction whose pinned connection is carrying
        another greenlet's command: unpinning would hand it back in use."""
        pinned = self.pinned
        if pinned is not None and pinned.transport is not None and pinned.transport.busy:
            raise InvalidOperation(
                "the transaction's connection is in use by another greenlet; a session "
                "serves one greenlet at a time")

    def _check_not_ended(self) -> None:
        if self.ended:
            raise InvalidOperation("Cannot use ended session")


def _raise_timed_out(deadline: Deadline | None, error: PyMongoError) -> None:
    """Give up retrying: ``error`` itself if it is a timeout already or
    there was no time limit, else a timeout error caused by it."""
    if deadline is None or error.timeout:
        raise error
    raise deadline.exceeded(f"with_transaction gave up retrying; last error: {error}") from error


def _label(error: PyMongoError, label: str) -> None:
    if not error.has_error_label(label):
        error._add_error_label(label)


def _is_retryable(error: PyMongoError) -> bool:
    # Labelled by the server, or by Operations.run_in_session (network
    # errors, a cleared pool): the Retryable Writes spec's test.
    return error.has_error_label("RetryableWriteError")


def _is_max_time_expired(error: PyMongoError) -> bool:
    details: Mapping[str, Any] = getattr(error, "details", None) or {}
    wce = details.get("writeConcernError") or {}
    return bool(getattr(error, "code", None) == _MAX_TIME_MS_EXPIRED
                or wce.get("code") == _MAX_TIME_MS_EXPIRED)


def _is_unknown_commit_result(error: OperationFailure) -> bool:
    # Write concern failures and retryable-write errors leave the outcome unknown.
    if error.has_error_label("RetryableWriteError"):
        return True
    details: Mapping[str, Any] = error.details or {}
    return "writeConcernError" in details or error.code in (64, 79, 100)
