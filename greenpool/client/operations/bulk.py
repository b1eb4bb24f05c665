"""Bulk writes: ``insert_many`` and ``bulk_write``, batched to the server's limits.

A bulk write is a list of operations (PyMongo's public classes
:class:`~pymongo.operations.InsertOne`, :class:`~pymongo.operations.UpdateOne`,
:class:`~pymongo.operations.UpdateMany`, :class:`~pymongo.operations.ReplaceOne`,
:class:`~pymongo.operations.DeleteOne`, :class:`~pymongo.operations.DeleteMany`,
which add themselves to a :class:`Builder`). It runs as the Bulk API does:

* **runs**: consecutive operations of one kind (insert, update, delete) in
  the order given (ordered), or one run per kind (unordered);
* **batches**: each run's documents (or update and delete statements) are
  encoded once, with the collection's codec options, and cut into commands
  of at most maxWriteBatchSize statements and maxMessageSizeBytes bytes,
  read from a connection's ``hello`` (the same server's connections share
  them). A document that cannot go raises
  :class:`~pymongo.errors.DocumentTooLarge` before anything is sent: one
  over maxMessageSizeBytes, or, unacknowledged, over maxBsonObjectSize; an
  acknowledged write leaves the latter to the server, whose write error comes
  back with the others (as PyMongo does). Each
  batch goes as an OP_MSG document sequence, through the collection's write
  path, so it is a retryable write when its statements allow (no ``multi``
  update, no ``limit: 0`` delete), as PyMongo's batches are;
* **results**: the batches' replies merge into PyMongo's bulk result
  document (``nInserted``, ``nMatched``, ``nModified``, ``nRemoved``,
  ``nUpserted``, ``upserted``, ``writeErrors`` with each error's index in
  the whole request list and its ``op``, ``writeConcernErrors``); any error
  raises :class:`~pymongo.errors.BulkWriteError` with that document as its
  ``details``. An ordered bulk stops at the first write error.

Unacknowledged (w=0): unordered, every batch goes with moreToCome; ordered,
every batch but the last is acknowledged with the server's default write
concern (to stop at the first error, as PyMongo does) and errors are not
reported.

Rules. This module knows the wire only through
:class:`~greenpool.wire.messages.Outgoing` and sends through a
:class:`Sender` (the collection); it holds no connection.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn, Protocol

import bson
from bson.codec_options import CodecOptions
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    DocumentTooLarge,
    InvalidOperation,
    OperationFailure,
    WriteConcernError,
)

from greenpool.client.config.codecs import write_reply_options
from greenpool.client.operations.retries import RETRYABLE_CODES
from greenpool.wire.messages import COMMAND_OVERHEAD, Outgoing

__all__ = ["DELETE", "INSERT", "UPDATE", "Builder", "Limits", "Sender", "check_document",
           "check_replacement", "check_update", "execute", "inserted_ids"]

INSERT, UPDATE, DELETE = 0, 1, 2
_COMMANDS = ("insert", "update", "delete")
_FIELDS = ("documents", "updates", "deletes")


class Limits:
    """The server's write limits, from a connection's hello."""

    __slots__ = ("max_bson_size", "max_message_size", "max_write_batch_size")

    def __init__(self, hello: Mapping[str, Any] | None) -> None:
        hello = hello or {}
        self.max_bson_size = int(hello.get("maxBsonObjectSize", 16 * 1024 * 1024))
        self.max_message_size = int(hello.get("maxMessageSizeBytes", 48_000_000))
        self.max_write_batch_size = int(hello.get("maxWriteBatchSize", 100_000))


class Sender(Protocol):
    """What a bulk write needs of its collection."""

    @property
    def name(self) -> str: ...

    @property
    def codec_options(self) -> CodecOptions[Any]: ...

    def _limits(self, session: Any) -> Limits: ...

    def _send_write(self, command: Outgoing, session: Any, *,
                   acknowledged: bool | None = None) -> dict[str, Any] | None:
        """Send a write; None if unacknowledged. ``acknowledged`` overrides
        the collection's write concern (False: w=0, True: the server's default)."""


class StatementOptions:
    """What a bulk write's builder (a collection's, or the client's across
    namespaces) does with a statement's options: each goes in only if given,
    and collation and arrayFilters are remembered, since an unacknowledged
    write refuses them."""

    def __init__(self) -> None:
        self.uses_collation = False
        self.uses_array_filters = False

    def add_options(self, statement: dict[str, Any], upsert: bool | None,
                    collation: Mapping[str, Any] | None, hint: Any,
                    sort: Mapping[str, Any] | None,
                    array_filters: Sequence[Mapping[str, Any]] | None) -> None:
        if upsert is not None:
            statement["upsert"] = upsert
        if collation is not None:
            self.uses_collation = True
            statement["collation"] = collation
        if array_filters is not None:
            self.uses_array_filters = True
            statement["arrayFilters"] = list(array_filters)
        if hint is not None:
            statement["hint"] = hint
        if sort is not None:
            statement["sort"] = sort


class Builder(StatementOptions):
    """The operations of one bulk write, as PyMongo's operation classes add
    themselves (``request._add_to_bulk(builder)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[int, dict[str, Any]]] = []
        self.retryable = True

    def add_insert(self, document: Any) -> None:
        assign_id(document)
        self.ops.append((INSERT, document))

    def add_update(self, selector: Mapping[str, Any], update: Any, multi: bool,
                   upsert: bool | None, collation: Mapping[str, Any] | None = None,
                   array_filters: Sequence[Mapping[str, Any]] | None = None,
                   hint: Any = None, sort: Mapping[str, Any] | None = None) -> None:
        check_update(update)
        statement: dict[str, Any] = {"q": selector, "u": update, "multi": multi}
        if multi:
            self.retryable = False  # PyMongo's rule: any multi update makes it not retryable
        self._add_statement(UPDATE, statement, upsert, collation, hint, sort, array_filters)

    def add_replace(self, selector: Mapping[str, Any], replacement: Mapping[str, Any],
                    upsert: bool | None, collation: Mapping[str, Any] | None = None,
                    hint: Any = None, sort: Mapping[str, Any] | None = None) -> None:
        check_replacement(replacement)
        statement: dict[str, Any] = {"q": selector, "u": replacement}
        self._add_statement(UPDATE, statement, upsert, collation, hint, sort, None)

    def add_delete(self, selector: Mapping[str, Any], limit: int,
                   collation: Mapping[str, Any] | None = None, hint: Any = None) -> None:
        statement: dict[str, Any] = {"q": selector, "limit": limit}
        if limit == 0:
            self.retryable = False
        self._add_statement(DELETE, statement, None, collation, hint, None, None)

    def _add_statement(self, kind: int, statement: dict[str, Any], upsert: bool | None,
                       collation: Mapping[str, Any] | None, hint: Any,
                       sort: Mapping[str, Any] | None,
                       array_filters: Sequence[Mapping[str, Any]] | None) -> None:
        self.add_options(statement, upsert, collation, hint, sort, array_filters)
        self.ops.append((kind, statement))


