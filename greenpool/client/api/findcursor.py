"""PyMongo's cursors on greenpool's: :class:`FindCursor` and :class:`CommandCursor`.

:class:`FindCursor` is what ``collection.find()`` returns: nothing is sent
until it is read, and until then PyMongo's builder methods shape the
``find`` command (``sort``, ``skip``, ``limit``, ``batch_size``, ``hint``,
``collation``, ``max_time_ms``, ``comment``, ``allow_disk_use``...); the
projection is find's argument. Reading it opens a
:class:`greenpool.client.api.cursor.Cursor`, whose getMore and killCursors
machinery does the rest. :class:`CommandCursor` is what ``aggregate``,
``list_indexes`` and ``list_collections`` return: the command already ran.
:class:`RawBatchCursor` and :class:`RawBatchCommandCursor` are their raw
batch forms (``find_raw_batches``, ``aggregate_raw_batches``).

Both iterate, give ``to_list()``, ``close()`` and work as context managers,
as PyMongo's do.

Exhaust cursors (``cursor_type=CursorType.EXHAUST``, or ``add_option(64)``):
the server streams the batches after the first over the cursor's own
connection, as PyMongo's do (see :mod:`greenpool.client.api.cursor`). As in
PyMongo, an exhaust cursor takes no limit (``limit()``, ``find_one``,
``cursor[n]``: InvalidOperation) and ``remove_option(64)`` makes it an
ordinary cursor again::

    for document in collection.find({}, cursor_type=CursorType.EXHAUST, batch_size=500):
        ...

Rules. This module sends nothing itself: a FindCursor asks its collection
(the :class:`CollectionLike` protocol) to build and open, and never imports
``collection.py``.
"""

from __future__ import annotations

import copy
import warnings
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from pymongo.errors import InvalidOperation
from pymongo.read_preferences import _ServerMode

from greenpool.address import Address
from greenpool.client.api.cursor import Cursor
from greenpool.client.operations.session import Session
from greenpool.wire.messages import Outgoing

__all__ = ["CollectionLike", "CommandCursor", "FindCursor", "RawBatchCommandCursor",
           "RawBatchCursor", "index_document", "index_name", "projection_document"]

ASCENDING = 1


class CollectionLike(Protocol):
    """What a find cursor needs of its collection."""

    @property
    def name(self) -> str: ...

    def _read_command(self, name: str, *, read_concern: bool = True) -> Outgoing: ...

    def _read(self, command: Outgoing, session: Session | None) -> dict[str, Any]: ...

    def distinct(self, key: str, filter: Mapping[str, Any] | None = None,
                 session: Session | None = None, comment: Any = None,
                 hint: Any = None, **kwargs: Any) -> list[Any]: ...

    def _open_cursor(self, command: Outgoing, session: Session | None, batch_size: int | None,
                     preference: _ServerMode | None = None, *,
                     max_await_time_ms: int | None = None,
                     raw_batches: bool = False, exhaust: bool = False) -> Cursor: ...


def index_document(keys: Any, direction: Any = None) -> dict[str, Any]:
    """A sort or index specification as a document: a field name (with an
    optional ``direction``), a list of names or ``(name, direction)`` pairs,
    or a document."""
    if direction is not None:
        if not isinstance(keys, str):
            raise TypeError(f"with a direction, the key must be a field name, not {keys!r}")
        return {keys: direction}
    if isinstance(keys, str):
        return {keys: ASCENDING}
    if isinstance(keys, Mapping):
        pairs = list(keys.items())
    elif isinstance(keys, list | tuple):
        pairs = [(item, ASCENDING) if isinstance(item, str) else item for item in keys]
    else:
        raise TypeError(f"keys must be a field name, a list of (name, direction) pairs or "
                        f"a document, not {keys!r}")
    if not pairs:
        raise ValueError("keys must name at least one field")
    document: dict[str, Any] = {}
    for pair in pairs:
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], str | int | Mapping)):
            raise TypeError(f"each key must be a (field name, direction) pair, not {pair!r}")
        document[pair[0]] = pair[1]
    return document


def index_name(keys: Mapping[str, Any]) -> str:
    """The name the server gives an index on ``keys`` by default: ``x_1_y_-1``."""
    return "_".join(f"{key}_{direction}" for key, direction in keys.items())


