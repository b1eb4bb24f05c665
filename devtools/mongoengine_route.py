"""A pytest plugin for devtools/mongoengine_suite.py: MongoEngine's default client class
on one route, its default server moved to the one the harness started.

``GREENPOOL_PEER_ROUTE`` says the route: ``stock`` (PyMongo's MongoClient, as MongoEngine
uses by default) or ``greenpool`` (greenpool.Client in its place, as
``connect(..., mongo_client_class=greenpool.Client)`` would put it).
``GREENPOOL_PEER_PORT`` is the started server's port on 127.0.0.1: a client MongoEngine
makes for its default ``localhost:27017`` goes there, on both routes alike.
The process runs under gevent's ``patch_all()``, as a gevent application does.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import atexit  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from typing import Any  # noqa: E402

import mongoengine.connection  # noqa: E402
import pymongo  # noqa: E402
from pymongo_suite import install_loopback_guard  # noqa: E402

import greenpool  # noqa: E402

install_loopback_guard()  # nothing beyond 127.0.0.1, on either route

ROUTE = os.environ["GREENPOOL_PEER_ROUTE"]
PORT = int(os.environ["GREENPOOL_PEER_PORT"])
_DEFAULT = re.compile(r"\blocalhost(:27017)?\b|\b127\.0\.0\.1:27017\b")


def moved(host: Any, port: Any) -> tuple[Any, Any]:
    """MongoEngine's default server, ``localhost:27017``, moved to the started one."""
    def text(value: Any) -> Any:
        return _DEFAULT.sub(f"127.0.0.1:{PORT}", value) if isinstance(value, str) else value

    host = [text(h) for h in host] if isinstance(host, list | tuple) else text(host)
    return host, (PORT if port in (None, 27017) else port)


_BASE: Any = greenpool.Client if ROUTE == "greenpool" else pymongo.MongoClient


class RoutedClient(_BASE):  # type: ignore[misc]
    """The route's client class, for MongoEngine's default server moved."""

    made = 0

    def __init__(self, host: Any = None, port: Any = None, *args: Any, **kwargs: Any) -> None:
        RoutedClient.made += 1
        host, port = moved("localhost" if host is None else host, port)
        super().__init__(host, port, *args, **kwargs)


@atexit.register
def _count() -> None:
    """How many clients of the route's class were made, for the harness to check."""
    with open(os.environ["GREENPOOL_PEER_MADE"], "w") as out:
        out.write(str(RoutedClient.made))


# MongoEngine makes its connections with this module global unless told otherwise.
mongoengine.connection.MongoClient = RoutedClient  # type: ignore[misc]
