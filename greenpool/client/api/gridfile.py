"""GridFS files on greenpool.Client, as PyMongo's ``gridfs.grid_file`` has them.

:class:`GridIn` writes a file: its data goes out as chunk documents to
``<root>.chunks`` (a chunk per ``chunk_size`` bytes, inserted in batches), and
:meth:`GridIn.close` inserts the files document into ``<root>.files`` last, so a
file is only visible once all of its chunks are stored. :class:`GridOut` reads
one: the files document first, then its chunks through one cursor, each checked
to be the next one and of the length the files document implies (the GridFS
spec's "File Download"). :class:`GridOutCursor` is ``find()`` over the files
collection, each document as a :class:`GridOut`.

The errors are PyMongo's (:mod:`gridfs.errors`): ``NoFile``, ``FileExists``,
``CorruptGridFile``, so ``except gridfs.errors.NoFile`` catches ours too.

Rules. Every command goes through the Client's
:class:`~greenpool.client.api.collection.Collection`; this module builds none.
A kill (``GreenletExit``, ``gevent.Timeout``) in the middle of an upload leaves
no files document and starts no clean-up: the chunks already inserted stay as
orphans, as after a failed insert (the spec: clean-up would only delay the
error); only an error from the source stream aborts, deleting them.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn, Self

from bson.int64 import Int64
from bson.objectid import ObjectId
from gridfs.errors import CorruptGridFile, FileExists, NoFile
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    CursorNotFound,
    DuplicateKeyError,
    InvalidOperation,
    OperationFailure,
    PyMongoError,
)
from pymongo.read_preferences import ReadPreference

from greenpool.client.api.collection import Collection
from greenpool.client.api.findcursor import FindCursor
from greenpool.client.operations.session import Session

__all__ = ["DEFAULT_CHUNK_SIZE", "GridIn", "GridOut", "GridOutCursor", "check_chunk_size",
           "check_filename", "disallow_transactions", "without_type_registry"]

#: The default chunk size, in bytes (the spec's 255 KiB: a chunk document then fits
#: a 256 KiB allocation).
DEFAULT_CHUNK_SIZE = 255 * 1024
# Chunk data buffered before an insert_many: few round trips, bounded memory. The
# collection cuts the batch to the server's message size itself.
_UPLOAD_BUFFER_BYTES = 16 * 1024 * 1024
# The indexes the spec requires, created before a bucket's first write.
FILES_INDEX = {"filename": 1, "uploadDate": 1}
CHUNKS_INDEX = {"files_id": 1, "n": 1}
_DUPLICATE_KEY_CODES = (11000, 11001, 12582)
_DEPRECATED = "GridFS property {!r} is deprecated and will be removed in PyMongo 5.0"


def disallow_transactions(session: Session | None) -> None:
    """GridFS spans two collections and many commands: never inside a transaction."""
    if session is not None and session.in_transaction:
        raise InvalidOperation("GridFS does not support multi-document transactions")


def check_chunk_size(value: object) -> int:
    """``value`` as a chunk size: an int > 0 (0 or less could never fill a chunk)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"chunk_size_bytes must be an int, not {value!r}")
    if value <= 0:
        raise ValueError(f"chunk_size_bytes must be > 0, not {value!r}")
    return value


def check_filename(filename: object) -> str:
    if not isinstance(filename, str):
        raise TypeError(f"filename must be an instance of str, not {type(filename)}")
    return filename


def without_type_registry(entity: Any, **options: Any) -> Any:
    """``entity`` (a database or collection) decoding without its type registry:
    chunk data and file fields are plain BSON, whatever the application registered."""
    codec_options = entity.codec_options.with_options(type_registry=None)
    return entity.with_options(codec_options=codec_options, **options)


def _check_collection(root_collection: object) -> None:
    if not isinstance(root_collection, Collection):
        raise TypeError(f"root_collection must be a greenpool Collection "
                        f"(database[name]), not {type(root_collection)}")


