"""greenpool.wire.link against the fake server: what a real server cannot show.

Compression on the wire, wire-version ranges, load-balanced handshakes with
and without serviceId, malformed replies, moreToCome streams, Unix sockets,
address fallback, and the errors a link raises when the stream breaks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest
from bson.objectid import ObjectId
from pymongo.errors import (
    AutoReconnect,
    ConfigurationError,
    DocumentTooLarge,
    NetworkTimeout,
    OperationFailure,
)

from greenpool import Connection, Pool, PoolClearedError
from greenpool.errors import AuthenticationError, ProtocolError
from greenpool.wire import compression
from greenpool.wire.auth import Credentials
from greenpool.wire.compression import OFF_HUB_SIZE
from greenpool.wire.connector import connect, handshake_completed, make_connector
from greenpool.wire.handshake import LOAD_BALANCER_UNSUPPORTED
from greenpool.wire.link import Link, LinkOptions
from greenpool.wire.offload import offload
from tests.fake_scram import FakeScramServer
from tests.fake_server import (
    EXHAUST_ALLOWED,
    HANG_UP,
    OP_COMPRESSED,
    OP_MSG,
    OP_QUERY,
    AwaitableHello,
    FakeServer,
    Raw,
    Request,
    Stream,
    block,
    op_msg,
    op_reply,
)
from tests.turns import hub_turns_until, switches_during

pytestmark = pytest.mark.timeout(30)

PASSWORD = "Zebra-Quartz-7741-unlikely"


@contextlib.contextmanager
def serving(**kwargs: Any) -> Iterator[FakeServer]:
    with FakeServer(**kwargs) as server:
        yield server


def scram_server(*, speculative: bool = True) -> FakeScramServer:
    scram = FakeScramServer(speculative=speculative)
    scram.create_user("app", PASSWORD)
    return scram


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        gevent.sleep(0.01)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def a_pool(server: FakeServer, options: LinkOptions, handler: Any = None) -> Pool[Link]:
    pool: Pool[Link] = Pool(
        server.address,
        {"load_balanced": options.load_balanced},
        connector=make_connector(options),
        on_establish_error=handler,
    )
    pool.ready()
    return pool


# -- round trips and the legacy handshake --------------------------------------------------


def test_handshake_is_a_legacy_hello_over_op_query() -> None:
    with serving() as server:
        link = connect(server.address, LinkOptions(app_name="fake-app"))
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        link.close()
    hello, ping = server.requests
    assert (hello.op_code, hello.db, hello.name) == (OP_QUERY, "admin", "isMaster")
    assert hello.command["helloOk"] is True
    assert hello.command["client"]["application"] == {"name": "fake-app"}
    assert "compression" not in hello.command and "loadBalanced" not in hello.command
    assert (ping.op_code, ping.db) == (OP_MSG, "admin")
    assert link.hello is not None and link.hello["helloOk"] is True
    assert link.max_wire_version == 21
    assert link.server_connection_id == 1
    assert link.service_id is None and link.compressor is None


def test_refused_command_leaves_the_link_usable() -> None:
    with serving() as server:
        link = connect(server.address, LinkOptions())
        with pytest.raises(OperationFailure, match="no such command") as caught:
            link.command("db", {"frobnicate": 1})
        assert caught.value.code == 59
        assert not link.broken and not link.closed
        assert link.command("admin", {"ping": 1})["ok"] == 1.0
        link.close()


@pytest.mark.parametrize("pieces", [(3,), (3, 20), (16,), (40, 1)])
def test_a_reply_arriving_in_pieces_is_read_whole(pieces: tuple[int, ...]) -> None:
    reply = {"ok": 1.0, "cursor": {"id": 0, "ns": "db.c", "firstBatch": [{"_id": 1}]}}
    with serving(handlers={"find": lambda r: Raw(op_msg(reply, r.request_id), pieces)}) as s:
        link = connect(s.address, LinkOptions())
        assert link.command("db", {"find": "c"}) == reply
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        link.close()


@pytest.mark.parametrize("size", [16_384 - 60, 16_384, 100_000, 3_000_000])
def test_replies_larger_than_the_first_receive(size: int) -> None:
    """Replies around and far over the first receive's 16 KiB, split or not."""
    reply = {"ok": 1.0, "pad": "x" * size}
    with serving(handlers={"find": lambda _r: reply,
                           "count": lambda r: Raw(op_msg(reply, r.request_id), (16_390,))}) as s:
        link = connect(s.address, LinkOptions())
        assert link.command("db", {"find": "c"}) == reply
        assert link.command("db", {"count": "c"}) == reply
        link.close()


