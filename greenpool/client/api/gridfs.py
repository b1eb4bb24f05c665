"""GridFS on greenpool.Client: :class:`GridFSBucket` (the GridFS spec's API) and the
legacy :class:`GridFS`, with the classes, methods and errors of PyMongo's ``gridfs``.

::

    from greenpool.gridfs import GridFSBucket

    bucket = GridFSBucket(client.shop)
    file_id = bucket.upload_from_stream("report.pdf", open("report.pdf", "rb"))
    with bucket.open_download_stream(file_id) as stream:
        data = stream.read()

PyMongo's ``gridfs`` takes PyMongo's Database only; these take a greenpool
:class:`~greenpool.client.api.database.Database`. As PyMongo's, the methods that
run several commands (uploads, downloads to a stream, deletes, drop) run within
the client's timeoutMS as a whole, not each command with its own, unless a
``timeout()`` block already bounds them. Differences: the bucket's write concern
and read preference apply to its uploads and downloads too (PyMongo's apply them
to deletes and renames only), and :meth:`GridFSBucket.drop` is the spec's (PyMongo
4.20 has none).

Rules. Files are written and read by ``gridfile.py``; this module finds, names and
deletes them, through the Client's collections.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from bson.objectid import ObjectId
from gridfs.errors import NoFile
from pymongo.errors import ConfigurationError
from pymongo.write_concern import WriteConcern

from greenpool.client.api.collection import Collection
from greenpool.client.api.database import Database
from greenpool.client.api.gridfile import (
    DEFAULT_CHUNK_SIZE,
    GridIn,
    GridOut,
    GridOutCursor,
    check_chunk_size,
    check_filename,
    disallow_transactions,
    without_type_registry,
)
from greenpool.client.operations import timeouts
from greenpool.client.operations.session import Session

__all__ = ["DEFAULT_CHUNK_SIZE", "GridFS", "GridFSBucket"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _check_database(database: object) -> Database:
    if not isinstance(database, Database):
        raise TypeError(f"database must be a greenpool Database (client[name]), not "
                        f"{type(database)}; PyMongo's own Database takes PyMongo's gridfs")
    return database


def _within_client_timeout(method: Callable[Concatenate[Any, _P], _R]
                           ) -> Callable[Concatenate[Any, _P], _R]:
    """Run ``method`` within the client's timeoutMS as a whole (PyMongo's
    ``_csot.apply``): its commands share one deadline. A ``timeout()`` block around
    the call bounds it instead."""

    def bounded(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        limit = self._timeout
        if limit is None or timeouts.resolve(None, None) is not None:
            return method(self, *args, **kwargs)
        with timeouts.timeout(limit):
            return method(self, *args, **kwargs)

    functools.update_wrapper(bounded, method)
    return bounded


def _find_revision(files: Collection, query: dict[str, Any], revision: int,
                   session: Session | None) -> Any:
    """The files document of ``revision`` among those ``query`` matches (0 the
    first uploaded, -1 the latest), or None: the spec's sort and skip."""
    if revision < 0:
        cursor = files.find(query, session=session, skip=-revision - 1, limit=-1,
                            sort=[("uploadDate", -1)])
    else:
        cursor = files.find(query, session=session, skip=revision, limit=-1,
                            sort=[("uploadDate", 1)])
    return next(cursor, None)


def _copy_to(source: GridOut, destination: Any) -> None:
    with source:
        while chunk := source.readchunk():
            destination.write(chunk)


