"""A small fake MongoDB server on gevent, for what a real server cannot show.

It listens on 127.0.0.1 (a free port) or on a Unix socket, speaks OP_QUERY /
OP_REPLY, OP_MSG and OP_COMPRESSED (snappy, zlib, zstd), and records every
request as it arrived on the wire, so a test can assert what was compressed.
Messages are parsed and built here with ``struct`` and ``bson``, not with
greenpool's wire module, so a symmetric mistake cannot hide.

Replies are scripted per command name::

    def find(request):
        return Stream([{"ok": 1, "n": 1}, {"ok": 1, "n": 2}])  # moreToCome

    with FakeServer(handlers={"find": find}) as server:
        ...connect to server.address...

A handler gets the :class:`Request` and returns a reply document, a
:class:`Stream` of them, a :class:`Live` stream (replies sent as they come),
:class:`Raw` bytes to send as they are, or :data:`HANG_UP` to close the
connection without replying. :class:`AwaitableHello` answers hellos as a
MongoDB 4.4+ server does: with a ``topologyVersion``, awaitable, streamed.
"""

from __future__ import annotations

import itertools
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import bson
import gevent
import gevent.event
import snappy
import zstandard
from bson.int64 import Int64
from bson.objectid import ObjectId
from gevent import socket as gsocket
from gevent.server import StreamServer

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013
MORE_TO_COME = 1 << 1
EXHAUST_ALLOWED = 1 << 16

_COMPRESSORS: dict[int, tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    1: ("snappy", snappy.compress, snappy.uncompress),
    2: ("zlib", zlib.compress, zlib.decompress),
    3: (
        "zstd",
        lambda data: zstandard.ZstdCompressor().compress(data),
        lambda data: zstandard.ZstdDecompressor().decompress(data),
    ),
}
_COMPRESSOR_IDS = {name: cid for cid, (name, _, _) in _COMPRESSORS.items()}


@dataclass
class Request:
    """One request as the server received it."""

    #: The opcode on the wire: OP_COMPRESSED when the request came compressed.
    op_code: int
    #: OP_QUERY or OP_MSG (inside the OP_COMPRESSED, if compressed).
    inner_op_code: int
    compressor: str | None
    request_id: int
    flags: int
    db: str
    command: dict[str, Any]
    connection: int
    #: The server's socket for this connection, for handlers that watch it.
    sock: Any = field(default=None, repr=False, compare=False)
    #: The fields that came as OP_MSG document sequences (merged into ``command``).
    sequences: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return next(iter(self.command))


@dataclass
class Stream:
    """Replies sent one after the other, all but the last flagged moreToCome."""

    replies: list[dict[str, Any]]


@dataclass
class Live:
    """Replies sent as ``replies`` produces them (it may wait in between):
    ``(document, more_to_come)`` pairs, until one without more_to_come; or
    :data:`HANG_UP` to close the connection there."""

    replies: Iterator[Any]


@dataclass
class Raw:
    """Bytes sent as they are: a malformed reply; or a reply sent in
    ``pieces`` (the sizes of the first pieces, the rest following), with a
    pause between them so that each arrives on its own."""

    data: bytes
    pieces: tuple[int, ...] = ()


HANG_UP = object()
# A handler saw the client close the connection.
_CLIENT_GONE = object()

Handler = Callable[[Request], Any]