def test_bytes_after_a_reply_break_the_link() -> None:
    with serving(handlers={"find": lambda r: Raw(op_msg({"ok": 1}, r.request_id) + b"12345")}) as s:
        link = connect(s.address, LinkOptions())
        with pytest.raises(AutoReconnect, match="sent 5 bytes after its reply") as caught:
            link.command("db", {"find": "c"})
        assert isinstance(caught.value.__cause__, ProtocolError)
        assert link.broken


class _ShortSends:
    """A socket whose send() takes at most ``limit`` bytes, as a full send buffer does."""

    def __init__(self, sock: Any, limit: int) -> None:
        self.sock, self.limit, self.sends = sock, limit, 0

    def send(self, data: Any) -> int:
        self.sends += 1
        return int(self.sock.send(data[: self.limit]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def test_a_command_that_one_send_does_not_take_is_sent_whole() -> None:
    document = {"_id": 1, "pad": "y" * 50_000}
    with serving(handlers={"insert": lambda _r: {"ok": 1.0, "n": 1}}) as server:
        link = connect(server.address, LinkOptions())
        short = _ShortSends(link._sock, 1000)
        link._sock = short
        link.command("db", {"insert": "c", "documents": [document]})
        assert short.sends == 1  # the rest went through sendall
        link.close()
    assert server.requests[-1].command["documents"] == [document]


def test_refused_hello_fails_before_the_handshake_completed() -> None:
    refuse = {"isMaster": lambda _r: {"ok": 0, "errmsg": "hello refused", "code": 8000}}
    with serving(handlers=refuse) as server:
        with pytest.raises(OperationFailure, match="hello refused") as caught:
            connect(server.address, LinkOptions())
        assert not handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])


# -- compression ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["zlib", "snappy", "zstd"])
def test_compression_on_the_wire(name: str) -> None:
    """hello, saslStart and saslContinue go uncompressed; everything after compressed."""
    options = LinkOptions(
        compressors=(name,), zlib_compression_level=9,
        credentials=Credentials("app", PASSWORD),
    )
    with serving(scram=scram_server(speculative=False)) as server:
        link = connect(server.address, options)
        assert link.compressor is not None and link.compressor.name == name
        reply = link.command("admin", {"ping": 1, "pad": "x" * 500})
        assert reply == {"ok": 1.0}
        link.close()
    by_name = {request.name: request for request in server.requests}
    assert server.names() == ["isMaster", "saslStart", "saslContinue", "ping"]
    assert server.requests[0].command["compression"] == [name]
    for uncompressed in ("isMaster", "saslStart", "saslContinue"):
        assert by_name[uncompressed].op_code != OP_COMPRESSED, uncompressed
    assert by_name["ping"].op_code == OP_COMPRESSED
    assert by_name["ping"].compressor == name
    assert by_name["ping"].command["pad"] == "x" * 500


def test_client_preference_decides_among_what_the_server_offers() -> None:
    with serving(compressors=("zlib", "snappy")) as server:
        link = connect(server.address, LinkOptions(compressors=("zstd", "snappy", "zlib")))
        assert link.compressor is not None and link.compressor.name == "snappy"
        link.command("admin", {"ping": 1})
        link.close()
    assert server.requests[0].command["compression"] == ["zstd", "snappy", "zlib"]
    assert server.requests[-1].compressor == "snappy"


def test_no_common_compressor_means_no_compression() -> None:
    with serving(compressors=("snappy",)) as server:
        link = connect(server.address, LinkOptions(compressors=("zlib",)))
        assert link.compressor is None
        link.command("admin", {"ping": 1})
        link.close()
    assert server.requests[-1].op_code == OP_MSG


