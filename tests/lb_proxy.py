"""A round-robin layer-4 load balancer for greenpool's load-balanced mode tests.

:class:`LBProxy` listens on 127.0.0.1 (a port the OS picks) in front of one or more
backends, the "services" of the Load Balancer spec (SecantusDB servers here, mongos in a
real deployment)::

    with LBProxy([server_a.address, server_b.address]) as proxy:
        client = MongoClient(proxy.uri)          # mongodb://127.0.0.1:<port>/?loadBalanced=true
        proxy.backends[0].service_id             # the serviceId backend 0's hellos carry
        proxy.kill_connections(0)                # "restart" service 0
        with proxy.unreachable(1): ...           # service 1 is down

Each accepted client connection is given the next backend in turn and stays on it. The
proxy relays bytes, except for what a service behind a load balancer does itself, which
SecantusDB does not (it has no load-balanced mode):

- The **first** ``hello`` / ``isMaster`` / ``ismaster`` command of a connection (OP_MSG,
  or legacy OP_QUERY on ``<db>.$cmd``) is inspected, as mongos does (its
  ``load_balancer_support::handleHello``: "only the first hello is special"). Until it has
  gone by, both directions are read message by message; afterwards the connection is a
  plain byte relay, so exhaust cursors, ``moreToCome`` and anything else pass untouched.
- If that hello has ``loadBalanced: true``, the successful reply gets a top-level
  ``serviceId``: an ObjectId fixed per backend for the proxy's lifetime. The reply is
  re-encoded with the server's requestID, responseTo and flags (a checksum flag is
  dropped, the length recomputed). A failed hello (``ok: 0``, e.g. a ``failCommand``
  fail point on ``hello``) passes through without one, as from mongos.
- If that hello lacks ``loadBalanced: true``, the proxy answers it instead of the server,
  as mongos does on its load-balancer port: ``{ok: 0, code: 354, codeName:
  "LoadBalancerSupportMismatch", errmsg: "The server is being accessed through a load
  balancer, but this driver does not have load balancing enabled"}`` (an OP_MSG reply to an
  OP_MSG hello, an OP_REPLY to an OP_QUERY one), then closes the connection: code 354 is in
  the server's ``CloseConnectionError`` category. Drivers report it as an
  ``OperationFailure`` from the handshake.
- ``compression`` is removed from that hello, so no compressor is ever negotiated and no
  OP_COMPRESSED message follows; the proxy does not decompress anything. (SecantusDB
  negotiates no compression anyway and drops a connection that sends OP_COMPRESSED.)

When either side closes, or sends something that is not a message before the handshake
is through, both sockets are closed (no half-close relay).

The proxy runs in the calling process's gevent hub, as greenlets: the tests run under
gevent's monkey-patching, so pymongo and greenpool block only their own greenlet while
the proxy serves. That keeps its statistics and failure switches plain attributes and
method calls, synchronous with the test (a subprocess would need a control channel, and a
"kill" would race with the test's next step). The cost: code that blocks the whole hub
(an unpatched blocking call) stalls the proxy too, so tests using it must stay
cooperative. :meth:`LBProxy.close` kills every greenlet it started and closes every
socket it opened; it starts no process.

Failure switches, per backend:

- :meth:`LBProxy.kill_connections`: close every current client connection and its backend
  connection, like a service restart (clients read EOF, or a reset with ``reset=True``).
- :meth:`LBProxy.set_mode` / :meth:`LBProxy.unreachable`: ``"refuse"``: new client
  connections given to the backend are accepted and closed at once, as an L4 balancer does
  when its backend refuses the connection; ``"blackhole"``: they are held open and never
  answered (connect timeouts). Round robin still counts the backend (no health checks).
- :meth:`LBProxy.partition` / :meth:`LBProxy.heal`: a network partition that heals: no
  byte moves in either direction on the backend's connections, old or new, until it
  heals; then what was held goes through (as TCP delivers it after a partition), and new
  connections held meanwhile reach the backend.

``relay_only=True`` makes it a plain TCP relay in front of one server: no hello is
inspected or rewritten, for clients that connect directly (``uri`` says
``directConnection=true``). The failover tests and ``benchmarks/bench_faults.py`` put it
in front of a server to reset or partition every connection at once. Each backend counts
its connections for them: ``accepted_at`` (when each was accepted, ``time.monotonic()``)
and ``peak_open``.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

import bson
import gevent
from bson.objectid import ObjectId
from gevent import socket as gsocket
from gevent.event import Event
from gevent.pool import Group

from greenpool.errors import ProtocolError
from greenpool.wire.messages import (
    CHECKSUM_PRESENT,
    DEFAULT_MAX_MESSAGE_SIZE,
    HEADER_SIZE,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    MessageHeader,
    decode_message,
    decode_reply,
    next_request_id,
    pack_header,
)

HOST = "127.0.0.1"

HELLO_NAMES = frozenset({"hello", "ismaster"})
"""Command names (lowercased) of a hello: ``hello``, ``isMaster``, ``ismaster``."""

LB_MISMATCH_CODE = 354
LB_MISMATCH_CODE_NAME = "LoadBalancerSupportMismatch"
LB_MISMATCH_MESSAGE = (
    "The server is being accessed through a load balancer, "
    "but this driver does not have load balancing enabled"
)
"""mongos's error for a first hello without ``loadBalanced: true`` on its load-balancer port."""