def projection_document(projection: Any) -> Mapping[str, Any]:
    """A projection document, or a list of field names as one."""
    if isinstance(projection, Mapping):
        return projection
    if isinstance(projection, list | tuple | set | frozenset) and all(
            isinstance(field, str) for field in projection):
        return dict.fromkeys(projection, 1)
    raise TypeError(f"projection must be a document or a list of field names, "
                    f"not {projection!r}")


# find()'s keyword arguments and the find command's field for each.
_FIELDS = {
    "no_cursor_timeout": "noCursorTimeout", "allow_partial_results": "allowPartialResults",
    "oplog_replay": "oplogReplay", "collation": "collation", "max_scan": "maxScan",
    "max_time_ms": "maxTimeMS", "max": "max", "min": "min", "return_key": "returnKey",
    "show_record_id": "showRecordId", "snapshot": "snapshot", "comment": "comment",
    "allow_disk_use": "allowDiskUse", "let": "let",
}
# PyMongo's CursorType values (pymongo.CursorType): tailable is the query
# flag 2, awaitData 32, exhaust 64.
NON_TAILABLE, _TAILABLE_FLAG, _AWAIT_DATA_FLAG, EXHAUST = 0, 2, 32, 64
TAILABLE, TAILABLE_AWAIT = _TAILABLE_FLAG, _TAILABLE_FLAG | _AWAIT_DATA_FLAG
_CURSOR_TYPES = (NON_TAILABLE, TAILABLE, TAILABLE_AWAIT, EXHAUST)
# The other query flags add_option() and remove_option() take (the wire's
# OP_QUERY bits, as PyMongo's), and the find fields they set; 4 (secondaryOk)
# means nothing to a find command.
_FLAG_FIELDS = {8: "oplogReplay", 16: "noCursorTimeout", 128: "allowPartialResults"}
_KNOWN_FLAGS = _TAILABLE_FLAG | 4 | _AWAIT_DATA_FLAG | EXHAUST | sum(_FLAG_FIELDS)
#: PyMongo's words for an exhaust cursor given a limit, or a limit given one.
_EXHAUST_LIMIT = "Can't use limit and exhaust together."


