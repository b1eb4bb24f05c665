"""Hostile servers and bad input: one clear error and one discarded connection.

A fake server (tests/fake_server.py) answers the handshake and then
misbehaves; each test asserts the error's type and first line, a generous
time bound, that the connection was discarded, that no descriptor or greenlet
is left behind, and that the same Client serves again once the server
behaves.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import struct
import time
import tracemalloc
import warnings
from collections.abc import Iterator
from typing import Any

import bson
import gevent
import gevent.threadpool
import greenlet
import pytest
from bson.binary import Binary
from gevent.pywsgi import WSGIServer
from pymongo import monitoring as _m
from pymongo.errors import (
    AutoReconnect,
    InvalidName,
    InvalidOperation,
    NetworkTimeout,
    ServerSelectionTimeoutError,
)

from greenpool import Client, Pool
from greenpool._compiled import compiled
from greenpool.cli.check import EXIT_CODES
from greenpool.cli.check import main as check_main
from greenpool.client.config.uri import parse_uri, redact_uri, uri_secrets
from greenpool.client.topology import checker as checker_module
from greenpool.client.topology import monitor as monitor_module
from greenpool.client.topology import topology as topology_module
from greenpool.errors import AuthenticationError, ConfigurationError, NotMongoDBError
from greenpool.wire import auth as auth_module
from greenpool.wire.auth import MAX_ITERATIONS, Credentials
from greenpool.wire.connector import connect, establishment_deadline, handshake_completed
from greenpool.wire.link import Link, LinkOptions
from tests.events import AllEvents
from tests.fake_scram import FakeScramServer
from tests.fake_server import (
    MORE_TO_COME,
    OP_MSG,
    AwaitableHello,
    FakeServer,
    Raw,
    Request,
    block,
    op_msg,
)

pytestmark = pytest.mark.timeout(60)

PASSWORD = "Quokka-Lantern-9920-unlikely"
# Generous: the machine is shared; a hang is what these bounds catch.
BOUND = 10.0


def wait_for(condition: Any, timeout: float = BOUND) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        gevent.sleep(0.02)


# gevent's threadpool worker greenlet class (private; its repr says ThreadPoolWorker).
_THREADPOOL_WORKER: type = gevent.threadpool._WorkerGreenlet


def _descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _live_greenlets() -> set[int]:
    hub = gevent.get_hub()
    current = greenlet.getcurrent()
    # Not the threadpool's workers (another thread's, idle ones live on for
    # a while), nor any thread's main greenlet (no parent).
    return {
        id(g) for g in gc.get_objects()
        # type(), not isinstance(): a dead weak proxy among the objects
        # raises ReferenceError when asked for its class.
        if issubclass(type(g), greenlet.greenlet) and g and g is not hub and g is not current
        and g.parent is not None and not issubclass(type(g), _THREADPOOL_WORKER)
    }


@contextlib.contextmanager
def no_leaks() -> Iterator[None]:
    """Every descriptor and greenlet opened inside is gone soon after."""
    gevent.sleep(0.05)
    descriptors, greenlets = _descriptors(), _live_greenlets()
    yield
    wait_for(lambda: _descriptors() <= descriptors)
    wait_for(lambda: _live_greenlets() <= greenlets)


def uri(server: FakeServer, options: str = "") -> str:
    host, port = server.address
    extra = f"&{options}" if options else ""
    return f"mongodb://{host}:{port}/?directConnection=true&heartbeatFrequencyMS=500{extra}"


def where(server: FakeServer) -> str:
    host, port = server.address
    return f"{host}:{port}"


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def closed_reasons(events: AllEvents) -> list[str]:
    return [e.reason for e in events.of(_m.ConnectionClosedEvent)]


class Switch:
    """A handler that misbehaves (``hostile``) until told to behave."""

    def __init__(self, hostile: Any, good: Any = None) -> None:
        self.hostile_answer = hostile
        self.good = good if good is not None else (lambda _request: {"ok": 1.0})
        self.hostile = True

    def __call__(self, request: Request) -> Any:
        return self.hostile_answer(request) if self.hostile else self.good(request)


# -- 1. moreToCome on a plain command, and any error while a connection is in use -------------


def test_more_to_come_on_a_plain_reply_discards_the_connection() -> None:
    streamed = Switch(lambda r: Raw(op_msg({"ok": 1.0}, r.request_id, flags=MORE_TO_COME)))
    with FakeServer(handlers={"ping": streamed}) as server, no_leaks():
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            started = time.monotonic()
            with pytest.raises(AutoReconnect) as caught:
                client.command("admin", {"ping": 1})
            assert time.monotonic() - started < BOUND
            assert first_line(caught.value) == (
                f"{where(server)}: the server flagged its reply moreToCome (more replies "
                "follow) although the request did not allow exhaust")
            assert closed_reasons(events) == ["error"]
            assert client.stats().total == 0
            streamed.hostile = False
            for _ in range(3):
                assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            assert closed_reasons(events) == ["error"]
    pings = [r for r in server.requests if r.name == "ping"]
    assert len(pings) == 4
    # The connection that got the stream was closed, the next one serves.
    assert pings[0].connection != pings[1].connection == pings[3].connection
    assert pings[0].connection in server.hangups


def test_any_error_while_a_connection_is_in_use_closes_it_at_checkin() -> None:
    class Unencodable:
        pass

    with FakeServer() as server, no_leaks():
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            # Not a PyMongoError: bson cannot encode the command.
            with pytest.raises(Exception, match="cannot encode object") as caught:
                client.command("db", {"insert": "c", "documents": [{"x": Unencodable()}]})
            assert not isinstance(caught.value, AutoReconnect)
            assert closed_reasons(events) == ["error"]
            failed = events.of(_m.CommandFailedEvent)
            assert [e.command_name for e in failed] == ["insert"]
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            assert client.stats().total == 1


@pytest.mark.parametrize(("reply", "expected"), [
    ({"ok": 0.0, "errmsg": "x", "errorLabels": 5}, "errorLabels must be a list of strings, not 5"),
    ({"ok": 0.0, "errmsg": "x", "code": [1]}, "code must be an integer, not [1]"),
    ({"ok": 1.0, "writeConcernError": 5}, "writeConcernError must be a document, not 5"),
    ({"ok": 1.0, "writeConcernError": {"code": 64, "errInfo": "x"}},
     "writeConcernError.errInfo must be a document, not 'x'"),
], ids=["errorLabels", "code", "writeConcernError", "errInfo"])
def test_a_reply_with_malformed_error_fields_discards_the_connection(
        reply: dict[str, Any], expected: str) -> None:
    lying = Switch(lambda _request: reply)
    with FakeServer(handlers={"ping": lying}) as server, no_leaks():
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            with pytest.raises(AutoReconnect) as caught:
                client.command("admin", {"ping": 1})
            assert first_line(caught.value) == f"{where(server)}: malformed reply: {expected}"
            assert closed_reasons(events) == ["error"]
            lying.hostile = False
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}


def test_a_cursor_reply_with_a_bad_id_is_a_pymongo_error() -> None:
    lying = Switch(lambda _request: {"ok": 1.0, "cursor": {"id": "abc", "firstBatch": []}},
                   good=lambda _request: {"ok": 1.0, "cursor": {"id": 0, "firstBatch": [{}]}})
    with FakeServer(handlers={"find": lying}) as server, no_leaks(), Client(uri(server)) as client:
        with pytest.raises(InvalidOperation) as caught:
            client.find("db", "c", {})
        assert first_line(caught.value) == (
            "the server's reply has a cursor id that is not an integer: 'abc'")
        lying.hostile = False
        assert list(client.find("db", "c", {})) == [{}]


# -- 2. the monitor never dies ----------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("me", 5, 'me must be a "host:port" string, not 5'),
    ("lastWrite", 5, "lastWrite must be a document, not 5"),
    ("hosts", ["db1:27017x"], "hosts must be a list of \"host:port\" strings, not ['db1:27017x']"),
])
def test_a_hello_pymongo_cannot_parse_is_a_failed_check(
        field: str, value: Any, expected: str) -> None:
    with FakeServer() as server, no_leaks():
        events = AllEvents()
        with Client(uri(server, "serverSelectionTimeoutMS=1500"),
                    event_listeners=[events]) as client:
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            server.hello[field] = value  # a misconfigured member, from the next check on
            (known,) = client.topology.servers.values()
            assert known.monitor is not None
            known.monitor.request_check()
            wait_for(lambda: not known.description.is_server_type_known)
            started = time.monotonic()
            with pytest.raises(ServerSelectionTimeoutError) as caught:
                client.command("admin", {"ping": 1})
            assert time.monotonic() - started < BOUND
            assert first_line(caught.value).startswith(
                f"no server suitable for a primary read or a write within 1.5 s; topology "
                f"Single: {where(server)} Unknown (last error: AutoReconnect(")
            # The error is shown as its repr: quotes in it come escaped.
            assert f"{where(server)}: invalid hello reply: {expected}" in first_line(
                caught.value).encode().decode("unicode_escape")
            failed = events.of(_m.ServerHeartbeatFailedEvent)
            assert failed and isinstance(failed[-1].reply, AutoReconnect)
            assert client.stats().total == 0  # the pool was cleared
            del server.hello[field]
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            monitor = known.monitor
            assert monitor is not None and monitor._greenlet is not None
            assert not monitor._greenlet.dead


def test_a_hello_pymongo_cannot_parse_at_the_first_check_too() -> None:
    with (FakeServer(hello={"hosts": ["db1:27017x"]}) as server, no_leaks(),
          Client(uri(server, "serverSelectionTimeoutMS=1000")) as client):
        with pytest.raises(ServerSelectionTimeoutError, match="invalid hello reply: hosts"):
            client.command("admin", {"ping": 1})
        server.hello.clear()
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}


def _one_shot(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Exception]:
    """Make ``owner.name`` raise once, then behave; the list holds what it raised."""
    original = getattr(owner, name)
    fired: list[Exception] = []

    def injected(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(RuntimeError(f"injected into {name}"))
            raise fired[0]
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, injected)
    return fired


# Each step of a check: where it happens, and whether the failure is the
# check's (reported as a failed check with that error) or the monitor loop's.
_CHECK_STEPS = [
    (monitor_module, "Hello", True),
    (monitor_module, "ServerDescription", True),
    (topology_module.Topology, "publish", True),
    (topology_module.Topology, "check_succeeded", True),
    (topology_module.Topology, "_apply", True),
    (Pool, "ready", True),
    (checker_module.LinkChecker, "check", True),
    (checker_module.LinkChecker, "__init__", True),
    (monitor_module.Monitor, "_check_once", False),
]


@pytest.mark.skipif("greenpool.client.topology.topology" in compiled(), reason=(
    "patches greenpool.client.topology.topology's globals, which its compiled code bound at "
    "import"))
@pytest.mark.parametrize(("owner", "name", "reported"), _CHECK_STEPS,
                         ids=[name for _, name, _ in _CHECK_STEPS])
def test_an_exception_at_any_step_of_a_check_never_kills_the_monitor(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        owner: Any, name: str, reported: bool) -> None:
    with FakeServer() as server, no_leaks():
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            (server_,) = client.topology.servers.values()
            monitor = server_.monitor
            assert monitor is not None
            # The fault is injected process-wide: another client's monitor would take it.
            others = [each for each in list(monitor_module._monitors)
                      if each is not monitor and not each._stopped]
            assert not others, f"a monitor another test left running: {others}"
            if name == "__init__":
                monitor.cancel_check()  # the next check makes a new checker
            fired = _one_shot(monkeypatch, owner, name)
            monitor.request_check()
            wait_for(lambda: fired)
            if reported:
                # Reported as the check's failure: the error itself, or (for
                # a reply PyMongo cannot parse) a ProtocolError caused by it.
                wait_for(lambda: any(fired[0] in (e.reply, e.reply.__cause__)
                                     for e in events.of(_m.ServerHeartbeatFailedEvent)))
            else:
                wait_for(lambda: "the monitor of" in caplog.text)
            # The next check succeeds again, and the Client serves.
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            assert monitor._greenlet is not None and not monitor._greenlet.dead


# Each step of a streamed check (an awaitable hello per reply: stream_length=1).
_STREAM_STEPS = [
    (checker_module.LinkChecker, "await_reply"),
    (Link, "start_stream"),
    (Link, "wait_readable"),
    (Link, "receive"),
    (monitor_module, "Hello"),
    (topology_module.Topology, "check_succeeded"),
]


@pytest.mark.skipif({"greenpool.client.topology.topology", "greenpool.wire.link"} & set(compiled()),
                    reason="patches classes and globals its compiled code bound at import")
@pytest.mark.parametrize(("owner", "name"), _STREAM_STEPS,
                         ids=[name for _, name in _STREAM_STEPS])
def test_an_exception_at_any_step_of_a_streamed_check_never_kills_the_monitor(
        monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    with FakeServer() as server, no_leaks():
        hello = AwaitableHello(server, stream_length=1).install()
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            (server_,) = client.topology.servers.values()
            monitor = server_.monitor
            assert monitor is not None
            wait_for(lambda: len(hello.awaited) == 1)
            others = [each for each in list(monitor_module._monitors)
                      if each is not monitor and not each._stopped]
            assert not others, f"a monitor another test left running: {others}"
            fired = _one_shot(monkeypatch, owner, name)
            while not fired:  # each change ends one awaited check and starts the next
                hello.change()
                wait_for(lambda: fired or len(hello.awaited) == hello.counter + 1)
            wait_for(lambda: any(fired[0] in (e.reply, e.reply.__cause__)
                                 for e in events.of(_m.ServerHeartbeatFailedEvent)))
            assert events.of(_m.ServerHeartbeatFailedEvent)[-1].awaited
            # The monitor streams again, on a new connection, and the Client serves.
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            wait_for(lambda: monitor.streaming)
            assert monitor._greenlet is not None and not monitor._greenlet.dead


@pytest.mark.skipif("greenpool.client.topology.topology" in compiled(), reason=(
    "patches greenpool.client.topology.topology's globals, which its compiled code bound at "
    "import"))
@pytest.mark.parametrize("name", ["check_failed", "cancel_check"])
def test_a_failure_while_reporting_a_failed_check_never_kills_the_monitor(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str) -> None:
    owner = topology_module.Topology if name == "check_failed" else monitor_module.Monitor
    with FakeServer() as server, no_leaks(), Client(uri(server)) as client:
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        (server_,) = client.topology.servers.values()
        monitor = server_.monitor
        assert monitor is not None
        check = _one_shot(monkeypatch, checker_module.LinkChecker, "check")
        report = _one_shot(monkeypatch, owner, name)
        monitor.request_check()
        wait_for(lambda: check and report)
        wait_for(lambda: "the monitor of" in caplog.text)
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        assert monitor._greenlet is not None and not monitor._greenlet.dead


# -- 3. hello fields validated once, at the handshake -------------------------------------------


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("connectionId", "abc", "connectionId must be an integer, not 'abc'"),
    ("connectionId", 1.5, "connectionId must be an integer, not 1.5"),
    ("maxWireVersion", "21", "maxWireVersion must be an integer, not '21'"),
    ("maxMessageSizeBytes", 0, "maxMessageSizeBytes must be a positive integer, not 0"),
    ("compression", "zstd", "compression must be a list of strings, not 'zstd'"),
    ("saslSupportedMechs", 5, "saslSupportedMechs must be a list of strings, not 5"),
    ("logicalSessionTimeoutMinutes", "30",
     "logicalSessionTimeoutMinutes must be an integer, not '30'"),
    ("topologyVersion", 5, "topologyVersion must be a document, not 5"),
    ("serviceId", "x", "serviceId must be an ObjectId, not 'x'"),
])
def test_hello_fields_are_checked_at_the_handshake(field: str, value: Any, expected: str) -> None:
    with FakeServer(hello={field: value}) as server, no_leaks():
        started = time.monotonic()
        with pytest.raises(AutoReconnect) as caught:
            connect(server.address, LinkOptions())
        assert time.monotonic() - started < BOUND
        assert first_line(caught.value) == f"{where(server)}: invalid hello reply: {expected}"
        assert not handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])  # discarded


def test_a_bad_connection_id_fails_one_checkout_not_every_command() -> None:
    with (FakeServer(hello={"connectionId": "abc"}) as server, no_leaks(),
          Client(uri(server, "serverSelectionTimeoutMS=1000")) as client):
        with pytest.raises(ServerSelectionTimeoutError) as caught:
            client.command("admin", {"ping": 1})
        assert "invalid hello reply: connectionId must be an integer, not 'abc'" in str(
            caught.value)
        server.hello.clear()
        for _ in range(3):
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        assert client.pool.stats().total == 1


# -- 8. the whole establishment is bounded by connectTimeoutMS ---------------------------------


def test_a_server_that_never_answers_the_hello_costs_connect_timeout() -> None:
    with FakeServer(handlers={"isMaster": block(60)}) as server, no_leaks():
        started = time.monotonic()
        with pytest.raises(NetworkTimeout) as caught:
            connect(server.address, LinkOptions(connect_timeout=0.5, socket_timeout=None))
        took = time.monotonic() - started
        assert 0.4 < took < BOUND
        assert first_line(caught.value) == (
            f"{where(server)}: connection establishment timed out (connectTimeoutMS: 500)")
        assert not handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])


def test_a_deadline_given_to_connect_overrides_connect_timeout() -> None:
    with FakeServer(handlers={"isMaster": block(60)}) as server, no_leaks():
        started = time.monotonic()
        with pytest.raises(NetworkTimeout) as caught:
            connect(server.address, LinkOptions(connect_timeout=60),
                    deadline=time.monotonic() + 0.3)
        assert time.monotonic() - started < BOUND
        assert first_line(caught.value) == (
            f"{where(server)}: connection establishment timed out (the operation's deadline)")
        assert establishment_deadline(LinkOptions(connect_timeout=None)) is None
        assert establishment_deadline(LinkOptions(), 12.5) == 12.5


def test_a_server_that_never_answers_sasl_start_costs_connect_timeout() -> None:
    scram = FakeScramServer(speculative=False)
    scram.create_user("app", PASSWORD)
    stalled = Switch(block(60), good=lambda request: scram.run_command(request.command))
    with FakeServer(scram=scram, handlers={"saslStart": stalled}) as server, no_leaks():
        options = LinkOptions(connect_timeout=0.5, credentials=Credentials("app", PASSWORD))
        started = time.monotonic()
        with pytest.raises(NetworkTimeout) as caught:
            connect(server.address, options)
        assert 0.4 < time.monotonic() - started < BOUND
        assert first_line(caught.value) == (
            f"{where(server)}: connection establishment timed out (connectTimeoutMS: 500)")
        assert handshake_completed(caught.value)
        wait_for(lambda: server.hangups == [1])
        # The same Client: its checkout fails in bounded time, then serves.
        client_uri = (f"mongodb://app:{PASSWORD}@{where(server)}/?directConnection=true"
                      "&connectTimeoutMS=500&heartbeatFrequencyMS=500")
        with Client(client_uri) as client:
            started = time.monotonic()
            with pytest.raises(NetworkTimeout, match="connection establishment timed out"):
                client.command("admin", {"ping": 1})
            assert time.monotonic() - started < BOUND
            stalled.hostile = False
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}


# -- 4. SCRAM: an iteration ceiling, key derivation off the hub ---------------------------------


@pytest.mark.parametrize("iterations", [str(MAX_ITERATIONS + 1), str(2**31 - 1), str(2**31),
                                        "9" * 5000], ids=["ceiling+1", "2**31-1", "2**31", "long"])
def test_scram_iteration_counts_above_the_ceiling_are_refused(iterations: str) -> None:
    scram = FakeScramServer(speculative=False)
    scram.create_user("app", PASSWORD)
    scram.users["app"]["SCRAM-SHA-256"].iterations = iterations  # type: ignore[assignment]
    options = LinkOptions(credentials=Credentials("app", PASSWORD))
    with FakeServer(scram=scram) as server, no_leaks():
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as caught:
            connect(server.address, options)
        assert time.monotonic() - started < BOUND
        shown = iterations if len(iterations) <= 20 else f"{iterations[:20]}..."
        assert first_line(caught.value) == (
            "SCRAM-SHA-256 authentication of user 'app' on 'admin' failed: the server asks for "
            f"{shown} iterations; at most 10000000 are allowed")
        assert server.names() == ["isMaster", "saslStart"]  # no proof sent
        wait_for(lambda: server.hangups == [1])


def _longest_stall(work: Any) -> tuple[float, float]:
    """Run ``work()``; return how long it took and the longest the hub went
    without running another greenlet meanwhile."""
    gaps = [0.0]

    def tick() -> None:
        last = time.perf_counter()
        while True:
            gevent.sleep(0.002)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = gevent.spawn(tick)
    gevent.sleep(0.01)
    started = time.perf_counter()
    try:
        work()
    finally:
        took = time.perf_counter() - started
        gevent.sleep(0.02)  # the ticker records the gap that ends now
        ticker.kill()
    return took, max(gaps)


def test_key_derivation_runs_off_the_hub_and_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    scram = FakeScramServer(speculative=False, iterations=1_000_000)
    scram.create_user("app", PASSWORD, ("SCRAM-SHA-256",))
    options = LinkOptions(credentials=Credentials("app", PASSWORD))
    derived = []
    real = auth_module._derive_keys
    monkeypatch.setattr(auth_module, "_derive_keys",
                        lambda *args: derived.append(args[3]) or real(*args))
    # For comparison: the derivation run on the hub stalls it throughout.
    on_hub, on_hub_stall = _longest_stall(
        lambda: real("sha256", b"pw", b"salt-on-hub", 1_000_000))
    assert on_hub_stall > on_hub / 2
    with FakeServer(scram=scram) as server, no_leaks():
        took, stall = _longest_stall(lambda: connect(server.address, options).close())
        assert derived == [1_000_000]
        # Other greenlets ran throughout (generous: the machine is shared).
        assert stall < min(took, on_hub) / 3, (stall, took, on_hub)
        print(f"\n1,000,000 iterations: on the hub {on_hub:.3f} s, longest stall "
              f"{on_hub_stall * 1000:.1f} ms; off the hub {took:.3f} s, longest stall "
              f"{stall * 1000:.1f} ms")
        connect(server.address, options).close()
        assert derived == [1_000_000]  # the second connection used the cache
        assert scram.authenticated == "app"


# -- 6. database names are checked before anything is sent ---------------------------------------


@pytest.mark.parametrize(("name", "character"), [
    ("a\x00b", "\x00"), ("a b", " "), ("a.b", "."), ("a$b", "$"), ("a/b", "/"), ("a\\b", "\\"),
    ('a"b', '"'),
])
def test_bad_database_names_are_refused_before_anything_is_sent(name: str, character: str) -> None:
    with FakeServer() as server, no_leaks(), Client(uri(server)) as client:
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        sent = len(server.requests)
        for run in (lambda: client.command(name, {"insert": "c", "documents": [{"x": 1}]}),
                    lambda: client.find(name, "c", {}),
                    lambda: client.cursor(name, {"aggregate": "c", "pipeline": []})):
            with pytest.raises(InvalidName) as caught:
                run()
            assert first_line(caught.value) == (
                f"invalid database name {name!r}: database names cannot contain the "
                f"character {character!r}")
        assert len(server.requests) == sent
        assert client.stats().total == 1


def test_database_names_remembered_as_good_are_bounded_and_exact() -> None:
    # check_database_name remembers names that passed: a bounded set, and a
    # str subclass (which may compare equal to a good name) is checked afresh.
    from greenpool.wire import messages

    class Sneaky(str):  # equal to a good name, and with its hash
        def __eq__(self, other: object) -> bool:
            return other == "db1" or str.__eq__(self, other)

        def __hash__(self) -> int:
            return hash("db1")

    for number in range(messages._GOOD_DATABASE_NAMES_MAX + 50):
        messages.check_database_name(f"db{number}")
    assert len(messages._GOOD_DATABASE_NAMES) <= messages._GOOD_DATABASE_NAMES_MAX
    messages.check_database_name("db1")
    with pytest.raises(InvalidName, match=r"character '\.'"):
        messages.check_database_name(Sneaky("a.b"))
    messages.check_database_name(Sneaky("db1"))
    assert all(type(name) is str for name in messages._GOOD_DATABASE_NAMES)
    for bad in ("a.b", ""):
        with pytest.raises(InvalidName):
            messages.check_database_name(bad)


def test_empty_and_non_str_database_names_are_refused() -> None:
    with FakeServer() as server, Client(uri(server)) as client:
        with pytest.raises(InvalidName, match=r"^database name cannot be the empty string$"):
            client.command("", {"ping": 1})
        with pytest.raises(TypeError, match=r"^a database name must be a str, not 5$"):
            client.command(5, {"ping": 1})  # type: ignore[arg-type]
    assert "ping" not in server.names()


def test_external_stays_usable() -> None:
    with FakeServer() as server, Client(uri(server)) as client:
        assert client.command("$external", {"ping": 1}) == {"ok": 1.0}
    assert [r.db for r in server.requests if r.name == "ping"] == ["$external"]
    assert Credentials("app", PASSWORD, source="$external").source == "$external"
    with pytest.raises(ConfigurationError, match=r"^authSource: invalid database name 'a\.b'"):
        Credentials("app", PASSWORD, source="a.b")
    with pytest.raises(ConfigurationError, match=r"^authSource: invalid database name 'a b'"):
        Client("mongodb://app:pw@127.0.0.1:1/?authSource=a%20b")


# -- 9. minor: a missing password, a listener that is not MongoDB, one copy of each reply ----------


def test_a_large_reply_is_received_without_an_extra_copy() -> None:
    size = 8 * 1024 * 1024
    document = bson.encode({"ok": 1.0, "blob": Binary(b"x" * size)})
    body = struct.pack("<I", 0) + b"\x00" + document  # built once, before measuring

    def big(request: Request) -> Raw:
        header = struct.pack("<iiii", 16 + len(body), 7, request.request_id, OP_MSG)
        request.sock.sendall(header)
        request.sock.sendall(body)
        return Raw(b"")

    with FakeServer(handlers={"find": big}) as server:
        link = connect(server.address, LinkOptions())
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            reply = link.command("db", {"find": "c"})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        link.close()
    assert len(reply["blob"]) == size
    # The receive buffer and the decoded value, not a third copy of the
    # message (bytes(buffer)) nor a fourth (a slice of it for bson).
    assert peak - before < 2.5 * size, (peak - before) / size
    print(f"\npeak while receiving an 8 MiB reply: {(peak - before) / size:.2f} x its size")


@pytest.mark.parametrize("userinfo", ["app", "app:"])
def test_a_missing_password_says_a_password_is_required(userinfo: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Client(f"mongodb://{userinfo}@127.0.0.1:1/")
    assert first_line(caught.value) == (
        "a password is required: the connection string names the user 'app' but no password "
        "(mongodb://user:password@host/; SCRAM-SHA-256 and SCRAM-SHA-1 need one)")
    with pytest.raises(ConfigurationError, match="mechanism 'PLAIN' is not supported"):
        Client("mongodb://app:pw@127.0.0.1:1/?authMechanism=PLAIN")


def _http_app(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/html")])
    return [b"<!DOCTYPE html><html><body>a web page</body></html>"]


@contextlib.contextmanager
def http_server() -> Iterator[tuple[str, int]]:
    """An HTTP server on 127.0.0.1, a free port: something that is not MongoDB."""
    server = WSGIServer(("127.0.0.1", 0), _http_app, log=None, error_log=None)
    server.start()
    try:
        yield ("127.0.0.1", server.server_port)
    finally:
        server.stop(timeout=1)


def test_an_http_server_is_reported_as_not_mongodb(capsys: pytest.CaptureFixture[str]) -> None:
    with http_server() as (host, port), no_leaks():
        started = time.monotonic()
        with pytest.raises(AutoReconnect) as caught:
            connect((host, port), LinkOptions())
        assert time.monotonic() - started < BOUND
        assert first_line(caught.value).startswith(
            f"{host}:{port}: the server answered the handshake, but is not a MongoDB server "
            "(message length ")
        assert isinstance(caught.value.__cause__, NotMongoDBError)
        code = check_main([f"mongodb://{host}:{port}/", "--timeout", "2"])
    err = capsys.readouterr().err
    assert code == EXIT_CODES["not MongoDB"] == 7
    assert err.startswith(
        f"greenpool check: not MongoDB failure: {host}:{port}: the server answered the "
        "handshake, but is not a MongoDB server (message length "), err
    assert err.rstrip().endswith(
        "(check the port: another service (a web server?) listens there)"), err


# -- 7. check redacts every secret -------------------------------------------------------------


def _nothing_listens() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


# (connection string with {host}, the secrets as written, the URI line check prints)
_SECRETS = [
    ("mongodb://app:Sup3rS3cret/tailPart@{host}/", ["Sup3rS3cret", "tailPart"],
     "mongodb://app:***@{host}/"),
    ("mongodb://app:Qu3ryS3cret?tailPart@{host}/", ["Qu3ryS3cret", "tailPart"],
     "mongodb://app:***@{host}/"),
    ("mongodb://app:Wh0le%40S3cret%2F%3F@{host}/", ["Wh0le%40S3cret%2F%3F", "Wh0le@S3cret/?"],
     "mongodb://app:***@{host}/"),
    ("mongodb://app:At@Sign@S3cret@{host}/", ["At@Sign@S3cret", "Sign"],
     "mongodb://app:***@{host}/"),
    ("mongodb://{host}/?authMechanism=MONGODB-AWS&authMechanismProperties="
     "AWS_SESSION_TOKEN:FwoGZXIvYXdzEJr%2BT0ken%3D", ["FwoGZXIvYXdzEJr", "T0ken"],
     "mongodb://{host}/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:***"),
    ("mongodb://{host}/?tls=true&tlsCertificateKeyFilePassword=K3yP%26ss&w=1", ["K3yP"],
     "mongodb://{host}/?tls=true&tlsCertificateKeyFilePassword=***&w=1"),
]


@pytest.mark.parametrize(("template", "secrets", "shown"), _SECRETS,
                         ids=["slash", "question-mark", "escaped", "at-signs", "aws-token",
                              "key-password"])
def test_check_never_prints_a_secret(capsys: pytest.CaptureFixture[str], template: str,
                                     secrets: list[str], shown: str) -> None:
    host = _nothing_listens()
    code = check_main([template.format(host=host), "--timeout", "0.5"])
    out, err = capsys.readouterr()
    assert code != 0
    assert out.splitlines()[0] == f"URI: {shown.format(host=host)}"
    assert err.startswith("greenpool check: "), err
    for secret in secrets:
        assert secret not in out + err
    assert redact_uri(template.format(host=host)) == shown.format(host=host)
    assert all(secret in "".join(uri_secrets(template.format(host=host))) for secret in secrets)


# -- 5. connection strings parse in linear time ---------------------------------------------------


def _parse_timed(uri: str) -> tuple[float, list[warnings.WarningMessage], Any]:
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = parse_uri(uri)
    # UserWarnings only: a ResourceWarning of a socket an earlier test left to the
    # garbage collector may be caught meanwhile.
    mine = [w for w in caught if issubclass(w.category, UserWarning)]
    return time.perf_counter() - started, mine, settings


@pytest.mark.parametrize("make", [
    lambda n: "&".join(f"unknownOption{i}=1" for i in range(n)),
    lambda n: "&".join(f"xPassword{i}=hidden{i}" for i in range(n)),
    lambda n: "&".join("w=1" for _ in range(n)),
], ids=["unknown", "secret-looking", "repeated"])
def test_many_options_parse_in_linear_time(make: Any) -> None:
    small, _, _ = _parse_timed(f"mongodb://app:pw@h/?maxPoolSize=7&{make(2_000)}")
    large, caught, settings = _parse_timed(f"mongodb://app:pw@h/?maxPoolSize=7&{make(10_000)}")
    print(f"\n2,000 options: {small:.3f} s; 10,000 options: {large:.3f} s")
    # Generous (the machine is shared): well under a second on a quiet one, where a
    # parse quadratic in the options takes over 60 s for 2,000 unknown ones.
    assert large < 5.0
    assert settings.pool.max_pool_size == 7
    assert len(caught) <= 21
    for record in caught:
        assert "hidden" not in str(record.message)


def test_unknown_options_are_still_warned_about_one_by_one_then_summed_up() -> None:
    uri = "mongodb://h/?" + "&".join(f"unknownOption{i}={i}" for i in range(25)) + "&maxPolSize=3"
    _, caught, settings = _parse_timed(uri)
    messages = [str(record.message) for record in caught]
    assert messages[0] == ("connection string option unknownOption0='0' is not an option "
                           "greenpool knows, and is ignored")
    assert len(messages) == 21
    assert messages[-1] == "6 more unknown options in the connection string are ignored too"
    assert settings.pool.max_pool_size == 100
    _, caught, _ = _parse_timed("mongodb://h/?maxPolSize=3")
    [message] = [str(r.message) for r in caught]
    assert message == ("connection string option maxPolSize='3' is not an option greenpool "
                       "knows, and is ignored; did you mean maxPoolSize or minPoolSize?")
