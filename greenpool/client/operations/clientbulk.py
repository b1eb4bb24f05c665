"""The client bulk write: writes across namespaces in the server's ``bulkWrite``
command (MongoDB 8.0), for :meth:`greenpool.Client.bulk_write`.

A call is a list of PyMongo's operation classes, each with its ``namespace=``
(:class:`~pymongo.operations.InsertOne`, :class:`~pymongo.operations.UpdateOne`,
:class:`~pymongo.operations.UpdateMany`, :class:`~pymongo.operations.ReplaceOne`,
:class:`~pymongo.operations.DeleteOne`, :class:`~pymongo.operations.DeleteMany`,
which add themselves to a :class:`Builder`). It runs as the CRUD spec's Bulk
Write section says:

* **commands**: ``bulkWrite`` on ``admin``, its ``ops`` and ``nsInfo`` as two
  OP_MSG document sequences (command events show them as arrays), with
  ``errorsOnly`` (not verbose_results), ``ordered``, and the
  bypassDocumentValidation, comment, let and writeConcern given (no
  writeConcern inside a transaction);
* **batches**: every operation is encoded once, before anything is sent (one
  that cannot fit a command alone raises
  :class:`~pymongo.errors.DocumentTooLarge` then), and the list is cut into
  commands of at most maxWriteBatchSize operations whose ``ops`` and
  ``nsInfo`` (only the namespaces that batch uses) fit in
  maxMessageSizeBytes less 1000 bytes and the command's own fields;
* **retries**: each batch is a retryable write (a new txnNumber, one retry
  after an error labelled RetryableWriteError) unless it holds a ``multi``
  update or delete, through the client's write path
  (:meth:`~greenpool.client.operations.operations.Operations.run_command`),
  as a collection's batches are;
* **results**: each reply's cursor is read to its end (getMore on the server
  that answered, in the same session; killCursors if a getMore fails); the
  counts are summed, each result recorded by its index in ``models`` when
  verbose, each write error with its index and ``op``, each write concern
  error kept, into PyMongo's result document, returned as
  :class:`~pymongo.results.ClientBulkWriteResult` or raised as
  :class:`~pymongo.errors.ClientBulkWriteException`: at the first write error
  if ordered, else at the end; at once, its ``error`` set, for a top-level
  error (a refused command, a network error), the batches after it not sent.

Unacknowledged (w=0; unordered, as the spec requires): every batch goes
on one connection with moreToCome and ``writeConcern: {w: 0}``, outside any
session; a document over maxBsonObjectSize is refused first, since the
server's error for it would be lost.

Rules. Like :mod:`greenpool.client.operations.bulk`, this module knows the wire
only through :class:`~greenpool.wire.messages.Outgoing`, and sends through
the client's :class:`~greenpool.client.operations.operations.Operations`,
holding a connection only while a results cursor needs the one that opened it
(load-balanced mode).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import bson
from bson.codec_options import CodecOptions
from bson.int64 import Int64
from bson.raw_bson import RawBSONDocument
from pymongo.errors import (
    ClientBulkWriteException,
    ConfigurationError,
    DocumentTooLarge,
    InvalidOperation,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
    WriteConcernError,
)
from pymongo.results import ClientBulkWriteResult, DeleteResult, InsertOneResult, UpdateResult

from greenpool.client.config import readpref
from greenpool.client.config.codecs import write_reply_options
from greenpool.client.operations import bulk, concern
from greenpool.client.operations.operations import Operations, ServerSession
from greenpool.client.operations.timeouts import Deadline
from greenpool.pool.connection import Connection, Purpose
from greenpool.wire.messages import Outgoing, message_size_limit

if TYPE_CHECKING:
    from greenpool.wire.link import Link

__all__ = ["Builder", "execute"]

#: The room the spec leaves in each message for the fields every command
#: carries (lsid, txnNumber, $clusterTime, apiVersion...).
MESSAGE_OVERHEAD = 1000
#: MongoDB 8.0's wire version, the first with bulkWrite.
BULK_WRITE_WIRE_VERSION = 25
# An encoded operation starts with its kind ("insert", "update", "delete": six
# letters each) holding its namespace's index in nsInfo, an int32 at this
# offset (document length 4, type byte 1, key 7): a batch patches it there.
_INDEX_AT = 12
_INT32 = struct.Struct("<i")
_RESULTS = "$cmd.bulkWrite"
# Errors after which an implicit session may be lent again: the server
# answered, or nothing was sent.
_SESSION_INTACT = (OperationFailure, NotPrimaryError, ServerSelectionTimeoutError,
                   WaitQueueTimeoutError)


class _Op:
    """One write model: its ``ops`` document (its first field the nsInfo
    index, set per batch), its namespace, its kind of result, and an
    insert's ``_id``."""

    __slots__ = ("document", "encoded", "inserted_id", "namespace", "result")

    def __init__(self, namespace: str, result: str, document: dict[str, Any],
                 inserted_id: Any = None) -> None:
        self.namespace = namespace
        self.result = result
        self.document = document
        self.inserted_id = inserted_id
        self.encoded = b""