def _file_field(field: str, doc: str, *, deprecated: bool = False) -> Any:
    """A read-only property of a GridOut: the files document's ``field``."""

    def get(self: GridOut) -> Any:
        if deprecated:
            warnings.warn(_DEPRECATED.format(field), DeprecationWarning, stacklevel=2)
        self.open()
        return self._file.get(field, 0 if field == "length" else None)

    return property(get, doc=doc + "\n\nThis attribute is read-only.")


def _upload_field(field: str, doc: str, *, read_only: bool = False,
                  closed_only: bool = False, deprecated: bool = False) -> Any:
    """A property of a GridIn: its files document's ``field``; settable unless
    ``read_only`` or ``closed_only`` (known once the file is closed)."""

    def get(self: GridIn) -> Any:
        if deprecated:
            warnings.warn(_DEPRECATED.format(field), DeprecationWarning, stacklevel=2)
        if closed_only and not self._closed:
            raise AttributeError(f"can only get {field!r} on a closed file")
        return self._file.get(field, 0 if field == "length" else None)

    def set_(self: GridIn, value: Any) -> None:
        self.set(field, value)

    if read_only or closed_only:
        return property(get, doc=doc + "\n\nThis attribute is read-only.")
    return property(get, set_, doc=doc)


class GridIn:
    """A file being written to GridFS (``bucket.open_upload_stream(...)``,
    ``fs.new_file(...)``): :meth:`write` to it, then :meth:`close` it (or use it
    as a context manager), which stores the files document.

    ``kwargs`` are the file's fields: ``_id`` (an ObjectId unless given),
    ``filename``, ``chunk_size``/``chunkSize``, ``content_type``/``contentType``,
    ``metadata``, ``encoding`` (which lets :meth:`write` take str), and any other
    field of the files document.
    """

    def __init__(self, root_collection: Collection, session: Session | None = None,
                 **kwargs: Any) -> None:
        _check_collection(root_collection)
        if not root_collection.write_concern.acknowledged:
            raise ConfigurationError("root_collection must use acknowledged write_concern")
        disallow_transactions(session)
        if "content_type" in kwargs:
            kwargs["contentType"] = kwargs.pop("content_type")
        if "chunk_size" in kwargs:
            kwargs["chunkSize"] = kwargs.pop("chunk_size")
        kwargs.setdefault("_id", ObjectId())
        kwargs["chunkSize"] = check_chunk_size(kwargs.get("chunkSize", DEFAULT_CHUNK_SIZE))
        # The spec: the emptiness check and the writes on the primary.
        root = without_type_registry(root_collection, read_preference=ReadPreference.PRIMARY)
        state = {"_session": session, "_root": root, "_file": kwargs,
                 "_buffer": bytearray(), "_pending": [], "_pending_bytes": 0,
                 "_chunk_number": 0, "_position": 0, "_closed": False,
                 "_indexes_checked": False}
        for name, value in state.items():
            object.__setattr__(self, name, value)

    _session: Session | None
    _root: Collection
    _file: dict[str, Any]
    _buffer: bytearray
    _pending: list[dict[str, Any]]
    _pending_bytes: int
    _chunk_number: int
    _position: int
    _closed: bool
    _indexes_checked: bool

    _id: Any = _upload_field("_id", "The file's ``_id``.", read_only=True)
    filename: str | None = _upload_field("filename", "The file's name.")
    name: str | None = _upload_field("filename", "Alias for ``filename``.")
    content_type: str | None = _upload_field(
        "contentType", "DEPRECATED, its MIME type (keep it in ``metadata`` instead).",
        deprecated=True)
    length: int = _upload_field("length", "The file's length in bytes.", closed_only=True)
    chunk_size: int = _upload_field("chunkSize", "The file's chunk size in bytes.",
                                    read_only=True)
    upload_date: datetime.datetime = _upload_field(
        "uploadDate", "When the upload completed.", closed_only=True)
    md5: str | None = _upload_field(
        "md5", "DEPRECATED, the MD5 of its contents, if one was stored (greenpool stores "
        "none, as PyMongo 4).", closed_only=True, deprecated=True)

    # -- the files document's fields ------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not attributes: the files document's fields.
        file = object.__getattribute__(self, "_file")
        if name in file:
            return file[name]
        raise AttributeError(f"GridIn object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ or hasattr(type(self), name):
            object.__setattr__(self, name, value)
        else:
            self.set(name, value)

    def set(self, name: str, value: Any) -> None:
        """Set the files document's field ``name``: stored on :meth:`close`, or at
        once if the file is closed already."""
        self._file[name] = value
        if self._closed:
            self._root.files.update_one({"_id": {"$eq": self._file["_id"]}},
                                        {"$set": {name: value}}, session=self._session)

    @property
    def closed(self) -> bool:
        """Whether the file is closed (stored, aborted or left by an error)."""
        return bool(self._closed)

    # -- writing ----------------------------------------------------------------------------

    def write(self, data: Any) -> None:
        """Write ``data``: bytes, a file-like object (read to its end) or, if the
        file has an ``encoding``, str. Whole chunks go to the server as they fill
        (in batches); the rest waits for the next write or :meth:`close`.

        :raises ValueError: the file is closed.
        :raises TypeError: ``data`` is none of those.
        """
        if self._closed:
            raise ValueError("cannot write to a closed file")
        read = self._reader_of(data)
        size = self.chunk_size
        while True:
            piece = self._read_source(read, size - len(self._buffer))
            if not piece:
                return
            self._buffer += piece
            if len(self._buffer) == size:
                self._add_chunk(bytes(self._buffer))
                self._buffer.clear()

    def writelines(self, sequence: Iterable[Any]) -> None:
        """Write each item of ``sequence`` (no separators added)."""
        for line in sequence:
            self.write(line)

    def _reader_of(self, data: Any) -> Callable[[int], Any]:
        read = getattr(data, "read", None)
        if callable(read):
            return read  # type: ignore[no-any-return]
        if isinstance(data, str):
            encoding = self._file.get("encoding")
            if encoding is None:
                raise TypeError("must specify an encoding for file in order to write str")
            data = data.encode(encoding)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"can only write bytes, str (with an encoding) or a file-like "
                            f"object with read(), not {type(data)}")
        return io.BytesIO(data).read

    def _read_source(self, read: Callable[[int], Any], size: int) -> bytes:
        """Up to ``size`` bytes from the source; if the source fails, the upload is
        aborted and the source's error raised (the spec's "Aborting an upload")."""
        try:
            piece = read(size)
        except Exception:
            # The spec: the source's error is the one to raise, whether or not the
            # chunks could be deleted.
            with contextlib.suppress(PyMongoError):
                self.abort()
            raise
        if isinstance(piece, str):
            raise TypeError(f"the source's read() returned str, not bytes: {piece[:20]!r}")
        return piece  # type: ignore[no-any-return]

    def _add_chunk(self, data: bytes) -> None:
        self._pending.append({"files_id": self._file["_id"], "n": self._chunk_number,
                              "data": data})
        self._pending_bytes += len(data)
        self._chunk_number += 1
        self._position += len(data)
        if self._pending_bytes >= _UPLOAD_BUFFER_BYTES:
            self._insert_pending()

    def _insert_pending(self) -> None:
        self._ensure_indexes()
        if not self._pending:
            return
        try:
            self._root.chunks.insert_many(self._pending, session=self._session)
        except BulkWriteError as error:
            codes = {item.get("code") for item in error.details.get("writeErrors", [])}
            if codes & set(_DUPLICATE_KEY_CODES):
                raise FileExists(f"file with _id {self._file['_id']!r} already exists") \
                    from error
            raise
        self._pending = []
        self._pending_bytes = 0

    def _ensure_indexes(self) -> None:
        """The spec's indexes, checked before the first write, on an empty files
        collection only (one files document means someone made them already)."""
        if self._indexes_checked:
            return
        disallow_transactions(self._session)
        files, chunks = self._root.files, self._root.chunks
        if files.find_one({}, {"_id": 1}, session=self._session) is None:
            self._create_index(files, FILES_INDEX, unique=False)
            self._create_index(chunks, CHUNKS_INDEX, unique=True)
        self._indexes_checked = True

    def _create_index(self, collection: Collection, keys: dict[str, int], *,
                      unique: bool) -> None:
        # Looked for first, for applications with read-only rights; keys compare by
        # value, so an index the shell made ({filename: 1.0, ...}) counts.
        try:
            existing = [index["key"] for index in collection.list_indexes(
                session=self._session)]
        except OperationFailure as error:
            if error.timeout:
                raise
            existing = []
        if keys not in existing:
            collection.create_index(list(keys.items()), unique=unique, session=self._session)

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Store the rest of the data and the files document; the file is then
        closed (closing again does nothing).

        :raises gridfs.errors.FileExists: a file with its ``_id`` exists.
        """
        if self._closed:
            return
        if self._buffer:
            self._add_chunk(bytes(self._buffer))
            self._buffer.clear()
        self._insert_pending()
        self._file["length"] = Int64(self._position)  # the spec: length SHOULD be Int64
        self._file["uploadDate"] = datetime.datetime.now(tz=datetime.UTC)
        try:
            self._root.files.insert_one(self._file, session=self._session)
        except DuplicateKeyError as error:
            raise FileExists(f"file with _id {self._file['_id']!r} already exists") \
                from error
        self._closed = True

    def abort(self) -> None:
        """Delete the chunks stored so far, and the files document if any; the
        file is then closed, and a write raises."""
        self._pending = []
        self._buffer.clear()
        file_id = self._file["_id"]
        self._root.chunks.delete_many({"files_id": {"$eq": file_id}}, session=self._session)
        self._root.files.delete_one({"_id": {"$eq": file_id}}, session=self._session)
        self._closed = True

    def read(self, size: int = -1) -> NoReturn:
        raise io.UnsupportedOperation("read")

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def writeable(self) -> bool:
        return True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """Close (store) the file, unless the block raised: then the file is only
        marked closed, as PyMongo's, and no files document is stored."""
        if exc_type is None:
            self.close()
        else:
            self._closed = True