class GridFSBucket:
    """A GridFS bucket of a greenpool database: its files in ``<bucket_name>.files``
    and their chunks in ``<bucket_name>.chunks``.

    >>> bucket = GridFSBucket(client.shop, bucket_name="images")  # doctest: +SKIP
    >>> file_id = bucket.upload_from_stream("logo.png", b"...")  # doctest: +SKIP

    :raises TypeError: ``db`` is not a greenpool Database, or ``chunk_size_bytes`` is
        not an int.
    :raises ValueError: ``chunk_size_bytes`` is not > 0.
    :raises pymongo.errors.ConfigurationError: the write concern is unacknowledged.
    """

    def __init__(self, db: Database, bucket_name: str = "fs",
                 chunk_size_bytes: int = DEFAULT_CHUNK_SIZE,
                 write_concern: WriteConcern | None = None,
                 read_preference: Any = None) -> None:
        db = without_type_registry(_check_database(db))
        if not isinstance(bucket_name, str):
            raise TypeError(f"bucket_name must be an instance of str, not {type(bucket_name)}")
        concern = write_concern if write_concern is not None else db.write_concern
        if not concern.acknowledged:
            raise ConfigurationError(f"write concern must be acknowledged, not {concern!r}")
        self._chunk_size_bytes = check_chunk_size(chunk_size_bytes)
        self._collection: Collection = db[bucket_name].with_options(
            write_concern=write_concern, read_preference=read_preference)
        self._files: Collection = self._collection.files
        self._chunks: Collection = self._collection.chunks
        self._timeout = db.operations.timeout

    # -- uploads ----------------------------------------------------------------------------

    def open_upload_stream(self, filename: str, chunk_size_bytes: int | None = None,
                           metadata: Mapping[str, Any] | None = None,
                           session: Session | None = None) -> GridIn:
        """A :class:`GridIn` to write the file ``filename`` to; it is stored when
        closed. ``metadata`` goes in the files document's ``metadata`` field."""
        return self._upload_stream({}, filename, chunk_size_bytes, metadata, session)

    def open_upload_stream_with_id(self, file_id: Any, filename: str,
                                   chunk_size_bytes: int | None = None,
                                   metadata: Mapping[str, Any] | None = None,
                                   session: Session | None = None) -> GridIn:
        """As :meth:`open_upload_stream`, the file's ``_id`` being ``file_id``."""
        return self._upload_stream({"_id": file_id}, filename, chunk_size_bytes, metadata,
                                   session)

    def _upload_stream(self, fields: dict[str, Any], filename: str,
                       chunk_size_bytes: int | None, metadata: Mapping[str, Any] | None,
                       session: Session | None) -> GridIn:
        fields["filename"] = check_filename(filename)
        fields["chunk_size"] = (self._chunk_size_bytes if chunk_size_bytes is None
                                else check_chunk_size(chunk_size_bytes))
        if metadata is not None:
            fields["metadata"] = metadata
        return GridIn(self._collection, session=session, **fields)

    @_within_client_timeout
    def upload_from_stream(self, filename: str, source: Any,
                           chunk_size_bytes: int | None = None,
                           metadata: Mapping[str, Any] | None = None,
                           session: Session | None = None) -> ObjectId:
        """Store ``source`` (bytes, or a file-like object read to its end) as the
        file ``filename``; its new ``_id``. If ``source`` raises, the chunks
        stored so far are deleted and its error raised."""
        with self.open_upload_stream(filename, chunk_size_bytes, metadata,
                                     session=session) as stream:
            stream.write(source)
        return stream._id  # type: ignore[no-any-return]

    @_within_client_timeout
    def upload_from_stream_with_id(self, file_id: Any, filename: str, source: Any,
                                   chunk_size_bytes: int | None = None,
                                   metadata: Mapping[str, Any] | None = None,
                                   session: Session | None = None) -> None:
        """As :meth:`upload_from_stream`, the file's ``_id`` being ``file_id``."""
        with self.open_upload_stream_with_id(file_id, filename, chunk_size_bytes, metadata,
                                             session=session) as stream:
            stream.write(source)

    # -- downloads --------------------------------------------------------------------------

    def open_download_stream(self, file_id: Any, session: Session | None = None) -> GridOut:
        """A :class:`GridOut` reading the file whose ``_id`` is ``file_id``.

        :raises gridfs.errors.NoFile: there is no such file.
        """
        stream = GridOut(self._collection, file_id, session=session)
        stream.open()  # NoFile now, not at the first read
        return stream

    @_within_client_timeout
    def download_to_stream(self, file_id: Any, destination: Any,
                           session: Session | None = None) -> None:
        """Write the file whose ``_id`` is ``file_id`` to ``destination`` (a
        file-like object with ``write()``, left open)."""
        _copy_to(self.open_download_stream(file_id, session=session), destination)

    def open_download_stream_by_name(self, filename: str, revision: int = -1,
                                     session: Session | None = None) -> GridOut:
        """A :class:`GridOut` reading ``revision`` of the file ``filename``: 0 the
        first stored, 1 the next...; -1 the latest (the default), -2 the one
        before...

        :raises gridfs.errors.NoFile: there is no such file, or no such revision.
        """
        check_filename(filename)
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise TypeError(f"revision must be an int, not {revision!r}")
        disallow_transactions(session)
        document = _find_revision(self._files, {"filename": filename}, revision, session)
        if document is None:
            if self._files.find_one({"filename": filename}, {"_id": 1},
                                    session=session) is None:
                raise NoFile(f"no file named {filename!r}")
            raise NoFile(f"no version {revision} for filename {filename!r}")
        return GridOut(self._collection, file_document=document, session=session)

    @_within_client_timeout
    def download_to_stream_by_name(self, filename: str, destination: Any,
                                   revision: int = -1,
                                   session: Session | None = None) -> None:
        """Write ``revision`` of the file ``filename`` to ``destination`` (see
        :meth:`open_download_stream_by_name`)."""
        _copy_to(self.open_download_stream_by_name(filename, revision, session=session),
                 destination)

    # -- finding, renaming, deleting --------------------------------------------------------

    def find(self, *args: Any, **kwargs: Any) -> GridOutCursor:
        """A cursor over the files whose documents match ``filter`` (a query on the
        files collection: ``{"metadata.owner": "ann"}``), each a :class:`GridOut`;
        ``skip``, ``limit``, ``sort``, ``batch_size``, ``no_cursor_timeout``,
        ``session`` as keywords."""
        return GridOutCursor(self._collection, *args, **kwargs)

    def rename(self, file_id: Any, new_filename: str, session: Session | None = None) -> None:
        """Rename the file whose ``_id`` is ``file_id``.

        :raises gridfs.errors.NoFile: there is no such file.
        """
        disallow_transactions(session)
        result = self._files.update_one({"_id": {"$eq": file_id}},
                                        {"$set": {"filename": new_filename}}, session=session)
        if not result.matched_count:
            raise NoFile(f"no files could be renamed {new_filename!r} because none matched "
                         f"file_id {file_id!r}")

    def rename_by_name(self, filename: str, new_filename: str,
                       session: Session | None = None) -> None:
        """Rename every revision of the file ``filename``.

        :raises gridfs.errors.NoFile: there is no such file.
        """
        disallow_transactions(session)
        result = self._files.update_many({"filename": filename},
                                         {"$set": {"filename": new_filename}}, session=session)
        if not result.matched_count:
            raise NoFile(f"no files could be renamed {new_filename!r} because none matched "
                         f"filename {filename!r}")

    @_within_client_timeout
    def delete(self, file_id: Any, session: Session | None = None) -> None:
        """Delete the file whose ``_id`` is ``file_id``: its files document first,
        then its chunks (orphaned ones too, if it has no files document).

        :raises gridfs.errors.NoFile: there is no such file.
        """
        disallow_transactions(session)
        result = self._files.delete_one({"_id": {"$eq": file_id}}, session=session)
        self._chunks.delete_many({"files_id": {"$eq": file_id}}, session=session)
        if not result.deleted_count:
            raise NoFile(f"no file could be deleted because none matched {file_id!r}")

    @_within_client_timeout
    def delete_by_name(self, filename: str, session: Session | None = None) -> None:
        """Delete every revision of the file ``filename``.

        :raises gridfs.errors.NoFile: there is no such file.
        """
        disallow_transactions(session)
        ids = [document["_id"] for document in self._files.find(
            {"filename": filename}, {"_id": 1}, session=session)]
        result = self._files.delete_many({"_id": {"$in": ids}}, session=session)
        self._chunks.delete_many({"files_id": {"$in": ids}}, session=session)
        if not result.deleted_count:
            raise NoFile(f"no file could be deleted because none matched filename "
                         f"{filename!r}")

    @_within_client_timeout
    def drop(self, session: Session | None = None) -> None:
        """Drop the bucket: its files collection, then its chunks collection."""
        disallow_transactions(session)
        self._files.drop(session=session)
        self._chunks.drop(session=session)