class FindCursor:
    """The documents a ``find`` returns; see the module's docstring."""

    def __init__(self, collection: CollectionLike, filter: Mapping[str, Any] | None = None,
                 projection: Any = None, skip: int = 0, limit: int = 0,
                 no_cursor_timeout: bool = False, cursor_type: int = NON_TAILABLE,
                 sort: Any = None, allow_partial_results: bool = False,
                 oplog_replay: bool = False, batch_size: int = 0,
                 collation: Mapping[str, Any] | None = None, hint: Any = None,
                 max_scan: int | None = None, max_time_ms: int | None = None,
                 max: Mapping[str, Any] | None = None, min: Mapping[str, Any] | None = None,
                 return_key: bool | None = None, show_record_id: bool | None = None,
                 snapshot: bool | None = None, comment: Any = None,
                 session: Session | None = None, allow_disk_use: bool | None = None,
                 let: Mapping[str, Any] | None = None) -> None:
        if filter is not None and not isinstance(filter, Mapping):
            raise TypeError(f"filter must be a document (a dict or another mapping), "
                            f"not {filter!r}")
        if cursor_type not in _CURSOR_TYPES:
            raise ValueError(
                f"cursor_type must be CursorType.NON_TAILABLE, TAILABLE, TAILABLE_AWAIT or "
                f"EXHAUST, not {cursor_type!r}")
        self._collection = collection
        #: The tailable and awaitData flags (exhaust is ``_exhaust``).
        self._cursor_type = cursor_type & TAILABLE_AWAIT
        self._exhaust = False
        self._max_await_time_ms: int | None = None
        self._filter = filter if filter is not None else {}
        self._projection = None if projection is None else projection_document(projection)
        self._session = session
        self._cursor: Cursor | None = None
        self._batch: deque[Any] = deque()
        #: Documents received from the server so far (PyMongo's ``retrieved``).
        self._retrieved = 0
        #: An empty slice (``cursor[3:3]``): no query, no documents.
        self._empty = False
        self._skip = self._limit = self._batch_size = 0
        self.skip(skip)
        self.limit(limit)
        if cursor_type == EXHAUST:
            if self._limit:
                raise InvalidOperation(_EXHAUST_LIMIT)
            self._exhaust = True
        self.batch_size(batch_size)
        self._sort = None if sort is None else index_document(sort)
        self._hint: Any = None
        if hint is not None:
            self.hint(hint)
        self._options: dict[str, Any] = {}
        given = {"no_cursor_timeout": no_cursor_timeout or None,
                 "allow_partial_results": allow_partial_results or None,
                 "oplog_replay": oplog_replay or None, "collation": collation,
                 "max_scan": max_scan, "max_time_ms": max_time_ms, "max": max, "min": min,
                 "return_key": return_key, "show_record_id": show_record_id,
                 "snapshot": snapshot, "comment": comment, "allow_disk_use": allow_disk_use,
                 "let": let}
        for name, value in given.items():
            if value is not None:
                self._options[_FIELDS[name]] = value

    # -- builder methods (before the first read) ----------------------------------------

    def sort(self, key_or_list: Any, direction: Any = None) -> FindCursor:
        """Sort by a field (and direction), or a list of (field, direction) pairs."""
        self._check_not_started()
        self._sort = index_document(key_or_list, direction)
        return self

    def skip(self, skip: int) -> FindCursor:
        """Skip this many documents first."""
        self._check_not_started()
        if not isinstance(skip, int) or isinstance(skip, bool) or skip < 0:
            raise ValueError(f"skip must be an int >= 0, not {skip!r}")
        self._skip = skip
        return self

    def limit(self, limit: int) -> FindCursor:
        """Return at most this many documents (0: no limit; negative: in one
        batch). An exhaust cursor takes none, as PyMongo's (InvalidOperation)."""
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(f"limit must be an int, not {limit!r}")
        if self._exhaust:
            raise InvalidOperation(_EXHAUST_LIMIT)
        self._check_not_started()
        self._limit = limit
        return self

    def batch_size(self, batch_size: int) -> FindCursor:
        """Fetch this many documents per batch (0: the server's choice)."""
        self._check_not_started()
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 0:
            raise ValueError(f"batch_size must be an int >= 0, not {batch_size!r}")
        self._batch_size = batch_size
        return self

    def hint(self, index: Any) -> FindCursor:
        """Use this index (its name, or its keys)."""
        self._check_not_started()
        self._hint = None if index is None else (
            index if isinstance(index, str) else index_document(index))
        return self

    def collation(self, collation: Mapping[str, Any]) -> FindCursor:
        """Compare strings by ``collation`` (a collation document)."""
        return self._set("collation", collation)

    def max_time_ms(self, max_time_ms: int | None) -> FindCursor:
        """Let the server spend at most this long on each batch."""
        return self._set("maxTimeMS", max_time_ms)

    def comment(self, comment: Any) -> FindCursor:
        """Attach ``comment`` to the find and to each of its getMores."""
        return self._set("comment", comment)

    def max_await_time_ms(self, max_await_time_ms: int | None) -> FindCursor:
        """How long (ms) the server waits for new data in a getMore of a
        ``CursorType.TAILABLE_AWAIT`` cursor before it answers with an empty
        batch. Only that cursor type waits: for any other a value warns and
        is left out, where PyMongo ignores it silently."""
        if max_await_time_ms is not None and (isinstance(max_await_time_ms, bool) or not
                                              isinstance(max_await_time_ms, int)):
            raise TypeError(f"max_await_time_ms must be an int or None, "
                            f"not {max_await_time_ms!r}")
        self._check_not_started()
        if max_await_time_ms is not None and self._cursor_type != TAILABLE_AWAIT:
            warnings.warn(f"max_await_time_ms={max_await_time_ms} is ignored: only a "
                          f"CursorType.TAILABLE_AWAIT cursor waits for new data",
                          UserWarning, stacklevel=2)
            return self
        self._max_await_time_ms = max_await_time_ms
        return self

    def allow_disk_use(self, allow_disk_use: bool) -> FindCursor:
        """Let the server use temporary files for a sort that exceeds its memory limit."""
        return self._set("allowDiskUse", allow_disk_use)

    def where(self, code: str) -> FindCursor:
        """Add a ``$where`` clause to the filter."""
        self._check_not_started()
        self._filter = {**self._filter, "$where": code}
        return self

    def max_scan(self, max_scan: int | None) -> FindCursor:
        """The most documents or index keys to scan (``maxScan``; servers
        before 4.2 only, as PyMongo's; None: unset)."""
        return self._set("maxScan", max_scan)

    def max(self, spec: Any) -> FindCursor:
        """The exclusive upper bound of an index's keys: a list of (field,
        value) pairs or a document (use with :meth:`hint`)."""
        return self._set("max", _bound("max", spec))

    def min(self, spec: Any) -> FindCursor:
        """The inclusive lower bound of an index's keys (see :meth:`max`)."""
        return self._set("min", _bound("min", spec))

    def add_option(self, mask: int) -> FindCursor:
        """Set query flags, as PyMongo's: 2 tailable, 8 oplogReplay, 16
        noCursorTimeout, 32 awaitData, 64 exhaust (not with a limit:
        InvalidOperation), 128 partial results."""
        self._check_flags(mask)
        if mask & EXHAUST:
            if self._limit:
                raise InvalidOperation(_EXHAUST_LIMIT)
            self._exhaust = True
        self._cursor_type |= mask & (_TAILABLE_FLAG | _AWAIT_DATA_FLAG)
        for flag, field in _FLAG_FIELDS.items():
            if mask & flag:
                self._options[field] = True
        return self

    def remove_option(self, mask: int) -> FindCursor:
        """Clear query flags (those of :meth:`add_option`; 64: no longer exhaust)."""
        self._check_flags(mask)
        if mask & EXHAUST:
            self._exhaust = False
        self._cursor_type &= ~mask
        for flag, field in _FLAG_FIELDS.items():
            if mask & flag:
                self._options.pop(field, None)
        return self

    def _check_flags(self, mask: object) -> None:
        self._check_not_started()
        if isinstance(mask, bool) or not isinstance(mask, int):
            raise TypeError(f"mask must be an int, not {mask!r}")
        if mask & ~_KNOWN_FLAGS or mask < 0:
            raise ValueError(f"mask {mask!r} holds flags no query has (known: 2, 4, 8, 16, "
                             "32, 64, 128)")

    def _set(self, field: str, value: Any) -> FindCursor:
        self._check_not_started()
        if value is None:
            self._options.pop(field, None)
        else:
            self._options[field] = value
        return self

    def _check_not_started(self) -> None:
        if self._cursor is not None:
            raise InvalidOperation("cannot set options after executing query")

    # -- the command ------------------------------------------------------------------------

    def _command(self) -> Outgoing:
        command = self._collection._read_command("find")
        command["filter"] = self._filter
        if self._sort is not None:
            command["sort"] = self._sort
        if self._projection is not None:
            command["projection"] = self._projection
        if self._skip:
            command["skip"] = self._skip
        limit, batch_size = self._limit, self._batch_size
        if limit:
            command["limit"] = abs(limit)
            if limit < 0:
                command["singleBatch"] = True
        if batch_size:
            # The CRUD spec: a batch as large as the limit would leave the
            # server cursor open for a killCursors; one more closes it.
            command["batchSize"] = batch_size + 1 if batch_size == limit else batch_size
        if self._hint is not None:
            command["hint"] = self._hint
        if self._cursor_type & _TAILABLE_FLAG:
            command["tailable"] = True
            if self._cursor_type & _AWAIT_DATA_FLAG:
                command["awaitData"] = True
        command.update(self._options)
        return command

    def _single_batch_command(self) -> tuple[Outgoing, Session | None]:
        """find_one's command (one document, in one batch) and session."""
        self.limit(-1)
        return self._command(), self._session

    # -- copies, items and other queries on the same documents -------------------------------

    def clone(self) -> FindCursor:
        """A new cursor with this one's query and options, not yet read
        (the filter, projection, sort and options copied deeply, as PyMongo's)."""
        twin = copy.copy(self)
        for name in ("_filter", "_projection", "_sort", "_hint", "_options"):
            setattr(twin, name, copy.deepcopy(getattr(self, name)))
        twin._cursor = None
        twin._batch = deque()
        twin._retrieved = 0
        return twin

    def __getitem__(self, index: int | slice) -> Any:
        """``cursor[5]``: the document at that place (a query of its own, on a
        clone; IndexError when there is none). ``cursor[10:20]``: this cursor,
        skipping and limited to that range. Before the first read only; no
        negative indices or steps."""
        self._check_not_started()
        if isinstance(index, slice):
            return self._slice(index)
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"a cursor's index must be an int or a slice, not {index!r}")
        if index < 0:
            raise IndexError(f"cursor[{index}]: a cursor has no negative indices")
        twin = self.clone()
        twin.skip(self._skip + index)
        twin.limit(-1)
        for document in twin:
            return document
        raise IndexError(f"cursor[{index}]: the query has no document there")

    def _slice(self, index: slice) -> FindCursor:
        if index.step is not None:
            raise IndexError(f"cursor[{index.start}:{index.stop}:{index.step}]: a cursor "
                             "slice takes no step")
        start = 0 if index.start is None else index.start
        if start < 0 or (index.stop is not None and index.stop < 0):
            raise IndexError(f"cursor[{index.start}:{index.stop}]: a cursor has no negative "
                             "indices")
        if index.stop is not None and index.stop < start:
            raise IndexError(f"cursor[{index.start}:{index.stop}]: the stop is before the "
                             "start")
        self._skip = start
        self._limit = 0 if index.stop is None else index.stop - start
        self._empty = index.stop == start
        return self

    def distinct(self, key: str) -> list[Any]:
        """The distinct values of ``key`` among the documents this cursor's
        filter matches (its collation, maxTimeMS, comment and session too)."""
        options = {name: self._options[field]
                   for name, field in (("collation", "collation"), ("maxTimeMS", "maxTimeMS"),
                                       ("comment", "comment")) if field in self._options}
        return self._collection.distinct(key, self._filter, session=self._session, **options)

    def explain(self) -> Any:
        """The server's plan for this cursor's query (the ``explain``
        command around its ``find``), as PyMongo's."""
        twin = self.clone()
        if twin._limit:
            twin._limit = -abs(twin._limit)
        find = twin._command()
        command = Outgoing()
        command["explain"] = {key: value for key, value in find.items() if key != "readConcern"}
        if "readConcern" in find:
            command["readConcern"] = find["readConcern"]
        command.codec_options = find.codec_options
        return self._collection._read(command, self._session)

    # -- reading ----------------------------------------------------------------------------

    #: Whether each read gives a batch's BSON bytes (:class:`RawBatchCursor`).
    _raw_batches = False

    def _opened(self) -> Cursor:
        if self._cursor is None:
            self._cursor = self._collection._open_cursor(
                self._command(), self._session, self._batch_size or None,
                max_await_time_ms=self._max_await_time_ms, raw_batches=self._raw_batches,
                exhaust=self._exhaust)
        return self._cursor

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        """The next document, fetching a batch when none is buffered (``StopIteration``
        at the end)."""
        # A batch at a time from the cursor: its per-call work (one greenlet
        # at a time, timeouts) once per batch, not once per document.
        batch = self._batch
        if not batch:
            if self._empty:
                raise StopIteration
            batch.extend(self._opened().next_batch())
            if not batch:
                raise StopIteration
            self._retrieved += len(batch)
        return batch.popleft()

    next = __next__

    def to_list(self, length: int | None = None) -> list[Any]:
        """The documents left (at most ``length``), in a list."""
        return _to_list(self, length)

    @property
    def alive(self) -> bool:
        """Whether more documents may come (true before the first read)."""
        return self._cursor is None or bool(self._batch) or self._cursor.alive

    @property
    def cursor_id(self) -> int | None:
        """The server cursor's id (0 once exhausted); None before the first read."""
        return None if self._cursor is None else self._cursor.id

    @property
    def retrieved(self) -> int:
        """How many documents the server has sent so far."""
        return self._retrieved

    @property
    def address(self) -> Address | None:
        """``(host, port)`` of the server the query ran on; None before the first read."""
        return None if self._cursor is None else self._cursor.address

    @property
    def collection(self) -> CollectionLike:
        """The collection the cursor reads."""
        return self._collection

    @property
    def session(self) -> Session | None:
        """The session the cursor's commands run in, if one was given."""
        return self._session

    def rewind(self) -> FindCursor:
        """Start again: the next read runs the query anew."""
        self.close()
        self._cursor = None
        self._batch = deque()
        self._retrieved = 0
        return self

    def close(self) -> None:
        """Kill the server cursor, if it is open."""
        if self._cursor is not None:
            self._cursor.close()

    def __enter__(self) -> FindCursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RawBatchCursor(FindCursor):
    """What ``collection.find_raw_batches()`` returns: a :class:`FindCursor`
    whose every read gives one batch's documents as the server sent them,
    their BSON one after another in one ``bytes`` (``bson.decode_all`` reads
    it), as PyMongo's ``RawBatchCursor``. Builder methods, ``explain()``
    (decoded) and the rest are FindCursor's; ``retrieved`` counts batches."""

    _raw_batches = True

    def __getitem__(self, index: int | slice) -> Any:
        raise InvalidOperation("Cannot call __getitem__ on RawBatchCursor")


