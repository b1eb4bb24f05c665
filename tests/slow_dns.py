"""A slow DNS server on loopback: a fixed zone, every answer held back.

:class:`SlowDNSServer` answers UDP and TCP queries on 127.0.0.1 (one free port for
both, as a resolver expects) from a zone of records, each answer after ``delay``
seconds, as a distant or overloaded name server does::

    zone = make_zone({"db.greenpool.test": [("A", "127.0.0.1")]})
    with SlowDNSServer(zone, delay=1.0) as server:
        ...ask 127.0.0.1, port server.port...
        server.queries                      # [("db.greenpool.test", "A", "udp")]

Answers are built by dnspython (:func:`tests.uri_dns.respond`, the DNS stub's own
rules): the records asked for, no answer for a name the zone has without that type,
NXDOMAIN for a name it lacks. It runs as greenlets in the calling process's hub (the
tests are monkey-patched), so the process that waits for it must be another one or
must stay cooperative; each query is answered in its own greenlet, so slow answers
overlap. It starts no process.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import dns.message
import dns.name
import dns.rdatatype
import dns.resolver
import gevent
from gevent import socket as gsocket
from gevent.server import DatagramServer, StreamServer

from tests.uri_dns import TTL, Records, respond

HOST = "127.0.0.1"
_LENGTH = struct.Struct("!H")  # DNS over TCP: each message after its 2-byte length


def make_zone(records: Mapping[str, Iterable[tuple[str, str]]]) -> Records:
    """A zone from ``{name: [(type, data), ...]}``, data as in a zone file."""
    zone: Records = {}
    for name, entries in records.items():
        for rdtype, data in entries:
            key = (dns.name.from_text(name), dns.rdatatype.from_text(rdtype))
            zone.setdefault(key, []).append(data)
    return zone


class SlowDNSServer:
    """A DNS server for ``zone`` on 127.0.0.1, over UDP and TCP on one port."""

    def __init__(self, zone: Records, *, delay: float = 0.0, ttl: int = TTL) -> None:
        #: The records served; may be replaced while serving.
        self.zone = zone
        #: Seconds each answer is held back; may be changed while serving.
        self.delay = delay
        #: The time to live of every record served; may be changed while serving.
        self.ttl = ttl
        #: Every query received: (name without the final dot, type, "udp" or "tcp").
        self.queries: list[tuple[str, str, str]] = []
        self._udp: DatagramServer | None = None
        self._tcp: StreamServer | None = None

    @property
    def port(self) -> int:
        if self._tcp is None:
            raise RuntimeError("the DNS server is not running")
        port: int = self._tcp.server_port
        return port

    def start(self) -> Self:
        # The OS picks the TCP port; UDP takes the same number (retried if it is taken).
        for _ in range(20):
            listener = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_STREAM)
            listener.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_REUSEADDR, 1)
            listener.bind((HOST, 0))
            listener.listen(64)
            udp = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_DGRAM)
            try:
                udp.bind((HOST, listener.getsockname()[1]))
            except OSError:
                listener.close()
                udp.close()
                continue
            self._tcp = StreamServer(listener, self._serve_tcp)
            self._udp = DatagramServer(udp, self._serve_udp)
            self._tcp.start()
            self._udp.start()
            return self
        raise RuntimeError("found no port free for both UDP and TCP")

    def close(self) -> None:
        for server in (self._udp, self._tcp):
            if server is not None:
                server.stop(timeout=1)

    def resolver(self) -> dns.resolver.Resolver:
        """A dnspython resolver that asks this server only."""
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [HOST]
        resolver.port = self.port
        return resolver

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- serving ----------------------------------------------------------------------

    def _answer(self, wire: bytes, transport: str) -> bytes:
        query = dns.message.from_wire(wire)
        question = query.question[0]
        self.queries.append((question.name.to_text(omit_final_dot=True),
                             dns.rdatatype.to_text(question.rdtype), transport))
        gevent.sleep(self.delay)
        answer: bytes = respond(query, self.zone, self.ttl).to_wire()
        return answer

    def _serve_udp(self, data: bytes, address: Any) -> None:
        assert self._udp is not None
        self._udp.sendto(self._answer(data, "udp"), address)

    def _serve_tcp(self, sock: Any, _address: Any) -> None:
        with sock, sock.makefile("rb") as reader:
            while True:
                prefix = reader.read(_LENGTH.size)
                if len(prefix) < _LENGTH.size:
                    return
                (size,) = _LENGTH.unpack(prefix)
                wire = reader.read(size)
                if len(wire) < size:
                    return
                answer = self._answer(wire, "tcp")
                sock.sendall(_LENGTH.pack(len(answer)) + answer)