Mode = Literal["up", "refuse", "blackhole"]

_CHUNK = 65536
_HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_REPLY_PREFIX = struct.Struct("<iqii")


def mismatch_error() -> dict[str, Any]:
    """The reply document to a hello without ``loadBalanced: true``."""
    return {
        "ok": 0.0,
        "errmsg": LB_MISMATCH_MESSAGE,
        "code": LB_MISMATCH_CODE,
        "codeName": LB_MISMATCH_CODE_NAME,
    }


# -- messages ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """A hello request found on the wire: how it came, and its command document."""

    header: MessageHeader
    command: dict[str, Any]
    #: OP_MSG: the body document (``$db`` included). OP_QUERY: the query document, which
    #: is the command or wraps it in ``$query``.
    document: dict[str, Any]
    flags: int
    #: OP_QUERY only: the namespace, numberToSkip and numberToReturn.
    namespace: str = ""
    skip: int = 0
    limit: int = -1

    @property
    def load_balanced(self) -> bool:
        return self.command.get("loadBalanced") is True


def parse_hello(header: MessageHeader, body: bytes) -> Hello | None:
    """The hello command in a client message, or None for anything else (or garbage)."""
    try:
        if header.op_code == OP_MSG:
            message = decode_message(header, body)
            command = message.document
            if _command_name(command) not in HELLO_NAMES:
                return None
            return Hello(header, command, command, message.flags)
        if header.op_code == OP_QUERY:
            return _parse_query_hello(header, body)
    except (ProtocolError, bson.errors.InvalidBSON, struct.error, UnicodeDecodeError):
        return None
    return None


def _parse_query_hello(header: MessageHeader, body: bytes) -> Hello | None:
    (flags,) = _INT32.unpack_from(body)
    end = body.index(b"\x00", 4)
    namespace = body[4:end].decode()
    if not namespace.endswith(".$cmd"):
        return None
    skip, limit = struct.unpack_from("<ii", body, end + 1)
    start = end + 9
    (size,) = _INT32.unpack_from(body, start)
    document: dict[str, Any] = bson.decode(body[start : start + size])
    command = document.get("$query", document)
    if not isinstance(command, dict) or _command_name(command) not in HELLO_NAMES:
        return None
    return Hello(header, command, document, flags, namespace, skip, limit)


def _command_name(command: Mapping[str, Any]) -> str:
    return next(iter(command), "").lower()


def encode_op_msg(
    document: Mapping[str, Any], *, request_id: int, response_to: int, flags: int = 0
) -> bytes:
    """One OP_MSG with a single body section; the checksum flag is dropped (none is added)."""
    body = _INT32.pack(flags & ~CHECKSUM_PRESENT) + b"\x00" + bson.encode(document)
    return pack_header(HEADER_SIZE + len(body), request_id, response_to, OP_MSG) + body


def encode_op_query(hello: Hello, document: Mapping[str, Any]) -> bytes:
    """``hello`` as an OP_QUERY again (same id, flags, namespace), with ``document``."""
    body = (
        _INT32.pack(hello.flags)
        + hello.namespace.encode()
        + b"\x00"
        + struct.pack("<ii", hello.skip, hello.limit)
        + bson.encode(document)
    )
    return pack_header(HEADER_SIZE + len(body), hello.header.request_id, 0, OP_QUERY) + body


