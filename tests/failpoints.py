"""Fail points on the test server: set for a block, always switched off after.

SecantusDB (like mongod) keeps one ``failCommand`` fail point server-wide,
and a new one replaces the old, so tests that use them must not overlap and
must switch them off whatever happens. Fail points are set with PyMongo's
own client, so a broken greenpool cannot hide a failing setup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from pymongo import MongoClient


@contextlib.contextmanager
def failpoint(uri: str, command: Mapping[str, Any]) -> Iterator[None]:
    """Run ``configureFailPoint`` (``command``) for the block, then turn it off."""
    admin: MongoClient[dict[str, Any]] = MongoClient(
        uri, directConnection=True, serverSelectionTimeoutMS=10_000)
    try:
        admin.admin.command(dict(command))
        try:
            yield
        finally:
            admin.admin.command({"configureFailPoint": command["configureFailPoint"],
                                 "mode": "off"})
    finally:
        admin.close()
