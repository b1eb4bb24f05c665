"""A WSGI app using MongoEngine, with greenpool's pools under PyMongo's client, or on
greenpool's own driver.

Run it with gunicorn's gevent workers (see gunicorn.conf.py)::

    MONGODB_URI=mongodb://127.0.0.1:27017/shop PORT=8000 gunicorn -c gunicorn.conf.py app:app
    MONGOENGINE_CLIENT=greenpool MONGODB_URI=... gunicorn -c gunicorn.conf.py app:app

MongoEngine's ``connect()`` passes the keyword arguments it does not know on to
the ``MongoClient`` it builds: :func:`greenpool.pymongo.client_kwargs` adds to
the app's own options what gives that client greenpool's application pools
(FIFO waits, kill safety). Documents, querysets and everything else stay
MongoEngine's. With ``MONGOENGINE_CLIENT=greenpool``, ``connect()`` is given
``mongo_client_class=greenpool.Client`` instead, and builds greenpool's driver with
the same arguments.

``GET /visit/<name>`` counts a visit atomically (``modify`` with ``upsert``) and
answers the new count, the worker's pid and the class of the pools serving the
client, as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from mongoengine import Document, IntField, NotUniqueError, StringField, connect, get_connection

import greenpool
from greenpool.pymongo import client_kwargs

URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/shop")
# connect=False: nothing is opened in gunicorn's master (preload_app); each worker's
# client connects on first use, after the fork.
if os.environ.get("MONGOENGINE_CLIENT") == "greenpool":
    connect(host=URI, mongo_client_class=greenpool.Client, maxPoolSize=10, connect=False)
else:
    connect(host=URI, **client_kwargs(maxPoolSize=10, connect=False))


class Visit(Document):
    name = StringField(primary_key=True)
    count = IntField(default=0)
    meta: ClassVar[dict[str, Any]] = {"collection": "visits"}


def pool_classes() -> list[str]:
    """The classes of the client's application pools (greenpool.Client's ``pools``; on
    PyMongo's client, a look at its internals, to show which pool serves the app)."""
    client = get_connection()
    if isinstance(client, greenpool.Client):
        return sorted({type(pool).__name__ for pool in client.pools.values()})
    servers = client._topology._servers.values()
    return sorted({type(server.pool).__name__ for server in servers})


def count_visit(name: str) -> Visit:
    """One more visit of ``name``, atomically; the updated document."""
    try:
        return Visit.objects(name=name).modify(upsert=True, new=True, inc__count=1)
    except NotUniqueError:
        # Two first visits of a name can race: both upserts find nothing, both
        # insert, and one insert fails on the unique _id. MongoDB's advice is to
        # retry: the document exists now, and the retry increments it.
        return Visit.objects(name=name).modify(upsert=True, new=True, inc__count=1)


def app(environ: dict[str, Any],
        start_response: Callable[[str, list[tuple[str, str]]], Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    if not path.startswith("/visit/") or len(path) == len("/visit/"):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"GET /visit/<name>\n"]
    name = path[len("/visit/"):]
    visit = count_visit(name)
    data = json.dumps({"name": name, "count": visit.count, "pid": os.getpid(),
                       "pools": pool_classes()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(data)))])
    return [data]