def encode_op_reply(
    document: Mapping[str, Any],
    *,
    request_id: int,
    response_to: int,
    flags: int = 0,
    cursor_id: int = 0,
    starting_from: int = 0,
) -> bytes:
    """One OP_REPLY holding ``document``."""
    body = _REPLY_PREFIX.pack(flags, cursor_id, starting_from, 1) + bson.encode(document)
    return pack_header(HEADER_SIZE + len(body), request_id, response_to, OP_REPLY) + body


def without_compression(hello: Hello) -> bytes | None:
    """``hello`` re-encoded without ``compression``, or None if it has none."""
    if "compression" not in hello.command:
        return None
    command = {k: v for k, v in hello.command.items() if k != "compression"}
    if hello.header.op_code == OP_MSG:
        return encode_op_msg(
            command, request_id=hello.header.request_id, response_to=0, flags=hello.flags
        )
    document = {**hello.document, "$query": command} if "$query" in hello.document else command
    return encode_op_query(hello, document)


def rejection(hello: Hello) -> bytes:
    """The proxy's own reply to a hello without ``loadBalanced: true``."""
    request_id = next_request_id()
    if hello.header.op_code == OP_MSG:
        return encode_op_msg(
            mismatch_error(), request_id=request_id, response_to=hello.header.request_id
        )
    return encode_op_reply(
        mismatch_error(), request_id=request_id, response_to=hello.header.request_id
    )


def with_service_id(header: MessageHeader, body: bytes, service_id: ObjectId) -> bytes | None:
    """The hello reply ``header`` + ``body`` with a top-level ``serviceId``, re-encoded.

    None when the reply is a failure (no ``serviceId`` then) or cannot be decoded.
    """
    try:
        if header.op_code == OP_MSG:
            message = decode_message(header, body)
            if not message.document.get("ok"):
                return None
            document = {**message.document, "serviceId": service_id}
            return encode_op_msg(
                document,
                request_id=header.request_id,
                response_to=header.response_to,
                flags=message.flags,
            )
        if header.op_code == OP_REPLY:
            reply = decode_reply(header, body)
            if len(reply.documents) != 1 or not reply.documents[0].get("ok"):
                return None
            return encode_op_reply(
                {**reply.documents[0], "serviceId": service_id},
                request_id=header.request_id,
                response_to=header.response_to,
                flags=reply.flags,
                cursor_id=reply.cursor_id,
                starting_from=reply.starting_from,
            )
    except (ProtocolError, bson.errors.InvalidBSON, struct.error):
        return None
    return None


class PeerClosed(Exception):
    """The peer closed its side, or sent something that is not a message."""


def _recv_exactly(sock: Any, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:])
        if not count:
            raise PeerClosed
        received += count
    return bytes(buffer)


def read_message(sock: Any) -> tuple[MessageHeader, bytes, bytes]:
    """One message from ``sock``: its header, its body, and its raw bytes."""
    raw_header = _recv_exactly(sock, HEADER_SIZE)
    header = MessageHeader(*_HEADER.unpack(raw_header))
    if not HEADER_SIZE <= header.length <= DEFAULT_MAX_MESSAGE_SIZE:
        raise PeerClosed
    body = _recv_exactly(sock, header.length - HEADER_SIZE)
    return header, body, raw_header + body


# -- the proxy ---------------------------------------------------------------------------


@dataclass(eq=False)
class Backend:
    """One service behind the load balancer, and the proxy's counters for it."""

    index: int
    address: tuple[str, int]
    service_id: ObjectId
    mode: Mode = "up"
    #: Client connections given to this backend, ever (refused and black-holed included).
    accepted: int = 0
    #: Client connections whose first hello was refused (no ``loadBalanced: true``).
    rejected: int = 0
    #: Connections closed by :meth:`LBProxy.kill_connections`.
    killed: int = 0
    connections: set[ProxiedConnection] = field(default_factory=set)
    #: When each client connection was accepted (``time.monotonic()``).
    accepted_at: list[float] = field(default_factory=list)
    #: The most client connections open at once.
    peak_open: int = 0
    #: Set while bytes flow; cleared by :meth:`LBProxy.partition`.
    flowing: Event = field(default_factory=lambda: _set(Event()))

    @property
    def open(self) -> int:
        """Client connections on this backend that are open now."""
        return len(self.connections)

    def stats(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "service_id": self.service_id,
            "mode": self.mode,
            "accepted": self.accepted,
            "open": self.open,
            "rejected": self.rejected,
            "killed": self.killed,
            "peak_open": self.peak_open,
            "partitioned": not self.flowing.is_set(),
        }