class GridFS:
    """The legacy GridFS API over ``<collection>.files`` and ``<collection>.chunks``
    of a greenpool database, as PyMongo's :class:`gridfs.GridFS`.

    >>> fs = GridFS(client.shop)  # doctest: +SKIP
    >>> file_id = fs.put(b"hello", filename="hello.txt")  # doctest: +SKIP
    >>> fs.get(file_id).read()  # doctest: +SKIP
    b'hello'

    :raises TypeError: ``database`` is not a greenpool Database.
    :raises pymongo.errors.ConfigurationError: its write concern is unacknowledged.
    """

    def __init__(self, database: Database, collection: str = "fs") -> None:
        database = without_type_registry(_check_database(database))
        if not database.write_concern.acknowledged:
            raise ConfigurationError("database must use acknowledged write_concern")
        self._collection: Collection = database[collection]
        self._files: Collection = self._collection.files
        self._chunks: Collection = self._collection.chunks

    def new_file(self, **kwargs: Any) -> GridIn:
        """A new :class:`GridIn` (``kwargs``: its fields, see GridIn).

        :raises gridfs.errors.FileExists: on close, if a file has its ``_id``.
        """
        return GridIn(self._collection, **kwargs)

    def put(self, data: Any, **kwargs: Any) -> Any:
        """Store ``data`` (bytes, a file-like object, or str with an ``encoding``
        keyword) as a new file with the fields ``kwargs``; its ``_id``."""
        with GridIn(self._collection, **kwargs) as grid_file:
            grid_file.write(data)
        return grid_file._id

    def get(self, file_id: Any, session: Session | None = None) -> GridOut:
        """The file whose ``_id`` is ``file_id``.

        :raises gridfs.errors.NoFile: there is no such file.
        """
        grid_out = GridOut(self._collection, file_id, session=session)
        grid_out.open()  # NoFile now, not at the first read
        return grid_out

    def get_version(self, filename: str | None = None, version: int | None = -1,
                    session: Session | None = None, **kwargs: Any) -> GridOut:
        """``version`` of the files named ``filename`` whose fields match
        ``kwargs``: 0 the first stored, -1 the latest (the default).

        :raises gridfs.errors.NoFile: there is no such version.
        """
        query = dict(kwargs)
        if filename is not None:
            query["filename"] = filename
        disallow_transactions(session)
        version = -1 if version is None else version
        document = _find_revision(self._files, query, version, session)
        if document is None:
            raise NoFile(f"no version {version} for filename {filename!r}")
        return GridOut(self._collection, file_document=document, session=session)

    def get_last_version(self, filename: str | None = None, session: Session | None = None,
                         **kwargs: Any) -> GridOut:
        """The latest version of the file (:meth:`get_version` with -1)."""
        return self.get_version(filename=filename, session=session, **kwargs)

    def delete(self, file_id: Any, session: Session | None = None) -> None:
        """Delete the file whose ``_id`` is ``file_id`` (none is not an error)."""
        disallow_transactions(session)
        self._files.delete_one({"_id": {"$eq": file_id}}, session=session)
        self._chunks.delete_many({"files_id": {"$eq": file_id}}, session=session)

    def list(self, session: Session | None = None) -> list[str]:
        """The names of the stored files."""
        disallow_transactions(session)
        # Files without a name count as None in distinct: they have no name to list.
        return [name for name in self._files.distinct("filename", session=session)
                if name is not None]

    def find_one(self, filter: Any = None, session: Session | None = None, *args: Any,
                 **kwargs: Any) -> GridOut | None:
        """The first file :meth:`find` would give, or None; a ``filter`` that is
        not a document is an ``_id``."""
        if filter is not None and not isinstance(filter, Mapping):
            filter = {"_id": {"$eq": filter}}
        disallow_transactions(session)
        for grid_out in self.find(filter, *args, session=session, **kwargs):
            return grid_out
        return None

    def find(self, *args: Any, **kwargs: Any) -> GridOutCursor:
        """A cursor over the files whose documents match ``filter``, each a
        :class:`GridOut` (``skip``, ``limit``, ``sort``, ``batch_size``,
        ``no_cursor_timeout``, ``session``, as :meth:`GridFSBucket.find`)."""
        return GridOutCursor(self._collection, *args, **kwargs)

    def exists(self, document_or_id: Any = None, session: Session | None = None,
               **kwargs: Any) -> bool:
        """Whether a file matches: an ``_id``, a query document, or fields as
        keywords (``fs.exists(filename="a.txt")``)."""
        disallow_transactions(session)
        query: Any
        if kwargs:
            query = kwargs
        elif document_or_id is not None and not isinstance(document_or_id, Mapping):
            query = {"_id": {"$eq": document_or_id}}
        else:
            query = document_or_id
        return self._files.find_one(query, ["_id"], session=session) is not None
