"""Client sessions and transactions.

A :class:`Session` carries a logical session id (``lsid``) and, for
transactions, a transaction number and a small state machine (the
Transactions spec's states). It decorates the commands run in it; the
client's :class:`~greenpool.client.operations.operations.Operations` do the I/O.
``with_transaction`` implements the spec's convenient API: retry the whole
transaction on ``TransientTransactionError``, and the commit on
``UnknownTransactionCommitResult``, for up to 120 seconds.

A session keeps the latest ``operationTime`` its replies carry. A causally
consistent session (the default, as PyMongo's) reads and writes after it: the
collection API's reads outside a transaction (find, aggregate, distinct,
count) and the write commands (insert, update, delete, findAndModify,
bulkWrite, create, createIndexes, drop, dropDatabase, dropIndexes) carry
``readConcern.afterClusterTime`` once the session has one (the Causal
Consistency spec), and so does a transaction's first command. A
snapshot session's commands (its writes too, which the server then
refuses) carry ``readConcern.level: snapshot``, then the
``atClusterTime`` its first read was answered at. A transaction runs with
the options :mod:`greenpool.client.operations.sessionopts` resolves: its read concern on
its first command, its write concern on its commit and abort, its
maxCommitTimeMS on its commit.

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
never imports :mod:`greenpool.client.api.client` nor :mod:`greenpool.client.api.cursor`,
not even lazily.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Mapping, MutableMapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from bson.timestamp import Timestamp
from pymongo.client_session import SessionOptions, TransactionOptions  # type: ignore[attr-defined]
from pymongo.errors import (
    ConnectionFailure,
    InvalidOperation,
    OperationFailure,
    PyMongoError,
)
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import _ServerMode
from pymongo.write_concern import WriteConcern

from greenpool.client.config import readpref
from greenpool.client.operations import concern
from greenpool.client.operations.sessionopts import (
    ClientDefaults,
    TransactionSettings,
    session_modes,
    transaction_settings,
)
from greenpool.client.operations.timeouts import Deadline, check_seconds, resolve

if TYPE_CHECKING:
    from greenpool.address import Address
    from greenpool.client.operations.operations import Operations, ServerSession
    from greenpool.pool.connection import Connection
    from greenpool.wire.link import Link

__all__ = ["Session", "TransactionState"]

R = TypeVar("R")

# The convenient API gives up retrying after this long (Transactions spec).
WITH_TRANSACTION_TIMEOUT = 120.0
# Code 50: a commit that exceeded maxTimeMS is not retried as "unknown".
_MAX_TIME_MS_EXPIRED = 50
# WriteConcernFailed: the write concern timed out, the commit may have happened.
_WRITE_CONCERN_FAILED = 64
# UnknownReplWriteConcern, UnsatisfiableWriteConcern: a write concern no retry satisfies.
_INVALID_WRITE_CONCERN = (79, 100)
# Retried commits use majority write concern so the retry cannot double-apply.
_RETRY_COMMIT_WRITE_CONCERN = {"w": "majority", "wtimeout": 10_000}
# The write commands that take readConcern.afterClusterTime in a causally
# consistent session (the Read and Write Concern spec's list).
_CAUSAL_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "bulkWrite",
                            "create", "createIndexes", "drop", "dropDatabase",
                            "dropIndexes"})
# A cursor's getMore and killCursors carry the read concern of the command that
# opened it, not one of their own.
_CURSOR_COMMANDS = frozenset({"getMore", "killCursors"})
# The client's options when a session is made without them (tests).
_SERVER_DEFAULTS = ClientDefaults(ReadConcern(), WriteConcern(), readpref.PRIMARY)


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
                 default_timeout: float | None = None, client: ClientDefaults | None = None,
                 causal_consistency: bool | None = None,
                 default_transaction_options: TransactionOptions | None = None,
                 snapshot: bool | None = False) -> None:
        causal, snapshot = session_modes(causal_consistency, default_transaction_options,
                                         snapshot)
        self._operations = operations
        self._client = _SERVER_DEFAULTS if client is None else client
        self._options = SessionOptions(causal_consistency=causal,
                                       default_transaction_options=default_transaction_options,
                                       snapshot=snapshot)
        self._causal = causal
        self._snapshot = snapshot
        #: The current (or last) transaction's options (None before the first).
        self._transaction: TransactionSettings | None = None
        #: The latest operationTime of a reply in this session.
        self._operation_time: Timestamp | None = None
        #: A snapshot session's time: the atClusterTime of its first read.
        self._snapshot_time: Timestamp | None = None
        #: defaultTimeoutMS in seconds (None: the client's timeoutMS applies).
        self.default_timeout = default_timeout
        # The with_transaction call's deadline, which every operation in the
        # session shares while it runs (the CSOT spec; read-only outside:
        # changing it mid-transaction would break the time limit).
        self._deadline: Deadline | None = None
        # The server session (lsid, last transaction number) from the client's pool,
        # which the implicit sessions share: given back when this session ends.
        self._server_session = operations.lend_server_session()
        #: Whether a command in this session failed without the server's answer (a
        #: network error, a kill): the server may still hold the session busy, so
        #: it is not lent again (the Sessions spec's dirty session).
        self.dirty = False
        self.state = TransactionState.NONE
        self.ended = False
        #: The connection a load-balanced transaction is pinned to.
        self.pinned: Connection[Link] | None = None
        #: The mongos a sharded transaction is pinned to.
        self.pinned_address: Address | None = None
        self._cluster_time: dict[str, Any] | None = None
        self._commit_attempts = 0

    @property
    def server_session(self) -> ServerSession:
        """The server session from the client's pool this session uses."""
        return self._server_session

    @property
    def lsid(self) -> dict[str, Any]:
        """The ``lsid`` document this session's commands carry."""
        return self._server_session.lsid

    @property
    def txn_number(self) -> int:
        """The number of the current (or last) transaction or retryable write."""
        return self._server_session.txn_number

    @txn_number.setter
    def txn_number(self, value: int) -> None:
        self._server_session.txn_number = value

    @property
    def operations(self) -> Operations:
        """The operations of the client that started this session."""
        return self._operations

    @property
    def session_id(self) -> dict[str, Any]:
        """The session's id, the ``lsid`` document its commands carry."""
        return self.lsid

    @property
    def options(self) -> SessionOptions:
        """The session's options, as PyMongo's
        :class:`~pymongo.client_session.SessionOptions`."""
        return self._options

    @property
    def has_ended(self) -> bool:
        """Whether :meth:`end_session` was called."""
        return self.ended

    @property
    def operation_time(self) -> Timestamp | None:
        """The latest operationTime a reply in this session carried (None before)."""
        return self._operation_time

    def advance_operation_time(self, operation_time: Timestamp) -> None:
        """Read after ``operation_time`` too (another session's, say), if it is later."""
        if not isinstance(operation_time, Timestamp):
            raise TypeError(f"operation_time must be a bson.timestamp.Timestamp, "
                            f"not {operation_time!r}")
        if self._operation_time is None or operation_time > self._operation_time:
            self._operation_time = operation_time

    @property
    def write_concern(self) -> dict[str, Any] | None:
        """The writeConcern document the transaction's commit and abort carry
        (None: the server's default), as the Transactions spec says."""
        return None if self._transaction is None else self._transaction.write_concern_field

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

    def start_transaction(self, read_concern: ReadConcern | None = None,
                          write_concern: WriteConcern | None = None,
                          read_preference: _ServerMode | None = None,
                          max_commit_time_ms: int | None = None) -> _TransactionContext:
        """Begin a transaction; the next command in this session starts it.
        Each option not given is the session's ``default_transaction_options``
        one, else the client's. As PyMongo's, it returns a context manager
        that commits at the end of its block, or aborts if the block raises:
        ``with session.start_transaction(): ...``."""
        self._check_not_ended()
        if self._snapshot:
            raise InvalidOperation("Transactions are not supported in snapshot sessions")
        if self.in_transaction:
            raise InvalidOperation("Transaction already in progress")
        settings = self._transaction_settings(read_concern, write_concern, read_preference,
                                              max_commit_time_ms)
        self._unpin()
        self._transaction = settings
        self.txn_number += 1
        self.state = TransactionState.STARTING
        self._commit_attempts = 0
        return _TransactionContext(self)

    @property
    def _max_commit_time_ms(self) -> int | None:
        return None if self._transaction is None else self._transaction.max_commit_time_ms

    def _transaction_settings(self, read_concern: object, write_concern: object,
                              read_preference: object,
                              max_commit_time_ms: object) -> TransactionSettings:
        return transaction_settings(read_concern, write_concern, read_preference,
                                    max_commit_time_ms,
                                    self._options.default_transaction_options, self._client)

    def transaction_read_preference(self) -> _ServerMode:
        """The read preference of an operation in the transaction: it must
        be primary (the Transactions spec), else InvalidOperation."""
        assert self._transaction is not None  # in a transaction
        preference = self._transaction.read_preference
        if preference.mode != readpref.PRIMARY.mode:
            raise InvalidOperation(f"read preference in a transaction must be primary, "
                                   f"not {preference.document!r}")
        return readpref.PRIMARY

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
        if self._snapshot and next(iter(command)) not in _CURSOR_COMMANDS:
            # Every command of a snapshot session says so, writes too, so that the
            # server refuses what a snapshot cannot do (the Snapshot Reads spec).
            self.add_read_concern(command)
        elif (self._causal and self._operation_time is not None and not self.in_transaction
                and next(iter(command)) in _CAUSAL_WRITES):
            # A causally consistent write waits for the session's last operation too
            # (the Causal Consistency spec since 2026-05): a read concern of
            # afterClusterTime alone, which these write commands accept.
            command["readConcern"] = {"afterClusterTime": self._operation_time}

    def sending(self, command: MutableMapping[str, Any]) -> None:
        """``command`` is about to go out: the transaction's first command
        carries ``startTransaction``. Done at the last moment, so that a
        command that never left (no connection, a kill in the wait) leaves
        the transaction still to be started."""
        if (self.state is TransactionState.STARTING
                and command.get("txnNumber") == self.txn_number):
            command["startTransaction"] = True
            assert self._transaction is not None  # STARTING
            read_concern = self._transaction.read_concern_field
            if read_concern is not None:
                command["readConcern"] = read_concern
            if self._causal and self._operation_time is not None:
                command["readConcern"] = {**(read_concern or {}),
                                          "afterClusterTime": self._operation_time}
            self.state = TransactionState.IN_PROGRESS

    def not_started(self) -> None:
        """The transaction's first command was refused as overloaded, so the
        server did not start it: the next command (its retry) starts it."""
        if self.state is TransactionState.IN_PROGRESS:
            self.state = TransactionState.STARTING

    def add_read_concern(self, command: MutableMapping[str, Any]) -> None:
        """A read outside a transaction (find, aggregate, distinct, count):
        in a causally consistent session, ``afterClusterTime`` once the
        session has an operationTime; in a snapshot session the snapshot
        level and, after the first read, its ``atClusterTime``. The
        collection's own level is kept (its document is copied, not changed)."""
        if self._snapshot:
            fields: dict[str, Any] = {"level": "snapshot"}
            if self._snapshot_time is not None:
                fields["atClusterTime"] = self._snapshot_time
        elif self._causal and self._operation_time is not None:
            fields = {"afterClusterTime": self._operation_time}
        else:
            return
        command["readConcern"] = {**command.get("readConcern", {}), **fields}

    def received(self, reply: Mapping[str, Any]) -> None:
        """A reply (or a refusal's) came in this session: keep its
        operationTime, and a snapshot session's first read time."""
        operation_time = reply.get("operationTime")
        if isinstance(operation_time, Timestamp) and (
                self._operation_time is None or operation_time > self._operation_time):
            self._operation_time = operation_time
        if self._snapshot and self._snapshot_time is None:
            cursor = reply.get("cursor")
            at = (cursor.get("atClusterTime") if isinstance(cursor, Mapping)
                  else reply.get("atClusterTime"))
            if isinstance(at, Timestamp):
                self._snapshot_time = at

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
        deadline = self._finishing_deadline(timeout)
        command: dict[str, Any] = {"commitTransaction": 1}
        if self._commit_attempts:
            command["writeConcern"] = self._retry_write_concern()
        elif self.write_concern is not None:
            command["writeConcern"] = dict(self.write_concern)
        if self._max_commit_time_ms is not None and deadline is None:
            # Under timeoutMS, maxTimeMS is what is left of it (the CSOT spec).
            command["maxTimeMS"] = self._max_commit_time_ms
        self._commit_attempts += 1
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
                command: dict[str, Any] = {"abortTransaction": 1}
                if self.write_concern is not None:
                    command["writeConcern"] = dict(self.write_concern)
                with contextlib.suppress(PyMongoError):
                    self._run_finishing(command, deadline)
        finally:
            self._unpin()  # even after a kill mid-abort: the link is broken then

    def forget_pin_after(self, error: PyMongoError) -> None:
        """Unpin after a transient error: the transaction will be retried,
        possibly elsewhere (the sharded transactions "when to unpin" rule)."""
        if (error.has_error_label("TransientTransactionError")
                or error.has_error_label("UnknownTransactionCommitResult")):
            self._unpin()

    def with_transaction(self, callback: Callable[[Session], R],
                         read_concern: ReadConcern | None = None,
                         write_concern: WriteConcern | None = None,
                         read_preference: _ServerMode | None = None,
                         max_commit_time_ms: int | None = None, *,
                         timeout: float | None = None) -> R:
        """Run ``callback(session)`` in a transaction and commit, retrying as
        the Transactions spec's convenient API does; return its result. The
        transaction's options are as for :meth:`start_transaction`.

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

        self._transaction_settings(read_concern, write_concern, read_preference,
                                   max_commit_time_ms)  # checked before anything runs
        self._deadline = deadline
        try:
            while True:
                self.start_transaction(read_concern, write_concern, read_preference,
                                       max_commit_time_ms)
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
        retryable error (as retryable writes are, whatever retryWrites says: the
        Transactions spec); the retry may use another connection, so the pin is
        dropped first."""
        command["lsid"] = self.lsid
        command["txnNumber"] = self.txn_number
        command["autocommit"] = False
        _drop_wtimeout(command, deadline)
        try:
            self._operations.run_in_session(self, "admin", command, deadline)
        except PyMongoError as error:
            if not _is_retryable(error):
                raise
            if deadline is not None and deadline.bounded and deadline.expired():
                raise  # no time left to retry in
            self._unpin()
            command.pop("maxTimeMS", None)  # the retry computes its own
            if "commitTransaction" in command:
                command["writeConcern"] = self._retry_write_concern()
                if self._max_commit_time_ms is not None and deadline is None:
                    command["maxTimeMS"] = self._max_commit_time_ms
                _drop_wtimeout(command, deadline)
            self._operations.run_in_session(self, "admin", command, deadline)

    def _retry_write_concern(self) -> dict[str, Any]:
        """A retried commit's write concern: majority, so that the retry cannot
        apply twice, keeping the rest of the transaction's (wtimeout 10 s if
        it has none), as the Transactions spec says."""
        return {**_RETRY_COMMIT_WRITE_CONCERN, **(self.write_concern or {}), "w": "majority"}

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


