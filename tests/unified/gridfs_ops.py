"""GridFS in the unified format: the ``bucket`` entity and its operations, as the
GridFS library of the client under test has them (PyMongo's :mod:`gridfs` for a
PyMongo database, :mod:`greenpool.gridfs` for a greenpool one).

Each operation is that library's call: ``upload`` is ``upload_from_stream`` from a
stream over the ``$$hexBytes`` source, ``download`` is ``download_to_stream`` into
a buffer whose bytes are the result (``$$matchesHexBytes`` compares them). The
methods that take a stream are the ones each library runs within its client's
timeoutMS as a whole, which the CSOT spec's GridFS files expect.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import gridfs
from pymongo.database import Database as PyMongoDatabase

from greenpool import gridfs as greenpool_gridfs

#: A bucket entity's ``bucketOptions`` and the GridFSBucket keywords they are.
BUCKET_OPTIONS = {"bucketName": "bucket_name", "chunkSizeBytes": "chunk_size_bytes",
                  "writeConcern": "write_concern", "readPreference": "read_preference",
                  "disableMD5": "disable_md5"}

_SESSION = {"session": "session"}
_UPLOAD = {**_SESSION, "filename": "filename", "source": "source",
           "chunkSizeBytes": "chunk_size_bytes", "metadata": "metadata",
           "disableMD5": "disable_md5"}

#: Each bucket operation's arguments and the library's keywords for them
#: (tests/unified/arguments.py reads this table).
KEYWORDS: dict[str, dict[str, str]] = {
    "bucket.upload": _UPLOAD,
    "bucket.uploadWithId": {**_UPLOAD, "id": "file_id"},
    "bucket.download": {**_SESSION, "id": "file_id"},
    "bucket.downloadByName": {**_SESSION, "filename": "filename", "revision": "revision"},
    "bucket.delete": {**_SESSION, "id": "file_id"},
    "bucket.deleteByName": {**_SESSION, "filename": "filename"},
    "bucket.rename": {**_SESSION, "id": "file_id", "newFilename": "new_filename"},
    "bucket.renameByName": {**_SESSION, "filename": "filename",
                            "newFilename": "new_filename"},
    "bucket.drop": _SESSION,
    "bucket.find": {**_SESSION, "filter": "filter", "sort": "sort", "skip": "skip",
                    "limit": "limit", "batchSize": "batch_size",
                    "noCursorTimeout": "no_cursor_timeout"},
}


def make_bucket(database: Any, options: dict[str, Any]) -> Any:
    """A GridFSBucket of ``database`` from the library of its client."""
    # MD5 is gone from both libraries: the spec's transitional option is a no-op.
    options.pop("disable_md5", None)
    library: Any = gridfs if isinstance(database, PyMongoDatabase) else greenpool_gridfs
    return library.GridFSBucket(database, **options)


def _hex_source(value: Any) -> io.BytesIO:
    assert isinstance(value, Mapping) and set(value) == {"$$hexBytes"}, (
        f"an upload's source must be {{$$hexBytes: ...}}, not {value!r}")
    return io.BytesIO(bytes.fromhex(value["$$hexBytes"]))


def _upload(bucket: Any, kwargs: dict[str, Any]) -> Any:
    kwargs.pop("disable_md5", None)
    return bucket.upload_from_stream(source=_hex_source(kwargs.pop("source")), **kwargs)


def _upload_with_id(bucket: Any, kwargs: dict[str, Any]) -> Any:
    kwargs.pop("disable_md5", None)
    return bucket.upload_from_stream_with_id(source=_hex_source(kwargs.pop("source")),
                                             **kwargs)


def _download(bucket: Any, kwargs: dict[str, Any]) -> bytes:
    destination = io.BytesIO()
    bucket.download_to_stream(destination=destination, **kwargs)
    return destination.getvalue()


def _download_by_name(bucket: Any, kwargs: dict[str, Any]) -> bytes:
    destination = io.BytesIO()
    bucket.download_to_stream_by_name(destination=destination, **kwargs)
    return destination.getvalue()


def _find(bucket: Any, kwargs: dict[str, Any]) -> list[Any]:
    # The format: a returned iterable is iterated to its end.
    return list(bucket.find(**kwargs))


def _method(name: str) -> Callable[[Any, dict[str, Any]], Any]:
    return lambda bucket, kwargs: getattr(bucket, name)(**kwargs)


#: The bucket operations, for tests/unified/operations.py's table.
OPERATIONS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "bucket.upload": _upload,
    "bucket.uploadWithId": _upload_with_id,
    "bucket.download": _download,
    "bucket.downloadByName": _download_by_name,
    "bucket.delete": _method("delete"),
    "bucket.deleteByName": _method("delete_by_name"),
    "bucket.rename": _method("rename"),
    "bucket.renameByName": _method("rename_by_name"),
    "bucket.drop": _method("drop"),
    "bucket.find": _find,
}
