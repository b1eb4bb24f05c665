"""Flask-PyMongo on :class:`greenpool.Client`: ``PyMongo(app, uri)`` with greenpool's
own driver under it.

    from greenpool.flask_pymongo import PyMongo

    mongo = PyMongo(app, "mongodb://db.example.net:27017/shop", maxPoolSize=10)

Flask-PyMongo 3 takes no client class: its ``init_app`` builds its own
``MongoClient`` (a ``pymongo.MongoClient`` subclass), and ``send_file`` and
``save_file`` open PyMongo's ``gridfs`` on the database. This :class:`PyMongo` is
Flask-PyMongo's with those three changed and nothing else: ``init_app`` builds a
:class:`Client` (``connect=False`` and Flask-PyMongo's driver name unless given,
the URI's database as ``mongo.db``, Flask-PyMongo's ``ObjectId`` URL converter
and JSON provider), and the two GridFS helpers use :mod:`greenpool.gridfs`, with
Flask-PyMongo's responses (conditional GET, the ``sha1`` etag). ``mongo.db.<name>``
is a :class:`greenpool.Collection` with Flask-PyMongo's ``find_one_or_404``.

Rules of this module: Flask-PyMongo's API on the Client's public classes; it imports
the client's API room and :mod:`flask_pymongo` (``pip install Flask-PyMongo``), and
nothing of PyMongo's client.
"""

from __future__ import annotations

import hashlib
import warnings
from mimetypes import guess_type
from typing import Any

import flask_pymongo
from flask import Flask, Response, abort, current_app, request
from flask_pymongo._version import __version__ as flask_pymongo_version
from flask_pymongo.helpers import BSONObjectIdConverter, BSONProvider
from gridfs.errors import NoFile
from pymongo.driver_info import DriverInfo
from werkzeug.wsgi import wrap_file

from greenpool.client.api.client import Client
from greenpool.client.api.collection import Collection
from greenpool.client.api.database import Database
from greenpool.client.api.gridfs import GridFS

__all__ = ["PyMongo"]