def _set(event: Event) -> Event:
    event.set()
    return event


class ProxiedConnection:
    """A client connection and the backend connection it is relayed to."""

    def __init__(
        self, proxy: LBProxy, client: Any, client_address: tuple[str, int], backend: Backend
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.client_address = client_address
        self.backend = backend
        self.upstream: Any = None
        #: The proxy's local port towards the backend (what the server sees as the client).
        self.upstream_port: int | None = None
        #: The first hello's ``loadBalanced``: None until it has been seen.
        self.load_balanced: bool | None = None
        self.closed = False
        self._hello_id: int | None = None
        self._handshake_done = False
        self._pumps: list[gevent.Greenlet] = []

    @property
    def client_port(self) -> int:
        return self.client_address[1]

    @property
    def service_id(self) -> ObjectId:
        return self.backend.service_id

    def serve(self) -> None:
        """Run the connection until either side closes (in its own greenlet)."""
        backend = self.backend
        backend.connections.add(self)
        try:
            if backend.mode == "refuse":
                return
            if backend.mode == "blackhole":
                while self.client.recv(_CHUNK):
                    pass
                return
            backend.flowing.wait()  # a partition holds new connections too
            try:
                self.upstream = gsocket.create_connection(
                    backend.address, timeout=self.proxy.connect_timeout
                )
            except OSError:
                return  # the service is down: the client sees its connection closed
            self.upstream.settimeout(None)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.upstream_port = self.upstream.getsockname()[1]
            self._pumps = [
                gevent.spawn(self._client_to_server),
                gevent.spawn(self._server_to_client),
            ]
            gevent.joinall(self._pumps, count=1)
        except OSError:
            pass
        finally:
            self.close()

    def close(self, *, reset: bool = False) -> None:
        """Close both sockets and stop the relay; idempotent."""
        if self.closed:
            return
        self.closed = True
        self.backend.connections.discard(self)
        current = gevent.getcurrent()
        gevent.killall([pump for pump in self._pumps if pump is not current])
        if reset:
            with contextlib.suppress(OSError):
                self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for sock in (self.client, self.upstream):
            if sock is not None:
                sock.close()

    def _client_to_server(self) -> None:
        with contextlib.suppress(PeerClosed, OSError):
            while self._hello_id is None and not self.proxy.relay_only:
                header, body, raw = read_message(self.client)
                hello = parse_hello(header, body)
                if hello is None:
                    self.upstream.sendall(raw)
                    continue
                self.load_balanced = hello.load_balanced
                if not hello.load_balanced:
                    self.backend.rejected += 1
                    self.client.sendall(rejection(hello))
                    return
                self._hello_id = header.request_id
                self.backend.flowing.wait()
                self.upstream.sendall(without_compression(hello) or raw)
            _relay(self.client, self.upstream, self.backend.flowing)

    def _server_to_client(self) -> None:
        with contextlib.suppress(PeerClosed, OSError):
            while not self._handshake_done and not self.proxy.relay_only:
                header, body, raw = read_message(self.upstream)
                if self._hello_id is not None and header.response_to == self._hello_id:
                    self._handshake_done = True
                    raw = with_service_id(header, body, self.service_id) or raw
                self.backend.flowing.wait()
                self.client.sendall(raw)
            _relay(self.upstream, self.client, self.backend.flowing)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"<ProxiedConnection client port {self.client_port} -> backend {self.backend.index} "
            f"{self.backend.address[0]}:{self.backend.address[1]}, {state}>"
        )


def _relay(source: Any, target: Any, flowing: Event) -> None:
    while True:
        data = source.recv(_CHUNK)
        if not data:
            return
        flowing.wait()  # held during a partition, delivered once it heals
        target.sendall(data)