class _ChunkReader:
    """A file's chunks from ``start`` on, through one cursor, each checked against
    what the files document implies."""

    def __init__(self, chunks: Collection, file: Mapping[str, Any], session: Session | None,
                 start: int) -> None:
        self._chunks = chunks
        self._file_id = file["_id"]
        self._chunk_size = int(file["chunkSize"])
        self._length = int(file.get("length", 0))
        self._count = math.ceil(self._length / self._chunk_size)
        self._session = session
        self.next_n = start
        self._cursor: FindCursor | None = None

    def _open(self) -> FindCursor:
        disallow_transactions(self._session)
        query: dict[str, Any] = {"files_id": {"$eq": self._file_id}}
        if self.next_n > 0:
            query["n"] = {"$gte": self.next_n}
        return self._chunks.find(query, sort=[("n", 1)], session=self._session)

    def _next_document(self) -> Mapping[str, Any] | None:
        if self._cursor is None:
            self._cursor = self._open()
        try:
            return next(self._cursor, None)
        except CursorNotFound:
            # Reads far apart (past the server's idle cursor timeout): once more.
            self._cursor = self._open()
            return next(self._cursor, None)

    def next(self) -> bytes:
        """The next chunk's data; CorruptGridFile if it is missing or of the wrong size."""
        expected_n = self.next_n
        document = self._next_document()
        if document is None:
            raise CorruptGridFile(f"no chunk #{expected_n} of file {self._file_id!r}")
        if document["n"] != expected_n:
            raise CorruptGridFile(f"missing chunk #{expected_n} of file {self._file_id!r}: "
                                  f"the next chunk is #{document['n']}")
        data = bytes(document["data"])
        last = self._count - 1
        expected = self._chunk_size if expected_n < last else (
            self._length - self._chunk_size * last)
        if len(data) != expected:
            raise CorruptGridFile(f"truncated chunk #{expected_n} of file "
                                  f"{self._file_id!r}: {len(data)} bytes, expected {expected}")
        self.next_n += 1
        return data

    def check_end(self) -> None:
        """CorruptGridFile if a chunk with data follows the last one (an empty one
        may: the spec lets readers ignore it)."""
        document = self._next_document()
        if document is not None and len(document["data"]):
            raise CorruptGridFile(f"extra chunk #{document['n']} of file {self._file_id!r}: "
                                  f"the file has {self._count} chunks")

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None