class Builder(bulk.StatementOptions):
    """The operations of one client bulk write, as PyMongo's operation
    classes add themselves (``model._add_to_client_bulk(builder)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[_Op] = []

    def add_models(self, models: Sequence[Any]) -> None:
        """Add each of ``models``, refusing one that is not a write operation
        or has no namespace, naming it and its place in the list."""
        for index, model in enumerate(models):
            add = getattr(model, "_add_to_client_bulk", None)
            if add is None:
                raise TypeError(f"models[{index}] is {model!r}, not a write operation "
                                f"(InsertOne, UpdateOne, UpdateMany, ReplaceOne, DeleteOne, "
                                f"DeleteMany)")
            if not getattr(model, "_namespace", None):
                raise InvalidOperation(f"models[{index}] {model!r} has no namespace: "
                                       f"bulk_write needs each operation's "
                                       f"namespace='database.collection'")
            add(self)

    def add_insert(self, namespace: str, document: Any) -> None:
        generated = (isinstance(document, Mapping) and not isinstance(document, RawBSONDocument)
                     and "_id" not in document)
        bulk.assign_id(document)
        if generated:
            # The spec: a generated _id is its document's first field.
            document = {"_id": document["_id"], **document}
        self._add(namespace, "insert", {"insert": 0, "document": document},
                  document.get("_id"))

    def add_update(self, namespace: str, selector: Mapping[str, Any], update: Any, multi: bool,
                   upsert: bool | None = None, collation: Mapping[str, Any] | None = None,
                   array_filters: Sequence[Mapping[str, Any]] | None = None, hint: Any = None,
                   sort: Mapping[str, Any] | None = None) -> None:
        bulk.check_update(update)
        self._add_update(namespace, "update", selector, update, multi, upsert, collation,
                         array_filters, hint, sort)

    def add_replace(self, namespace: str, selector: Mapping[str, Any],
                    replacement: Mapping[str, Any], upsert: bool | None = None,
                    collation: Mapping[str, Any] | None = None, hint: Any = None,
                    sort: Mapping[str, Any] | None = None) -> None:
        bulk.check_replacement(replacement)
        self._add_update(namespace, "update", selector, replacement, False, upsert, collation,
                         None, hint, sort)

    def add_delete(self, namespace: str, selector: Mapping[str, Any], multi: bool,
                   collation: Mapping[str, Any] | None = None, hint: Any = None) -> None:
        bulk.check_document("filter", selector)
        document: dict[str, Any] = {"delete": 0, "filter": selector, "multi": multi}
        self.add_options(document, None, collation, hint, None, None)
        self._add(namespace, "delete", document)

    def _add_update(self, namespace: str, kind: str, selector: Mapping[str, Any], mods: Any,
                    multi: bool, upsert: bool | None, collation: Mapping[str, Any] | None,
                    array_filters: Sequence[Mapping[str, Any]] | None, hint: Any,
                    sort: Mapping[str, Any] | None) -> None:
        bulk.check_document("filter", selector)
        document: dict[str, Any] = {"update": 0, "filter": selector, "updateMods": mods,
                                    "multi": multi}
        self.add_options(document, upsert, collation, hint, sort, array_filters)
        self._add(namespace, kind, document)

    def _add(self, namespace: str, result: str, document: dict[str, Any],
             inserted_id: Any = None) -> None:
        check_namespace(namespace)
        self.ops.append(_Op(namespace, result, document, inserted_id))


def check_namespace(namespace: object) -> None:
    """A namespace is ``"database.collection"``."""
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, 'database.collection', not {namespace!r}")
    database, dot, collection = namespace.partition(".")
    if not (database and dot and collection):
        raise InvalidOperation(f"namespace must be 'database.collection', not {namespace!r}")


class _ImplicitSession:
    """An implicit server session lent for a whole call, so that the results
    cursors' getMores run in the session their bulkWrite ran in (the spec);
    to the client's operations it is a session without transactions."""

    pinned: Connection[Link] | None = None
    pinned_address: Any = None
    cluster_time: Mapping[str, Any] | None = None
    in_transaction = False
    deadline: Deadline | None = None

    def __init__(self, server_session: ServerSession) -> None:
        self.server_session = server_session
        self.lsid = server_session.lsid
        #: Whether a command failed other than by the server's refusal: the
        #: server may still hold the session busy, so it is not lent again.
        self.dirty = False

    def advance_cluster_time(self, cluster_time: Mapping[str, Any]) -> None:
        pass  # the client's cluster time is the one an implicit session uses

    def decorate(self, command: MutableMapping[str, Any]) -> None:
        command["lsid"] = self.lsid

    def sending(self, command: MutableMapping[str, Any]) -> None:
        pass

    def received(self, reply: Mapping[str, Any]) -> None:
        pass

    def next_txn_number(self) -> int:
        self.server_session.txn_number += 1
        return self.server_session.txn_number

    def forget_pin_after(self, error: PyMongoError) -> None:
        pass

    def not_started(self) -> None:
        pass

    def end(self) -> None:
        pass


