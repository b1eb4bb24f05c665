"""A Flask app using Flask-PyMongo's API on greenpool's own driver, greenpool.Client.

Run it with gunicorn's gevent workers (see gunicorn.conf.py)::

    MONGO_URI=mongodb://127.0.0.1:27017/shop PORT=8000 gunicorn -c gunicorn.conf.py app:app

Flask-PyMongo takes no client class (it always builds a ``pymongo.MongoClient``
subclass), so greenpool ships its ``PyMongo`` with the client changed:
:class:`greenpool.flask_pymongo.PyMongo`. ``PyMongo(app, uri, **kwargs)`` builds
a :class:`greenpool.Client` (``connect=False``); ``mongo.db``, ``mongo.cx``,
``find_one_or_404``, ``send_file`` and ``save_file`` are Flask-PyMongo's, on it.

``GET /visit/<name>`` counts a visit atomically (``find_one_and_update`` with
``upsert``) and answers the new count, the worker's pid and the class of the
client's pools. ``GET /visits/<name>`` answers the stored document, or 404.
``PUT /files/<filename>`` stores the request's body in GridFS and ``GET
/files/<filename>`` sends it back (with an ETag, and 304 for ``If-None-Match``).
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, Response, request
from pymongo.errors import DuplicateKeyError

from greenpool import ReturnDocument
from greenpool.flask_pymongo import PyMongo

app = Flask(__name__)
mongo = PyMongo(app, os.environ.get("MONGO_URI", "mongodb://127.0.0.1:27017/shop"),
                maxPoolSize=10)


def count_visit(name: str) -> dict[str, Any]:
    """One more visit of ``name``, atomically; the updated document."""
    assert mongo.db is not None  # the URI names a database
    counter: dict[str, Any] = mongo.db.visits.find_one_and_update(
        {"_id": name}, {"$inc": {"count": 1}}, upsert=True,
        return_document=ReturnDocument.AFTER)
    return counter


@app.get("/visit/<name>")
def visit(name: str) -> dict[str, Any]:
    try:
        counter = count_visit(name)
    except DuplicateKeyError:
        # Two first visits of a name can race: both upserts find nothing, both
        # insert, and one insert fails on the unique _id. MongoDB's advice is to
        # retry: the document exists now, and the retry increments it.
        counter = count_visit(name)
    assert mongo.cx is not None
    return {"name": name, "count": counter["count"], "pid": os.getpid(),
            "pools": sorted({type(pool).__name__ for pool in mongo.cx.pools.values()})}


@app.get("/visits/<name>")
def visits(name: str) -> dict[str, Any]:
    assert mongo.db is not None
    found: dict[str, Any] = mongo.db.visits.find_one_or_404({"_id": name})
    return found


@app.put("/files/<filename>")
def upload(filename: str) -> dict[str, Any]:
    file_id = mongo.save_file(filename, request.stream)
    return {"_id": str(file_id), "filename": filename}


@app.get("/files/<filename>")
def download(filename: str) -> Response:
    return mongo.send_file(filename)