@pytest.fixture
def offloaded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions greenpool.wire.compression hands to gevent's threadpool, by name."""
    calls: list[str] = []

    def spy(function: Any, *args: Any) -> Any:
        calls.append(function.__name__)
        return offload(function, *args)

    monkeypatch.setattr(compression, "offload", spy)
    return calls


@pytest.mark.parametrize("name", ["zlib", "snappy", "zstd"])
def test_large_messages_are_compressed_in_the_threadpool(name: str, offloaded: list[str]) -> None:
    """From OFF_HUB_SIZE bytes both ways (the reply too); small messages inline."""
    large = os.urandom(OFF_HUB_SIZE // 2).hex()  # OFF_HUB_SIZE characters
    echo = {"echo": lambda request: {"ok": 1.0, "pad": request.command["pad"]}}
    with serving(compressors=(name,), handlers=echo) as server:
        link = connect(server.address, LinkOptions(compressors=(name,)))
        assert link.command("admin", {"echo": 1, "pad": "small"})["pad"] == "small"
        assert offloaded == []
        assert link.command("admin", {"echo": 1, "pad": large})["pad"] == large
        link.close()
    assert [request.compressor for request in server.requests[-2:]] == [name, name]
    assert server.requests[-1].command["pad"] == large
    assert offloaded == ["_compress", f"_inflate_{name}"]


def test_a_link_is_taken_while_its_message_is_compressed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another greenlet's command is refused meanwhile; a kill there sends nothing
    and leaves the link usable."""
    compressing = gevent.event.Event()
    release = gevent.event.Event()

    def held(function: Any, *args: Any) -> Any:
        compressing.set()
        release.wait()
        return offload(function, *args)

    monkeypatch.setattr(compression, "offload", held)
    large = "x" * OFF_HUB_SIZE
    with serving(compressors=("zlib",)) as server:
        link = connect(server.address, LinkOptions(compressors=("zlib",)))
        first = gevent.spawn(link.command, "admin", {"ping": 1, "pad": large})
        compressing.wait(5)
        with pytest.raises(RuntimeError, match="carrying another greenlet's request"):
            link.command("admin", {"ping": 1})
        first.kill()
        assert not link.broken
        release.set()
        assert link.command("admin", {"ping": 1, "pad": "small"}) == {"ok": 1.0}
        link.close()
    assert [request.command.get("pad") for request in server.requests[1:]] == ["small"]


@pytest.mark.parametrize("kill", [gevent.GreenletExit, gevent.Timeout])
def test_a_kill_while_a_reply_is_decompressed_breaks_the_link(
    monkeypatch: pytest.MonkeyPatch, kill: type[BaseException]
) -> None:
    """The reply was read: whatever the stream holds next is no answer to a new request."""
    inflating = gevent.event.Event()

    def held(function: Any, *args: Any) -> Any:
        if function.__name__.startswith("_inflate"):
            inflating.set()
            gevent.sleep(10)
        return offload(function, *args)

    monkeypatch.setattr(compression, "offload", held)
    large = "x" * OFF_HUB_SIZE
    echo = {"echo": lambda request: {"ok": 1.0, "pad": request.command["pad"]}}
    with serving(compressors=("zlib",), handlers=echo) as server:
        link = connect(server.address, LinkOptions(compressors=("zlib",)))
        receiver = gevent.spawn(link.command, "admin", {"echo": 1, "pad": large})
        assert inflating.wait(5)
        receiver.kill(kill())
        assert link.broken
        with pytest.raises(AutoReconnect, match="connection closed"):
            link.command("admin", {"ping": 1})
        wait_for(lambda: server.hangups == [1])


def test_unknown_compressors_are_dropped_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="'lz4'"):
        options = LinkOptions(compressors=("lz4", "zlib"))
    assert options.compressors == ("zlib",)


# -- authentication ------------------------------------------------------------------------


def test_speculative_authentication_saves_the_sasl_start() -> None:
    scram = scram_server()
    with serving(scram=scram) as server:
        link = connect(server.address, LinkOptions(credentials=Credentials("app", PASSWORD)))
        link.close()
    assert server.names() == ["isMaster", "saslContinue"]
    hello = server.requests[0].command
    assert hello["saslSupportedMechs"] == "admin.app"
    assert hello["speculativeAuthenticate"]["mechanism"] == "SCRAM-SHA-256"
    assert scram.authenticated == "app"


def test_wrong_password_never_shows_the_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    scram = FakeScramServer()
    scram.create_user("app", "the-right-one")
    options = LinkOptions(credentials=Credentials("app", PASSWORD), app_name="secretive")
    with serving(scram=scram) as server:
        with pytest.raises(AuthenticationError) as caught:
            connect(server.address, options)
        wait_for(lambda: server.hangups == [1])
    error = caught.value
    assert handshake_completed(error)
    assert "Authentication failed" in str(error)
    texts = [str(error), repr(error), repr(options), repr(options.credentials), caplog.text]
    texts += [str(arg) for arg in error.args]
    assert not any(PASSWORD in text for text in texts)


# -- wire versions and load balancing ------------------------------------------------------


@pytest.mark.parametrize(("low", "high", "verdict"), [(0, 6, "too old"), (40, 45, "too new")])
def test_wire_version_out_of_range(low: int, high: int, verdict: str) -> None:
    hello = {"minWireVersion": low, "maxWireVersion": high}
    with serving(hello=hello) as server:
        with pytest.raises(ConfigurationError, match=verdict) as caught:
            connect(server.address, LinkOptions())
        assert f"wire versions {low} through {high}" in str(caught.value)
        assert not handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])


def test_load_balanced_handshake_sets_the_service_id() -> None:
    service_id = ObjectId()
    options = LinkOptions(load_balanced=True, compressors=("zlib",))
    with serving(hello={"serviceId": service_id}) as server:
        pool = a_pool(server, options)
        with pool.checkout() as conn:
            assert conn.service_id == service_id
            assert conn.transport is not None and conn.transport.service_id == service_id
            conn.transport.command("admin", {"ping": 1})
        pool.close()
    hello = server.requests[0]
    assert (hello.op_code, hello.name, hello.db) == (OP_MSG, "hello", "admin")
    assert hello.command["loadBalanced"] is True and hello.command["helloOk"] is True
    assert server.requests[1].op_code == OP_COMPRESSED


def test_load_balanced_server_without_a_service_id() -> None:
    with serving() as server:
        with pytest.raises(ConfigurationError) as caught:
            connect(server.address, LinkOptions(load_balanced=True))
        assert str(caught.value) == LOAD_BALANCER_UNSUPPORTED
        assert not handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])


def test_service_id_is_known_before_authentication_fails() -> None:
    service_id = ObjectId()
    scram = FakeScramServer()  # no such user
    seen: list[tuple[bool, ObjectId | None]] = []

    def on_error(error: Exception, conn: Connection[Link]) -> None:
        seen.append((handshake_completed(error), conn.service_id))

    options = LinkOptions(load_balanced=True, credentials=Credentials("app", PASSWORD))
    with serving(hello={"serviceId": service_id}, scram=scram) as server:
        pool = a_pool(server, options, handler=on_error)
        with pytest.raises(AuthenticationError):
            pool.checkout()
        pool.close()
    assert seen == [(True, service_id)]


def test_errors_before_the_hello_are_marked_incomplete() -> None:
    with pytest.raises(AutoReconnect, match="refused") as caught:
        connect(("127.0.0.1", free_port()), LinkOptions())
    assert not handshake_completed(caught.value)
    assert not handshake_completed(ValueError("not from a link"))


# -- malformed replies and moreToCome ------------------------------------------------------


def garbage_reply(request: Request) -> Raw:
    bad = struct.pack("<i", 8) + b"\x20a\x00\x00"  # element type 0x20 does not exist
    body = struct.pack("<I", 0) + b"\x00" + bad
    return Raw(struct.pack("<iiii", 16 + len(body), 5, request.request_id, OP_MSG) + body)


@pytest.mark.parametrize(
    ("handler", "match"),
    [
        (garbage_reply, "invalid BSON"),
        (lambda r: Raw(op_msg({"ok": 1}, r.request_id + 1)), "expected one to"),
        (lambda r: Raw(op_reply({"ok": 1}, r.request_id)), "unknown opcode 1"),
        (lambda r: Raw(b"\x03\x00\x00\x00" + b"\x00" * 12), "shorter than its own header"),
    ],
)
def test_malformed_reply_breaks_the_link(handler: Any, match: str) -> None:
    with serving(handlers={"find": handler}) as server:
        pool = a_pool(server, LinkOptions())
        with pool.checkout() as conn:
            link = conn.transport
            assert link is not None
            with pytest.raises(AutoReconnect, match=match) as caught:
                link.command("db", {"find": "c"})
            assert isinstance(caught.value.__cause__, ProtocolError)
            assert str(caught.value).startswith(f"127.0.0.1:{server.address[1]}: ")
            assert link.broken and link.closed
            assert conn.errored
        assert pool.stats().total == 0  # closed at checkin, not reused
        pool.close()


def test_malformed_op_reply_in_the_handshake() -> None:
    def truncated(request: Request) -> Raw:
        data = op_reply({"ok": 1, "maxWireVersion": 21}, request.request_id)
        return Raw(data[:16] + struct.pack("<iqii", 0, 0, 0, 2) + data[36:])

    with serving(handlers={"isMaster": truncated}) as server:
        with pytest.raises(AutoReconnect, match="claims 2 documents but holds 1") as caught:
            connect(server.address, LinkOptions())
        assert isinstance(caught.value.__cause__, ProtocolError)
        assert not handshake_completed(caught.value)


def test_op_msg_answer_to_the_op_query_handshake() -> None:
    answer = {"isMaster": lambda r: Raw(op_msg({"ok": 1, "maxWireVersion": 21}, r.request_id))}
    with serving(handlers=answer) as server:
        with pytest.raises(AutoReconnect, match="expected an OP_REPLY") as caught:
            connect(server.address, LinkOptions())
        assert not handshake_completed(caught.value)


def test_handshake_timeout() -> None:
    with serving(handlers={"isMaster": block(2.0)}) as server:
        with pytest.raises(NetworkTimeout, match="timed out after 100 ms") as caught:
            connect(server.address, LinkOptions(socket_timeout=0.1))
        assert not handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])


def test_more_to_come_replies_are_read_one_by_one() -> None:
    batches = [{"ok": 1.0, "n": n} for n in range(3)]
    with serving(handlers={"find": lambda _r: Stream(batches)}) as server:
        link = connect(server.address, LinkOptions(compressors=("zstd",)))
        assert link.command("db", {"find": "c"}, exhaust_allowed=True) == batches[0]
        assert link.more_to_come
        with pytest.raises(RuntimeError, match="still sending replies"):
            link.command("admin", {"ping": 1})
        assert link.receive() == batches[1]
        assert link.receive(timeout=5) == batches[2]
        assert not link.more_to_come
        with pytest.raises(RuntimeError, match="no more replies"):
            link.receive()
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        link.close()
    assert server.names() == ["isMaster", "find", "ping"]  # no request in between


def test_more_to_come_replies_may_answer_the_original_request() -> None:
    def stream(request: Request) -> Raw:
        first = op_msg({"ok": 1, "n": 0}, request.request_id, flags=2, request_id=900)
        second = op_msg({"ok": 1, "n": 1}, request.request_id, request_id=901)
        return Raw(first + second)

    with serving(handlers={"find": stream}) as server:
        link = connect(server.address, LinkOptions())
        assert link.command("db", {"find": "c"}, exhaust_allowed=True)["n"] == 0
        assert link.receive()["n"] == 1
        link.close()


def test_a_stream_started_without_reading_is_read_after_waits() -> None:
    with serving() as server:
        hello = AwaitableHello(server).install()
        link = connect(server.address, LinkOptions())
        version = link.hello["topologyVersion"] if link.hello else None
        link.start_stream("admin", {"hello": 1, "topologyVersion": version,
                                    "maxAwaitTimeMS": 60_000})
        assert link.more_to_come
        with pytest.raises(RuntimeError, match="still sending replies"):
            link.command("admin", {"ping": 1})
        for counter in (1, 2):
            hello.change()
            link.wait_readable(timeout=5)
            assert link.receive()["topologyVersion"]["counter"] == counter
            assert link.more_to_come
        link.close()
    (request,) = hello.awaited
    assert request.flags & EXHAUST_ALLOWED


def test_wait_readable_times_out_as_a_read_would() -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        link = connect(server.address, LinkOptions())
        link.start_stream("db", {"find": "c"})
        with pytest.raises(NetworkTimeout, match="timed out after 100 ms"):
            link.wait_readable(timeout=0.1)
        assert link.broken


@pytest.mark.parametrize("how", ["close", "interrupt", "kill"])
def test_a_wait_for_a_stream_ends_at_once(how: str) -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        link = connect(server.address, LinkOptions())
        link.start_stream("db", {"find": "c"})
        worker = gevent.spawn(link.wait_readable)
        wait_for(lambda: "find" in server.names())
        gevent.sleep(0.01)  # the worker waits
        if how == "kill":
            worker.kill(block=False)
        else:
            getattr(link, how)()
            assert link._sock.fileno() == -1  # closed now, not on the hub's next turn
        worker.join(timeout=5)
        assert worker.dead
        if how == "close":
            assert isinstance(worker.exception, AutoReconnect)
            assert "connection closed" in str(worker.exception)
        elif how == "interrupt":
            assert isinstance(worker.exception, PoolClearedError)
        assert link.closed and (how == "close" or link.broken)
        wait_for(lambda: server.hangups == [1])


def test_a_wait_for_a_stream_never_keeps_hub_join_waiting() -> None:
    script = textwrap.dedent("""
        import gevent
        from gevent import socket as gsocket
        from greenpool.wire.link import Link, LinkOptions
        near, far = gsocket.socketpair()
        link = Link(near, ("db.test", 27017), LinkOptions())
        waiter = gevent.spawn(link.wait_readable)
        gevent.sleep(0.01)
        assert gevent.get_hub().join(timeout=30), "Hub.join() did not return"
        print("joined", waiter.dead)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["joined", "False"]


def test_server_hang_up_breaks_the_link() -> None:
    with serving(handlers={"find": lambda _r: HANG_UP}) as server:
        link = connect(server.address, LinkOptions())
        with pytest.raises(AutoReconnect) as caught:
            link.command("db", {"find": "c"})
        assert str(caught.value) == f"127.0.0.1:{server.address[1]}: connection closed"
        assert link.broken
        with pytest.raises(AutoReconnect, match="connection closed"):
            link.command("admin", {"ping": 1})


def test_message_size_limit_comes_from_the_handshake() -> None:
    big = {"ok": 1.0, "pad": "x" * 2000}
    with serving(hello={"maxMessageSizeBytes": 1000}, handlers={"find": lambda _r: big}) as s:
        link = connect(s.address, LinkOptions())
        assert link.max_message_size == 1000
        with pytest.raises(DocumentTooLarge):
            link.command("db", {"insert": "c", "documents": [{"pad": "y" * 2000}]})
        assert not link.broken  # nothing was sent
        with pytest.raises(AutoReconnect, match="exceeds the maximum message size 1000"):
            link.command("db", {"find": "c"})
        assert link.broken


# -- timeouts, kills, interrupts, concurrency ----------------------------------------------


def test_socket_timeout_breaks_the_link() -> None:
    with serving(handlers={"find": block(2.0)}) as server:
        link = connect(server.address, LinkOptions(socket_timeout=0.2))
        started = time.monotonic()
        with pytest.raises(NetworkTimeout) as caught:
            link.command("db", {"find": "c"})
        # Not before its 200 ms; the error (not the reply the server sends after 2 s)
        # says it was the timeout that ended the call.
        assert time.monotonic() - started > 0.15
        assert str(caught.value) == f"127.0.0.1:{server.address[1]}: timed out after 200 ms"
        assert link.broken


def test_a_call_timeout_overrides_the_socket_timeout() -> None:
    with serving(handlers={"find": block(0.3)}) as server:
        link = connect(server.address, LinkOptions(socket_timeout=0.1))
        assert link.command("db", {"find": "c"}, timeout=5) == {"ok": 1.0}
        with pytest.raises(NetworkTimeout, match="after 50 ms"):
            link.command("db", {"find": "c"}, timeout=0.05)
        link.close()


@pytest.mark.parametrize("kill", [gevent.Timeout, gevent.GreenletExit])
def test_kill_mid_request_breaks_the_link(kill: type[BaseException]) -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        pool = a_pool(server, LinkOptions())
        conn = pool.checkout()
        link = conn.transport
        assert link is not None
        worker = gevent.spawn(link.command, "db", {"find": "c"})
        wait_for(lambda: "find" in server.names())
        worker.kill(kill, block=True, timeout=5)
        assert link.broken and link.closed and conn.errored
        wait_for(lambda: server.hangups == [1])
        with pytest.raises(AutoReconnect, match="connection closed"):
            link.command("admin", {"ping": 1})
        pool.checkin(conn)
        assert pool.stats().total == 0
        pool.close()


def test_gevent_timeout_around_a_command() -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        link = connect(server.address, LinkOptions())
        timeout = gevent.Timeout(0.1)
        with pytest.raises(gevent.Timeout) as caught, timeout:
            link.command("db", {"find": "c"})
        assert caught.value is timeout  # the kill propagates unchanged
        assert link.broken


def test_interrupt_wakes_the_blocked_greenlet_at_once() -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        link = connect(server.address, LinkOptions())
        worker = gevent.spawn(link.command, "db", {"find": "c"})
        wait_for(lambda: "find" in server.names())
        assert switches_during(link.interrupt) == 0  # the caller never blocks
        # At once: within a few turns of the hub, long before the server answers (5 s).
        assert hub_turns_until(lambda: worker.dead) <= 3
        assert isinstance(worker.exception, PoolClearedError)
        assert str(worker.exception) == PoolClearedError.interrupted(server.address).message
        assert link.broken
        with pytest.raises(PoolClearedError):
            link.command("admin", {"ping": 1})
        link.interrupt()  # idempotent


def test_pool_clear_with_interruption_interrupts_the_link() -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        pool = a_pool(server, LinkOptions())
        conn = pool.checkout()
        link = conn.transport
        assert link is not None
        worker = gevent.spawn(link.command, "db", {"find": "c"})
        wait_for(lambda: "find" in server.names())
        pool.clear(interrupt_in_use_connections=True)
        # Within a few turns of the hub, long before the server answers (5 s).
        assert hub_turns_until(lambda: worker.dead) <= 3
        assert isinstance(worker.exception, PoolClearedError)
        assert "interrupted" in str(worker.exception)
        pool.checkin(conn)
        pool.close()


def test_pool_clear_interrupts_an_establishment() -> None:
    with serving(handlers={"isMaster": block(5.0)}) as server:
        pool = a_pool(server, LinkOptions())
        worker = gevent.spawn(pool.checkout)
        wait_for(lambda: "isMaster" in server.names())
        pool.clear(interrupt_in_use_connections=True)
        worker.join(timeout=5)
        assert isinstance(worker.exception, PoolClearedError)
        assert not handshake_completed(worker.exception)
        wait_for(lambda: server.hangups == [1])
        pool.close()


def test_kill_during_establishment_closes_the_socket() -> None:
    with serving(handlers={"isMaster": block(5.0)}) as server:
        worker = gevent.spawn(connect, server.address, LinkOptions())
        wait_for(lambda: "isMaster" in server.names())
        worker.kill(block=True, timeout=5)
        wait_for(lambda: server.hangups == [1])


def test_concurrent_use_is_refused() -> None:
    with serving(handlers={"find": block(0.3)}) as server:
        link = connect(server.address, LinkOptions())
        first = gevent.spawn(link.command, "db", {"find": "c"})
        wait_for(lambda: "find" in server.names())
        with pytest.raises(RuntimeError, match="one request at a time"):
            link.command("admin", {"ping": 1})
        assert first.get(timeout=5) == {"ok": 1.0}
        assert not link.broken
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        link.close()
    assert server.names() == ["isMaster", "find", "ping"]


def test_close_is_idempotent_and_sends_nothing() -> None:
    with serving() as server:
        link = connect(server.address, LinkOptions())
        link.close()
        link.close()
        assert link.closed and not link.broken
        assert repr(link) == f"<greenpool.Link to 127.0.0.1:{server.address[1]}, closed>"
        wait_for(lambda: server.hangups == [1])
        with pytest.raises(AutoReconnect, match="connection closed"):
            link.command("admin", {"ping": 1})
    assert server.names() == ["isMaster"]


def test_close_from_another_greenlet_wakes_the_blocked_one() -> None:
    with serving(handlers={"find": block(5.0)}) as server:
        link = connect(server.address, LinkOptions())
        worker = gevent.spawn(link.command, "db", {"find": "c"})
        wait_for(lambda: "find" in server.names())
        link.close()
        worker.join(timeout=1)
        assert isinstance(worker.exception, AutoReconnect)
        assert not isinstance(worker.exception, PoolClearedError)
        assert "connection closed" in str(worker.exception)


# -- addresses -----------------------------------------------------------------------------


def test_unix_domain_socket() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "mongodb-fake.sock")
        with serving(unix_path=path) as server:
            link = connect(path, LinkOptions(compressors=("zlib",)))
            assert link.address == (path, None)
            assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
            link.close()
        assert server.requests[-1].compressor == "zlib"