class LBProxy:
    """A round-robin TCP load balancer in this process's gevent hub; see the module docstring.

    :param backends: the services' addresses, in round-robin order (one may repeat: two
        services in front of one server).
    :param service_ids: each backend's ``serviceId``; new ObjectIds by default.
    :param connect_timeout: seconds to connect to a backend before giving up on a client.
    :param relay_only: relay bytes only, inspecting no hello (a TCP proxy in front of a
        server that clients connect to directly).
    """

    def __init__(
        self,
        backends: Sequence[tuple[str, int]],
        *,
        service_ids: Sequence[ObjectId] | None = None,
        connect_timeout: float = 5.0,
        relay_only: bool = False,
    ) -> None:
        if not backends:
            raise ValueError("a load balancer needs at least one backend")
        if service_ids is None:
            service_ids = [ObjectId() for _ in backends]
        if len(service_ids) != len(backends):
            raise ValueError("one service id per backend")
        self.backends = [
            Backend(index, (host, port), service_id)
            for index, ((host, port), service_id) in enumerate(
                zip(backends, service_ids, strict=True)
            )
        ]
        self.connect_timeout = connect_timeout
        self.relay_only = relay_only
        self._next = itertools.cycle(self.backends)
        self._listener: Any = None
        self._acceptor: gevent.Greenlet | None = None
        self._group = Group()
        self._by_client_port: dict[int, ProxiedConnection] = {}

    # -- where it is ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("the proxy is not listening")
        port: int = self._listener.getsockname()[1]
        return port

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def uri(self) -> str:
        """``mongodb://127.0.0.1:<port>/?loadBalanced=true`` (``directConnection=true``
        for a ``relay_only`` proxy)."""
        option = "directConnection" if self.relay_only else "loadBalanced"
        return f"mongodb://{HOST}:{self.port}/?{option}=true"

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> Self:
        if self._listener is not None:
            raise RuntimeError("the proxy is already listening")
        listener = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_STREAM)
        try:
            listener.bind((HOST, 0))  # a port nothing uses, chosen by the OS
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._acceptor = gevent.spawn(self._accept_loop)
        return self

    def close(self) -> None:
        """Stop listening, close every connection (both sides) and kill every greenlet."""
        if self._acceptor is not None:
            self._acceptor.kill()
            self._acceptor = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for backend in self.backends:
            backend.flowing.set()  # nothing stays held
        self._group.kill(timeout=10)
        for backend in self.backends:
            for conn in list(backend.connections):
                conn.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def greenlets(self) -> list[gevent.Greenlet]:
        """Every live greenlet of the proxy (for leak checks)."""
        found = [g for g in self._group if not g.dead]
        if self._acceptor is not None and not self._acceptor.dead:
            found.append(self._acceptor)
        for backend in self.backends:
            for conn in backend.connections:
                found += [pump for pump in conn._pumps if not pump.dead]
        return found

    # -- what tests read ------------------------------------------------------------------

    def connections(self, backend: int | None = None) -> list[ProxiedConnection]:
        """The open client connections (of one backend)."""
        chosen = self.backends if backend is None else [self.backends[backend]]
        return [conn for b in chosen for conn in b.connections]

    def connection_for(self, client_port: int) -> ProxiedConnection | None:
        """The latest connection from the client's local port ``client_port`` (open or not)."""
        return self._by_client_port.get(client_port)

    def backend_for(self, client_port: int) -> Backend | None:
        """The backend the client connection from local port ``client_port`` went to."""
        conn = self.connection_for(client_port)
        return conn.backend if conn is not None else None

    def backend_with(self, service_id: ObjectId) -> Backend:
        """The backend whose ``serviceId`` is ``service_id``."""
        for backend in self.backends:
            if backend.service_id == service_id:
                return backend
        raise LookupError(f"no backend has serviceId {service_id}")

    def stats(self) -> list[dict[str, Any]]:
        """Each backend's counters: accepted, open, rejected, killed (and mode, address)."""
        return [backend.stats() for backend in self.backends]

    # -- failures -------------------------------------------------------------------------

    def kill_connections(self, backend: int, *, reset: bool = False) -> int:
        """Close every current client connection on ``backend`` (and its backend side).

        Clients read EOF, or get a reset with ``reset``. Returns how many were closed.
        """
        chosen = self.backends[backend]
        victims = list(chosen.connections)
        for conn in victims:
            conn.close(reset=reset)
        chosen.killed += len(victims)
        return len(victims)

    def set_mode(self, backend: int, mode: Mode) -> None:
        """How new connections given to ``backend`` are served: see the module docstring."""
        if mode not in ("up", "refuse", "blackhole"):
            raise ValueError(f"unknown mode {mode!r}")
        self.backends[backend].mode = mode

    def partition(self, backend: int) -> None:
        """Stop every byte to and from ``backend`` (its connections stay open)."""
        self.backends[backend].flowing.clear()

    def heal(self, backend: int) -> None:
        """End a partition: what was held goes through."""
        self.backends[backend].flowing.set()

    @contextlib.contextmanager
    def unreachable(self, backend: int, mode: Mode = "refuse") -> Iterator[Backend]:
        """``backend`` in ``mode`` for the ``with`` block (new connections only), then up."""
        previous = self.backends[backend].mode
        self.set_mode(backend, mode)
        try:
            yield self.backends[backend]
        finally:
            self.set_mode(backend, previous)

    # -- internals ------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        while True:
            try:
                client, client_address = listener.accept()
            except OSError:
                if self._listener is None:
                    return
                gevent.sleep(0.01)  # e.g. EMFILE: try again
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            backend = next(self._next)
            backend.accepted += 1
            backend.accepted_at.append(time.monotonic())
            conn = ProxiedConnection(self, client, client_address, backend)
            self._by_client_port[client_address[1]] = conn
            # Registered now, not when its greenlet first runs: the counters are exact as
            # soon as the proxy has accepted (once a first round trip went through).
            backend.connections.add(conn)
            backend.peak_open = max(backend.peak_open, backend.open)
            self._group.spawn(conn.serve)

    def __repr__(self) -> str:
        where = f"{HOST}:{self.port}" if self._listener is not None else "closed"
        return f"<LBProxy {where} -> {[b.address for b in self.backends]}>"


