"""A slow MongoDB-compatible server: SecantusDB behind a front that holds every reply back.

:class:`SlowFront` listens on 127.0.0.1 (a free port, kept across :meth:`SlowFront.down`
and :meth:`SlowFront.up`) in front of a SecantusDB server, and relays messages, not
bytes::

    with ServerProcess(replica_set=True) as server, SlowFront(server.address, delay=0.2,
                                                              tls=files) as front:
        ...connect to front.address with TLS; every reply arrives 0.2 s late...
        front.down()     # the server goes away: listener and connections closed
        front.up()       # and comes back on the same port

What the front adds to the server behind it:

- **delay**: each reply is held back ``delay`` seconds, and so is the TLS handshake;
- **TLS**: it terminates TLS with the given server certificate (the server behind it is
  plain), so clients verify the front's certificate (:func:`tests.servers.make_tls_files`,
  ``server_names`` for the host names clients use);
- **compression**, which SecantusDB lacks: a hello's ``compression`` list is answered with
  the front's compressors that the client offered (the client's order), an OP_COMPRESSED
  request is unwrapped before the server sees it, and its replies are compressed with the
  same compressor; :attr:`SlowFront.compressed` counts the compressed requests by
  client (the appName of the connection's handshake) and compressor, so a test can
  prove compression happened;
- **its own address**: in hello replies, ``hosts``, ``primary`` and ``me`` name
  ``host_name`` and the front's port instead of the server's address (as a replica set
  member reached through a host name does), so drivers that discover replica set
  members keep using the front.

It runs as greenlets in the calling process's hub (the tests are monkey-patched), like
:class:`tests.lb_proxy.LBProxy`, whose message helpers it uses; the process that talks
to it must be another one or stay cooperative. It starts no process.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import bson
import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl
from gevent.server import StreamServer

from greenpool.errors import ProtocolError
from greenpool.wire.messages import (
    HEADER_SIZE,
    MORE_TO_COME,
    OP_COMPRESSED,
    OP_MSG,
    OP_REPLY,
    MessageHeader,
    decode_message,
    decode_reply,
    pack_header,
)
from tests.fake_server import compress, decompress
from tests.lb_proxy import (
    Hello,
    PeerClosed,
    encode_op_msg,
    encode_op_reply,
    parse_hello,
    read_message,
)
from tests.servers import HOST, TLSFiles


@dataclass(frozen=True)
class _Sent:
    """What the front remembers of a request until its replies have gone back."""

    hello: Hello | None
    compressor: str | None


class SlowFront:
    """A slow front for the SecantusDB server at ``backend``; see the module docstring.

    :param delay: seconds each reply (and the TLS handshake) is held back; may be
        changed while serving.
    :param tls: serve TLS with ``tls.server_cert_file`` and ``tls.server_key_file``.
    :param host_name: the host name hello replies give for the front (with its port)
        instead of the server's address; default 127.0.0.1.
    :param compressors: what the front agrees to, from a client's ``compression`` list.
    """

    def __init__(
        self,
        backend: tuple[str, int],
        *,
        delay: float = 0.0,
        tls: TLSFiles | None = None,
        host_name: str = HOST,
        compressors: Sequence[str] = ("zstd", "zlib", "snappy"),
    ) -> None:
        self.backend = backend
        self.delay = delay
        self.compressors = tuple(compressors)
        self.host_name = host_name
        self._context: ssl.SSLContext | None = None
        if tls is not None:
            self._context = gssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._context.load_cert_chain(tls.server_cert_file, tls.server_key_file)
        #: OP_COMPRESSED requests received, by (appName, compressor); the appName is
        #: None for a connection whose handshake gave none.
        self.compressed: Counter[tuple[str | None, str]] = Counter()
        #: Client connections accepted, ever.
        self.accepted = 0
        self._port: int | None = None
        self._server: StreamServer | None = None
        self._connections: set[_FrontConnection] = set()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the front has not been started")
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def advertise(self) -> str:
        """The ``host:port`` hello replies name."""
        return f"{self.host_name}:{self.port}"

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> Self:
        self.up()
        return self

    def up(self) -> None:
        """Listen (again, on the same port); a no-op while serving."""
        if self._server is not None:
            return
        self._server = StreamServer((HOST, self._port or 0), self._serve)
        self._server.start()
        self._port = self._server.server_port

    def down(self) -> None:
        """Stop listening and close every connection, as a server that goes away."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        while self._connections:  # closing yields: a handler may start meanwhile
            self._connections.pop().close()

    def close(self) -> None:
        self.down()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _serve(self, sock: Any, _address: Any) -> None:
        if self._server is None:  # accepted just before down()
            sock.close()
            return
        self.accepted += 1
        connection = _FrontConnection(self, sock)
        self._connections.add(connection)
        try:
            connection.serve()
        finally:
            connection.close()
            self._connections.discard(connection)