def execute(ops: Operations, builder: Builder, *, session: Any, ordered: bool,
            verbose: bool, acknowledged: bool, write_concern: dict[str, Any] | None,
            options: Mapping[str, Any],
            codec_options: CodecOptions[Any]) -> ClientBulkWriteResult:
    """Run the bulk write (``session``: the caller's explicit one or None;
    ``write_concern``: the field to send, None for none; ``options``: the
    command's bypassDocumentValidation, comment and let)."""
    if not builder.ops:
        raise InvalidOperation("bulk_write needs at least one write operation; models is "
                               "empty")
    if not acknowledged:
        _check_unacknowledged(builder, options)
    run = _Run(ops, builder, ordered=ordered, verbose=verbose, options=options,
               codec_options=codec_options)
    if not acknowledged:
        run.unacknowledged()
        return ClientBulkWriteResult({}, False, False)
    return ClientBulkWriteResult(run.acknowledged(session, write_concern), True, verbose)


def _check_unacknowledged(builder: Builder, options: Mapping[str, Any]) -> None:
    if builder.uses_collation:
        raise ConfigurationError("collation cannot be used with an unacknowledged write "
                                 "concern (w=0): the server's answer would be lost")
    if builder.uses_array_filters:
        raise ConfigurationError("array_filters cannot be used with an unacknowledged write "
                                 "concern (w=0): the server's answer would be lost")
    if "bypassDocumentValidation" in options:
        raise OperationFailure("bypass_document_validation cannot be used with an "
                               "unacknowledged write concern (w=0)")