def test_unix_socket_that_does_not_exist() -> None:
    with pytest.raises(AutoReconnect, match=r"/nonexistent/mongodb\.sock: .*No such file"):
        connect(("/nonexistent/mongodb.sock", None), LinkOptions())


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_address() -> None:
    with serving(host="::1") as server:
        link = connect(server.address, LinkOptions())
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        assert repr(link).startswith(f"<greenpool.Link to [::1]:{server.address[1]}")
        link.close()


def test_tcp_options() -> None:
    with serving() as server:
        link = connect(server.address, LinkOptions())
        sock = link._sock  # what the link configured, read back from the OS
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) <= 120
        link.close()


def test_every_resolved_address_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    from greenpool.wire import sockets as link_module

    closed = free_port()
    with serving() as server:
        port = server.address[1]
        candidates = [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", closed)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]
        asked: list[tuple[str, int]] = []

        def getaddrinfo(host: str, port: int, *args: Any) -> list[Any]:
            asked.append((host, port))
            return candidates

        monkeypatch.setattr(link_module.gsocket, "getaddrinfo", getaddrinfo)
        link = connect(("db.example.test", 27017), LinkOptions())
        assert asked == [("db.example.test", 27017)]
        assert link.command("admin", {"ping": 1}) == {"ok": 1.0}
        link.close()
        candidates.pop()
        with pytest.raises(AutoReconnect, match=r"db\.example\.test:27017: .*refused"):
            connect(("db.example.test", 27017), LinkOptions())


def test_hostname_that_does_not_resolve() -> None:
    with pytest.raises(AutoReconnect, match=r"no-such-host\.invalid:27017: "):
        connect("no-such-host.invalid:27017", LinkOptions(connect_timeout=1))


def test_connect_timeout() -> None:
    # A listener whose backlog is full leaves new connections unanswered.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        fillers = []
        try:
            for _ in range(8):
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(address)
                fillers.append(filler)
            started = time.monotonic()
            with pytest.raises((NetworkTimeout, AutoReconnect)) as caught:
                Link.open(address, LinkOptions(connect_timeout=0.2))
            assert time.monotonic() - started < 2
            if isinstance(caught.value, NetworkTimeout):
                assert "connectTimeoutMS: 200" in str(caught.value)
        finally:
            for filler in fillers:
                filler.close()


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"socket_timeout": -1}, "socket_timeout"),
        ({"socket_timeout": True}, "socket_timeout"),
        ({"ssl_context": object()}, "ssl_context"),
        ({"server_hostname": 5}, "server_hostname"),
        ({"app_name": "x" * 200}, "appName"),
        ({"compressors": "zlib"}, "one string"),
        ({"zlib_compression_level": 10}, "zlibCompressionLevel"),
        ({"credentials": ("app", "pw")}, "credentials"),
        ({"load_balanced": "yes"}, "load_balanced"),
    ],
)
def test_bad_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LinkOptions(**options)


def test_bad_call_timeout_sends_nothing() -> None:
    with serving() as server:
        link = connect(server.address, LinkOptions())
        with pytest.raises(ConfigurationError, match="timeout"):
            link.command("admin", {"ping": 1}, timeout=0)
        assert not link.broken
        link.close()
    assert server.names() == ["isMaster"]


def test_options_repr_hides_the_password() -> None:
    options = LinkOptions(credentials=Credentials("app", PASSWORD))
    assert "app" in repr(options)
    assert PASSWORD not in repr(options)
