"""Every PyMongo internal greenpool.pymongo uses, imported in one place.

Rules of this module: it checks the installed PyMongo against the supported range
first (``versions.py``), then imports the private names that range guarantees; the
adapter's other modules take PyMongo's internals from here, never from PyMongo
directly. Names that moved between modules from release to release are looked up where
every supported release has them. No logic lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pymongo

from greenpool.pymongo.versions import check_pymongo_version

# Before any private name below is imported: they are what the range guarantees.
check_pymongo_version(pymongo.version)

from pymongo import _csot  # noqa: E402
from pymongo.logger import (  # noqa: E402
    _CONNECTION_LOGGER,
    _ConnectionStatusMessage,
    _debug_log,
    _verbose_connection_error_reason,
)
from pymongo.monitoring import ConnectionCheckOutFailedReason as Failed  # noqa: E402
from pymongo.monitoring import ConnectionClosedReason as Closed  # noqa: E402
from pymongo.synchronous import pool as _stock_pool  # noqa: E402
from pymongo.synchronous.pool import Connection, Pool  # noqa: E402
from pymongo.typings import _DocumentType  # noqa: E402

if TYPE_CHECKING:
    from pymongo.helpers_shared import _get_timeout_details
    from pymongo.pool_shared import PoolState, _PoolClosedError, _raise_connection_failure
    from pymongo.synchronous.mongo_client import _ClientCheckout  # annotations only
else:
    # These moved between modules from release to release; PyMongo's own pool
    # module defines or imports all four in every supported release.
    PoolState = _stock_pool.PoolState
    _PoolClosedError = _stock_pool._PoolClosedError
    _raise_connection_failure = _stock_pool._raise_connection_failure
    _get_timeout_details = _stock_pool._get_timeout_details

__all__ = [
    "_CONNECTION_LOGGER",
    "Closed",
    "Connection",
    "Failed",
    "Pool",
    "PoolState",
    "_ClientCheckout",
    "_ConnectionStatusMessage",
    "_DocumentType",
    "_PoolClosedError",
    "_csot",
    "_debug_log",
    "_get_timeout_details",
    "_raise_connection_failure",
    "_verbose_connection_error_reason",
]