def _empty_result() -> dict[str, Any]:
    """PyMongo's client bulk result document, which its result and error classes read."""
    return {"anySuccessful": False, "error": None, "writeErrors": [],
            "writeConcernErrors": [], "nInserted": 0, "nUpserted": 0, "nMatched": 0,
            "nModified": 0, "nDeleted": 0, "insertResults": {}, "updateResults": {},
            "deleteResults": {}}


class _Run:
    """One call's batches: their commands, sending, and the merged result."""

    def __init__(self, ops: Operations, builder: Builder, *, ordered: bool, verbose: bool,
                 options: Mapping[str, Any], codec_options: CodecOptions[Any]) -> None:
        self.ops = ops
        self.builder = builder
        self.ordered = ordered
        self.verbose = verbose
        self.codec_options = write_reply_options(codec_options)
        self.template: dict[str, Any] = {"bulkWrite": 1, "errorsOnly": not verbose,
                                         "ordered": ordered, **options}
        self.namespaces: dict[str, bytes] = {}
        self.result = _empty_result()
        self.session: Any = None
        self.deadline: Deadline | None = None
        self.comment = options.get("comment")
        # The server that answered the last bulkWrite and, in load-balanced
        # mode, its connection while that reply's cursor lives (see _keep).
        self.address: Any = None
        self.pinned: Connection[Link] | None = None
        self.sending: Outgoing | None = None

    # -- batches ----------------------------------------------------------------------

    def _encode(self, max_bson_size: int, max_message_size: int, acknowledged: bool) -> int:
        """Encode every operation and namespace, refusing before anything is
        sent one that cannot go in any command; the room a batch has."""
        room = (message_size_limit(max_message_size) - MESSAGE_OVERHEAD
                - len(bson.encode(self.template, codec_options=self.codec_options)))
        for index, op in enumerate(self.builder.ops):
            op.encoded = bson.encode(op.document, codec_options=self.codec_options)
            namespace = self.namespaces.get(op.namespace)
            if namespace is None:
                namespace = self.namespaces[op.namespace] = bson.encode({"ns": op.namespace})
            size = len(op.encoded) + len(namespace)
            if size > room:
                raise DocumentTooLarge(
                    f"models[{index}] is {size} bytes with its namespace, over the {room} "
                    f"bytes a bulkWrite command has room for (the server's "
                    f"maxMessageSizeBytes {max_message_size}, less {MESSAGE_OVERHEAD} and the "
                    f"command's fields); nothing was sent")
            if not acknowledged and op.result != "delete":
                _check_unacknowledged_size(index, op, max_bson_size, self.codec_options)
        return room

    def _batches(self, room: int, max_count: int) -> list[tuple[int, int]]:
        """``(start, stop)`` of each batch: at most ``max_count`` operations,
        whose ops and nsInfo documents fit in ``room``."""
        ops, batches, start = self.builder.ops, [], 0
        while start < len(ops):
            stop, size, seen = start, 0, set()
            while stop < len(ops) and stop - start < max_count:
                op = ops[stop]
                added = len(op.encoded) + (
                    0 if op.namespace in seen else len(self.namespaces[op.namespace]))
                if size + added > room:
                    break  # never for the first: _encode checked each alone
                seen.add(op.namespace)
                size += added
                stop += 1
            batches.append((start, stop))
            start = stop
        return batches

    def _command(self, start: int, stop: int) -> Outgoing:
        """The batch's command: each operation's first field the index of its
        namespace in the batch's nsInfo."""
        indexes: dict[str, int] = {}
        documents, encoded = [], []
        for op in self.builder.ops[start:stop]:
            index = indexes.setdefault(op.namespace, len(indexes))
            data = op.encoded
            if index:
                data = data[:_INDEX_AT] + _INT32.pack(index) + data[_INDEX_AT + 4:]
            op.document[next(iter(op.document))] = index
            documents.append(op.document)
            encoded.append(data)
        command = Outgoing(self.template)
        command["ops"] = documents
        command["nsInfo"] = [{"ns": namespace} for namespace in indexes]
        command.codec_options = self.codec_options
        command.sequence = "ops"
        command.encoded = encoded
        command.more_sequences = (("nsInfo", [self.namespaces[ns] for ns in indexes]),)
        return command

    def _limits(self, session: Any) -> tuple[int, int, int]:
        """maxBsonObjectSize, maxMessageSizeBytes and maxWriteBatchSize of the
        server writes go to, from a connection's hello (a transaction's
        pinned one, if any); InvalidOperation before MongoDB 8.0."""
        with self.ops.lease(session, Purpose.OTHER, deadline=self.deadline) as conn:
            assert conn.transport is not None  # a checked-out connection is established
            version = conn.transport.max_wire_version
            limits = bulk.Limits(conn.transport.hello)
        if version < BULK_WRITE_WIRE_VERSION:
            raise InvalidOperation(f"bulk_write needs MongoDB 8.0 or later (wire version "
                                   f"{BULK_WRITE_WIRE_VERSION}); the server's wire version is "
                                   f"{version}")
        return limits.max_bson_size, limits.max_message_size, limits.max_write_batch_size

    # -- unacknowledged -----------------------------------------------------------------

    def unacknowledged(self) -> None:
        """Every batch with moreToCome, in order on one connection."""
        ops = self.ops
        self.deadline = ops.deadline(None, None)
        max_bson, max_message, max_count = self._limits(None)
        room = self._encode(max_bson, max_message, acknowledged=False)
        self.template["writeConcern"] = {"w": 0}
        with ops.lease(None, Purpose.OTHER, name="bulkWrite", deadline=self.deadline) as conn:
            for start, stop in self._batches(room, max_count):
                command = self._command(start, stop)
                command.unacknowledged = True
                ops.send(conn, "admin", command, None, self.deadline)

    # -- acknowledged -------------------------------------------------------------------

    def acknowledged(self, session: Any,
                     write_concern: dict[str, Any] | None) -> dict[str, Any]:
        """Every batch in the explicit ``session``, else in an implicit one
        lent for the call (none if the server has no sessions); the result
        document."""
        ops = self.ops
        self.deadline = ops.deadline(None, session)
        # After this first selection the topology knows whether sessions are supported.
        max_bson, max_message, max_count = self._limits(session)
        room = self._encode(max_bson, max_message, acknowledged=True)
        if self.deadline is not None:
            write_concern = concern.timed(write_concern)
        if write_concern is not None and not (session is not None and session.in_transaction):
            self.template["writeConcern"] = write_concern
        implicit = None
        if session is None:
            server_session = ops.take_server_session()
            implicit = None if server_session is None else _ImplicitSession(server_session)
        self.session = session if implicit is None else implicit
        try:
            return self._run_batches(room, max_count)
        finally:
            if implicit is not None:
                ops.give_server_session(implicit.server_session, implicit.dirty)

    def _run_batches(self, room: int, max_count: int) -> dict[str, Any]:
        result = self.result
        for start, stop in self._batches(room, max_count):
            reply = self._send(self._command(start, stop))
            self._merge(start, stop, reply)
            if self.ordered and result["writeErrors"]:
                break
        if result["writeErrors"] or result["writeConcernErrors"]:
            self._raise()
        return result

    def _decorate(self, command: dict[str, Any]) -> None:
        if self.session is not None:
            self.session.decorate(command)

    def _send(self, command: Outgoing) -> dict[str, Any]:
        """One batch's reply; a top-level error raises the call's
        ClientBulkWriteException. A writeConcernError raises in the write path
        (so that it is retried if labelled RetryableWriteError); once it is
        not, the reply that carried it is the batch's."""
        self._decorate(command)
        self.sending = command
        try:
            return self.ops.run_command("admin", command, self.session, self.deadline,
                                        readpref.WRITE, keep=self._keep)
        except WriteConcernError as error:
            if command.reply is None or not command.reply.get("writeConcernError"):
                self._fail(error)
            return command.reply
        except PyMongoError as error:
            self._fail(error)
        except BaseException:
            self._mark_dirty()
            raise

    def _keep(self, conn: Connection[Link]) -> bool:
        """Remember the server that answered, for getMore; in load-balanced
        mode keep its connection while the reply's cursor lives (only that
        connection reaches the service holding it)."""
        self.address = conn.address
        reply = self.sending.reply if self.sending is not None else None
        cursor = reply.get("cursor") if reply is not None else None
        alive = isinstance(cursor, Mapping) and bool(cursor.get("id"))
        if not (alive and self.ops.load_balanced and conn.error is None):
            return False
        self.pinned = conn
        return True

    def _merge(self, start: int, stop: int, reply: Mapping[str, Any]) -> None:
        """Add one batch's reply, its cursor read to the end, to the result."""
        result = self.result
        first_error: list[int] = []
        succeeded: list[bool] = []

        def take(documents: list[dict[str, Any]]) -> None:
            for document in documents:
                index = start + document["idx"]
                op = self.builder.ops[index]
                if not document.get("ok"):
                    first_error.append(document["idx"])
                    result["writeErrors"].append({**document, "idx": index,
                                                  "op": op.document})
                else:
                    succeeded.append(True)
                    if self.verbose:
                        _record(result, index, op, document)

        try:
            self._read_cursor(reply, take)
        finally:
            for field in ("nInserted", "nUpserted", "nMatched", "nModified", "nDeleted"):
                result[field] += reply.get(field, 0)
            if succeeded or self._any_successful(reply, stop - start, first_error):
                result["anySuccessful"] = True
            concern_error = reply.get("writeConcernError")
            if concern_error:
                labels = reply.get("errorLabels")
                # The server puts the labels at the top level; they belong to the error.
                result["writeConcernErrors"].append(
                    {**concern_error, "errorLabels": labels} if labels else concern_error)

    def _any_successful(self, reply: Mapping[str, Any], count: int,
                        first_error: list[int]) -> bool:
        """Whether the batch wrote anything (the spec's rule): ordered, if it
        had no error or its first error came after an operation; unordered,
        if fewer errors than operations."""
        errors = reply.get("nErrors", 0)
        if self.ordered:
            return errors == 0 or bool(first_error and min(first_error) > 0)
        return bool(errors < count)

    # -- the results cursor -------------------------------------------------------------

    def _read_cursor(self, reply: Mapping[str, Any],
                     take: Callable[[list[dict[str, Any]]], None]) -> None:
        """Give ``take`` each batch of the reply's results cursor, with
        getMore until it ends; a getMore's error is the call's top-level
        error, after killCursors."""
        pinned, self.pinned = self.pinned, None
        try:
            cursor = reply.get("cursor")
            if not isinstance(cursor, Mapping) or not isinstance(cursor.get("firstBatch"),
                                                                 list):
                self._fail(InvalidOperation(f"the server's bulkWrite reply has no "
                                            f"cursor.firstBatch: {reply!r}"))
            take(cursor["firstBatch"])
            cursor_id = cursor.get("id", 0)
            while cursor_id:
                try:
                    more = self._get_more(cursor_id, pinned)
                except PyMongoError as error:
                    self._kill(cursor_id, pinned)
                    self._fail(error)
                cursor_id = more["cursor"]["id"]
                take(more["cursor"]["nextBatch"])
        finally:
            if pinned is not None:
                self.ops.unpin(pinned)

    def _get_more(self, cursor_id: int, pinned: Connection[Link] | None) -> dict[str, Any]:
        command = Outgoing({"getMore": Int64(cursor_id), "collection": _RESULTS})
        command.codec_options = self.codec_options
        if self.comment is not None:
            command["comment"] = self.comment

        def again() -> dict[str, Any]:
            return self._cursor_round_trip(command, pinned)

        try:
            return again()
        except PyMongoError as error:
            return self.ops.retry_overloaded(error, again, command, self.deadline)

    def _kill(self, cursor_id: int, pinned: Connection[Link] | None) -> None:
        """killCursors, best effort: the getMore's error is what is reported."""
        if pinned is not None and pinned.error is not None:
            return  # the connection, and so the cursor, is gone
        with contextlib.suppress(PyMongoError):
            self._cursor_round_trip({"killCursors": _RESULTS, "cursors": [Int64(cursor_id)]},
                                    pinned)

    def _cursor_round_trip(self, command: dict[str, Any],
                           pinned: Connection[Link] | None) -> dict[str, Any]:
        """A getMore or killCursors in the call's session, to the server (or
        the connection) holding the cursor; without a known server (the reply
        came with a writeConcernError, or the transaction's pinned
        connection), where the session's writes go."""
        ops, session = self.ops, self.session
        self._decorate(command)
        try:
            if pinned is not None:
                return ops.send(pinned, "admin", command, session, self.deadline,
                                max_time=False)
            with ops.lease(session, Purpose.CURSOR, deadline=self.deadline,
                           address=self.address) as conn:
                return ops.send(conn, "admin", command, session, self.deadline,
                                max_time=False)
        except OperationFailure:
            raise  # the server answered: the session is fine
        except BaseException:
            self._mark_dirty()
            raise

    # -- errors -------------------------------------------------------------------------

    def _mark_dirty(self) -> None:
        if isinstance(self.session, _ImplicitSession):
            self.session.dirty = True

    def _fail(self, error: PyMongoError) -> NoReturn:
        """A top-level error: the call ends, with what it has done so far
        (the result document the exception holds is the call's, so the
        counts of a batch whose getMore failed still reach it)."""
        if not isinstance(error, _SESSION_INTACT):
            self._mark_dirty()  # the server may still hold the session busy
        self.result["error"] = error
        raise ClientBulkWriteException(self.result, self.verbose) from error

    def _raise(self) -> NoReturn:
        errors = self.result["writeErrors"]
        errors.sort(key=lambda error: error["idx"])
        if errors and errors[0].get("code") == 20 and str(
                errors[0].get("errmsg", "")).startswith("Transaction numbers"):
            raise OperationFailure(
                "this server does not support retryable writes; add retryWrites=false to the "
                "connection string", 20, self.result)
        raise ClientBulkWriteException(self.result, self.verbose)


def _record(result: dict[str, Any], index: int, op: _Op, document: dict[str, Any]) -> None:
    """A verbose result, as PyMongo's classes present it."""
    if op.result == "insert":
        result["insertResults"][index] = InsertOneResult(op.inserted_id, True)
    elif op.result == "update":
        result["updateResults"][index] = UpdateResult(document, True, in_client_bulk=True)
    else:
        result["deleteResults"][index] = DeleteResult(document, True)


def _check_unacknowledged_size(index: int, op: _Op, max_bson_size: int,
                               codec_options: CodecOptions[Any]) -> None:
    """Unacknowledged, an inserted or replacing document over
    maxBsonObjectSize is refused here: the server's error would be lost."""
    document = op.document["document" if op.result == "insert" else "updateMods"]
    if isinstance(document, list):
        return  # an update pipeline
    size = len(document.raw) if isinstance(document, RawBSONDocument) else len(
        bson.encode(document, codec_options=codec_options))
    if size > max_bson_size:
        raise DocumentTooLarge(f"models[{index}]'s document is {size} bytes, over the "
                               f"server's maxBsonObjectSize of {max_bson_size} for an "
                               f"unacknowledged write; nothing was sent")