class _FlaskCollection(Collection):
    """A :class:`greenpool.Collection` with Flask-PyMongo's view helper,
    ``find_one_or_404``."""

    def find_one_or_404(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`find_one`, or a 404 Not Found response if nothing matches."""
        found = self.find_one(*args, **kwargs)
        if found is None:
            abort(404)
        return found

    def __getitem__(self, name: str) -> _FlaskCollection:
        return _collection(super().__getitem__(name))

    def with_options(self, *args: Any, **kwargs: Any) -> _FlaskCollection:
        """This collection with some options changed (the others kept)."""
        return _collection(super().with_options(*args, **kwargs))


class _FlaskDatabase(Database):
    """A :class:`greenpool.Database` whose collections have ``find_one_or_404``."""

    def get_collection(self, *args: Any, **kwargs: Any) -> _FlaskCollection:
        """The collection ``name``, with this database's options unless given."""
        return _collection(super().get_collection(*args, **kwargs))

    def __getitem__(self, name: str) -> _FlaskCollection:
        return _collection(super().__getitem__(name))

    def __getattr__(self, name: str) -> _FlaskCollection:
        return _collection(super().__getattr__(name))

    def with_options(self, *args: Any, **kwargs: Any) -> _FlaskDatabase:
        """This database with some options changed (the others kept)."""
        return _database(super().with_options(*args, **kwargs))


class _FlaskClient(Client):
    """A :class:`greenpool.Client` whose databases' collections have
    ``find_one_or_404``."""

    def get_database(self, *args: Any, **kwargs: Any) -> _FlaskDatabase:
        """The database ``name`` (the URI's database when None), with the client's
        options unless given."""
        return _database(super().get_database(*args, **kwargs))

    def __getitem__(self, name: str) -> _FlaskDatabase:
        return _database(super().__getitem__(name))

    def __getattr__(self, name: str) -> _FlaskDatabase:
        return _database(super().__getattr__(name))


def _database(database: Database) -> _FlaskDatabase:
    if isinstance(database, _FlaskDatabase):
        return database
    return _FlaskDatabase(database.client, database.name, database.operations,
                    codec_options=database.codec_options,
                    read_preference=database.read_preference,
                    write_concern=database.write_concern, read_concern=database.read_concern)


def _collection(collection: Collection) -> _FlaskCollection:
    if isinstance(collection, _FlaskCollection):
        return collection
    return _FlaskCollection(collection.database, collection.name,
                      codec_options=collection.codec_options,
                      read_preference=collection.read_preference,
                      write_concern=collection.write_concern,
                      read_concern=collection.read_concern)


class PyMongo(flask_pymongo.PyMongo):
    """Flask-PyMongo's ``PyMongo`` on :class:`greenpool.Client`: ``mongo.cx`` is the
    client, ``mongo.db`` the URI's database or None; a subclass of greenpool's
    Client, Database and Collection each, whose collections have Flask-PyMongo's
    ``find_one_or_404(filter, ...)`` (:meth:`~greenpool.Collection.find_one`, or a 404
    Not Found response)."""

    cx: _FlaskClient | None  # type: ignore[assignment]
    db: _FlaskDatabase | None  # type: ignore[assignment]

    def init_app(self, app: Flask, uri: str | None = None, *args: Any,
                 **kwargs: Any) -> None:
        """Build the client from ``uri`` (else the app's ``MONGO_URI``), ``args`` and
        ``kwargs``, as :class:`greenpool.Client` takes them.

        :raises ValueError: no URI given and no ``MONGO_URI`` configured.
        """
        if uri is None:
            uri = app.config.get("MONGO_URI", None)
        if uri is None:
            raise ValueError("You must specify a URI or set the MONGO_URI Flask config "
                             "variable")
        # No connection before the first request: the app may be loaded before a fork.
        kwargs.setdefault("connect", False)
        kwargs.setdefault("driver", DriverInfo("Flask-PyMongo", flask_pymongo_version))
        self.cx = _FlaskClient(uri, *args, **kwargs)
        database = self.cx.settings.database
        self.db = self.cx[database] if database else None
        app.url_map.converters["ObjectId"] = BSONObjectIdConverter
        app.json = BSONProvider(app)

    def _storage(self, base: str, db: str | None, helper: str) -> GridFS:
        if not isinstance(base, str):
            raise TypeError("'base' must be string or unicode")
        database = self.cx[db] if db and self.cx is not None else self.db
        assert database is not None, f"Please initialize the app before calling {helper}!"
        return GridFS(database, base)

    def send_file(self, filename: str, base: str = "fs", version: int = -1,
                  cache_for: int = 31536000, db: str | None = None) -> Response:
        """Respond with ``version`` of the GridFS file ``filename`` (404 if there is
        none), as Flask-PyMongo's ``send_file``: conditional GET, cached for
        ``cache_for`` seconds, the ``sha1`` that :meth:`save_file` stored as its etag."""
        if not isinstance(version, int):
            raise TypeError("'version' must be an integer")
        if not isinstance(cache_for, int):
            raise TypeError("'cache_for' must be an integer")
        storage = self._storage(base, db, "send_file")
        try:
            fileobj = storage.get_version(filename=filename, version=version)
        except NoFile:
            abort(404)
        data = wrap_file(request.environ, fileobj,  # type: ignore[arg-type]  # a binary file
                         buffer_size=1024 * 255)
        content_type, _ = guess_type(filename)
        response = current_app.response_class(data, mimetype=content_type,
                                              direct_passthrough=True)
        response.headers["Content-Disposition"] = f"attachment; filename={filename}"
        response.content_length = fileobj.length
        response.last_modified = fileobj.upload_date
        # save_file's sha1, else a legacy md5, else the contents hashed now.
        etag = getattr(fileobj, "sha1", None)
        if etag is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                etag = fileobj.md5
        if etag is None:
            position = fileobj.tell()
            etag = hashlib.sha1(fileobj.read()).hexdigest()
            fileobj.seek(position)
        response.set_etag(etag)
        response.cache_control.max_age = cache_for
        response.cache_control.public = True
        response.make_conditional(request)
        return response

    def save_file(self, filename: str, fileobj: Any, base: str = "fs",
                  content_type: str | None = None, db: str | None = None,
                  **kwargs: Any) -> Any:
        """Store the file-like ``fileobj`` in GridFS as ``filename``, with its
        ``sha1`` (the etag of :meth:`send_file`) and the fields ``kwargs``; its
        ``_id``."""
        if not (hasattr(fileobj, "read") and callable(fileobj.read)):
            raise TypeError("'fileobj' must have read() method")
        storage = self._storage(base, db, "save_file")
        if content_type is None:
            content_type, _ = guess_type(filename)
        source = _Hashing(fileobj)
        with storage.new_file(filename=filename, content_type=content_type,
                              **kwargs) as grid_file:
            grid_file.write(source)
            grid_file.sha1 = source.hash.hexdigest()
        return grid_file._id


class _Hashing:
    """``file`` read through, its bytes hashed on the way (sha1)."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.hash = hashlib.sha1()

    def read(self, size: int = -1) -> Any:
        data = self.file.read(size)
        if data:
            self.hash.update(data)
        return data
