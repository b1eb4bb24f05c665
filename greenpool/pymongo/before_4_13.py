"""PyMongo 4.9-4.12: how a monitor pool is told apart.

Rules of this module: the one shim for the releases before 4.13, and nothing else.
Those releases build a monitor (or RTT) pool with ``handshake=False``; 4.13 on, with
``is_sdam=True``. When 4.12 leaves ``SUPPORTED_PYMONGO``, delete this module and let
``keywords.pool_factory`` read ``is_sdam`` alone.
"""

from __future__ import annotations

import inspect

from greenpool.pymongo.internals import Pool

#: The keyword that marks a monitor pool, and its value when it does.
MONITOR_FLAG, MONITOR_VALUE = (
    ("is_sdam", True) if "is_sdam" in inspect.signature(Pool.__init__).parameters
    else ("handshake", False))