def check_update(update: Any) -> None:
    """An update is a document of ``$`` operators, or a pipeline (a list)."""
    if isinstance(update, list):
        if not update:
            raise ValueError("an update pipeline cannot be empty")
        return
    check_document("update", update)
    if not update:
        raise ValueError("an update document cannot be empty")
    first = next(iter(update))
    if not first.startswith("$"):
        raise ValueError(f"an update document must hold $ operators ($set, $inc...), "
                         f"not {first!r}; to replace a document use replace_one")


def check_replacement(replacement: Any) -> None:
    """A replacement is a document without ``$`` operators."""
    check_document("replacement", replacement)
    if replacement and next(iter(replacement)).startswith("$"):
        raise ValueError(f"a replacement document cannot hold $ operators "
                         f"({next(iter(replacement))!r}); to update use update_one")


def assign_id(document: Any) -> Any:
    """Check a ``document`` to insert and give it an ``_id`` (an ObjectId) if
    it has none; return the ``_id`` to report, as PyMongo reports it: None
    for a raw document, which is sent as it is."""
    check_document("document", document)
    # A dict first: isinstance against an ABC (RawBSONDocument is a Mapping) costs more.
    if type(document) is not dict and isinstance(document, RawBSONDocument):
        return None
    if "_id" not in document:
        document["_id"] = ObjectId()
    return document["_id"]


def check_document(name: str, value: Any) -> None:
    """Refuse a ``value`` that is not a document (a mapping), naming it."""
    # A dict first: isinstance against the Mapping ABC costs more.
    if type(value) is not dict and not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a document (a dict or another mapping), "
                        f"not {value!r}")


# -- running ---------------------------------------------------------------------------


