"""One socket to one MongoDB server: the transport a pool's connector produces.

A :class:`Link` is a connected socket (TCP, TLS or Unix domain) that has been
through the MongoDB handshake and authentication, and carries one command at
a time::

    from greenpool import Pool
    from greenpool.wire.connector import make_connector
    from greenpool.wire.link import LinkOptions

    options = LinkOptions(app_name="billing", compressors=("zstd", "zlib"))
    pool = Pool(("db.example.com", 27017), {"maxPoolSize": 10},
                connector=make_connector(options))
    pool.ready()
    with pool.checkout() as conn:
        reply = conn.transport.command("shop", {"find": "orders", "filter": {}})

What lives here: :class:`Link` (and, re-exported, :class:`LinkOptions` from
:mod:`greenpool.wire.linkoptions`), with the link's own steps
(:meth:`Link.open`, :meth:`Link.handshake`, :meth:`Link.authenticate`), its
round trips (one request at a time; exhaust streams) and how it breaks and
closes. What must not: opening sockets (:mod:`greenpool.wire.sockets`),
encoding and decoding messages (:mod:`greenpool.wire.messages`), the
establishment's deadline and the pool connector
(:mod:`greenpool.wire.connector`), anything of the client layer.
:meth:`Link.command` is the hot path of every operation: no extra call
layers on it.

Cooperative without monkey-patching. Every byte goes through
:mod:`gevent.socket` and :mod:`gevent.ssl`, never the standard library's
modules, so a link yields to other greenlets while it waits whether or not
the program called ``gevent.monkey.patch_all()``. A standard library
:class:`ssl.SSLContext` works too: its TLS objects are driven by gevent's
SSL socket, which only needs the context's C-level ``_wrap_socket``.

Errors. A command the server refused raises PyMongo's own errors (see
:func:`greenpool.wire.replies.check_reply`) and leaves the link usable. Anything that
leaves the stream in an unknown state (a network error, a timeout, a closed
socket, a malformed message, a kill such as ``gevent.Timeout`` or
``GreenletExit`` landing mid-request) *breaks* the link: it is closed at
once, the pool connection that owns it is marked errored, and the error
surfaces as :class:`pymongo.errors.AutoReconnect` (or
:class:`pymongo.errors.NetworkTimeout` for a timeout) whose message starts
with the server's address, ``"db.example.com:27017: connection closed"``;
the underlying error is its ``__cause__``. A kill propagates unchanged. A
link broken because it was interrupted (:meth:`Link.interrupt`, or the pool's
``clear(interrupt_in_use_connections=True)``) raises
``greenpool.PoolClearedError.interrupted(address)`` instead, which is
retryable and must not mark the server Unknown.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from bson.objectid import ObjectId
from gevent.hub import get_hub, getcurrent
from pymongo.errors import AutoReconnect, NetworkTimeout

from greenpool.address import Address, format_address, parse_address
from greenpool.errors import (
    NotMongoDBError,
    PoolClearedError,
    ProtocolError,
    caused_by,
)
from greenpool.pool.connection import Connection
from greenpool.wire.auth import ScramConversation, authenticate, handshake_fields
from greenpool.wire.compression import Compressor, negotiate_compressor
from greenpool.wire.handshake import check_hello_reply, hello_command
from greenpool.wire.linkoptions import LinkOptions, check_timeout
from greenpool.wire.messages import (
    DEFAULT_MAX_MESSAGE_SIZE,
    HEADER_SIZE,
    Message,
    MessageHeader,
    Outgoing,
    decode_message,
    decode_reply,
    encode_command,
    encode_outgoing,
    encode_query,
    message_size_limit,
    parse_header,
    parse_reply_header,
)
from greenpool.wire.replies import check_reply, check_reply_fields
from greenpool.wire.sockets import EstablishmentTimedOut, open_socket

__all__ = ["Link", "LinkOptions"]

_R = TypeVar("_R")
# How much of a reply the first receive asks for: most replies fit, and a
# bytes object of this size is only allocated, not filled, until it arrives.
_FIRST_READ = 16384
# libev's event mask for "readable".
_READ = 1


class _PeerClosed(Exception):
    """The server closed the connection (recv returned no bytes)."""


class Link:
    """One socket to one server, through the handshake: a pool's transport.

    Make links with :func:`greenpool.wire.connector.connect` or a pool
    connector from :func:`~greenpool.wire.connector.make_connector`;
    :meth:`open`, :meth:`handshake` and :meth:`authenticate` are the steps
    they take. A link carries one request at a time; see the module
    docstring for its errors.
    """

    __slots__ = (
        "_broken", "_busy", "_closed", "_compressor", "_connection", "_hello", "_interrupted",
        "_max_message_size", "_more_to_come", "_sock", "_speculative", "_spoke_mongodb",
        "_waiting", "address", "options",
    )

    def __init__(
        self,
        sock: Any,
        address: Address,
        options: LinkOptions,
        *,
        connection: Connection[Any] | None = None,
    ) -> None:
        """Wrap ``sock``, a connected :mod:`gevent.socket` (or gevent SSL)
        socket; the link owns it from now on. ``connection`` is the pool
        connection the link is for: a failure marks it errored, and its
        ``interrupted`` flag tells an interruption from other closes."""
        self.address = address
        self.options = options
        self._sock = sock
        self._connection = weakref.ref(connection) if connection is not None else None
        self._busy = False
        self._broken = False
        self._closed = False
        self._interrupted = False
        self._hello: dict[str, Any] | None = None
        self._compressor: Compressor | None = None
        self._max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        # While the server has more replies to send: the request's id and
        # the last reply's id (the next reply answers one of them).
        self._more_to_come: tuple[int, int] | None = None
        self._speculative: ScramConversation | None = None
        # The wait_readable() in progress, which close() ends.
        self._waiting: _StreamWait | None = None
        # A well-formed MongoDB message came back: whatever fails after that,
        # the peer is a MongoDB server (or speaks like one).
        self._spoke_mongodb = False

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        address: Address | str,
        options: LinkOptions,
        *,
        connection: Connection[Any] | None = None,
    ) -> Link:
        """Connect to ``address`` (TCP, then TLS if ``options.ssl_context``;
        or a Unix socket for ``(path, None)``), without the handshake.

        Each address the host resolves to is tried in turn until one
        connects, as drivers do. Raises :class:`pymongo.errors.AutoReconnect`
        or :class:`pymongo.errors.NetworkTimeout` naming the address.
        """
        address = parse_address(address)
        sock = open_socket(
            address, options.connect_timeout, options.ssl_context, options.server_hostname
        )
        return cls(sock, address, options, connection=connection)

    # -- what callers read -----------------------------------------------------------------

    @property
    def broken(self) -> bool:
        """A failure left the stream unusable; the link is closed."""
        return self._broken

    @property
    def closed(self) -> bool:
        """The socket is closed (by :meth:`close`, :meth:`interrupt` or a failure)."""
        return self._closed

    @property
    def busy(self) -> bool:
        """A request is in flight (another greenlet may be waiting on it)."""
        return self._busy

    @property
    def hello(self) -> Mapping[str, Any] | None:
        """The handshake's reply, or None before the handshake."""
        return self._hello

    @property
    def max_wire_version(self) -> int:
        """The server's ``maxWireVersion`` (0 before the handshake)."""
        return int(self._hello.get("maxWireVersion", 0)) if self._hello else 0

    @property
    def service_id(self) -> ObjectId | None:
        """The handshake's ``serviceId`` in load-balanced mode, else None."""
        if not (self.options.load_balanced and self._hello):
            return None
        service_id: ObjectId = self._hello["serviceId"]
        return service_id

    @property
    def server_connection_id(self) -> int | None:
        """The server's id for this connection (the hello's ``connectionId``)."""
        value = self._hello.get("connectionId") if self._hello else None
        return int(value) if value is not None else None

    @property
    def compressor(self) -> Compressor | None:
        """The compressor negotiated in the handshake, if any."""
        return self._compressor

    @property
    def max_message_size(self) -> int:
        """The largest message sent or accepted: the server's ``maxMessageSizeBytes``
        (the server's default before the handshake), bounded by
        :data:`~greenpool.wire.messages.MAX_MESSAGE_SIZE_CEILING`."""
        return self._max_message_size

    @property
    def more_to_come(self) -> bool:
        """The server will send more replies to the last request: read them
        with :meth:`receive` before sending anything else."""
        return self._more_to_come is not None

    # -- handshake and authentication ----------------------------------------------------

    def handshake(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Send the initial hello, check its reply, and return it; ``timeout``
        bounds the round trip as for :meth:`command`.

        A legacy ``isMaster`` over OP_QUERY, or ``hello`` over OP_MSG in
        load-balanced mode. The reply sets :attr:`hello`,
        :attr:`compressor` and :attr:`max_message_size`. A refused hello
        raises PyMongo's error; an incompatible server, or one without a
        ``serviceId`` in load-balanced mode, raises
        :class:`pymongo.errors.ConfigurationError`. On any failure the link
        is closed.
        """
        options = self.options
        credentials = options.credentials
        auth_fields: dict[str, Any] = {}
        if credentials is not None:
            auth_fields, self._speculative = handshake_fields(credentials)
        command = hello_command(
            app_name=options.app_name,
            compressors=options.compressors,
            load_balanced=options.load_balanced,
            auth_fields=auth_fields,
            driver=options.driver,
            server_api=options.server_api,
        )
        try:
            if options.load_balanced or options.server_api:
                reply = self.command("admin", command, timeout=timeout)
            else:
                reply = check_reply(self._legacy_command("admin", command, timeout))
            check_hello_reply(reply, self.address, load_balanced=options.load_balanced)
        except ProtocolError as exc:
            # A hello with fields of the wrong type: the server is not
            # usable as it answers, like a malformed message.
            self.close()
            raise caused_by(AutoReconnect(f"{format_address(self.address)}: {exc}"),
                            exc) from exc
        except AutoReconnect as exc:
            self.close()
            if (isinstance(exc, PoolClearedError) or self._spoke_mongodb
                    or not isinstance(exc.__cause__, ProtocolError)):
                raise
            # No MongoDB server answers a hello with a malformed message:
            # something else listens there (a web server, another service).
            not_mongodb = NotMongoDBError(
                f"the server answered the handshake, but is not a MongoDB server "
                f"({exc.__cause__})")
            raise caused_by(AutoReconnect(f"{format_address(self.address)}: {not_mongodb}"),
                            not_mongodb) from not_mongodb
        except BaseException:
            self.close()
            raise
        self._hello = reply
        self._max_message_size = message_size_limit(
            int(reply.get("maxMessageSizeBytes", DEFAULT_MAX_MESSAGE_SIZE)))
        self._compressor = negotiate_compressor(
            options.compressors, reply.get("compression"), zlib_level=options.zlib_compression_level
        )
        return reply

    def authenticate(self, *, timeout: float | None = None) -> None:
        """Authenticate with ``options.credentials`` (nothing to do without them);
        ``timeout`` bounds each round trip as for :meth:`command`.

        Continues the speculative conversation the handshake started when the
        hello reply answered it, as :func:`greenpool.wire.auth.authenticate` does.
        Raises :class:`~greenpool.errors.AuthenticationError` if the server
        refused; on any failure the link is closed.
        """
        credentials = self.options.credentials
        if credentials is None:
            return
        if self._hello is None:
            raise RuntimeError(f"{self!r}: authenticate() needs the handshake first")
        source = credentials.source
        try:
            authenticate(
                credentials,
                lambda command: self.command(source, command, timeout=timeout),
                hello_reply=self._hello,
                speculative=self._speculative,
            )
        except BaseException:
            self.close()
            raise
        finally:
            self._speculative = None

    # -- commands --------------------------------------------------------------------------

    def command(
        self,
        db: str,
        command: Mapping[str, Any],
        *,
        timeout: float | None = None,
        request_id: int | None = None,
        exhaust_allowed: bool = False,
    ) -> dict[str, Any]:
        """Run ``command`` on database ``db`` and return the server's reply.

        ``timeout`` bounds this round trip (seconds; default: the options'
        ``socket_timeout``). ``request_id`` is the message's requestID (by
        default a fresh one), for callers that publish it in events first.
        The reply has passed :func:`~greenpool.wire.replies.check_reply`: a refused
        command raises PyMongo's error and the link stays usable.

        ``exhaust_allowed`` lets the server answer with a stream: if the reply
        says more are coming (``moreToCome``), read them with :meth:`receive`.
        Without it a reply flagged moreToCome is a protocol error that breaks
        the link (AutoReconnect): the server would keep sending replies that
        the next request would read as its own.

        Raises ``RuntimeError`` if another greenlet is using the link, or
        replies to the last request are still coming; nothing is sent then.

        An :class:`~greenpool.wire.messages.Outgoing` command goes as its
        options say (codec options, a document sequence, no reply for w=0);
        with ``exhaust_allowed`` its stream's replies decode with its codec
        options too (pass them to :meth:`receive`).
        """
        if type(command) is Outgoing:
            return self._command_outgoing(db, command, timeout, request_id, exhaust_allowed)
        self._check_usable()
        # Compressing a large message yields (it runs in gevent's threadpool):
        # the link is taken meanwhile. Nothing is sent yet, so an error or a
        # kill here leaves it usable.
        self._busy = True
        try:
            request_id, data = encode_command(
                command, db, request_id=request_id, exhaust_allowed=exhaust_allowed,
                compressor=self._compressor, max_message_size=self._max_message_size,
            )
        finally:
            self._busy = False
        read = self._read_stream_start if exhaust_allowed else self._read_message
        message = self._round_trip(request_id, data, timeout, read)
        return check_reply(message.document)

    def _command_outgoing(self, db: str, command: Outgoing, timeout: float | None,
                          request_id: int | None, exhaust_allowed: bool) -> dict[str, Any]:
        """:meth:`command` for an :class:`~greenpool.wire.messages.Outgoing`."""
        self._check_usable()
        self._busy = True  # as in command: nothing is sent while encoding
        try:
            request_id, data = encode_outgoing(
                command, db, request_id=request_id, compressor=self._compressor,
                max_message_size=self._max_message_size,
                max_bson_size=self._hello.get("maxBsonObjectSize") if self._hello else None,
                exhaust_allowed=exhaust_allowed)
        finally:
            self._busy = False
        if command.unacknowledged:
            # moreToCome: the server sends no reply, so none is read.
            with self._exchange(timeout) as deadline:
                self._send(data, deadline)
            return {"ok": 1}
        codec_options = command.codec_options

        def read(answering: int, deadline: float | None) -> dict[str, Any]:
            if exhaust_allowed:
                return self._read_op_msg(answering, (answering,), deadline, stream=True,
                                         codec_options=codec_options).document
            return self._read_decoded(answering, deadline, codec_options)

        reply = command.reply = self._round_trip(request_id, data, timeout, read)
        return check_reply(reply, raise_write_concern_error=not reply.get("writeErrors"))

    def receive(self, *, timeout: float | None = None,
                codec_options: CodecOptions[Any] | None = None) -> dict[str, Any]:
        """Read the next reply of a ``moreToCome`` stream (see :attr:`more_to_come`),
        decoded with ``codec_options`` (default: plain dicts).

        ``timeout`` and errors are as for :meth:`command`.
        """
        self._check_idle()
        if self._more_to_come is None:
            raise RuntimeError(f"{self!r}: no more replies are coming")
        request_id, last_reply_id = self._more_to_come
        with self._exchange(timeout) as deadline:
            message = self._read_op_msg(
                request_id, (last_reply_id, request_id), deadline, stream=True,
                codec_options=codec_options or DEFAULT_CODEC_OPTIONS)
        return check_reply(message.document)

    # -- streams waited for in the background ------------------------------------------------

    def start_stream(self, db: str, command: Mapping[str, Any], *,
                     timeout: float | None = None) -> None:
        """Send ``command`` on database ``db`` with exhaustAllowed, without
        reading a reply: :attr:`more_to_come` is true from now on, and each
        reply (the first included) is read with :meth:`receive`, after
        :meth:`wait_readable` if the wait must not hold the hub.

        ``timeout`` bounds the send (default: the options' ``socket_timeout``).
        Raises as :meth:`command` does; a failed send breaks the link.
        """
        self._check_usable()
        self._busy = True  # compressing may yield; nothing is sent yet
        try:
            request_id, data = encode_command(
                command, db, exhaust_allowed=True, compressor=self._compressor,
                max_message_size=self._max_message_size,
            )
        finally:
            self._busy = False
        with self._exchange(timeout) as deadline:
            self._send(data, deadline)
        # The first reply answers the request itself.
        self._more_to_come = (request_id, request_id)

    def wait_readable(self, *, timeout: float | None = None) -> None:
        """Wait until the server has sent something (or closed the
        connection), at most ``timeout`` (default: the options'
        ``socket_timeout``); nothing is read.

        For a reader that waits long and must decide between the wait and
        the read, as the streaming monitor does (a forked child must not
        read its parent's stream). The wait holds no reference on gevent's
        loop, so a greenlet waiting here never keeps ``Hub.join()`` (or the
        end of a program) waiting; :meth:`close` ends it at once. Running out
        of time raises :class:`pymongo.errors.NetworkTimeout` and breaks the
        link, as a timed out read would.
        """
        self._check_idle()
        with self._exchange(timeout) as deadline:
            self._wait_readable(deadline)

    def _wait_readable(self, deadline: float | None) -> None:
        sock = self._sock
        pending = getattr(sock, "pending", None)
        if pending is not None and pending():
            return  # TLS bytes already decrypted: the socket itself may stay quiet
        seconds = _remaining(deadline)
        hub = get_hub()
        wait = _StreamWait(getcurrent(), hub.loop.io(sock.fileno(), _READ, ref=False),
                           None if seconds is None else hub.loop.timer(seconds, ref=False))
        self._waiting = wait
        try:
            wait.watcher.start(self._wake, wait, _READABLE)
            if wait.timer is not None:
                wait.timer.start(self._wake, wait, _TIMED_OUT)
            while True:
                woken = hub.switch()
                if type(woken) is tuple and woken[0] is wait:
                    break
            outcome = woken[1]
        finally:
            self._waiting = None
            wait.close()
        if outcome is _TIMED_OUT:
            raise TimeoutError("timed out")
        if outcome is _CLOSED:
            raise ConnectionAbortedError("the link was closed")

    def _wake(self, wait: _StreamWait, outcome: object) -> None:
        """In the hub: resume the greenlet of ``wait`` if it still waits."""
        if self._waiting is wait:
            wait.greenlet.switch((wait, outcome))

    def _legacy_command(self, db: str, command: Mapping[str, Any],
                        timeout: float | None) -> dict[str, Any]:
        self._check_usable()
        request_id, data = encode_query(command, db, max_message_size=self._max_message_size)
        return self._round_trip(request_id, data, timeout, self._read_legacy_reply)

    def _round_trip(
        self,
        request_id: int,
        data: bytes,
        timeout: float | None,
        read: Callable[[int, float | None], _R],
    ) -> _R:
        # _exchange's work, written out: the context manager would cost a
        # few microseconds on every command.
        deadline = self._deadline(timeout)
        self._busy = True
        try:
            self._send(data, deadline)
            return read(request_id, deadline)
        except Exception as exc:
            error = self._failure(exc, self.options.socket_timeout if timeout is None else timeout)
            if error is exc:
                raise
            raise caused_by(error, exc) from exc
        except BaseException as kill:
            self._break(kill)  # see _exchange
            raise
        finally:
            self._busy = False

    def _check_usable(self) -> None:
        self._check_idle()
        if self._more_to_come is not None:
            raise RuntimeError(
                f"{self!r}: the server is still sending replies to the last request "
                "(moreToCome); read them with receive() first"
            )

    def _check_idle(self) -> None:
        if self._closed:
            raise self._closed_error()
        if self._busy:
            raise RuntimeError(
                f"{self!r} is carrying another greenlet's request: "
                "a link carries one request at a time"
            )

    @contextlib.contextmanager
    def _exchange(self, timeout: float | None) -> Iterator[float | None]:
        """Hold the link for one exchange, yielding its deadline (``timeout``
        or the socket timeout from now); break the link on any failure in it."""
        deadline = self._deadline(timeout)
        if timeout is None:
            timeout = self.options.socket_timeout
        self._busy = True
        try:
            yield deadline
        except Exception as exc:
            error = self._failure(exc, timeout)
            if error is exc:
                raise
            raise caused_by(error, exc) from exc
        except BaseException as kill:
            # A kill mid-request: whatever the server sends next would be
            # read as the answer to the next request.
            self._break(kill)
            raise
        finally:
            self._busy = False

    def _deadline(self, timeout: float | None) -> float | None:
        """When an exchange bounded by ``timeout`` (default: the socket
        timeout) must end, on the monotonic clock; None for never."""
        if timeout is None:
            timeout = self.options.socket_timeout
            if timeout is None:
                return None
        else:
            check_timeout("timeout", timeout)
        return time.monotonic() + timeout

    def _failure(self, exc: Exception, timeout: float | None) -> Exception:
        """Break the link; return what the caller should see for ``exc``."""
        where = format_address(self.address)
        if self._was_interrupted():
            error: Exception = PoolClearedError.interrupted(self.address)
        elif self._closed or isinstance(exc, _PeerClosed):
            # Closed under us by close() in another greenlet (whatever the
            # socket raised then), or by the server.
            error = AutoReconnect(f"{where}: connection closed")
        elif isinstance(exc, EstablishmentTimedOut):
            error = NetworkTimeout(f"{where}: {exc}")
        elif isinstance(exc, TimeoutError):
            what = f"timed out after {timeout * 1000:g} ms" if timeout is not None else exc
            error = NetworkTimeout(f"{where}: {what}")
        elif isinstance(exc, OSError | ProtocolError):
            error = AutoReconnect(f"{where}: {exc}")
        else:
            error = exc  # not the network's doing (a kill thrown as an error, a bug)
        self._break(error)
        return error

    def _was_interrupted(self) -> bool:
        if self._interrupted:
            return True
        connection = self._connection() if self._connection is not None else None
        return connection is not None and connection.interrupted

    def _closed_error(self) -> Exception:
        if self._was_interrupted():
            return PoolClearedError.interrupted(self.address)
        return AutoReconnect(f"{format_address(self.address)}: connection closed")

    def _break(self, error: BaseException) -> None:
        self._broken = True
        self.close()
        connection = self._connection() if self._connection is not None else None
        if connection is not None:
            connection.mark_errored(error)

    # -- bytes -------------------------------------------------------------------------------

    def _send(self, data: bytes, deadline: float | None) -> None:
        sock = self._sock
        sock.settimeout(_remaining(deadline))
        # One send() carries a command whole in the common case; sendall(),
        # which asks the kernel for the send buffer's size on every call,
        # only for what is left.
        sent = sock.send(data)
        if sent < len(data):
            sock.settimeout(_remaining(deadline))
            sock.sendall(memoryview(data)[sent:])

    def _recv_exactly(self, size: int, deadline: float | None) -> bytearray:
        # The buffer itself, not a bytes() copy of it: a large reply would
        # briefly take twice its size.
        buffer = bytearray(size)
        self._recv_into(memoryview(buffer), deadline)
        return buffer

    def _recv_into(self, view: memoryview, deadline: float | None) -> None:
        """Fill ``view`` from the socket."""
        received, size = 0, len(view)
        while received < size:
            self._sock.settimeout(_remaining(deadline))
            count = self._sock.recv_into(view[received:])
            if not count:
                raise _PeerClosed
            received += count

    def _recv_reply(self, deadline: float | None) -> tuple[MessageHeader, bytes | bytearray]:
        """The header and body of the one reply a request gets (not a
        stream), in one receive when it is small.

        Nothing may follow that reply until the next request, so bytes
        after it are a protocol error, not the start of another message:
        only a stream's replies must be read header first.
        """
        sock = self._sock
        sock.settimeout(_remaining(deadline))
        data = sock.recv(_FIRST_READ)
        if not data:
            raise _PeerClosed
        if len(data) < HEADER_SIZE:
            data += self._recv_exactly(HEADER_SIZE - len(data), deadline)
        header = parse_header(data, max_message_size=self._max_message_size)
        extra = len(data) - header.length
        if extra > 0:
            raise ProtocolError(f"the server sent {extra} bytes after its reply")
        if extra == 0:
            return header, data[HEADER_SIZE:]
        # A large reply: its body in one buffer, the rest received into it.
        body = bytearray(header.length - HEADER_SIZE)
        body[: len(data) - HEADER_SIZE] = memoryview(data)[HEADER_SIZE:]
        self._recv_into(memoryview(body)[len(data) - HEADER_SIZE :], deadline)
        return header, body

    def _read_message(self, request_id: int, deadline: float | None) -> Message:
        return self._read_op_msg(request_id, (request_id,), deadline, stream=False)

    def _read_stream_start(self, request_id: int, deadline: float | None) -> Message:
        return self._read_op_msg(request_id, (request_id,), deadline, stream=True)

    def _read_op_msg(
        self, request_id: int, answering: tuple[int, ...], deadline: float | None, *,
        stream: bool, codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
    ) -> Message:
        """The next OP_MSG, which must answer one of the ids in ``answering``;
        flagged moreToCome only if ``stream`` (the request allowed exhaust).

        A reply after a moreToCome one answers that reply as mongod numbers
        them, or the original request as some servers do: both are accepted.
        """
        limit = self._max_message_size
        if stream:
            header = parse_header(self._recv_exactly(HEADER_SIZE, deadline),
                                  max_message_size=limit)
            body: bytes | bytearray = self._recv_exactly(header.length - HEADER_SIZE, deadline)
        else:
            header, body = self._recv_reply(deadline)
        message = decode_message(header, body, max_message_size=limit,
                                 codec_options=codec_options)
        self._spoke_mongodb = True
        _check_response_to(message.response_to, answering)
        check_reply_fields(message.document)
        if message.more_to_come and not stream:
            raise ProtocolError(
                "the server flagged its reply moreToCome (more replies follow) although the "
                "request did not allow exhaust"
            )
        self._more_to_come = (request_id, message.request_id) if message.more_to_come else None
        return message

    def _read_decoded(self, request_id: int, deadline: float | None,
                      codec_options: CodecOptions[Any]) -> dict[str, Any]:
        """The reply to ``request_id`` (not a stream), decoded with
        ``codec_options``; checked as :meth:`_read_op_msg` checks one."""
        header, body = self._recv_reply(deadline)
        message = decode_message(header, body, max_message_size=self._max_message_size,
                                 codec_options=codec_options)
        self._spoke_mongodb = True
        _check_response_to(message.response_to, (request_id,))
        check_reply_fields(message.document)
        if message.more_to_come:
            raise ProtocolError(
                "the server flagged its reply moreToCome (more replies follow) although the "
                "request did not allow exhaust")
        return message.document

    def _read_legacy_reply(self, response_to: int, deadline: float | None) -> dict[str, Any]:
        limit = self._max_message_size
        header = parse_reply_header(
            self._recv_exactly(HEADER_SIZE, deadline), max_message_size=limit
        )
        reply = decode_reply(header, self._recv_exactly(header.length - HEADER_SIZE, deadline))
        self._spoke_mongodb = True
        _check_response_to(reply.response_to, (response_to,))
        document = reply.command_reply()
        check_reply_fields(document)
        return document

    # -- closing -------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Close the socket now, from any greenlet, without blocking.

        A greenlet blocked on this link wakes at once with
        ``PoolClearedError.interrupted(address)``, as does any later use.
        """
        self._interrupted = True
        self.close()

    def close(self) -> None:
        """Close the socket: idempotent, never blocks, never sends anything
        (no TLS close_notify). A greenlet blocked on the link wakes with
        ``AutoReconnect``."""
        if self._closed:
            return
        self._closed = True
        wait = self._waiting
        if wait is not None:
            # A wait_readable() in progress: its watchers stop before the
            # descriptor closes, and it wakes on the hub's next turn.
            wait.close()
            get_hub().loop.run_callback(self._wake, wait, _CLOSED)
        self._sock.close()

    def __repr__(self) -> str:
        state = "broken" if self._broken else "closed" if self._closed else "open"
        return f"<greenpool.Link to {format_address(self.address)}, {state}>"


# What wakes a wait_readable().
_READABLE = object()
_TIMED_OUT = object()
_CLOSED = object()


class _StreamWait:
    """A wait_readable() in progress: the greenlet that waits and its watchers."""

    __slots__ = ("greenlet", "timer", "watcher")

    def __init__(self, greenlet: Any, watcher: Any, timer: Any) -> None:
        self.greenlet = greenlet
        self.watcher = watcher
        self.timer = timer

    def close(self) -> None:
        self.watcher.close()
        if self.timer is not None:
            self.timer.close()


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _check_response_to(actual: int, expected: tuple[int, ...]) -> None:
    if actual not in expected:
        wanted = " or ".join(str(request_id) for request_id in expected)
        raise ProtocolError(f"got a reply to message {actual}; expected one to {wanted}")

