"""A collection, as PyMongo's :class:`~pymongo.collection.Collection` has it.

::

    orders = client.shop.orders
    orders.insert_one({"sku": 1, "qty": 2})
    orders.update_one({"sku": 1}, {"$inc": {"qty": 1}})
    for order in orders.find({"qty": {"$gt": 1}}).sort("sku").limit(10):
        ...

Every method has PyMongo's signature and returns PyMongo's result classes
(:mod:`pymongo.results`) or raises PyMongo's errors as PyMongo does for the
same reply: a write error raises :class:`~pymongo.errors.WriteError`
(:class:`~pymongo.errors.DuplicateKeyError` for code 11000), a write concern
error :class:`~pymongo.errors.WriteConcernError`, a bulk write
:class:`~pymongo.errors.BulkWriteError` with PyMongo's ``details``; an
unacknowledged result raises :class:`~pymongo.errors.InvalidOperation` when
its counts are read.

A collection's options (codec options, read preference, write and read
concern) are resolved when it is made, and the fields they put on each
command are worked out once then, so a call builds its command and sends it.
Commands go through the client's
:class:`~greenpool.client.operations.operations.Operations` (:meth:`~Operations.run_command`:
implicit sessions, retryable reads and writes; cursors through
:class:`~greenpool.client.api.cursor.Cursor`), as
:meth:`greenpool.Client.command` does, wrapped in an
:class:`~greenpool.wire.messages.Outgoing` that carries the codec options
(and, for w=0, moreToCome) to the wire. Writes go to the primary; reads
follow the collection's read preference (primary inside a transaction).

Rules. This module imports neither ``client.py`` nor ``database.py``: a
collection reaches its database through the :class:`DatabaseLike` protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from bson.codec_options import CodecOptions
from bson.timestamp import Timestamp
from pymongo.collation import validate_collation_or_none
from pymongo.errors import (
    ConfigurationError,
    DuplicateKeyError,
    InvalidName,
    InvalidOperation,
    OperationFailure,
    WriteError,
)
from pymongo.operations import IndexModel, SearchIndexModel
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import _ServerMode
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)
from pymongo.write_concern import WriteConcern

from greenpool.client.api.changestream import ChangeStream, check_watch_options
from greenpool.client.api.cursor import ITERATION, Cursor
from greenpool.client.api.findcursor import (
    CommandCursor,
    FindCursor,
    RawBatchCommandCursor,
    RawBatchCursor,
    index_document,
    index_name,
    projection_document,
)
from greenpool.client.config import readpref
from greenpool.client.config.codecs import check_codec_options, write_reply_options
from greenpool.client.operations import bulk, concern
from greenpool.client.operations.operations import Operations
from greenpool.client.operations.session import Session
from greenpool.pool.connection import Purpose
from greenpool.wire.messages import Outgoing

__all__ = ["Collection", "DatabaseLike", "ReturnDocument"]

# Codes of a drop that finds nothing to drop, which PyMongo ignores.
_NAMESPACE_NOT_FOUND = 26
_INDEX_NOT_FOUND = 27
# The reads that take a read concern, and so a session's afterClusterTime or snapshot.
_READ_CONCERN_READS = frozenset({"find", "aggregate", "distinct", "count"})


class ReturnDocument:
    """find_one_and_*'s ``return_document``: the document as it was, or as it is."""

    BEFORE = False
    AFTER = True


class DatabaseLike(Protocol):
    """What a collection needs of its database."""

    @property
    def name(self) -> str: ...

    @property
    def operations(self) -> Operations: ...

    @property
    def codec_options(self) -> CodecOptions[Any]: ...

    @property
    def read_preference(self) -> _ServerMode: ...

    @property
    def write_concern(self) -> WriteConcern: ...

    @property
    def read_concern(self) -> ReadConcern: ...

    def with_options(self, codec_options: CodecOptions[Any] | None = None) -> Any: ...


def check_collection_name(name: object) -> str:
    """Refuse a name the server would misread, as PyMongo does:
    :class:`~pymongo.errors.InvalidName` naming it; TypeError for a non-str."""
    if not isinstance(name, str):
        raise TypeError(f"a collection name must be a str, not {name!r}")
    if not name or ".." in name:
        raise InvalidName(f"invalid collection name {name!r}: empty, or holding '..'")
    if "$" in name and not (name.startswith(("oplog.$main", "$cmd"))):
        raise InvalidName(f"invalid collection name {name!r}: collection names cannot "
                          f"contain '$'")
    if name[0] == "." or name[-1] == ".":
        raise InvalidName(f"invalid collection name {name!r}: collection names cannot "
                          f"start or end with '.'")
    if "\x00" in name:
        raise InvalidName(f"invalid collection name {name!r}: collection names cannot "
                          f"contain the NUL character")
    return name