class CommandCursor:
    """The documents of a command that opened a cursor (aggregate, list*)."""

    def __init__(self, cursor: Cursor | None, documents: Iterator[Any] | None = None) -> None:
        # None: the command found nothing (no collection), or its documents
        # came whole in its reply (listDatabases): ``documents``.
        self._cursor = cursor
        self._batch: deque[Any] = deque(documents or ())

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        """The next document, fetching a batch when none is buffered (``StopIteration``
        at the end)."""
        batch = self._batch  # a batch at a time, as FindCursor reads
        if not batch:
            if self._cursor is not None:
                batch.extend(self._cursor.next_batch())
            if not batch:
                raise StopIteration
        return batch.popleft()

    next = __next__

    def to_list(self, length: int | None = None) -> list[Any]:
        """The documents left (at most ``length``), in a list."""
        return _to_list(self, length)

    def try_next(self) -> Any:
        """The next document, or None when there is none (yet)."""
        return next(self, None)

    def batch_size(self, batch_size: int) -> CommandCursor:
        """Fetch this many documents per getMore (0: the server's choice)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"batch_size must be an int >= 0, not {batch_size!r}")
        if self._cursor is not None:
            self._cursor.batch_size = batch_size
        return self

    @property
    def alive(self) -> bool:
        """Whether more documents may come: a batch is buffered or the server cursor is open."""
        return bool(self._batch) or (self._cursor is not None and self._cursor.alive)

    @property
    def cursor_id(self) -> int:
        """The server cursor's id (0 once exhausted)."""
        return 0 if self._cursor is None else self._cursor.id

    @property
    def address(self) -> Address | None:
        """``(host, port)`` of the server the cursor reads from (None: no server cursor)."""
        return None if self._cursor is None else self._cursor.address

    @property
    def session(self) -> Session | None:
        """The explicit session the cursor runs in, or None."""
        return None if self._cursor is None else self._cursor.session

    def close(self) -> None:
        """Kill the server cursor, if it is open."""
        if self._cursor is not None:
            self._cursor.close()

    def __enter__(self) -> CommandCursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RawBatchCommandCursor(CommandCursor):
    """What ``collection.aggregate_raw_batches()`` returns: each read gives
    one batch's BSON bytes, as :class:`RawBatchCursor`'s do (PyMongo's
    ``RawBatchCommandCursor``)."""

    def __getitem__(self, index: int) -> Any:
        raise InvalidOperation("Cannot call __getitem__ on RawBatchCommandCursor")


def _bound(name: str, spec: Any) -> dict[str, Any]:
    """min()'s or max()'s index bound: a document, or (field, value) pairs."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, list | tuple) and all(
            isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)
            for pair in spec):
        return dict(spec)
    raise TypeError(f"{name}() takes a list of (field, value) pairs or a document, not {spec!r}")


def _to_list(cursor: FindCursor | CommandCursor, length: int | None) -> list[Any]:
    """A cursor's documents left (at most ``length``), taken a batch at a time."""
    if length is not None and (not isinstance(length, int) or isinstance(length, bool)
                               or length < 1):
        raise ValueError(f"length must be None or an int >= 1, not {length!r}")
    documents: list[Any] = []
    while length is None or len(documents) < length:
        try:
            documents.append(next(cursor))
        except StopIteration:
            break
        batch = cursor._batch  # the rest of the batch that next() fetched
        if length is None:
            documents.extend(batch)
            batch.clear()
        else:
            while batch and len(documents) < length:
                documents.append(batch.popleft())
    return documents
