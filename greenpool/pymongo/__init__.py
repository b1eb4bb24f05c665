"""greenpool's pools under PyMongo's own ``MongoClient``.

Rules of this package: the adapter between PyMongo's MongoClient and greenpool's pool
core: it builds on :mod:`greenpool.pool` (the wait queue) and PyMongo's own pool
classes, and never imports greenpool's client or wire layers. This ``__init__`` only
gathers the public names.

One line changes in an application that already runs PyMongo under gevent::

    from greenpool.pymongo import MongoClient   # instead of: from pymongo import MongoClient

Where a framework builds the client from keyword arguments it passes through
(Flask-PyMongo, MongoEngine, a Django backend's ``OPTIONS``), give it
:func:`client_kwargs`::

    mongo = PyMongo(app, uri, **client_kwargs(maxPoolSize=10))

Everything else is PyMongo: the same constructor arguments, URI options,
server selection, retries, sessions, transactions, SDAM, authentication, TLS
and compression. Only the application connection pools change. They hand
connections out in strict arrival order (FIFO, with direct handoff at
checkin), honour maxConnecting, and stay consistent when a greenlet is
killed (GreenletExit, gevent.Timeout) at any point of a checkout or checkin.

The modules, one job each:

* ``versions.py``: :data:`SUPPORTED_PYMONGO` and the check that refuses any other
  PyMongo when this package is imported.
* ``internals.py``: every PyMongo internal the adapter uses, imported after that check.
* ``pool.py``: :class:`GreenPool`, PyMongo's pool with greenpool's FIFO handoff and
  accounting.
* ``holders.py``: its base, which says who holds its connections (its report, the
  holders its WaitQueueTimeoutError names, long-hold warnings).
* ``condition.py``: :class:`KillSafeCondition`, the condition server selection waits on.
* ``keywords.py``: :func:`client_kwargs`, the keyword arguments that put greenpool's
  pools under any ``MongoClient`` (for frameworks that build their own), and
  :func:`pool_factory`; PyMongo's private keywords are named nowhere else.
* ``client.py``: :class:`MongoClient`.
* ``before_4_18.py`` and ``before_4_13.py``: what older supported PyMongo releases
  do differently, one module per release boundary, deleted when its releases leave
  the range.

Requirements: ``gevent.monkey.patch_all()`` (at least ``threading``) before
the client is created, so PyMongo's monitors are greenlets in the same hub;
one hub per client (no OS threads using the same client).
"""

from __future__ import annotations

from greenpool.pymongo.client import MongoClient
from greenpool.pymongo.condition import KillSafeCondition
from greenpool.pymongo.keywords import client_kwargs, pool_factory
from greenpool.pymongo.pool import GreenPool
from greenpool.pymongo.versions import (
    SUPPORTED_PYMONGO,
    UnsupportedPyMongoVersion,
    check_pymongo_version,
)

__all__ = [
    "SUPPORTED_PYMONGO",
    "GreenPool",
    "KillSafeCondition",
    "MongoClient",
    "UnsupportedPyMongoVersion",
    "check_pymongo_version",
    "client_kwargs",
    "pool_factory",
]