# -- the test deployment ------------------------------------------------------------------


class LBCluster:
    """What the ``lb_cluster`` fixture yields: an :class:`LBProxy` in front of servers.

    ``servers`` are :class:`tests.servers.ServerProcess` objects (or anything with
    ``address``, ``uri`` and ``client()``), backend ``i`` being ``servers[i]``. Fail points
    are set on a backend directly (SecantusDB's ``failCommand`` is server-wide, one at a
    time), which is what the Load Balancer spec tests do on one mongos.
    """

    def __init__(self, proxy: LBProxy, servers: Sequence[Any]) -> None:
        self.proxy = proxy
        self.servers = list(servers)

    @property
    def uri(self) -> str:
        """The load balancer's URI, with ``loadBalanced=true``."""
        return self.proxy.uri

    @property
    def backends(self) -> list[Backend]:
        return self.proxy.backends

    @property
    def service_ids(self) -> list[ObjectId]:
        return [backend.service_id for backend in self.proxy.backends]

    def direct_uri(self, backend: int) -> str:
        """A URI for backend ``backend`` itself, bypassing the proxy."""
        uri: str = self.servers[backend].uri
        return uri

    def direct_client(self, backend: int, **options: Any) -> Any:
        """A pymongo client connected straight to backend ``backend`` (close it)."""
        return self.servers[backend].client(**options)

    def configure_fail_point(self, backend: int, command: Mapping[str, Any]) -> None:
        """Run ``command`` (``{configureFailPoint: "failCommand", mode: ..., data: ...}``)
        on backend ``backend`` directly."""
        with self.direct_client(backend) as client:
            client.admin.command(dict(command))

    @contextlib.contextmanager
    def fail_point(self, backend: int, mode: Any, data: Mapping[str, Any]) -> Iterator[None]:
        """``failCommand`` on backend ``backend`` for the ``with`` block, then off."""
        self.configure_fail_point(
            backend, {"configureFailPoint": "failCommand", "mode": mode, "data": dict(data)}
        )
        try:
            yield
        finally:
            self.configure_fail_point(backend, {"configureFailPoint": "failCommand", "mode": "off"})

    def reset(self) -> None:
        """Every backend up and without fail point (connections are left alone)."""
        for index in range(len(self.backends)):
            self.proxy.set_mode(index, "up")
            self.configure_fail_point(index, {"configureFailPoint": "failCommand", "mode": "off"})
