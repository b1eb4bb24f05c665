"""greenpool: a MongoDB connection pool for gevent programs.

It implements the MongoDB Connection Monitoring and Pooling (CMAP) and Load
Balancer specifications on gevent: FIFO waits with direct handoff, a
maintenance greenlet, kill safety and fork safety.
"""

from greenpool._version import __version__
from greenpool.client.client import Client
from greenpool.client.cursor import Cursor
from greenpool.client.session import Session, TransactionState
from greenpool.client.timeouts import timeout
from greenpool.errors import (
    ConfigurationError,
    PoolClearedError,
    PoolClosedError,
    WaitQueueTimeoutError,
)
from greenpool.pool.connection import Connection, ConnectionState, PoolStats, Purpose, Transport
from greenpool.pool.options import PoolOptions
from greenpool.pool.pool import Pool
from greenpool.pool.poolstate import PoolState
from greenpool.pool.reports import pool_reports, report_on_signal

__all__ = [
    "Client",
    "ConfigurationError",
    "Connection",
    "ConnectionState",
    "Cursor",
    "Pool",
    "PoolClearedError",
    "PoolClosedError",
    "PoolOptions",
    "PoolState",
    "PoolStats",
    "Purpose",
    "Session",
    "TransactionState",
    "Transport",
    "WaitQueueTimeoutError",
    "__version__",
    "pool_reports",
    "report_on_signal",
    "timeout",
]