class _TransactionContext:
    """What :meth:`Session.start_transaction` returns: a block that commits
    the transaction when it ends, or aborts it when it raises (if the block
    did neither itself)."""

    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        self._session = session

    def __enter__(self) -> _TransactionContext:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not self._session.in_transaction:
            return
        if error is None:
            self._session.commit_transaction()
        else:
            self._session.abort_transaction()


def _drop_wtimeout(command: dict[str, Any], deadline: Deadline | None) -> None:
    """Under timeoutMS a commit or abort carries no wtimeout: timeoutMS
    replaces it (the CSOT spec), as PyMongo drops it."""
    if deadline is not None and "writeConcern" in command:
        field = concern.timed(command.pop("writeConcern"))
        if field is not None:
            command["writeConcern"] = field


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
    """Whether a commit's refusal leaves its outcome unknown (the Transactions spec's
    UnknownTransactionCommitResult): a retryable-write error, MaxTimeMSExpired, or a
    write concern that failed or timed out, but not one that can never be satisfied
    (UnsatisfiableWriteConcern, UnknownReplWriteConcern), which a retry fails again."""
    if error.has_error_label("RetryableWriteError") or _is_max_time_expired(error):
        return True
    details: Mapping[str, Any] = error.details or {}
    wce = details.get("writeConcernError")
    if isinstance(wce, Mapping):
        return wce.get("code") not in _INVALID_WRITE_CONCERN
    return error.code == _WRITE_CONCERN_FAILED
