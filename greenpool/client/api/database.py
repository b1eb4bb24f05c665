"""A database, as PyMongo's :class:`~pymongo.database.Database` has it.

::

    shop = client.shop                      # or client["shop"], client.get_database("shop")
    shop.command("ping")
    shop.list_collection_names()
    orders = shop.get_collection("orders", write_concern=WriteConcern(w="majority"))

A database holds the options its collections inherit (codec options, read
preference, write and read concern), resolved when it is made; it runs
database commands (:meth:`Database.command`, the generic command method,
to which no read or write concern is added, as the Read and Write Concern
spec says) and makes :class:`~greenpool.client.api.collection.Collection`
objects.

:class:`Defaults` is what a Client resolves once from its connection string
and codec keywords: the options its databases inherit.

Rules. This module imports ``collection.py`` and never ``client.py``: a
database's client is whatever object made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from bson.dbref import DBRef
from bson.timestamp import Timestamp
from pymongo.errors import CollectionInvalid, InvalidOperation, OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import _ServerMode
from pymongo.write_concern import WriteConcern

from greenpool.client.api.changestream import ChangeStream
from greenpool.client.api.collection import Collection
from greenpool.client.api.cursor import Cursor
from greenpool.client.api.findcursor import CommandCursor
from greenpool.client.config import readpref
from greenpool.client.config.codecs import check_codec_options, client_codec_options
from greenpool.client.config.settings import ClientSettings
from greenpool.client.operations import concern
from greenpool.client.operations.operations import Operations
from greenpool.client.operations.session import Session
from greenpool.wire.messages import Outgoing, check_database_name

__all__ = ["CACHED_NAMES", "Database", "Defaults"]

_NAMESPACE_NOT_FOUND = 26
# The namespace of a database aggregate's cursor (the server names it so).
_AGGREGATE_NAMESPACE = "$cmd.aggregate"
# Databases and collections made with their parent's options are kept, so that
# ``client.shop.orders`` in a loop resolves nothing again; bounded, so that a
# program that makes up names cannot grow the caches forever.
CACHED_NAMES = 1000


class Defaults:
    """A client's options for its databases: codec options (the URI's
    uuidRepresentation under the codec keywords), read preference
    (readPreference, readPreferenceTags, maxStalenessSeconds), write concern
    (w, wTimeoutMS, journal) and read concern (readConcernLevel)."""

    __slots__ = ("codec_options", "databases", "read_concern", "read_preference",
                 "write_concern")

    def __init__(self, settings: ClientSettings, codec_keywords: Mapping[str, Any]) -> None:
        #: The client's databases with these options, by name (see CACHED_NAMES).
        self.databases: dict[str, Database] = {}
        self.codec_options = client_codec_options(settings.extra.get("uuidrepresentation"),
                                                  codec_keywords)
        self.read_preference = settings.read_preference_object()
        self.write_concern, self.read_concern = concern.from_settings(settings.extra)


class Database:
    """A database; see the module's docstring."""

    def __init__(self, client: Any, name: str, operations: Operations, *,
                 codec_options: CodecOptions[Any], read_preference: _ServerMode,
                 write_concern: WriteConcern, read_concern: ReadConcern) -> None:
        check_database_name(name)
        self._client = client
        self._name = name
        self._ops = operations
        self._codec_options = codec_options
        self._read_preference = read_preference
        self._write_concern = write_concern
        self._read_concern = read_concern
        self._collections: dict[str, Collection] = {}

    # -- what it is ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The database's name."""
        return self._name

    @property
    def client(self) -> Any:
        """The client this database belongs to."""
        return self._client

    @property
    def operations(self) -> Operations:
        """The client's operations, through which this database's commands run."""
        return self._ops

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
                     read_preference: Any = None, write_concern: WriteConcern | None = None,
                     read_concern: ReadConcern | None = None) -> Database:
        """This database with some options changed (the others kept)."""
        return Database(
            self._client, self._name, self._ops,
            codec_options=check_codec_options(codec_options, default=self._codec_options),
            read_preference=(self._read_preference if read_preference is None
                             else readpref.coerce(read_preference)),
            write_concern=concern.check_write_concern(write_concern,
                                                      default=self._write_concern),
            read_concern=concern.check_read_concern(read_concern, default=self._read_concern))

    # -- collections ----------------------------------------------------------------------

    def get_collection(self, name: str, codec_options: CodecOptions[Any] | None = None,
                       read_preference: Any = None, write_concern: WriteConcern | None = None,
                       read_concern: ReadConcern | None = None) -> Collection:
        """The collection ``name``, with this database's options unless given."""
        return Collection(self, name, codec_options=codec_options,
                          read_preference=read_preference, write_concern=write_concern,
                          read_concern=read_concern)

    def __getitem__(self, name: str) -> Collection:
        collection = self._collections.get(name)
        if collection is None:
            collection = Collection(self, name)
            if len(self._collections) < CACHED_NAMES:
                self._collections[name] = collection
        return collection

    def __getattr__(self, name: str) -> Collection:
        if name.startswith("_"):
            raise AttributeError(
                f"Database has no attribute {name!r}; for the collection {name!r} use "
                f"database[{name!r}]")
        return self[name]

    def list_collections(self, session: Session | None = None,
                         filter: Mapping[str, Any] | None = None, comment: Any = None,
                         **kwargs: Any) -> CommandCursor:
        """A cursor over the database's collection descriptions."""
        command = Outgoing()
        command["listCollections"] = 1
        command["cursor"] = {}
        command.codec_options = self._codec_options
        if filter is not None:
            if not isinstance(filter, Mapping):
                raise TypeError(f"filter must be a document, not {filter!r}")
            command["filter"] = filter
        command.update(kwargs)
        if comment is not None:
            command["comment"] = comment
        return CommandCursor(self._cursor(command, session))

    def list_collection_names(self, session: Session | None = None,
                              filter: Mapping[str, Any] | None = None, comment: Any = None,
                              **kwargs: Any) -> list[str]:
        """The names of the database's collections."""
        # The Enumerate Collections spec: nameOnly unless the filter asks
        # about more than the name.
        if filter is None or not filter or (len(filter) == 1 and "name" in filter):
            kwargs["nameOnly"] = True
        return [each["name"] for each in self.list_collections(
            session=session, filter=filter, comment=comment, **kwargs)]

    def create_collection(self, name: str, codec_options: CodecOptions[Any] | None = None,
                          read_preference: Any = None,
                          write_concern: WriteConcern | None = None,
                          read_concern: ReadConcern | None = None,
                          session: Session | None = None, check_exists: bool | None = True,
                          **kwargs: Any) -> Collection:
        """Create the collection ``name`` (options such as ``capped``,
        ``validator`` as keywords) and return it; CollectionInvalid if it
        exists (unless ``check_exists=False``, when the server decides)."""
        collection = self.get_collection(name, codec_options, read_preference, write_concern,
                                         read_concern)
        in_transaction = session is not None and session.in_transaction
        if check_exists and not in_transaction and name in self.list_collection_names(
                session=session, filter={"name": name}):
            raise CollectionInvalid(f"collection {name} already exists")
        command = Outgoing()
        command["create"] = name
        command.update(kwargs)
        collection._run_write_command(command, session)
        return collection

    def drop_collection(self, name_or_collection: str | Collection,
                        session: Session | None = None, comment: Any = None,
                        encrypted_fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Drop a collection; the server's reply (the "ns not found" one if
        there was no such collection, which is not an error)."""
        name = (name_or_collection.name if isinstance(name_or_collection, Collection)
                else name_or_collection)
        if not isinstance(name, str):
            raise TypeError(f"name_or_collection must be a collection name or a Collection, "
                            f"not {name_or_collection!r}")
        if encrypted_fields is not None:
            raise InvalidOperation("greenpool.Client does not do queryable encryption; use "
                                   "greenpool.pymongo.MongoClient for encrypted_fields")
        command = Outgoing()
        command["drop"] = name
        if comment is not None:
            command["comment"] = comment
        try:
            return self.get_collection(name)._run_write_command(command, session)
        except OperationFailure as error:
            if error.code != _NAMESPACE_NOT_FOUND:
                raise
            return dict(error.details or {})

    def validate_collection(self, name_or_collection: str | Collection,
                            scandata: bool = False, full: bool = False,
                            session: Session | None = None, background: bool | None = None,
                            comment: Any = None) -> dict[str, Any]:
        """The server's ``validate`` of a collection; CollectionInvalid when it
        finds the collection invalid (on any shard), as PyMongo's."""
        name = (name_or_collection.name if isinstance(name_or_collection, Collection)
                else name_or_collection)
        if not isinstance(name, str):
            raise TypeError(f"name_or_collection must be a collection name or a Collection, "
                            f"not {name_or_collection!r}")
        command: dict[str, Any] = {"validate": name, "scandata": scandata, "full": full}
        if background is not None:
            command["background"] = background
        reply: dict[str, Any] = self.command(command, session=session, comment=comment)
        results = reply["raw"].values() if "raw" in reply else [reply]
        for result in results:
            if not result.get("valid", False) or result.get("errors"):
                raise CollectionInvalid(f"collection {self._name}.{name} is invalid: "
                                        f"{result!r}")
        return reply

    def dereference(self, dbref: DBRef, session: Session | None = None, comment: Any = None,
                    **kwargs: Any) -> Any:
        """The document a :class:`~bson.dbref.DBRef` points to, or None (its
        database must be this one); ``kwargs`` go to ``find_one``."""
        if not isinstance(dbref, DBRef):
            raise TypeError(f"dereference() takes a bson.dbref.DBRef, not {dbref!r}")
        if dbref.database is not None and dbref.database != self._name:
            raise ValueError(f"the DBRef points to the database {dbref.database!r}, not to "
                             f"{self._name!r}")
        return self[dbref.collection].find_one({"_id": dbref.id}, session=session,
                                                comment=comment, **kwargs)

    # -- commands -------------------------------------------------------------------------

    def command(self, command: str | Mapping[str, Any], value: Any = 1, check: bool = True,
                allowable_errors: Sequence[str | int] | None = None,
                read_preference: Any = None,
                codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
                session: Session | None = None, comment: Any = None,
                **kwargs: Any) -> Any:
        """Run a command on this database and return the server's reply:
        ``db.command("ping")``, ``db.command("count", "orders", query={...})``
        or ``db.command({"count": "orders"})``. As the generic command
        method, it adds no read or write concern; ``read_preference``
        defaults to primary. ``check=False`` returns a refusal's reply
        rather than raising it; so does a refusal whose code or message is in
        ``allowable_errors``, as PyMongo's."""
        document = Outgoing()
        if isinstance(command, str):
            document[command] = value
        elif isinstance(command, Mapping):
            document.update(command)
        else:
            raise TypeError(f"command must be a command name or a document, not {command!r}")
        document.update(kwargs)
        if comment is not None:
            document["comment"] = comment
        document.codec_options = check_codec_options(codec_options,
                                                     default=DEFAULT_CODEC_OPTIONS)
        preference = command_preference(read_preference, session)
        try:
            return self._run(document, session, preference)
        except OperationFailure as error:
            if check and not (allowable_errors and (
                    error.code in allowable_errors
                    or (error.details or {}).get("errmsg") in allowable_errors)):
                raise
            return error.details

    def cursor_command(self, command: str | Mapping[str, Any], value: Any = 1,
                       read_preference: Any = None,
                       codec_options: CodecOptions[Any] | None = None,
                       session: Session | None = None, comment: Any = None,
                       max_await_time_ms: int | None = None, **kwargs: Any) -> CommandCursor:
        """Run a command that opens a cursor (``db.cursor_command("find",
        "orders", filter={...})``) and return a cursor over its documents,
        as PyMongo's does: like :meth:`command` (no read or write concern
        added, primary unless ``read_preference`` says otherwise, never
        retried), the reply read with ``codec_options``; ``comment`` goes on
        each getMore, and ``max_await_time_ms`` is each getMore's maxTimeMS
        (a tailable awaitData cursor's wait for new data)."""
        document = Outgoing()
        if isinstance(command, str):
            document[command] = value
        elif isinstance(command, Mapping):
            document.update(command)
        else:
            raise TypeError(f"command must be a command name or a document, not {command!r}")
        document.update(kwargs)
        document.codec_options = check_codec_options(codec_options,
                                                     default=DEFAULT_CODEC_OPTIONS)
        if session is not None:
            _check_session(session, self._ops)
        preference = command_preference(read_preference, session)
        return CommandCursor(Cursor(
            self._ops, self._name, document, batch_size=None, session=session,
            read_preference=preference, retry=False, comment=comment,
            max_await_time_ms=max_await_time_ms))

    def aggregate(self, pipeline: list[Mapping[str, Any]], session: Session | None = None,
                  **kwargs: Any) -> CommandCursor:
        """Run an aggregation pipeline of collection-less stages
        (``$currentOp``, ``$listLocalSessions``...) on this database; a
        cursor over its results. Options as for
        :meth:`Collection.aggregate <greenpool.client.api.collection.Collection.aggregate>`
        (``let`` and ``comment`` among the keywords), with this database's
        read preference, read and write concern."""
        let, comment = kwargs.pop("let", None), kwargs.pop("comment", None)
        return CommandCursor(Collection(self, _AGGREGATE_NAMESPACE)._aggregate(
            1, pipeline, session, let, comment, kwargs))

    def watch(self, pipeline: list[Mapping[str, Any]] | None = None,
              full_document: str | None = None, resume_after: Mapping[str, Any] | None = None,
              max_await_time_ms: int | None = None, batch_size: int | None = None,
              collation: Any = None, start_at_operation_time: Timestamp | None = None,
              session: Session | None = None, start_after: Mapping[str, Any] | None = None,
              comment: Any = None, full_document_before_change: str | None = None,
              show_expanded_events: bool | None = None) -> ChangeStream:
        """A change stream of the changes to every collection of this database
        (PyMongo's ``Database.watch``), with ``pipeline``'s stages after
        ``$changeStream``; the arguments are :meth:`Collection.watch
        <greenpool.client.api.collection.Collection.watch>`'s."""
        return self._watch(pipeline, full_document, resume_after, max_await_time_ms,
                           batch_size, collation, start_at_operation_time, session,
                           start_after, comment, full_document_before_change,
                           show_expanded_events)

    def _watch(self, *arguments: Any, cluster: bool = False) -> ChangeStream:
        return Collection(self, _AGGREGATE_NAMESPACE)._watch(1, *arguments, cluster=cluster)

    def _run(self, command: Outgoing, session: Session | None,
             preference: _ServerMode) -> dict[str, Any]:
        ops = self._ops
        deadline = ops.deadline(None, session)
        if session is not None:
            _check_session(session, ops)
            session.decorate(command)
        return ops.run_command(self._name, command, session, deadline, preference)

    def _cursor(self, command: Outgoing, session: Session | None) -> Cursor:
        if session is not None:
            _check_session(session, self._ops)
        return Cursor(self._ops, self._name, command, batch_size=None, session=session,
                      read_preference=readpref.PRIMARY)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Database):
            return NotImplemented
        return (self._client, self._name) == (other._client, other._name)

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f"Database({self._client!r}, {self._name!r})"

    def __bool__(self) -> bool:
        raise NotImplementedError(
            "Database objects do not implement truth value testing; compare with None")

    def __iter__(self) -> Database:
        return self

    def __next__(self) -> Any:
        """Raise TypeError, as PyMongo's: a Database is not a cursor (``for x in
        database`` is a mistake for ``find()``)."""
        raise TypeError("'Database' object is not iterable")

    next = __next__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # client.nme(...) reads as the database "nme": say which method is missing.
        raise TypeError(
            f"'Database' object is not callable. If you meant to call the '{self._name}' "
            f"method on a 'Client' object it is failing because no such method exists.")


def command_preference(given: Any, session: Session | None,
                       default: _ServerMode = readpref.PRIMARY) -> _ServerMode:
    """A command's read preference: the one given, else ``default``; in a
    transaction, the transaction's unless one is given, and either way primary
    (the Transactions spec), else InvalidOperation."""
    if session is not None and session.in_transaction:
        if given is None:
            return session.transaction_read_preference()
        preference = readpref.coerce(given)
        if preference.mode != readpref.PRIMARY.mode:
            raise InvalidOperation(f"read preference in a transaction must be primary, not "
                                   f"{preference.document!r}")
        return preference
    return default if given is None else readpref.coerce(given)


def _check_session(session: Session, ops: Operations) -> None:
    if not isinstance(session, Session):
        raise TypeError(f"session must be a greenpool Session (client.start_session()), "
                        f"not {session!r}")
    if session.operations is not ops:
        raise InvalidOperation("the session was started by another client")
