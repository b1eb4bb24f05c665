"""A mock connector for the pool: transports that do no I/O.

``MockConnector`` counts what it opens and closes (the Go driver's counting
dialer) and can be told to block, yield or fail, so tests can put a kill or
an error at any point of establishment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from bson.objectid import ObjectId

from greenpool import Connection


class MockTransport:
    """Stands in for a socket: it only knows whether it was closed."""

    def __init__(self, conn_id: int, service_id: ObjectId | None = None) -> None:
        self.conn_id = conn_id
        self.service_id = service_id
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return f"<MockTransport {self.conn_id}{' closed' if self.closed else ''}>"


class MockConnector:
    """``connector(conn) -> MockTransport``, with hooks for tests.

    :param delay: seconds each establishment blocks (0: no yield at all).
    :param fail: an exception (or a callable of the connection returning one,
        or None) to raise instead of establishing.
    :param service_ids: load-balanced mode: the serviceId each new connection
        reports, picked by a callable of the connection.
    """

    def __init__(
        self,
        delay: float = 0,
        fail: BaseException | Callable[[Connection[Any]], BaseException | None] | None = None,
        service_ids: Callable[[Connection[Any]], ObjectId] | None = None,
    ) -> None:
        self.delay = delay
        self.fail = fail
        self.service_ids = service_ids
        self.opened: list[MockTransport] = []
        self.attempts = 0

    def __call__(self, conn: Connection[Any]) -> MockTransport:
        self.attempts += 1
        if self.delay:
            gevent.sleep(self.delay)
        error = self.fail(conn) if callable(self.fail) else self.fail
        if error is not None:
            raise error
        if self.service_ids is not None:
            conn.service_id = self.service_ids(conn)
        transport = MockTransport(conn.id, conn.service_id)
        self.opened.append(transport)
        return transport

    @property
    def open_count(self) -> int:
        return sum(1 for t in self.opened if not t.closed)
