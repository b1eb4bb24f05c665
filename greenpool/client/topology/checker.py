"""The monitor's connections: what a monitor needs of one (:class:`Checker`) and the
Client's, over a :class:`~greenpool.wire.link.Link` (:class:`LinkChecker`).

Rules of this module: the commands a monitoring connection sends and how it reads
their replies (the handshake, hello or legacy hello, the awaitable hello and the
replies the server streams for it); when to check and what a reply means are the
monitor's (:mod:`greenpool.client.topology.monitor`).

A monitoring connection never authenticates and never compresses (Server Monitoring
spec); its socket timeout is connectTimeoutMS, and connectTimeoutMS plus
heartbeatFrequencyMS for the reply to an awaitable hello, which the server may hold
that long.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from pymongo.errors import AutoReconnect

from greenpool.address import Address, format_address
from greenpool.errors import ProtocolError
from greenpool.wire.connector import connect
from greenpool.wire.handshake import check_hello_fields
from greenpool.wire.link import Link, LinkOptions

__all__ = ["Checker", "LinkChecker", "monitor_link_options"]


class Checker(Protocol):
    """One monitoring connection, opened by its first check."""

    def check(self) -> tuple[dict[str, Any], float]:
        """A hello round trip: the reply and the round-trip time in seconds
        (the handshake's, for the connection's first check); raises on failure."""

    def await_reply(self, topology_version: Mapping[str, Any],
                    max_await: float) -> dict[str, Any]:
        """The streaming protocol's next reply: the next one the server
        streams if :attr:`more_to_come`, else the reply to an awaitable hello
        (``topology_version``, ``max_await`` seconds, exhaustAllowed) sent
        now. Only on a connection a :meth:`check` opened; raises on failure."""

    @property
    def more_to_come(self) -> bool:
        """The server streams more replies: the next check reads one."""

    def close(self) -> None:
        """Close the monitoring connection now (interrupting a check)."""


def monitor_link_options(options: LinkOptions) -> LinkOptions:
    """The options of a monitoring connection, from the pooled connections'
    ones: no authentication, no compression, connectTimeoutMS as the socket
    timeout (Server Monitoring spec)."""
    return LinkOptions(connect_timeout=options.connect_timeout,
                       socket_timeout=options.connect_timeout,
                       ssl_context=options.ssl_context, app_name=options.app_name,
                       driver=options.driver, server_api=options.server_api)


class LinkChecker:
    """A :class:`Checker` over a :class:`~greenpool.wire.link.Link`.

    The first check is the connection's handshake. Later ones send ``hello``,
    or the legacy hello (``isMaster``) if the handshake's reply lacked
    ``helloOk: true``, as the spec says. Every reply must pass the checks the
    handshake's passed (:func:`~greenpool.wire.handshake.check_hello_fields`):
    one that fails closes the connection and raises AutoReconnect naming the
    field. ``options`` are used as given (see :func:`monitor_link_options`).
    """

    def __init__(self, address: Address, options: LinkOptions) -> None:
        self._address = address
        self._options = options
        self._link: Link | None = None
        self._hello_ok = False
        # A forked child must not read its parent's stream (see await_reply).
        self._pid = os.getpid()

    @property
    def more_to_come(self) -> bool:
        link = self._link
        return link is not None and link.more_to_come and not link.closed

    def check(self) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        if self._link is None:
            self._link = connect(self._address, self._options)
            assert self._link.hello is not None
            reply = dict(self._link.hello)
        else:
            reply = self._accepted(self._link.command("admin", self._hello()))
        elapsed = time.perf_counter() - started
        self._hello_ok = reply.get("helloOk") is True
        return reply, elapsed

    def await_reply(self, topology_version: Mapping[str, Any],
                    max_await: float) -> dict[str, Any]:
        link = self._link
        if link is None:
            raise AutoReconnect(f"{format_address(self._address)}: connection closed")
        if not link.more_to_come:
            command = {**self._hello(), "topologyVersion": topology_version,
                       "maxAwaitTimeMS": round(max_await * 1000)}
            link.start_stream("admin", command)
        connect_timeout = self._options.connect_timeout
        link.wait_readable(
            timeout=None if connect_timeout is None else connect_timeout + max_await)
        if os.getpid() != self._pid:
            # Forked while waiting, without Python's at-fork hooks (which
            # close the parent's connection in the child): the bytes that
            # came are the parent's to read.
            raise AutoReconnect(f"{format_address(self._address)}: the process forked; the "
                                f"monitoring connection belongs to the parent")
        return self._accepted(link.receive())

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()

    def _hello(self) -> dict[str, Any]:
        api = self._options.server_api
        if api:  # the Versioned API spec: hello alone, with the API's fields
            return {"hello": 1, "helloOk": True, **dict(api)}
        return {"hello" if self._hello_ok else "isMaster": 1, "helloOk": True}

    def _accepted(self, reply: dict[str, Any]) -> dict[str, Any]:
        try:
            check_hello_fields(reply)  # as the handshake's reply was
        except ProtocolError as exc:
            self.close()
            raise AutoReconnect(f"{format_address(self._address)}: {exc}") from exc
        return reply