class GridOut(io.IOBase):
    """A file read from GridFS (``bucket.open_download_stream(...)``,
    ``fs.get(...)``): a read-only, seekable binary file; its files document's
    fields are attributes (``length``, ``filename``, ``metadata``...).

    Give ``file_id`` (the files document is read on first use) or
    ``file_document``.
    """

    def __init__(self, root_collection: Collection, file_id: Any = None,
                 file_document: Any = None, session: Session | None = None) -> None:
        _check_collection(root_collection)
        disallow_transactions(session)
        super().__init__()
        root = without_type_registry(root_collection)
        self._files: Collection = root.files
        self._chunks: Collection = root.chunks
        self._file_id = file_id
        self._file: Any = file_document
        self._session = session
        self._position = 0
        # The chunk holding the position, by number, and the reader of the next ones.
        self._chunk_n = -1
        self._chunk = b""
        self._reader: _ChunkReader | None = None

    _id: Any = _file_field("_id", "The file's ``_id``.")
    filename: str = _file_field("filename", "The file's name.")
    name: str = _file_field("filename", "Alias for ``filename``.")
    content_type: str | None = _file_field("contentType", "DEPRECATED, its MIME type.",
                                           deprecated=True)
    length: int = _file_field("length", "The file's length in bytes.")
    chunk_size: int = _file_field("chunkSize", "The file's chunk size in bytes.")
    upload_date: datetime.datetime = _file_field("uploadDate", "When it was uploaded.")
    aliases: list[str] | None = _file_field("aliases", "DEPRECATED, its aliases.",
                                            deprecated=True)
    metadata: Mapping[str, Any] | None = _file_field("metadata",
                                                     "The application's data about it.")
    md5: str | None = _file_field("md5", "DEPRECATED, the MD5 of its contents, if stored.",
                                  deprecated=True)

    def open(self) -> None:
        """Read the files document, if not read yet.

        :raises gridfs.errors.NoFile: there is no file with this ``_id``.
        """
        if self._file:
            return
        disallow_transactions(self._session)
        self._file = self._files.find_one({"_id": {"$eq": self._file_id}},
                                          session=self._session)
        if not self._file:
            raise NoFile(f"no file in gridfs collection {self._files!r} with _id "
                         f"{self._file_id!r}")

    def __getattr__(self, name: str) -> Any:
        # Private names are never fields: io.IOBase looks some up, and a lookup must
        # not query the server (from a finalizer, say).
        if name.startswith("_"):
            raise AttributeError(f"GridOut object has no attribute {name!r}")
        self.open()
        if name in self._file:
            return self._file[name]
        raise AttributeError(f"GridOut object has no attribute {name!r}")

    # -- reading ----------------------------------------------------------------------------

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the position (all the rest if ``size`` is
        negative or None). Reading to the end checks that no chunk with data
        follows the last."""
        return self._read(-1 if size is None else size, line=False)

    def readline(self, size: int | None = -1) -> bytes:
        """The rest of the line (through ``b"\\n"``), at most ``size`` bytes."""
        return self._read(-1 if size is None else size, line=True)

    def readchunk(self) -> bytes:
        """The rest of the chunk holding the position (b"" at the end)."""
        self.open()
        if self._position >= int(self.length):
            return b""
        data = self._rest_of_chunk()
        self._position += len(data)
        return bytes(data)

    def _read(self, size: int, *, line: bool) -> bytes:
        self.open()
        length = int(self.length)
        remaining = max(length - self._position, 0)
        wanted = remaining if size < 0 else min(size, remaining)
        parts: list[memoryview] = []
        while wanted > 0:
            data = self._rest_of_chunk()
            take = min(len(data), wanted)
            if line:
                newline = bytes(data[:take]).find(b"\n")
                if newline >= 0:
                    take = wanted = newline + 1
            parts.append(data[:take])
            self._position += take
            wanted -= take
        if self._position == length and self._reader is not None:
            self._reader.check_end()
        return b"".join(parts)

    def _rest_of_chunk(self) -> memoryview:
        """The data from the position to the end of its chunk (fetched if needed)."""
        chunk_size = int(self.chunk_size)
        n = self._position // chunk_size
        if n != self._chunk_n:
            if self._reader is None or self._reader.next_n != n:
                self._close_reader()
                self._reader = _ChunkReader(self._chunks, self._file, self._session, n)
            self._chunk, self._chunk_n = self._reader.next(), n
        return memoryview(self._chunk)[self._position - n * chunk_size:]

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def tell(self) -> int:
        """The position, in bytes from the start."""
        return self._position

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        """Move the position to ``pos`` from the start (``os.SEEK_SET``), the
        position (``os.SEEK_CUR``) or the end (``os.SEEK_END``); the new position.

        :raises OSError: an unknown ``whence``, or a position before the start.
        """
        if whence == os.SEEK_SET:
            new = pos
        elif whence == os.SEEK_CUR:
            new = self._position + pos
        elif whence == os.SEEK_END:
            new = int(self.length) + pos
        else:
            raise OSError(22, f"Invalid value for `whence`: {whence!r}")
        if new < 0:
            raise OSError(22, f"Invalid value for `pos` - must be positive: {pos!r}")
        self._position = new
        return new

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def __iter__(self) -> Self:
        """Its lines (through ``b"\\n"``), as a binary file's; :meth:`readchunk`
        reads chunk by chunk."""
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def close(self) -> None:
        """Close the chunks' cursor; the file is then closed."""
        self._close_reader()
        super().close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def write(self, value: Any) -> NoReturn:
        raise io.UnsupportedOperation("write")

    def writelines(self, lines: Any) -> NoReturn:
        raise io.UnsupportedOperation("writelines")

    def writable(self) -> bool:
        return False

    def fileno(self) -> NoReturn:
        raise io.UnsupportedOperation("fileno")

    def flush(self) -> None:
        """Nothing to flush: the file is read-only."""

    def isatty(self) -> bool:
        return False

    def truncate(self, size: int | None = None) -> NoReturn:
        raise io.UnsupportedOperation("truncate")

    def __del__(self) -> None:
        # io.IOBase's finalizer closes the file; closing a cursor does I/O, which a
        # finalizer must not (the cursor's own finalizer releases it).
        pass


