"""A Flask app using Flask-PyMongo, with greenpool's pools under PyMongo's client.

Run it with gunicorn's gevent workers (see gunicorn.conf.py)::

    MONGO_URI=mongodb://127.0.0.1:27017/shop PORT=8000 gunicorn -c gunicorn.conf.py app:app

Flask-PyMongo builds a ``pymongo.MongoClient`` subclass and passes every extra
keyword argument of ``PyMongo(app, ...)`` on to it.
:func:`greenpool.pymongo.client_kwargs` adds to the app's own options what
:class:`greenpool.pymongo.MongoClient` sets itself: the application pools
become greenpool's (FIFO waits, kill safety) and server selection waits on a
kill-safe condition. Nothing else in the app changes.

``GET /visit/<name>`` counts a visit atomically (``find_one_and_update`` with
``upsert``) and answers the new count, the worker's pid and the class of the
pools serving the client.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask
from flask_pymongo import PyMongo
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from greenpool.pymongo import client_kwargs

app = Flask(__name__)
mongo = PyMongo(app, os.environ.get("MONGO_URI", "mongodb://127.0.0.1:27017/shop"),
                **client_kwargs(maxPoolSize=10))


def pool_classes() -> list[str]:
    """The classes of the client's application pools (a look at PyMongo internals,
    to show which pool serves the app)."""
    servers = mongo.cx._topology._servers.values()  # type: ignore[union-attr]
    return sorted({type(server.pool).__name__ for server in servers})


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
    return {"name": name, "count": counter["count"], "pid": os.getpid(),
            "pools": pool_classes()}
