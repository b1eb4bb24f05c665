"""greenpool.pymongo.MongoClient: PyMongo's MongoClient with greenpool's pools.

Rules of this module: the client class and nothing else; what it plugs into PyMongo
is ``keywords.py``'s.
"""

from __future__ import annotations

from typing import Any

import pymongo

from greenpool.pymongo.internals import _DocumentType
from greenpool.pymongo.keywords import client_kwargs, require_patched_threading


class MongoClient(pymongo.MongoClient[_DocumentType]):
    """PyMongo's ``MongoClient`` with greenpool's application pools.

    Same arguments and behaviour as :class:`pymongo.MongoClient`; only the
    connection pools differ (see :mod:`greenpool.pymongo`). Requires
    ``gevent.monkey.patch_all()`` before it is created.

    Two keywords are greenpool's, never connection string options, and are
    not passed on to PyMongo: ``acquire_sites`` and ``long_hold_threshold``
    (seconds), as for :class:`greenpool.Client` (recording acquire sites
    walks PyMongo's frames on every checkout). Each pool's holders are in
    :func:`greenpool.pool_reports`, and in the WaitQueueTimeoutError a
    checkout raises (PyMongo's own class and message, the holders added to
    the message and in its ``holders`` attribute).
    """

    def __init__(self, *args: Any, acquire_sites: bool | None = None,
                 long_hold_threshold: float | None = None, **kwargs: Any) -> None:
        require_patched_threading()
        super().__init__(*args, **client_kwargs(
            acquire_sites=acquire_sites, long_hold_threshold=long_hold_threshold, **kwargs))
