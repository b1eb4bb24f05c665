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
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_patched_threading()
        super().__init__(*args, **client_kwargs(**kwargs))