class GridOutCursor(FindCursor):
    """``find()`` over a bucket's files collection: each files document it
    matches, as a :class:`GridOut`; PyMongo's cursor builder methods otherwise."""

    def __init__(self, collection: Collection, filter: Mapping[str, Any] | None = None,
                 skip: int = 0, limit: int = 0, no_cursor_timeout: bool = False,
                 sort: Any = None, batch_size: int = 0,
                 session: Session | None = None) -> None:
        _check_collection(collection)
        disallow_transactions(session)
        self._root_collection = without_type_registry(collection)
        super().__init__(self._root_collection.files, filter, skip=skip, limit=limit,
                         no_cursor_timeout=no_cursor_timeout, sort=sort,
                         batch_size=batch_size, session=session)

    def __next__(self) -> GridOut:
        disallow_transactions(self.session)
        return GridOut(self._root_collection, file_document=super().__next__(),
                       session=self.session)

    next = __next__

    def __iter__(self) -> Iterator[GridOut]:
        return self

    def to_list(self, length: int | None = None) -> list[GridOut]:
        """The files left (at most ``length``), as GridOut objects."""
        if length is not None and (isinstance(length, bool) or not isinstance(length, int)
                                   or length < 1):
            raise ValueError(f"length must be None or an int >= 1, not {length!r}")
        files: list[GridOut] = []
        for grid_out in self:
            files.append(grid_out)
            if length is not None and len(files) == length:
                break
        return files

    def add_option(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError("Method does not exist for GridOutCursor")

    def remove_option(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError("Method does not exist for GridOutCursor")