class _FrontConnection:
    """One client connection and its connection to the server."""

    def __init__(self, front: SlowFront, client: Any) -> None:
        self.front = front
        self.client = client
        self.upstream: Any = None
        self.closed = False
        self.app_name: str | None = None
        self._sent: dict[int, _Sent] = {}
        self._pumps: list[gevent.Greenlet] = []

    def serve(self) -> None:
        front = self.front
        with contextlib.suppress(OSError):
            if front._context is not None:
                gevent.sleep(front.delay)
                self.client = front._context.wrap_socket(self.client, server_side=True)
            self.upstream = gsocket.create_connection(front.backend, timeout=5)
            self.upstream.settimeout(None)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pumps = [gevent.spawn(self._requests), gevent.spawn(self._replies)]
            gevent.joinall(self._pumps, count=1)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        current = gevent.getcurrent()
        gevent.killall([pump for pump in self._pumps if pump is not current])
        for sock in (self.client, self.upstream):
            if sock is not None:
                sock.close()

    def _requests(self) -> None:
        with contextlib.suppress(PeerClosed, OSError):
            while True:
                header, body, raw = read_message(self.client)
                compressor = None
                if header.op_code == OP_COMPRESSED:
                    op_code, body, compressor = decompress(body)
                    self.front.compressed[self.app_name, compressor] += 1
                    length = HEADER_SIZE + len(body)
                    header = MessageHeader(length, header.request_id, header.response_to, op_code)
                    raw = pack_header(length, header.request_id, header.response_to, op_code) + body
                hello = parse_hello(header, body)
                if hello is not None and self.app_name is None:
                    self.app_name = _app_name(hello.command)
                self._sent[header.request_id] = _Sent(hello, compressor)
                self.upstream.sendall(raw)

    def _replies(self) -> None:
        with contextlib.suppress(PeerClosed, OSError):
            while True:
                header, body, raw = read_message(self.upstream)
                sent = self._sent.get(header.response_to)
                if sent is not None:
                    raw = self._adapt(sent, header, body, raw)
                    if _more_to_come(header, body):
                        # More replies follow, answering the request or this reply
                        # (servers differ).
                        self._sent[header.request_id] = sent
                    else:
                        del self._sent[header.response_to]
                gevent.sleep(self.front.delay)
                self.client.sendall(raw)

    def _adapt(self, sent: _Sent, header: MessageHeader, body: bytes, raw: bytes) -> bytes:
        if sent.hello is not None:
            offered = sent.hello.command.get("compression") or []
            agreed = [name for name in offered if name in self.front.compressors]
            return _rewrite_hello_reply(header, body, agreed, self._addresses()) or raw
        if sent.compressor is not None:
            return compress(raw, sent.compressor)
        return raw

    def _addresses(self) -> dict[str, str]:
        host, port = self.front.backend
        return {f"{host}:{port}": self.front.advertise}


def _app_name(hello: Mapping[str, Any]) -> str | None:
    client = hello.get("client")
    application = client.get("application") if isinstance(client, Mapping) else None
    name = application.get("name") if isinstance(application, Mapping) else None
    return name if isinstance(name, str) else None


def _more_to_come(header: MessageHeader, body: bytes) -> bool:
    return header.op_code == OP_MSG and bool(struct.unpack_from("<I", body)[0] & MORE_TO_COME)


def _rewrite_hello_reply(
    header: MessageHeader, body: bytes, compression: list[str], addresses: Mapping[str, str]
) -> bytes | None:
    """The hello reply with ``compression`` (if any) and the server's addresses replaced."""

    def rewrite(document: dict[str, Any]) -> dict[str, Any]:
        document = dict(document)
        if compression:
            document["compression"] = compression
        for key in ("primary", "me"):
            if isinstance(document.get(key), str):
                document[key] = addresses.get(document[key], document[key])
        for key in ("hosts", "passives", "arbiters"):
            if isinstance(document.get(key), list):
                document[key] = [addresses.get(host, host) for host in document[key]]
        return document

    try:
        if header.op_code == OP_MSG:
            message = decode_message(header, body)
            return encode_op_msg(rewrite(message.document), request_id=header.request_id,
                                 response_to=header.response_to, flags=message.flags)
        if header.op_code == OP_REPLY:
            reply = decode_reply(header, body)
            if len(reply.documents) != 1:
                return None
            return encode_op_reply(rewrite(reply.documents[0]), request_id=header.request_id,
                                   response_to=header.response_to, flags=reply.flags,
                                   cursor_id=reply.cursor_id, starting_from=reply.starting_from)
    except (ProtocolError, bson.errors.InvalidBSON, struct.error):
        return None
    return None
