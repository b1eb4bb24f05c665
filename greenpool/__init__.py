"""greenpool: a MongoDB connection pool for gevent programs.

It implements the MongoDB Connection Monitoring and Pooling (CMAP) and Load
Balancer specifications on gevent: FIFO waits with direct handoff, a
maintenance greenlet, kill safety and fork safety.
"""

from greenpool._version import __version__
from greenpool.client import Client
from greenpool.cursor import Cursor
from greenpool.errors import (
    ConfigurationError,
    PoolClearedError,
    PoolClosedError,
    WaitQueueTimeoutError,
)
from greenpool.options import PoolOptions
from greenpool.pool import Connection, ConnectionState, Pool, PoolStats, Purpose, Transport
from greenpool.poolstate import PoolState
from greenpool.session import Session, TransactionState
from greenpool.timeouts import timeout

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
    "timeout",
]