class _Run:
    """Consecutive operations of one kind: their statements, encoded, and
    each one's index in the whole request list."""

    __slots__ = ("encoded", "indexes", "kind", "ops")

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.ops: list[dict[str, Any]] = []
        self.indexes: list[int] = []
        self.encoded: list[bytes] = []


def _runs(ops: list[tuple[int, dict[str, Any]]], ordered: bool) -> list[_Run]:
    runs: list[_Run] = []
    if ordered:
        for index, (kind, op) in enumerate(ops):
            if not runs or runs[-1].kind != kind:
                runs.append(_Run(kind))
            runs[-1].ops.append(op)
            runs[-1].indexes.append(index)
        return runs
    by_kind = [_Run(INSERT), _Run(UPDATE), _Run(DELETE)]
    for index, (kind, op) in enumerate(ops):
        by_kind[kind].ops.append(op)
        by_kind[kind].indexes.append(index)
    return [run for run in by_kind if run.ops]


def _encode(runs: list[_Run], codec_options: CodecOptions[Any], limits: Limits,
            acknowledged: bool) -> None:
    """Encode every statement, refusing before anything is sent one that
    cannot go: over maxMessageSizeBytes with its command, or, unacknowledged,
    over maxBsonObjectSize (whose write error would be lost). An acknowledged
    write's document over maxBsonObjectSize goes, and the server's write
    error for it is reported with the others, as PyMongo does."""
    largest = limits.max_message_size - COMMAND_OVERHEAD
    if not acknowledged:
        largest = min(largest, limits.max_bson_size)
    for run in runs:
        for op in run.ops:
            data = bytes(op.raw) if isinstance(op, RawBSONDocument) else bson.encode(
                op, codec_options=codec_options)
            if len(data) > largest:
                what = "document" if run.kind == INSERT else f"{_COMMANDS[run.kind]} statement"
                raise DocumentTooLarge(
                    f"a {what} of {len(data)} bytes is over the limit of {largest} bytes for "
                    f"{'an unacknowledged' if not acknowledged else 'a'} write (the server's "
                    f"maxBsonObjectSize is {limits.max_bson_size}, maxMessageSizeBytes "
                    f"{limits.max_message_size}); nothing was sent")
            run.encoded.append(data)