def _recv_exactly(sock: Any, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _parse_op_msg(body: bytes) -> tuple[int, dict[str, Any], tuple[str, ...]]:
    """Flags, the body document with each document sequence merged in as an
    array, and the sequences' identifiers."""
    (flags,) = struct.unpack_from("<I", body)
    assert body[4] == 0, "the fake takes the body section first"
    (size,) = struct.unpack_from("<i", body, 5)
    document = bson.decode(body[5 : 5 + size])
    position, sequences = 5 + size, []
    while position < len(body):
        assert body[position] == 1, "a section after the body is a document sequence"
        (size,) = struct.unpack_from("<i", body, position + 1)
        end = body.index(b"\x00", position + 5)
        identifier = body[position + 5 : end].decode()
        document[identifier] = bson.decode_all(body[end + 1 : position + 1 + size])
        sequences.append(identifier)
        position += 1 + size
    return flags, document, tuple(sequences)


def _parse_op_query(body: bytes) -> tuple[int, str, dict[str, Any]]:
    (flags,) = struct.unpack_from("<i", body)
    end = body.index(b"\x00", 4)
    namespace = body[4:end].decode()
    skip, limit = struct.unpack_from("<ii", body, end + 1)
    assert (skip, limit) == (0, -1), (skip, limit)
    document = bson.decode(body[end + 9 :])
    return flags, namespace.removesuffix(".$cmd"), document


def op_msg(
    document: dict[str, Any], response_to: int, *, flags: int = 0, request_id: int = 1
) -> bytes:
    """An OP_MSG reply."""
    body = struct.pack("<I", flags) + b"\x00" + bson.encode(document)
    return struct.pack("<iiii", 16 + len(body), request_id, response_to, OP_MSG) + body


def op_reply(document: dict[str, Any], response_to: int, *, request_id: int = 1) -> bytes:
    """An OP_REPLY holding one document."""
    body = struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(document)
    return struct.pack("<iiii", 16 + len(body), request_id, response_to, OP_REPLY) + body


def compress(message: bytes, compressor: str) -> bytes:
    """Wrap a whole message (header included) in OP_COMPRESSED."""
    _, request_id, response_to, op_code = struct.unpack_from("<iiii", message)
    body = message[16:]
    compressor_id = _COMPRESSOR_IDS[compressor]
    data = _COMPRESSORS[compressor_id][1](body)
    prefix = struct.pack("<iiB", op_code, len(body), compressor_id)
    length = 16 + len(prefix) + len(data)
    return struct.pack("<iiii", length, request_id, response_to, OP_COMPRESSED) + prefix + data


def decompress(body: bytes) -> tuple[int, bytes, str]:
    """The body of an OP_COMPRESSED message unwrapped: the original opcode and
    body, and the compressor's name."""
    op_code, size, compressor_id = struct.unpack_from("<iiB", body)
    compressor, _, uncompress = _COMPRESSORS[compressor_id]
    original = uncompress(body[9:])
    assert len(original) == size, (len(original), size)
    return op_code, original, compressor


@dataclass
class FakeServer:
    """The fake server; use it as a context manager (it starts and stops)."""

    #: Fields added to (or, with None, removed from) every hello reply.
    hello: dict[str, Any] = field(default_factory=dict)
    #: What the server supports, answered to the client's ``compression`` list.
    compressors: tuple[str, ...] = ("snappy", "zlib", "zstd")
    handlers: dict[str, Handler] = field(default_factory=dict)
    #: Answers saslSupportedMechs, speculativeAuthenticate, saslStart, saslContinue.
    scram: Any = None
    #: The loopback address to listen on (a free port).
    host: str = "127.0.0.1"
    #: Listen on this Unix socket path instead.
    unix_path: str | None = None
    #: A server-side :class:`ssl.SSLContext`: speak TLS.
    tls: Any = None
    requests: list[Request] = field(default_factory=list)
    #: The connections the client closed (by number, from 1).
    hangups: list[int] = field(default_factory=list)
    _server: Any = None
    _ids: Any = field(default_factory=lambda: itertools.count(100))
    _connections: Any = field(default_factory=lambda: itertools.count(1))

    @property
    def address(self) -> tuple[str, int | None]:
        if self.unix_path is not None:
            return (self.unix_path, None)
        return (self.host, self._server.server_port)

    def names(self) -> list[str]:
        """The command names received, in order."""
        return [request.name for request in self.requests]

    def start(self) -> None:
        if self.unix_path is not None:
            listener = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
            listener.bind(self.unix_path)
            listener.listen(64)
        else:
            listener = (self.host, 0)
        tls = {"ssl_context": self.tls} if self.tls is not None else {}
        self._server = StreamServer(listener, self._serve, **tls)
        self._server.start()

    def stop(self) -> None:
        self._server.stop(timeout=1)

    def __enter__(self) -> FakeServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- serving ---------------------------------------------------------------------

    def _serve(self, sock: Any, _address: Any) -> None:
        connection = next(self._connections)
        with sock:
            try:
                self._converse(sock, connection)
            except ConnectionError:
                self.hangups.append(connection)

    def _converse(self, sock: Any, connection: int) -> None:
        while True:
            request = self._read(sock, connection)
            if request is None:
                self.hangups.append(connection)
                return
            self.requests.append(request)
            if request.flags & MORE_TO_COME and request.inner_op_code == OP_MSG:
                continue  # the client wants no reply
            answer = self._answer(request)
            if answer is _CLIENT_GONE:
                self.hangups.append(connection)
                return
            if answer is HANG_UP:
                return
            if isinstance(answer, Live):
                if not self._send_live(sock, request, answer):
                    return
                continue
            for index, data in enumerate(self._encode(request, answer)):
                if index and isinstance(answer, Raw):
                    gevent.sleep(0.02)  # the client reads the piece before it
                sock.sendall(data)

    def _send_live(self, sock: Any, request: Request, answer: Live) -> bool:
        """Send a Live stream; False if the connection ends with it."""
        response_to = request.request_id
        for item in answer.replies:
            if item is HANG_UP:
                return False
            if item is _CLIENT_GONE:
                self.hangups.append(request.connection)
                return False
            reply, more = item
            data, response_to = self._encode_one(request, reply, response_to, more)
            sock.sendall(data)
            if not more:
                break
        return True

    def _read(self, sock: Any, connection: int) -> Request | None:
        header = _recv_exactly(sock, 16)
        if header is None:
            return None
        length, request_id, _, op_code = struct.unpack("<iiii", header)
        body = _recv_exactly(sock, length - 16)
        if body is None:
            return None
        inner, compressor = op_code, None
        if op_code == OP_COMPRESSED:
            inner, body, compressor = decompress(body)
        sequences: tuple[str, ...] = ()
        if inner == OP_QUERY:
            flags, db, command = _parse_op_query(body)
        else:
            assert inner == OP_MSG, inner
            flags, command, sequences = _parse_op_msg(body)
            db = command.pop("$db")
        return Request(
            op_code, inner, compressor, request_id, flags, db, command, connection, sock,
            sequences,
        )

    def _answer(self, request: Request) -> Any:
        handler = self.handlers.get(request.name)
        if handler is not None:
            return handler(request)
        if request.name in ("hello", "isMaster", "ismaster"):
            return self._hello(request)
        if request.name in ("saslStart", "saslContinue") and self.scram is not None:
            return self.scram.run_command(request.command)
        if request.name == "ping":
            return {"ok": 1.0}
        return {"ok": 0.0, "errmsg": f"no such command: '{request.name}'", "code": 59}

    def _hello(self, request: Request) -> dict[str, Any]:
        command = request.command
        reply: dict[str, Any] = {
            "isWritablePrimary": True,
            "maxBsonObjectSize": 16 * 1024 * 1024,
            "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000,
            "connectionId": request.connection,
            "minWireVersion": 0,
            "maxWireVersion": 21,
        }
        if command.get("helloOk"):
            reply["helloOk"] = True
        offered = [name for name in command.get("compression", []) if name in self.compressors]
        if offered:
            reply["compression"] = offered
        if self.scram is not None:
            answer = self.scram.hello(command)
            reply.update({k: v for k, v in answer.items() if k not in ("ok", "maxWireVersion")})
        for key, value in self.hello.items():
            if value is None:
                reply.pop(key, None)
            else:
                reply[key] = value
        reply["ok"] = 1.0
        return reply

    def _encode(self, request: Request, answer: Any) -> Iterable[bytes]:
        if isinstance(answer, Raw):
            pieces, rest = [], answer.data
            for size in answer.pieces:
                pieces.append(rest[:size])
                rest = rest[size:]
            return [*pieces, rest]
        replies = answer.replies if isinstance(answer, Stream) else [answer]
        messages = []
        response_to = request.request_id
        for index, reply in enumerate(replies):
            message, response_to = self._encode_one(
                request, reply, response_to, index < len(replies) - 1)
            messages.append(message)
        return messages

    def _encode_one(self, request: Request, reply: dict[str, Any], response_to: int,
                    more: bool) -> tuple[bytes, int]:
        """One reply to ``request``, answering ``response_to``; with its requestID,
        which the next reply of a stream answers."""
        request_id = next(self._ids)
        if request.inner_op_code == OP_QUERY:
            message = op_reply(reply, response_to, request_id=request_id)
        else:
            message = op_msg(reply, response_to, flags=MORE_TO_COME if more else 0,
                             request_id=request_id)
        if request.compressor is not None:
            message = compress(message, request.compressor)
        return message, request_id


def block(seconds: float, reply: dict[str, Any] | None = None) -> Handler:
    """A handler that waits ``seconds`` (cooperatively) before replying, or
    until the client closes the connection, as a server notices."""

    def handler(request: Request) -> Any:
        try:
            gsocket.wait_read(request.sock.fileno(), timeout=seconds)
        except TimeoutError:
            return reply if reply is not None else {"ok": 1.0}
        return _CLIENT_GONE  # readable while the client awaits a reply: end of stream

    return handler


class AwaitableHello:
    """The hello of a MongoDB 4.4+ server, as the Server Monitoring spec describes it::

        hello = AwaitableHello(server).install()
        ...
        hello.change(isWritablePrimary=False, secondary=True)  # a new state, counter + 1

    Every reply carries a ``topologyVersion`` (this server's ``process_id`` and
    ``counter``). A hello with ``topologyVersion`` and ``maxAwaitTimeMS`` is
    answered when the counter passes the request's (at once for another
    processId) or when maxAwaitTimeMS passes; with exhaustAllowed the server
    goes on streaming replies flagged moreToCome, each after the next change
    or maxAwaitTimeMS, ``stream_length`` of them (None: no end; the last one
    without moreToCome). :meth:`interrupt` ends the stream at once with an
    error. ``awaited`` holds the awaitable hellos received.
    """

    def __init__(self, server: FakeServer, *, stream_length: int | None = None) -> None:
        self.server = server
        self.stream_length = stream_length
        self.process_id = ObjectId()
        self.counter = 0
        self.script: list[Any] = []
        self.awaited: list[Request] = []
        self._changed = gevent.event.Event()

    def install(self) -> AwaitableHello:
        for name in ("hello", "isMaster", "ismaster"):
            self.server.handlers[name] = self
        return self

    def interrupt(self, answer: Any) -> None:
        """Answer the awaiting hello now with ``answer`` instead of a reply,
        ending its stream: a document (an ``ok: 0`` error) or :data:`HANG_UP`."""
        self.script.append(answer)
        self._wake()

    def change(self, **fields: Any) -> None:
        """A significant change: ``fields`` set in every hello reply (None
        removes one), the counter bumped, awaiting hellos answered."""
        for key, value in fields.items():
            self.server.hello[key] = value
        self.counter += 1
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, gevent.event.Event()
        changed.set()

    def reply(self, request: Request) -> dict[str, Any]:
        reply = self.server._hello(request)
        reply["topologyVersion"] = {"processId": self.process_id, "counter": Int64(self.counter)}
        return reply

    def __call__(self, request: Request) -> Any:
        command = request.command
        version, wait = command.get("topologyVersion"), command.get("maxAwaitTimeMS")
        if (version is None) != (wait is None):
            return {"ok": 0.0, "code": 9, "codeName": "FailedToParse",
                    "errmsg": "topologyVersion and maxAwaitTimeMS go together"}
        if version is None:
            return self.reply(request)
        self.awaited.append(request)
        known = version["counter"] if version["processId"] == self.process_id else -1
        exhaust = bool(request.flags & EXHAUST_ALLOWED)
        return Live(self._replies(request, known, wait / 1000, exhaust))

    def _replies(self, request: Request, known: int, wait: float,
                 exhaust: bool) -> Iterator[Any]:
        sent = 0
        while True:
            if not self._await_change(request.sock, known, wait):
                yield _CLIENT_GONE
                return
            if self.script:
                scripted = self.script.pop(0)
                yield scripted if scripted is HANG_UP else (scripted, False)
                return
            sent += 1
            more = exhaust and (self.stream_length is None or sent < self.stream_length)
            known = self.counter
            yield self.reply(request), more
            if not more:
                return

    def _await_change(self, sock: Any, known: int, wait: float) -> bool:
        """Wait for a change past ``known`` or ``wait`` seconds; False if the
        client closed the connection (or sent something) meanwhile."""
        deadline = time.monotonic() + wait
        client = gevent.spawn(gsocket.wait_read, sock.fileno())
        try:
            while self.counter <= known and not self.script:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                gevent.wait([self._changed, client], timeout=left, count=1)
                if client.ready():
                    return False
        finally:
            client.kill()
        return True
