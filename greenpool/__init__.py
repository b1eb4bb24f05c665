"""greenpool: a MongoDB connection pool for gevent programs.

It implements the MongoDB Connection Monitoring and Pooling (CMAP) and Load
Balancer specifications on gevent: FIFO waits with direct handoff, a
maintenance greenlet, kill safety and fork safety, with a gevent-native
client on top (:class:`Client`).

Every name an application imports is here, in :mod:`greenpool.gridfs` (GridFS on the
Client), in :mod:`greenpool.pymongo` (PyMongo's ``MongoClient`` on greenpool's pools),
in :mod:`greenpool.testing` (servers for tests and trials), in :mod:`greenpool.otel`
(OpenTelemetry metrics, the ``otel`` extra) or in :mod:`greenpool.flask_pymongo`
(Flask-PyMongo's ``PyMongo`` on the Client).
The modules behind them are arranged in layers (docs/architecture.rst) and may move.
"""

from greenpool import _moved
from greenpool._version import __version__
from greenpool.client.api.client import Client
from greenpool.client.api.collection import Collection, ReturnDocument
from greenpool.client.api.cursor import Cursor
from greenpool.client.api.database import Database
from greenpool.client.api.findcursor import CommandCursor, FindCursor
from greenpool.client.config.settings import ClientSettings, Credentials, Secret
from greenpool.client.config.uri import InvalidURIError, parse_uri, redact_uri, uri_secrets
from greenpool.client.operations.session import Session, TransactionState
from greenpool.client.operations.timeouts import timeout
from greenpool.errors import (
    AuthenticationError,
    ConfigurationError,
    NotMongoDBError,
    OptionTypeError,
    PoolClearedError,
    PoolClosedError,
    ProtocolError,
    WaitQueueTimeoutError,
)
from greenpool.pool.connection import Connection, ConnectionState, PoolStats, Purpose, Transport
from greenpool.pool.holds import LISTED_HOLDERS, Holder, PoolReport, Site
from greenpool.pool.longholds import ConnectionHeldTooLongEvent
from greenpool.pool.options import PoolOptions
from greenpool.pool.pool import Pool
from greenpool.pool.poolstate import PoolState
from greenpool.pool.reports import pool_reports, report_on_signal
from greenpool.wire.connector import connect, make_connector
from greenpool.wire.link import Link
from greenpool.wire.linkoptions import LinkOptions

_moved.install()

__all__ = [
    "LISTED_HOLDERS",
    "AuthenticationError",
    "Client",
    "ClientSettings",
    "Collection",
    "CommandCursor",
    "ConfigurationError",
    "Connection",
    "ConnectionHeldTooLongEvent",
    "ConnectionState",
    "Credentials",
    "Cursor",
    "Database",
    "FindCursor",
    "Holder",
    "InvalidURIError",
    "Link",
    "LinkOptions",
    "NotMongoDBError",
    "OptionTypeError",
    "Pool",
    "PoolClearedError",
    "PoolClosedError",
    "PoolOptions",
    "PoolReport",
    "PoolState",
    "PoolStats",
    "ProtocolError",
    "Purpose",
    "ReturnDocument",
    "Secret",
    "Session",
    "Site",
    "TransactionState",
    "Transport",
    "WaitQueueTimeoutError",
    "__version__",
    "connect",
    "make_connector",
    "parse_uri",
    "pool_reports",
    "redact_uri",
    "report_on_signal",
    "timeout",
    "uri_secrets",
]