def _batches(run: _Run, limits: Limits) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each batch of ``run``: at most maxWriteBatchSize
    statements and maxMessageSizeBytes (less the command's room) of them."""
    room = limits.max_message_size - COMMAND_OVERHEAD
    start, count = 0, len(run.encoded)
    while start < count:
        stop, size = start, 0
        while (stop < count and stop - start < limits.max_write_batch_size
               and (stop == start or size + len(run.encoded[stop]) <= room)):
            size += len(run.encoded[stop])
            stop += 1
        yield start, stop
        start = stop


def _empty_result() -> dict[str, Any]:
    return {"writeErrors": [], "writeConcernErrors": [], "nInserted": 0, "nUpserted": 0,
            "nMatched": 0, "nModified": 0, "nRemoved": 0, "upserted": []}


def execute(sender: Sender, builder: Builder, *, ordered: bool, acknowledged: bool,
            session: Any, options: Mapping[str, Any],
            let: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Run the bulk write; its result document, or None if unacknowledged.

    ``options`` are the commands' fields (``bypassDocumentValidation``,
    ``comment``); ``let`` goes on updates and deletes."""
    if not builder.ops:
        raise InvalidOperation("a bulk write needs at least one operation; none were given")
    if not acknowledged:
        _check_unacknowledged(builder, options)
    runs = _runs(builder.ops, ordered)
    limits = sender._limits(session)
    _encode(runs, sender.codec_options, limits, acknowledged)
    if not acknowledged:
        _execute_unacknowledged(sender, runs, limits, ordered, options, let)
        return None
    result = _empty_result()
    for run in runs:
        for start, stop in _batches(run, limits):
            command = _command(sender, run, start, stop, ordered, options, let)
            reply = _send_batch(sender, command, session)
            concern_error = reply.get("writeConcernError")
            if concern_error and concern_error.get("code") in RETRYABLE_CODES:
                # The batch may be retried elsewhere: report it at once, as PyMongo does.
                attempt = copy.deepcopy(result)
                _merge(run, start, reply, attempt)
                _raise(attempt)
            _merge(run, start, reply, result)
            if ordered and reply.get("writeErrors"):
                _raise(result)
    if result["writeErrors"] or result["writeConcernErrors"]:
        _raise(result)
    return result


def _send_batch(sender: Sender, command: Outgoing, session: Any) -> dict[str, Any]:
    """One acknowledged batch's reply. A writeConcernError raises, so that
    the collection's write path retries the batch if it is labelled
    RetryableWriteError, as PyMongo retries one; once it is not retried, the
    reply that carried it (``command.reply``) is the batch's result."""
    try:
        reply = sender._send_write(command, session)
    except WriteConcernError:
        if command.reply is None or not command.reply.get("writeConcernError"):
            raise
        return command.reply
    assert reply is not None  # acknowledged
    return reply


def _execute_unacknowledged(sender: Sender, runs: list[_Run], limits: Limits, ordered: bool,
                            options: Mapping[str, Any], let: Mapping[str, Any] | None) -> None:
    batches = [(run, start, stop) for run in runs for start, stop in _batches(run, limits)]
    for number, (run, start, stop) in enumerate(batches):
        command = _command(sender, run, start, stop, ordered, options, let)
        last = number == len(batches) - 1
        if not ordered or last:
            sender._send_write(command, None, acknowledged=False)
            continue
        # Ordered: acknowledged (server default), to stop at the first error.
        try:
            reply = sender._send_write(command, None, acknowledged=True)
        except OperationFailure:
            return
        if reply is not None and reply.get("writeErrors"):
            return


def _check_unacknowledged(builder: Builder, options: Mapping[str, Any]) -> None:
    if builder.uses_collation:
        raise ConfigurationError("collation cannot be used with an unacknowledged write "
                                 "concern (w=0): the server's answer would be lost")
    if builder.uses_array_filters:
        raise ConfigurationError("array_filters cannot be used with an unacknowledged write "
                                 "concern (w=0): the server's answer would be lost")
    if options.get("bypassDocumentValidation"):
        raise OperationFailure("bypass_document_validation cannot be used with an "
                               "unacknowledged write concern (w=0)")


def _command(sender: Sender, run: _Run, start: int, stop: int, ordered: bool,
             options: Mapping[str, Any], let: Mapping[str, Any] | None) -> Outgoing:
    command = Outgoing()
    command[_COMMANDS[run.kind]] = sender.name
    command["ordered"] = ordered
    command.update(options)
    if let is not None and run.kind != INSERT:
        command["let"] = let
    field = _FIELDS[run.kind]
    command[field] = run.ops[start:stop]
    command.codec_options = write_reply_options(sender.codec_options)
    command.sequence = field
    command.encoded = run.encoded[start:stop]
    return command


def _merge(run: _Run, offset: int, reply: Mapping[str, Any], result: dict[str, Any]) -> None:
    """Add one batch's reply to the bulk result (the Bulk API's merge)."""
    affected = reply.get("n", 0)
    if run.kind == INSERT:
        result["nInserted"] += affected
    elif run.kind == DELETE:
        result["nRemoved"] += affected
    else:
        upserted = reply.get("upserted") or []
        for document in upserted:
            result["upserted"].append(
                {**document, "index": run.indexes[document["index"] + offset]})
        result["nUpserted"] += len(upserted)
        result["nMatched"] += affected - len(upserted)
        result["nModified"] += reply.get("nModified", 0)
    for error in reply.get("writeErrors") or []:
        position = error["index"] + offset
        result["writeErrors"].append(
            {**error, "index": run.indexes[position], "op": run.ops[position]})
    concern_error = reply.get("writeConcernError")
    if concern_error:
        labels = reply.get("errorLabels")
        # The server puts the labels at the top level; they belong to the error.
        result["writeConcernErrors"].append(
            {**concern_error, "errorLabels": labels} if labels else concern_error)


def _raise(result: dict[str, Any]) -> NoReturn:
    errors = result["writeErrors"]
    errors.sort(key=lambda error: error["index"])
    if errors and errors[0].get("code") == 20 and str(
            errors[0].get("errmsg", "")).startswith("Transaction numbers"):
        raise OperationFailure(
            "this server does not support retryable writes; add retryWrites=false to the "
            "connection string", 20, result)
    raise BulkWriteError(result)


def inserted_ids(builder: Builder) -> list[Any]:
    """The ``_id`` of each document an insert_many's builder holds; raw
    documents' are left out, as PyMongo leaves them out."""
    return [op.get("_id") for _, op in builder.ops if not isinstance(op, RawBSONDocument)]