class Collection:
    """A collection; made by ``database["name"]``, ``database.name`` or
    :meth:`~greenpool.client.api.database.Database.get_collection`. See the
    module's docstring."""

    def __init__(self, database: DatabaseLike, name: str, *,
                 codec_options: CodecOptions[Any] | None = None,
                 read_preference: _ServerMode | None = None,
                 write_concern: WriteConcern | None = None,
                 read_concern: ReadConcern | None = None) -> None:
        self._database = database
        self._name = check_collection_name(name)
        self._ops = database.operations
        self._db = database.name
        self._codec_options = check_codec_options(codec_options,
                                                  default=database.codec_options)
        self._read_preference = (database.read_preference if read_preference is None
                                 else readpref.coerce(read_preference))
        self._write_concern = concern.check_write_concern(write_concern,
                                                          default=database.write_concern)
        self._read_concern = concern.check_read_concern(read_concern,
                                                        default=database.read_concern)
        # What each command carries, worked out once.
        self._write_options = write_reply_options(self._codec_options)
        self._write_concern_field = concern.write_concern_field(self._write_concern)
        self._acknowledged = self._write_concern.acknowledged
        self._read_concern_field = concern.read_concern_field(self._read_concern)

    # -- what it is ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The collection's name."""
        return self._name

    @property
    def full_name(self) -> str:
        """``database.collection``."""
        return f"{self._db}.{self._name}"

    @property
    def database(self) -> DatabaseLike:
        """The database this collection belongs to."""
        return self._database

    @property
    def codec_options(self) -> CodecOptions[Any]:
        """The codec options its documents are encoded and decoded with."""
        return self._codec_options

    @property
    def read_preference(self) -> _ServerMode:
        """The read preference of its reads."""
        return self._read_preference

    @property
    def write_concern(self) -> WriteConcern:
        """The write concern of its writes."""
        return self._write_concern

    @property
    def read_concern(self) -> ReadConcern:
        """The read concern of its reads."""
        return self._read_concern

    def with_options(self, codec_options: CodecOptions[Any] | None = None,
                     read_preference: _ServerMode | None = None,
                     write_concern: WriteConcern | None = None,
                     read_concern: ReadConcern | None = None) -> Collection:
        """This collection with some options changed (the others kept)."""
        return Collection(
            self._database, self._name,
            codec_options=self._codec_options if codec_options is None else codec_options,
            read_preference=(self._read_preference if read_preference is None
                             else read_preference),
            write_concern=self._write_concern if write_concern is None else write_concern,
            read_concern=self._read_concern if read_concern is None else read_concern)

    def __getitem__(self, name: str) -> Collection:
        """The sub-collection ``<this name>.<name>``."""
        return Collection(self._database, f"{self._name}.{name}",
                          codec_options=self._codec_options,
                          read_preference=self._read_preference,
                          write_concern=self._write_concern, read_concern=self._read_concern)

    def __getattr__(self, name: str) -> Collection:
        if name.startswith("_"):
            raise AttributeError(
                f"Collection has no attribute {name!r}; for the sub-collection "
                f"{self._name}.{name} use collection[{name!r}]")
        return self[name]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Collection):
            return NotImplemented
        return (self._database, self._name) == (other._database, other._name)

    def __hash__(self) -> int:
        return hash((self._db, self._name))

    def __repr__(self) -> str:
        return f"Collection({self._database!r}, {self._name!r})"

    def __bool__(self) -> bool:
        raise NotImplementedError(
            "Collection objects do not implement truth value testing; compare with None")

    def __iter__(self) -> Collection:
        return self

    def __next__(self) -> None:
        """Raise TypeError, as PyMongo's: a Collection is not a cursor (``for x in
        collection`` is a mistake for ``find()``)."""
        raise TypeError("'Collection' object is not iterable")

    next = __next__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # db.coll.insert(...) reads as the sub-collection "coll.insert": say
        # which method is missing, in PyMongo's words.
        if "." not in self._name:
            raise TypeError(
                f"'Collection' object is not callable. If you meant to call the "
                f"'{self._name}' method on a 'Database' object it is failing because no "
                f"such method exists.")
        method = self._name.rpartition(".")[2]
        raise TypeError(
            f"'Collection' object is not callable. If you meant to call the '{method}' "
            f"method on a 'Collection' object it is failing because no such method exists.")

    def options(self, session: Session | None = None, comment: Any = None) -> dict[str, Any]:
        """The options the collection was created with (``capped``,
        ``validator``...), from listCollections; ``{}`` if it does not exist."""
        database = self._database.with_options(codec_options=self._codec_options)
        with database.list_collections(session=session, filter={"name": self._name},
                                       comment=comment) as cursor:
            for description in cursor:
                options = dict(description.get("options", {}))
                options.pop("create", None)
                return options
        return {}

    # -- Atlas Search indexes ---------------------------------------------------------------

    def create_search_index(self, model: Mapping[str, Any] | SearchIndexModel,
                            session: Session | None = None, comment: Any = None,
                            **kwargs: Any) -> str:
        """Create one Atlas Search index (a SearchIndexModel or its document);
        its name."""
        if not isinstance(model, SearchIndexModel):
            if not isinstance(model, Mapping):
                raise TypeError(f"model must be a SearchIndexModel or a document, "
                                f"not {model!r}")
            model = SearchIndexModel(**model)
        return self.create_search_indexes([model], session, comment, **kwargs)[0]

    def create_search_indexes(self, models: list[SearchIndexModel],
                              session: Session | None = None, comment: Any = None,
                              **kwargs: Any) -> list[str]:
        """Create Atlas Search indexes (``createSearchIndexes``); their names."""
        for model in models:
            if not isinstance(model, SearchIndexModel):
                raise TypeError(f"models must be SearchIndexModel objects, not {model!r}")
        command = self._search_command("createSearchIndexes", comment, kwargs)
        command["indexes"] = [model.document for model in models]
        reply = self._run_search_command(command, session)
        return [index["name"] for index in reply["indexesCreated"]]

    def drop_search_index(self, name: str, session: Session | None = None,
                          comment: Any = None, **kwargs: Any) -> None:
        """Drop an Atlas Search index (``dropSearchIndex``); no error if the
        collection does not exist."""
        command = self._search_command("dropSearchIndex", comment, kwargs)
        command["name"] = name
        try:
            self._run_search_command(command, session)
        except OperationFailure as error:
            if error.code != _NAMESPACE_NOT_FOUND:
                raise

    def update_search_index(self, name: str, definition: Mapping[str, Any],
                            session: Session | None = None, comment: Any = None,
                            **kwargs: Any) -> None:
        """Replace an Atlas Search index's definition (``updateSearchIndex``)."""
        command = self._search_command("updateSearchIndex", comment, kwargs)
        command["name"] = name
        command["definition"] = definition
        self._run_search_command(command, session)

    def list_search_indexes(self, name: str | None = None, session: Session | None = None,
                            comment: Any = None, **kwargs: Any) -> CommandCursor:
        """A cursor over the collection's Atlas Search indexes (all, or the one
        named), by the ``$listSearchIndexes`` stage, without the collection's
        read concern (the Index Management spec, as PyMongo's)."""
        stage = {} if name is None else {"name": name}
        return CommandCursor(self._aggregate(self._name, [{"$listSearchIndexes": stage}],
                                             session, None, comment, kwargs,
                                             read_concern=False))

    def _run_search_command(self, command: Outgoing, session: Session | None) -> dict[str, Any]:
        """A search index command: to the primary, with no write concern (as PyMongo's)."""
        ops = self._ops
        deadline = ops.deadline(None, session)
        if session is not None:
            self._check_session(session)
            session.decorate(command)
        return ops.run_command(self._db, command, session, deadline, readpref.WRITE)

    def _search_command(self, name: str, comment: Any, kwargs: Mapping[str, Any]) -> Outgoing:
        command = Outgoing()
        command[name] = self._name
        command.codec_options = self._codec_options
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        return command

    # -- inserts --------------------------------------------------------------------------

    def insert_one(self, document: Any, bypass_document_validation: bool | None = None,
                   session: Session | None = None, comment: Any = None) -> InsertOneResult:
        """Insert one document, giving it an ``_id`` (an ObjectId) if it has none."""
        inserted_id = bulk.assign_id(document)
        command = self._write_command("insert")
        command["ordered"] = True
        command["documents"] = [document]
        if bypass_document_validation is not None or comment is not None:
            _add_options(command, bypass_document_validation, comment)
        reply = self._send_write(command, session)
        if reply is None:
            return InsertOneResult(inserted_id, False)
        if "writeErrors" in reply:
            _raise_write_error(reply)
        return InsertOneResult(inserted_id, True)

    def insert_many(self, documents: Iterable[Any], ordered: bool = True,
                    bypass_document_validation: bool | None = None,
                    session: Session | None = None, comment: Any = None) -> InsertManyResult:
        """Insert documents, in batches the server takes (see
        :mod:`greenpool.client.operations.bulk`)."""
        if (not isinstance(documents, Iterable) or isinstance(documents, Mapping | str | bytes)
                or not documents):
            raise TypeError(f"documents must be a non-empty list of documents, "
                            f"not {documents!r}")
        _check_bool("ordered", ordered)
        builder = bulk.Builder()
        for document in documents:
            builder.add_insert(document)
        self._run_bulk(builder, ordered, bypass_document_validation, session, comment, None)
        return InsertManyResult(bulk.inserted_ids(builder), self._acknowledged)

    # -- updates, replacements, deletes -----------------------------------------------

    def update_one(self, filter: Mapping[str, Any], update: Any, upsert: bool = False,
                   bypass_document_validation: bool | None = None,
                   collation: Mapping[str, Any] | None = None,
                   array_filters: Sequence[Mapping[str, Any]] | None = None,
                   hint: Any = None, session: Session | None = None,
                   let: Mapping[str, Any] | None = None, sort: Mapping[str, Any] | None = None,
                   comment: Any = None) -> UpdateResult:
        """Update the first document ``filter`` matches (``$`` operators or a pipeline)."""
        bulk.check_update(update)
        return self._update(filter, update, upsert, False, bypass_document_validation,
                            collation, array_filters, hint, session, let, sort, comment)

    def update_many(self, filter: Mapping[str, Any], update: Any, upsert: bool = False,
                    array_filters: Sequence[Mapping[str, Any]] | None = None,
                    bypass_document_validation: bool | None = None,
                    collation: Mapping[str, Any] | None = None, hint: Any = None,
                    session: Session | None = None, let: Mapping[str, Any] | None = None,
                    comment: Any = None) -> UpdateResult:
        """Update every document ``filter`` matches."""
        bulk.check_update(update)
        return self._update(filter, update, upsert, True, bypass_document_validation,
                            collation, array_filters, hint, session, let, None, comment)

    def replace_one(self, filter: Mapping[str, Any], replacement: Mapping[str, Any],
                    upsert: bool = False, bypass_document_validation: bool | None = None,
                    collation: Mapping[str, Any] | None = None, hint: Any = None,
                    session: Session | None = None, let: Mapping[str, Any] | None = None,
                    sort: Mapping[str, Any] | None = None,
                    comment: Any = None) -> UpdateResult:
        """Replace the first document ``filter`` matches (no ``$`` operators)."""
        bulk.check_replacement(replacement)
        return self._update(filter, replacement, upsert, False, bypass_document_validation,
                            collation, None, hint, session, let, sort, comment)

    def _update(self, filter: Mapping[str, Any], update: Any, upsert: bool, multi: bool,
                bypass_document_validation: bool | None, collation: Mapping[str, Any] | None,
                array_filters: Sequence[Mapping[str, Any]] | None, hint: Any,
                session: Session | None, let: Mapping[str, Any] | None,
                sort: Mapping[str, Any] | None, comment: Any) -> UpdateResult:
        bulk.check_document("filter", filter)
        _check_bool("upsert", upsert)
        statement: dict[str, Any] = {"q": filter, "u": update, "multi": multi, "upsert": upsert}
        if collation is not None:
            self._check_acknowledged("collation")
            statement["collation"] = collation
        if array_filters is not None:
            self._check_acknowledged("array_filters")
            statement["arrayFilters"] = list(array_filters)
        if hint is not None:
            statement["hint"] = hint if isinstance(hint, str) else index_document(hint)
        if sort is not None:
            statement["sort"] = sort
        command = self._write_command("update")
        command["ordered"] = True
        command["updates"] = [statement]
        if let is not None:
            command["let"] = let
        if bypass_document_validation is not None or comment is not None:
            _add_options(command, bypass_document_validation, comment)
        reply = self._send_write(command, session)
        if reply is None:
            return UpdateResult(None, False)
        if "writeErrors" in reply:
            _raise_write_error(reply)
        result = dict(reply)
        # As PyMongo presents it: updatedExisting, and the upserted _id alone.
        result["updatedExisting"] = bool(result.get("n")) and "upserted" not in result
        if "upserted" in result:
            result["upserted"] = result["upserted"][0]["_id"]
        return UpdateResult(result, True)

    def delete_one(self, filter: Mapping[str, Any], collation: Mapping[str, Any] | None = None,
                   hint: Any = None, session: Session | None = None,
                   let: Mapping[str, Any] | None = None, comment: Any = None) -> DeleteResult:
        """Delete the first document ``filter`` matches."""
        return self._delete(filter, 1, collation, hint, session, let, comment)

    def delete_many(self, filter: Mapping[str, Any], collation: Mapping[str, Any] | None = None,
                    hint: Any = None, session: Session | None = None,
                    let: Mapping[str, Any] | None = None, comment: Any = None) -> DeleteResult:
        """Delete every document ``filter`` matches."""
        return self._delete(filter, 0, collation, hint, session, let, comment)

    def _delete(self, filter: Mapping[str, Any], limit: int,
                collation: Mapping[str, Any] | None, hint: Any, session: Session | None,
                let: Mapping[str, Any] | None, comment: Any) -> DeleteResult:
        bulk.check_document("filter", filter)
        statement: dict[str, Any] = {"q": filter, "limit": limit}
        if collation is not None:
            self._check_acknowledged("collation")
            statement["collation"] = collation
        if hint is not None:
            statement["hint"] = hint if isinstance(hint, str) else index_document(hint)
        command = self._write_command("delete")
        command["ordered"] = True
        command["deletes"] = [statement]
        if let is not None:
            command["let"] = let
        _add_options(command, None, comment)
        reply = self._send_write(command, session)
        if reply is None:
            return DeleteResult({"ok": 1}, False)  # what the link answers, as PyMongo's
        _raise_write_error(reply)
        return DeleteResult(reply, True)

    def bulk_write(self, requests: Sequence[Any], ordered: bool = True,
                   bypass_document_validation: bool | None = None,
                   session: Session | None = None, comment: Any = None,
                   let: Mapping[str, Any] | None = None) -> BulkWriteResult:
        """Run PyMongo's operations (InsertOne, UpdateOne, UpdateMany,
        ReplaceOne, DeleteOne, DeleteMany) as one bulk write."""
        if not isinstance(requests, list):
            raise TypeError(f"requests must be a list of write operations, not {requests!r}")
        _check_bool("ordered", ordered)
        builder = bulk.Builder()
        for request in requests:
            add = getattr(request, "_add_to_bulk", None)
            if add is None:
                raise TypeError(f"{request!r} is not a write operation (InsertOne, UpdateOne, "
                                f"UpdateMany, ReplaceOne, DeleteOne, DeleteMany)")
            add(builder)
        result = self._run_bulk(builder, ordered, bypass_document_validation, session,
                                comment, let)
        if result is None:
            return BulkWriteResult({}, False)
        return BulkWriteResult(result, True)

    def _run_bulk(self, builder: bulk.Builder, ordered: bool, bypass: bool | None,
                  session: Session | None, comment: Any,
                  let: Mapping[str, Any] | None) -> dict[str, Any] | None:
        concern.check_session(session, self._write_concern)
        options: dict[str, Any] = {}
        _add_options(options, bypass, comment)
        return bulk.execute(self, builder, ordered=ordered,
                            acknowledged=self._acknowledged or _in_transaction(session),
                            session=session, options=options, let=let)

    # -- find_one_and_* ---------------------------------------------------------------

    def find_one_and_delete(self, filter: Mapping[str, Any], projection: Any = None,
                            sort: Any = None, hint: Any = None,
                            session: Session | None = None,
                            let: Mapping[str, Any] | None = None, comment: Any = None,
                            **kwargs: Any) -> Any:
        """Delete the first document ``filter`` matches (in ``sort`` order) and return it."""
        kwargs["remove"] = True
        return self._find_and_modify(filter, projection, sort, None, ReturnDocument.BEFORE,
                                     None, hint, session, let, comment, kwargs)

    def find_one_and_replace(self, filter: Mapping[str, Any], replacement: Mapping[str, Any],
                             projection: Any = None, sort: Any = None, upsert: bool = False,
                             return_document: bool = ReturnDocument.BEFORE, hint: Any = None,
                             session: Session | None = None,
                             let: Mapping[str, Any] | None = None, comment: Any = None,
                             **kwargs: Any) -> Any:
        """Replace the first document ``filter`` matches; return it as it was
        (or as it is, with ``return_document=ReturnDocument.AFTER``)."""
        bulk.check_replacement(replacement)
        kwargs["update"] = replacement
        return self._find_and_modify(filter, projection, sort, upsert, return_document,
                                     None, hint, session, let, comment, kwargs)

    def find_one_and_update(self, filter: Mapping[str, Any], update: Any,
                            projection: Any = None, sort: Any = None, upsert: bool = False,
                            return_document: bool = ReturnDocument.BEFORE,
                            array_filters: Sequence[Mapping[str, Any]] | None = None,
                            hint: Any = None, session: Session | None = None,
                            let: Mapping[str, Any] | None = None, comment: Any = None,
                            **kwargs: Any) -> Any:
        """Update the first document ``filter`` matches; return it as it was
        (or as it is, with ``return_document=ReturnDocument.AFTER``)."""
        bulk.check_update(update)
        kwargs["update"] = update
        return self._find_and_modify(filter, projection, sort, upsert, return_document,
                                     array_filters, hint, session, let, comment, kwargs)

    def _find_and_modify(self, filter: Mapping[str, Any], projection: Any, sort: Any,
                         upsert: bool | None, return_document: bool,
                         array_filters: Sequence[Mapping[str, Any]] | None, hint: Any,
                         session: Session | None, let: Mapping[str, Any] | None,
                         comment: Any, fields: dict[str, Any]) -> Any:
        bulk.check_document("filter", filter)
        if not isinstance(return_document, bool):
            raise TypeError(f"return_document must be ReturnDocument.BEFORE or "
                            f"ReturnDocument.AFTER, not {return_document!r}")
        command = self._write_command("findAndModify")
        command.codec_options = self._codec_options  # the document comes back as the user's
        command["query"] = filter
        command["new"] = return_document
        if let is not None:
            command["let"] = let
        collation = fields.pop("collation", None)
        command.update(fields)
        if projection is not None:
            command["fields"] = projection_document(projection)
        if sort is not None:
            command["sort"] = index_document(sort)
        if upsert is not None:
            _check_bool("upsert", upsert)
            command["upsert"] = upsert
        if array_filters is not None:
            self._check_acknowledged("array_filters")
            command["arrayFilters"] = list(array_filters)
        if hint is not None:
            command["hint"] = hint if isinstance(hint, str) else index_document(hint)
        if collation is not None:
            command["collation"] = collation
        if comment is not None:
            command["comment"] = comment
        reply = self._send_write(command, session)
        if reply is None:
            return None
        _raise_write_error(reply)
        return reply.get("value")

    # -- reads ----------------------------------------------------------------------------

    def find(self, *args: Any, **kwargs: Any) -> FindCursor:
        """A cursor over the documents ``filter`` matches, with PyMongo's
        find arguments and builder methods; nothing is sent until it is read."""
        return FindCursor(self, *args, **kwargs)

    def find_raw_batches(self, *args: Any, **kwargs: Any) -> RawBatchCursor:
        """:meth:`find`, read a batch at a time: each batch's documents as
        the server sent them, in one ``bytes`` (``bson.decode_all`` reads it)."""
        return RawBatchCursor(self, *args, **kwargs)

    def find_one(self, filter: Any = None, *args: Any, **kwargs: Any) -> Any:
        """The first document ``filter`` matches, or None. A ``filter`` that
        is not a document is an ``_id``: ``find_one(oid)``."""
        if filter is not None and type(filter) is not dict and not isinstance(filter, Mapping):
            filter = {"_id": filter}
        if args or kwargs:
            command, session = FindCursor(self, filter, *args, **kwargs)._single_batch_command()
        else:
            # The common case, built directly: what FindCursor builds for limit(-1).
            command, session = self._read_command("find"), None
            command["filter"] = {} if filter is None else filter
            command["limit"] = 1
            command["singleBatch"] = True
        reply = self._read(command, session)
        batch = reply["cursor"]["firstBatch"]
        return batch[0] if batch else None

    def count_documents(self, filter: Mapping[str, Any], session: Session | None = None,
                        comment: Any = None, **kwargs: Any) -> int:
        """How many documents ``filter`` matches (an aggregation; ``skip``,
        ``limit``, ``hint``, ``collation``, ``maxTimeMS`` as keywords)."""
        bulk.check_document("filter", filter)
        pipeline: list[dict[str, Any]] = [{"$match": filter}]
        if "skip" in kwargs:
            pipeline.append({"$skip": kwargs.pop("skip")})
        if "limit" in kwargs:
            pipeline.append({"$limit": kwargs.pop("limit")})
        pipeline.append({"$group": {"_id": 1, "n": {"$sum": 1}}})
        if "hint" in kwargs and not isinstance(kwargs["hint"], str):
            kwargs["hint"] = index_document(kwargs["hint"])
        command = self._read_command("aggregate")
        command["pipeline"] = pipeline
        command["cursor"] = {}
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        batch = self._read(command, session)["cursor"]["firstBatch"]
        return int(batch[0]["n"]) if batch else 0

    def estimated_document_count(self, comment: Any = None, **kwargs: Any) -> int:
        """The collection's document count from its metadata (the ``count`` command)."""
        if "session" in kwargs:
            raise InvalidOperation("estimated_document_count does not take a session")
        command = self._read_command("count")
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        try:
            return int(self._read(command, None)["n"])
        except OperationFailure as error:
            if error.code == _NAMESPACE_NOT_FOUND:
                return 0  # no such collection: none, as PyMongo says
            raise

    def distinct(self, key: str, filter: Mapping[str, Any] | None = None,
                 session: Session | None = None, comment: Any = None,
                 hint: Any = None, **kwargs: Any) -> list[Any]:
        """The distinct values of ``key`` among the documents ``filter`` matches."""
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {key!r}")
        command = self._read_command("distinct")
        command["key"] = key
        if filter is not None:
            bulk.check_document("filter", filter)
            command["query"] = filter
        if hint is not None:
            command["hint"] = hint if isinstance(hint, str) else index_document(hint)
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        values: list[Any] = self._read(command, session)["values"]
        return values

    def aggregate(self, pipeline: Sequence[Mapping[str, Any]], session: Session | None = None,
                  let: Mapping[str, Any] | None = None, comment: Any = None,
                  **kwargs: Any) -> CommandCursor:
        """Run an aggregation pipeline; a cursor over its results. A
        pipeline ending in ``$out`` or ``$merge`` writes (with the
        collection's write concern) and returns no documents. Command
        options as keywords (``allowDiskUse``, ``maxTimeMS``, ``hint``...);
        ``batchSize`` sizes every batch (but a writing pipeline's first,
        which the CRUD spec leaves to the server) and ``maxAwaitTimeMS`` is
        each getMore's maxTimeMS, as PyMongo sends them."""
        return CommandCursor(self._aggregate(self._name, pipeline, session, let, comment,
                                             kwargs))

    def aggregate_raw_batches(self, pipeline: Sequence[Mapping[str, Any]],
                              session: Session | None = None, comment: Any = None,
                              **kwargs: Any) -> RawBatchCommandCursor:
        """:meth:`aggregate`, read a batch at a time as :meth:`find_raw_batches`
        reads. The aggregate asks for an empty first batch (a writing one
        aside), as PyMongo's does: every batch comes from a getMore."""
        return RawBatchCommandCursor(self._aggregate(self._name, pipeline, session, None,
                                                     comment, kwargs, raw_batches=True))

    def watch(self, pipeline: Sequence[Mapping[str, Any]] | None = None,
              full_document: str | None = None, resume_after: Mapping[str, Any] | None = None,
              max_await_time_ms: int | None = None, batch_size: int | None = None,
              collation: Any = None, start_at_operation_time: Timestamp | None = None,
              session: Session | None = None, start_after: Mapping[str, Any] | None = None,
              comment: Any = None, full_document_before_change: str | None = None,
              show_expanded_events: bool | None = None) -> ChangeStream:
        """A change stream of this collection's changes (PyMongo's
        ``Collection.watch``; see :mod:`greenpool.client.api.changestream`), with
        ``pipeline``'s stages after ``$changeStream``."""
        return self._watch(self._name, pipeline, full_document, resume_after,
                           max_await_time_ms, batch_size, collation, start_at_operation_time,
                           session, start_after, comment, full_document_before_change,
                           show_expanded_events)

    def _watch(self, target: str | int, pipeline: Sequence[Mapping[str, Any]] | None,
               full_document: str | None, resume_after: Mapping[str, Any] | None,
               max_await_time_ms: int | None, batch_size: int | None, collation: Any,
               start_at_operation_time: Timestamp | None, session: Session | None,
               start_after: Mapping[str, Any] | None, comment: Any,
               full_document_before_change: str | None, show_expanded_events: bool | None,
               *, cluster: bool = False) -> ChangeStream:
        """A change stream of an aggregate on ``target``, as :meth:`_aggregate`'s; of
        the whole deployment (``allChangesForCluster``) with ``cluster``."""
        stages = check_watch_options(pipeline, full_document, full_document_before_change,
                                     batch_size, max_await_time_ms, start_at_operation_time)
        options: dict[str, Any] = {"batchSize": batch_size, "maxAwaitTimeMS": max_await_time_ms}
        collation = validate_collation_or_none(collation)
        if collation is not None:
            options["collation"] = collation

        # Under a time limit, each next() gets it anew, its resume included (the CSOT
        # spec's change streams).
        deadline = self._ops.deadline(None, session)
        limit = deadline.limit if deadline is not None and deadline.bounded else None
        mode = ITERATION if limit is not None else None

        def open_cursor(full: list[Mapping[str, Any]]) -> Cursor:
            return self._aggregate(target, full, session, None, comment, dict(options),
                                   timeout_mode=mode)

        return ChangeStream(open_cursor, stages, time_limit=limit, full_document=full_document,
                            full_document_before_change=full_document_before_change,
                            resume_after=resume_after, start_after=start_after,
                            start_at_operation_time=start_at_operation_time,
                            show_expanded_events=show_expanded_events,
                            all_changes_for_cluster=cluster)

    def _aggregate(self, target: str | int, pipeline: Sequence[Mapping[str, Any]],
                   session: Session | None, let: Mapping[str, Any] | None, comment: Any,
                   kwargs: dict[str, Any], *, timeout_mode: str | None = None,
                   raw_batches: bool = False, read_concern: bool = True) -> Cursor:
        """An aggregate's cursor, on ``target``: this collection's name, or 1 for a
        database's collection-less stages (``Database.aggregate``)."""
        if not isinstance(pipeline, list):
            raise TypeError(f"pipeline must be a list of stages, not {pipeline!r}")
        writes = bool(pipeline) and isinstance(pipeline[-1], Mapping) and (
            "$out" in pipeline[-1] or "$merge" in pipeline[-1])
        command = self._read_command("aggregate", read_concern=read_concern)
        command["aggregate"] = target
        command["pipeline"] = pipeline
        batch_size = kwargs.pop("batchSize", kwargs.pop("batch_size", None))
        command["cursor"] = {} if batch_size is None or writes else {"batchSize": batch_size}
        if raw_batches and not writes:
            command["cursor"] = {"batchSize": 0}
        max_await = kwargs.pop("maxAwaitTimeMS", kwargs.pop("max_await_time_ms", None))
        if "maxTimeMS" not in kwargs and "max_time_ms" in kwargs:
            kwargs["maxTimeMS"] = kwargs.pop("max_time_ms")
        if "allowDiskUse" not in kwargs and "allow_disk_use" in kwargs:
            kwargs["allowDiskUse"] = kwargs.pop("allow_disk_use")
        if "hint" in kwargs and not isinstance(kwargs["hint"], str):
            kwargs["hint"] = index_document(kwargs["hint"])
        command.update(kwargs)
        if let is not None:
            command["let"] = let
        if comment is not None:
            command["comment"] = comment
        in_transaction = session is not None and session.in_transaction
        field = self._write_concern_field
        if writes and field is not None and self._ops.deadline(None, session) is not None:
            field = concern.timed(field)
        if writes and field is not None and not in_transaction:
            command["writeConcern"] = field
        return self._open_cursor(command, session, batch_size or None,
                                 max_await_time_ms=max_await, timeout_mode=timeout_mode,
                                 raw_batches=raw_batches)

    # -- indexes --------------------------------------------------------------------------

    def create_index(self, keys: Any, session: Session | None = None, comment: Any = None,
                     **kwargs: Any) -> str:
        """Create an index on ``keys`` (a name, or ``[(name, direction)...]``);
        return its name. Index options (``unique``, ``name``...) as keywords."""
        options: dict[str, Any] = {
            key: kwargs.pop(key) for key in ("maxTimeMS", "commitQuorum") if key in kwargs}
        key = index_document(keys)
        document = dict(kwargs)
        if document.get("name") is None:
            document["name"] = index_name(key)
        document["key"] = key
        return self._create_indexes([document], session, comment, options)[0]

    def create_indexes(self, indexes: Sequence[IndexModel], session: Session | None = None,
                       comment: Any = None, **kwargs: Any) -> list[str]:
        """Create the indexes PyMongo's :class:`~pymongo.operations.IndexModel`
        objects describe; return their names."""
        if not isinstance(indexes, list):
            raise TypeError(f"indexes must be a list of IndexModel, not {indexes!r}")
        documents = []
        for index in indexes:
            if not isinstance(index, IndexModel):
                raise TypeError(f"{index!r} is not a pymongo.operations.IndexModel")
            documents.append(index.document)
        return self._create_indexes(documents, session, comment, kwargs)

    def _create_indexes(self, documents: list[dict[str, Any]], session: Session | None,
                        comment: Any, options: Mapping[str, Any]) -> list[str]:
        command = self._write_command("createIndexes")
        command["indexes"] = documents
        command.update(options)
        if comment is not None:
            command["comment"] = comment
        self._run_write_command(command, session)
        return [document["name"] for document in documents]

    def drop_index(self, index_or_name: Any, session: Session | None = None,
                   comment: Any = None, **kwargs: Any) -> None:
        """Drop an index by name, or by the keys it was created with."""
        name = index_or_name
        if isinstance(index_or_name, list):
            name = index_name(index_document(index_or_name))
        if not isinstance(name, str):
            raise TypeError(f"index_or_name must be an index name or a list of "
                            f"(key, direction) pairs, not {index_or_name!r}")
        command = self._write_command("dropIndexes")
        command["index"] = name
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        self._run_write_command(command, session)

    def drop_indexes(self, session: Session | None = None, comment: Any = None,
                     **kwargs: Any) -> None:
        """Drop every index but the one on ``_id``."""
        self.drop_index("*", session=session, comment=comment, **kwargs)

    def list_indexes(self, session: Session | None = None,
                     comment: Any = None) -> CommandCursor:
        """A cursor over the collection's index documents (none if it does not exist)."""
        command = self._read_command("listIndexes", read_concern=False)
        command["cursor"] = {}
        if comment is not None:
            command["comment"] = comment
        try:
            cursor = self._open_cursor(command, session, None, readpref.PRIMARY)
        except OperationFailure as error:
            if error.code != _NAMESPACE_NOT_FOUND:
                raise
            return CommandCursor(None)
        return CommandCursor(cursor)

    def index_information(self, session: Session | None = None,
                          comment: Any = None) -> dict[str, Any]:
        """The indexes as PyMongo gives them:
        ``{name: {"key": [(field, direction)...], ...}}``."""
        information = {}
        for index in self.list_indexes(session=session, comment=comment):
            index = dict(index)
            index["key"] = list(index["key"].items())
            information[index.pop("name")] = index
        return information

    # -- the collection itself --------------------------------------------------------------

    def drop(self, session: Session | None = None, comment: Any = None,
             encrypted_fields: Mapping[str, Any] | None = None) -> None:
        """Drop the collection (nothing happens if it does not exist)."""
        if encrypted_fields is not None:
            raise InvalidOperation("greenpool.Client does not do queryable encryption; use "
                                   "greenpool.pymongo.MongoClient for encrypted_fields")
        command = self._write_command("drop")
        if comment is not None:
            command["comment"] = comment
        try:
            self._run_write_command(command, session)
        except OperationFailure as error:
            if error.code != _NAMESPACE_NOT_FOUND:
                raise

    def rename(self, new_name: str, session: Session | None = None, comment: Any = None,
               **kwargs: Any) -> dict[str, Any]:
        """Rename the collection (``dropTarget=True`` replaces an existing one)."""
        check_collection_name(new_name)
        command = Outgoing()
        command["renameCollection"] = self.full_name
        command["to"] = f"{self._db}.{new_name}"
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        return self._run_write_command(command, session, dbname="admin")

    # -- sending (bulk.Sender, database.py and findcursor.py use these) ----------------------

    def _send_write(self, command: Outgoing, session: Session | None, *,
                   acknowledged: bool | None = None) -> dict[str, Any] | None:
        """Send a write command built by :meth:`_write_command`, with the
        collection's write concern (or, for ``acknowledged``, w=0 or the
        server's default); its reply, or None if unacknowledged."""
        ops = self._ops
        if acknowledged is None:
            # In a transaction the collection's write concern is not sent (the
            # transaction's goes on its commit), w=0 included.
            acknowledged = self._acknowledged or _in_transaction(session)
            field = self._write_concern_field
        else:
            field = None if acknowledged else {"w": 0}
        if not acknowledged:
            concern.check_session(session, self._write_concern)
            command["writeConcern"] = field
            command.unacknowledged = True
            deadline = ops.deadline(None, None)
            with ops.lease(None, Purpose.OTHER, name=next(iter(command)),
                           deadline=deadline) as conn:
                ops.send(conn, self._db, command, None, deadline)
            return None
        deadline = ops.deadline(None, session)
        if deadline is not None:
            field = concern.timed(field)
        if session is not None:
            self._check_session(session)
            if field is not None and not session.in_transaction:
                command["writeConcern"] = field
            session.decorate(command)
        elif field is not None:
            command["writeConcern"] = field
        return ops.run_command(self._db, command, session, deadline, readpref.WRITE)

    def _run_write_command(self, command: Outgoing, session: Session | None, *,
                          dbname: str | None = None) -> dict[str, Any]:
        """A command that writes but is not a CRUD write (createIndexes,
        drop...): acknowledged whatever the write concern, and its
        writeConcernError raised, as PyMongo's helpers do."""
        if not self._acknowledged:
            self._send_write(command, session)
            return {"ok": 1}
        ops = self._ops
        deadline = ops.deadline(None, session)
        field = self._write_concern_field if deadline is None else concern.timed(
            self._write_concern_field)
        if session is not None:
            self._check_session(session)
            if field is not None and not session.in_transaction:
                command["writeConcern"] = field
            session.decorate(command)
        elif field is not None:
            command["writeConcern"] = field
        return ops.run_command(dbname or self._db, command, session, deadline,
                               readpref.WRITE)

    def _read(self, command: Outgoing, session: Session | None) -> dict[str, Any]:
        """Run a read command that answers in one reply, with the collection's
        read preference (primary inside a transaction)."""
        ops = self._ops
        deadline = ops.deadline(None, session)
        preference = self._read_preference
        if session is not None:
            preference = self._in_session(command, session, preference)
            session.decorate(command)
        return ops.run_command(self._db, command, session, deadline, preference)

    def _open_cursor(self, command: Outgoing, session: Session | None, batch_size: int | None,
                     preference: _ServerMode | None = None, *,
                     max_await_time_ms: int | None = None,
                     timeout_mode: str | None = None, raw_batches: bool = False,
                     exhaust: bool = False) -> Cursor:
        """Open a server cursor with ``command`` (find, aggregate, list*);
        ``raw_batches``: one that reads each batch as its BSON bytes;
        ``exhaust``: one whose getMores are an exhaust stream."""
        preference = preference or self._read_preference
        if session is not None:
            preference = self._in_session(command, session, preference)
        return Cursor(self._ops, self._db, command, batch_size=batch_size, session=session,
                      read_preference=preference,
                      max_await_time_ms=max_await_time_ms, timeout_mode=timeout_mode,
                      raw_batches=raw_batches, exhaust=exhaust)

    def _in_session(self, command: Outgoing, session: Session,
                    preference: _ServerMode) -> _ServerMode:
        """A read in ``session``: in a transaction, the transaction's read
        preference (primary) and read concern (on its first command) apply;
        outside one, the session's causal consistency or snapshot."""
        self._check_session(session)
        if session.in_transaction:
            command.pop("readConcern", None)
            return session.transaction_read_preference()
        if next(iter(command)) in _READ_CONCERN_READS:
            session.add_read_concern(command)
        return preference

    def _read_command(self, name: str, *, read_concern: bool = True) -> Outgoing:
        """A new read command on this collection, with its read concern."""
        command = Outgoing()
        command[name] = self._name
        command.codec_options = self._codec_options
        if read_concern and self._read_concern_field is not None:
            command["readConcern"] = self._read_concern_field
        return command

    def _limits(self, session: Session | None) -> bulk.Limits:
        """The server's write limits, from the hello of a connection to it
        (a transaction's pinned one, if any)."""
        ops = self._ops
        with ops.lease(session, Purpose.OTHER, deadline=ops.deadline(None, session)) as conn:
            assert conn.transport is not None  # a checked-out connection is established
            return bulk.Limits(conn.transport.hello)

    # -- internals ------------------------------------------------------------------------

    def _write_command(self, name: str) -> Outgoing:
        command = Outgoing()
        command[name] = self._name
        command.codec_options = self._write_options
        return command

    def _check_session(self, session: Session) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a greenpool Session (client.start_session()), "
                            f"not {session!r}")
        if session.operations is not self._ops:
            raise InvalidOperation("the session was started by another client")

    def _check_acknowledged(self, option: str) -> None:
        if not self._acknowledged:
            raise ConfigurationError(
                f"{option} cannot be used with an unacknowledged write concern (w=0): the "
                f"server's answer would be lost")


def _add_options(command: dict[str, Any], bypass_document_validation: bool | None,
                 comment: Any) -> None:
    if bypass_document_validation is not None:
        _check_bool("bypass_document_validation", bypass_document_validation)
        command["bypassDocumentValidation"] = bypass_document_validation
    if comment is not None:
        command["comment"] = comment


def _raise_write_error(reply: Mapping[str, Any]) -> None:
    """Raise the last write error of a single write's reply, as PyMongo does."""
    errors = reply.get("writeErrors")
    if not errors:
        return
    error = errors[-1]
    code = error.get("code")
    if code == 11000:
        raise DuplicateKeyError(error.get("errmsg"), code, error)
    raise WriteError(error.get("errmsg"), code, error)


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")


def _in_transaction(session: Session | None) -> bool:
    return session is not None and session.in_transaction
