"""greenpool: a MongoDB connection pool for gevent programs.

It implements the MongoDB Connection Monitoring and Pooling (CMAP) and Load
Balancer specifications on gevent: FIFO waits with direct handoff, a
maintenance greenlet, kill safety and fork safety.
"""

from greenpool._version import __version__
from greenpool.errors import (
    ConfigurationError,
    PoolClearedError,
    PoolClosedError,
    WaitQueueTimeoutError,
)
from greenpool.options import PoolOptions
from greenpool.pool import Connection, ConnectionState, Pool, PoolStats, Purpose, Transport
from greenpool.poolstate import PoolState

__all__ = [
    "ConfigurationError",
    "Connection",
    "ConnectionState",
    "Pool",
    "PoolClearedError",
    "PoolClosedError",
    "PoolOptions",
    "PoolState",
    "PoolStats",
    "Purpose",
    "Transport",
    "WaitQueueTimeoutError",
    "__version__",
]
