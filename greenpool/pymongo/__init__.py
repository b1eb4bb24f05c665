"""greenpool's pools under PyMongo's own ``MongoClient``.

Layer rule: the adapter between PyMongo's MongoClient and greenpool's pool core builds
on :mod:`greenpool.pool` (the wait queue) and PyMongo's own pool classes, and never
imports greenpool's client or wire layers. This ``__init__`` only gathers the public
names.

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

Requirements: ``gevent.monkey.patch_all()`` (at least ``threading``) before
the client is created, so PyMongo's monitors are greenlets in the same hub;
one hub per client (no OS threads using the same client).

Which module does what: docs/architecture.rst, the module map.
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
