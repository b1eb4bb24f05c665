"""The Server Monitoring spec's streaming and polling protocols, the RTT monitor and
serverMonitoringMode, against scripted fake servers (tests/fake_server.py's
:class:`AwaitableHello`) for exact sequences.

Heartbeat frequencies are long (60 s) wherever a test waits for a streamed reply: a
client that polled, or slept between checks, would learn nothing within the test's
timeout, so each assertion on what arrived is also one on how it arrived. Tests
assert on events, requests and counts, not on elapsed time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE

from greenpool import Client
from greenpool.client.topology.checker import LinkChecker
from greenpool.client.topology.monitor import Monitor, streaming_enabled
from greenpool.client.topology.roundtrips import RoundTrips
from greenpool.client.topology.server import Server
from greenpool.wire.handshake import faas_platforms
from greenpool.wire.link import LinkOptions
from tests.events import AllEvents
from tests.fake_server import (
    EXHAUST_ALLOWED,
    HANG_UP,
    AwaitableHello,
    FakeServer,
    Request,
)

pytestmark = pytest.mark.timeout(60)

LONG = 60_000  # heartbeatFrequencyMS: longer than any test runs
FAAS_VARIABLES = {
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
    "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
    "FUNCTIONS_WORKER_RUNTIME": "python",
    "K_SERVICE": "orders",
    "FUNCTION_NAME": "orders",
    "VERCEL": "1",
}
HEARTBEATS = (_m.ServerHeartbeatStartedEvent, _m.ServerHeartbeatSucceededEvent,
              _m.ServerHeartbeatFailedEvent)


@pytest.fixture(autouse=True)
def _not_on_a_function_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FAAS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    with gevent.Timeout(timeout, AssertionError("condition not met in time")):
        while not condition():
            gevent.sleep(0.01)


def uri(server: FakeServer, heartbeat: int = LONG, options: str = "") -> str:
    host, port = server.address
    extra = f"&{options}" if options else ""
    return (f"mongodb://{host}:{port}/?directConnection=true&heartbeatFrequencyMS={heartbeat}"
            f"{extra}")


def only_server(client: Client) -> Server:
    """The one server of a directly connected client's topology."""
    (server,) = client.topology.servers.values()
    return server


def beats(events: AllEvents) -> list[str]:
    """The heartbeats so far: "started", "succeeded" or "failed", with
    " awaited" when the event says so."""
    names = {_m.ServerHeartbeatStartedEvent: "started",
             _m.ServerHeartbeatSucceededEvent: "succeeded",
             _m.ServerHeartbeatFailedEvent: "failed"}
    return [names[type(e)] + (" awaited" if e.awaited else "") for e in events.of(*HEARTBEATS)]


def counters(events: AllEvents) -> list[int]:
    """The topologyVersion counter of each successful heartbeat's reply."""
    return [e.reply.document["topologyVersion"]["counter"]
            for e in events.of(_m.ServerHeartbeatSucceededEvent)]


def hellos(server: FakeServer) -> list[Request]:
    return [r for r in server.requests if r.name in ("hello", "isMaster", "ismaster")]


def connections(server: FakeServer) -> list[int]:
    """The connections that sent a hello, in order of their first."""
    return list(dict.fromkeys(r.connection for r in hellos(server)))


@pytest.fixture
def streaming() -> Iterator[tuple[FakeServer, AwaitableHello]]:
    with FakeServer() as server:
        yield server, AwaitableHello(server).install()


# -- the streaming protocol -----------------------------------------------------------------


def test_each_streamed_reply_is_a_check_reported_at_once(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    events = AllEvents()
    with Client(uri(server), event_listeners=[events]) as client:
        events.wait_for(_m.ServerHeartbeatStartedEvent, 2)
        wait_for(lambda: len(hello.awaited) == 1)
        for changes in range(1, 4):
            hello.change()
            events.wait_for(_m.ServerHeartbeatSucceededEvent, 1 + changes)
        events.wait_for(_m.ServerHeartbeatStartedEvent, 5)
        assert beats(events) == ["started", "succeeded",
                                 *["started awaited", "succeeded awaited"] * 3,
                                 "started awaited"]
        assert counters(events) == [0, 1, 2, 3]
        assert only_server(client).description.topology_version["counter"] == 3
    # One awaitable hello carried the whole stream, on the monitor's first connection.
    (request,) = hello.awaited
    assert request.flags & EXHAUST_ALLOWED
    assert request.name == "hello"  # the handshake's reply said helloOk
    assert request.command["topologyVersion"] == {"processId": hello.process_id, "counter": 0}
    assert request.command["maxAwaitTimeMS"] == LONG
    assert request.command["helloOk"] is True
    assert request.connection == connections(server)[0]


@pytest.mark.parametrize("stream_length", [1, 2])
def test_a_reply_without_more_to_come_is_followed_by_another_awaitable_hello(
        stream_length: int) -> None:
    with FakeServer() as server:
        hello = AwaitableHello(server, stream_length=stream_length).install()
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]):
            wait_for(lambda: len(hello.awaited) == 1)
            for changes in range(1, 5):
                hello.change()
                events.wait_for(_m.ServerHeartbeatSucceededEvent, 1 + changes)
            wait_for(lambda: len(hello.awaited) == 1 + 4 // stream_length)
            assert counters(events) == [0, 1, 2, 3, 4]
            assert set(beats(events)[2:]) == {"started awaited", "succeeded awaited"}
        # Each new awaitable hello sends back the last reply's topologyVersion.
        sent = [r.command["topologyVersion"]["counter"] for r in hello.awaited]
        assert sent == list(range(0, 5, stream_length))
        assert all(r.flags & EXHAUST_ALLOWED for r in hello.awaited)
        assert len({r.connection for r in hello.awaited}) == 1


def test_a_command_error_mid_stream_closes_the_connection_and_fails_the_check(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    events = AllEvents()
    with Client(uri(server), event_listeners=[events]) as client:
        wait_for(lambda: len(hello.awaited) == 1)
        first = hello.awaited[0].connection
        hello.interrupt({"ok": 0.0, "code": 91, "codeName": "ShutdownInProgress",
                         "errmsg": "the server is shutting down"})
        events.wait_for(_m.ServerHeartbeatFailedEvent)
        wait_for(lambda: first in server.hangups)
        assert beats(events) == ["started", "succeeded", "started awaited", "failed awaited"]
        assert only_server(client).description.server_type == SERVER_TYPE.Unknown
        assert events.of(_m.PoolClearedEvent)
        # Not a network error: the next check waits to be requested (selection
        # asks), on a new connection, whose first check is its handshake.
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        wait_for(lambda: len(hello.awaited) == 2)
        assert beats(events)[4:6] == ["started", "succeeded"]
        assert hello.awaited[1].connection not in (first, *server.hangups)


def test_a_hang_up_mid_stream_is_retried_at_once_on_a_new_connection(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    events = AllEvents()
    with Client(uri(server), event_listeners=[events]):
        wait_for(lambda: len(hello.awaited) == 1)
        hello.interrupt(HANG_UP)
        # A network error on a known server: the next check follows at once
        # (no request from anyone, and heartbeatFrequencyMS is a minute).
        wait_for(lambda: len(hello.awaited) == 2)
        events.wait_for(_m.ServerHeartbeatStartedEvent, 4)
        assert beats(events) == ["started", "succeeded", "started awaited", "failed awaited",
                                 "started", "succeeded", "started awaited"]
        failed = events.of(_m.ServerHeartbeatFailedEvent)[0]
        assert isinstance(failed.reply, AutoReconnect)
        assert hello.awaited[1].connection != hello.awaited[0].connection


def test_a_new_primary_is_learned_from_the_next_streamed_reply() -> None:
    """The benefit: the server's new state (a secondary elected primary) comes
    with the reply the server pushes, on the request already open."""
    with FakeServer(hello={"setName": "rs0", "isWritablePrimary": False,
                           "secondary": True}) as server:
        host, port = server.address
        member = f"{host}:{port}"
        server.hello["hosts"] = [member]
        hello = AwaitableHello(server).install()
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]) as client:
            wait_for(lambda: len(hello.awaited) == 1)
            assert only_server(client).description.server_type == SERVER_TYPE.RSSecondary
            sent_before = len(hellos(server))
            events.clear()
            hello.change(isWritablePrimary=True, secondary=False, primary=member)
            changed = events.wait_for(_m.ServerDescriptionChangedEvent)[0]
            assert changed.previous_description.server_type == SERVER_TYPE.RSSecondary
            assert changed.new_description.server_type == SERVER_TYPE.RSPrimary
            # Learned from one streamed reply: nothing was sent for it.
            assert events.names(*HEARTBEATS, _m.ServerDescriptionChangedEvent)[:2] == [
                "ServerHeartbeatSucceededEvent", "ServerDescriptionChangedEvent"]
            assert events.of(_m.ServerHeartbeatSucceededEvent)[0].awaited
            assert len(hellos(server)) == sent_before
            assert only_server(client).description.server_type == SERVER_TYPE.RSPrimary


def test_a_server_that_answers_awaitable_hellos_at_once_cannot_make_the_monitor_spin() -> None:
    """A topologyVersion in every hello, but no waiting (as no 4.4+ server
    answers): the awaited checks come at most every minHeartbeatFrequencyMS."""
    with FakeServer(hello={"topologyVersion": {"processId": ObjectId(),
                                               "counter": Int64(0)}}) as server:
        events = AllEvents()
        with Client(uri(server), event_listeners=[events]):
            events.wait_for(_m.ServerHeartbeatSucceededEvent, 2)
            gevent.sleep(1.0)  # two more checks at most; a spinning monitor makes thousands
            assert len(events.of(_m.ServerHeartbeatSucceededEvent)) <= 2 + 3
            assert set(beats(events)[2:]) == {"started awaited", "succeeded awaited"}


# -- the polling protocol -------------------------------------------------------------------


def test_a_server_without_a_topology_version_is_polled() -> None:
    with FakeServer() as server:
        events = AllEvents()
        with Client(uri(server, heartbeat=500), event_listeners=[events]) as client:
            events.wait_for(_m.ServerHeartbeatSucceededEvent, 3)
            assert set(beats(events)) == {"started", "succeeded"}
            wait_for(lambda: client.min_round_trip > 0)  # polled hellos are samples
        checks = hellos(server)
        assert all("topologyVersion" not in r.command and "maxAwaitTimeMS" not in r.command
                   and not r.flags & EXHAUST_ALLOWED for r in checks)
        assert [r.name for r in checks[1:]] == ["hello"] * (len(checks) - 1)
        assert len(connections(server)) == 1  # no RTT connection while polling


def test_server_monitoring_mode_poll_polls_a_server_that_could_stream(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    events = AllEvents()
    with Client(uri(server, heartbeat=500, options="serverMonitoringMode=poll"),
                event_listeners=[events]):
        events.wait_for(_m.ServerHeartbeatSucceededEvent, 3)
        assert set(beats(events)) == {"started", "succeeded"}
    assert hello.awaited == []
    assert len(connections(server)) == 1


@pytest.mark.parametrize("variable", sorted(FAAS_VARIABLES))
def test_auto_polls_on_a_function_platform(
        monkeypatch: pytest.MonkeyPatch, variable: str,
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    monkeypatch.setenv(variable, FAAS_VARIABLES[variable])
    events = AllEvents()
    with Client(uri(server, heartbeat=500), event_listeners=[events]):
        events.wait_for(_m.ServerHeartbeatSucceededEvent, 2)
        assert set(beats(events)) == {"started", "succeeded"}
    assert hello.awaited == []


@pytest.mark.parametrize(("mode", "environment", "streams"), [
    ("auto", {}, True),
    ("auto", {"AWS_EXECUTION_ENV": "AWS_ECS_FARGATE"}, True),  # AWS, but not Lambda
    ("auto", {"VERCEL": ""}, True),  # empty: not set
    ("stream", {"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001"}, True),
    ("poll", {}, False),
])
def test_when_auto_and_stream_stream(
        monkeypatch: pytest.MonkeyPatch, mode: str, environment: dict[str, str],
        streams: bool) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert streaming_enabled(mode) is streams


def test_faas_platforms_follow_the_handshake_rules() -> None:
    assert faas_platforms({}) == ()
    assert faas_platforms({"AWS_EXECUTION_ENV": "AWS_Lambda_java17"}) == ("aws.lambda",)
    assert faas_platforms({"AWS_EXECUTION_ENV": "EC2"}) == ()
    assert faas_platforms({"FUNCTIONS_WORKER_RUNTIME": "node", "VERCEL": "1"}) == (
        "azure.func", "vercel")
    assert faas_platforms({"K_SERVICE": "", "FUNCTION_NAME": "f"}) == ("gcp.func",)


def test_a_bad_monitoring_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="serverMonitoringMode must be one of auto, stream, "
                                         "poll, not 'push'"):
        streaming_enabled("push")


# -- the monitor alone, with an owner that records ----------------------------------------


class Owner:
    """A MonitorOwner that keeps the last description and records the rest."""

    def __init__(self, address: Any, frequency: float) -> None:
        self.address = address
        self.heartbeat_frequency = frequency
        self.server = ServerDescription(address)
        self.events: list[Any] = []
        self.failures: list[Exception] = []

    def publish(self, method: str, event: object, **ids: Any) -> None:
        self.events.append(event)

    def check_succeeded(self, description: ServerDescription) -> None:
        self.server = description

    def check_failed(self, error: Exception) -> None:
        self.failures.append(error)
        self.server = ServerDescription(self.address, error=error)

    def beats(self) -> list[str]:
        recorder = AllEvents()
        recorder.events = self.events
        return beats(recorder)


class Samples(RoundTrips):
    """RoundTrips that also keeps every sample."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[float] = []

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)
        super().add(seconds)


def monitor_of(server: FakeServer, frequency: float, mode: str = "stream",
               ) -> tuple[Monitor, Owner, Samples]:
    owner = Owner(server.address, frequency)
    samples = Samples()
    options = LinkOptions(connect_timeout=10, socket_timeout=10)
    monitor = Monitor(owner, lambda: LinkChecker(server.address, options), mode=mode,
                      round_trips=samples)
    return monitor, owner, samples


def rtt_requests(server: FakeServer, hello: AwaitableHello) -> list[Request]:
    """The hellos of the connections that never streamed: the RTT monitor's."""
    streamed = {r.connection for r in hello.awaited} | set(connections(server)[:1])
    return [r for r in hellos(server) if r.connection not in streamed]


def test_the_rtt_monitor_samples_on_its_own_connection_and_publishes_nothing(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    monitor, owner, samples = monitor_of(server, frequency=LONG / 1000)
    monitor.start()
    try:
        # The RTT connection opens once the server streams; its handshake is no sample.
        wait_for(lambda: len(hello.awaited) == 1 and len(rtt_requests(server, hello)) == 1)
        (request,) = rtt_requests(server, hello)
        assert request.command.get("topologyVersion") is None  # a plain handshake
        for changes in range(1, 4):
            hello.change()
            wait_for(lambda: owner.server.topology_version["counter"] == changes)  # noqa: B023
        # Streamed replies are no samples, and in this first heartbeatFrequencyMS
        # (a minute) the monitor's handshake is the only one; nothing published
        # the RTT connection's handshake.
        (handshake,) = samples.samples
        assert owner.beats() == ["started", "succeeded",
                                 *["started awaited", "succeeded awaited"] * 3,
                                 "started awaited"]
        assert owner.server.round_trip_time == handshake
        assert owner.server.min_round_trip_time == 0  # one sample: no minimum yet
    finally:
        monitor.stop()
    rtt_connection = request.connection
    wait_for(lambda: rtt_connection in server.hangups)  # stopped with the monitor


def test_the_rtt_monitor_checks_every_heartbeat_and_survives_errors(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    monitor, owner, samples = monitor_of(server, frequency=0.5)
    refused: list[int] = []

    def rtt_hello(request: Request) -> Any:
        on_rtt = request in rtt_requests(server, hello)
        if on_rtt and request.name == "hello" and not refused:
            refused.append(request.connection)
            return HANG_UP
        return hello(request)

    server.handlers["hello"] = rtt_hello
    monitor.start()
    try:
        # The RTT connection's first hello (after its handshake) hangs up; the
        # next round opens another connection and goes on.
        wait_for(lambda: len(set(r.connection for r in rtt_requests(server, hello))) == 2)
        wait_for(lambda: len([r for r in rtt_requests(server, hello)
                              if r.connection != refused[0]]) >= 3)
        # The monitor's handshake, then a sample per RTT hello after each
        # connection's handshake (the one refused is none).
        wait_for(lambda: len(samples.samples) >= 2)
        assert owner.failures == []
        assert owner.server.is_server_type_known
        assert "failed" not in " ".join(owner.beats())
        assert all(r.command.get("topologyVersion") is None
                   for r in rtt_requests(server, hello))
    finally:
        monitor.stop()


def test_no_rtt_monitor_while_polling(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, _hello = streaming
    monitor, owner, samples = monitor_of(server, frequency=0.5, mode="poll")
    monitor.start()
    try:
        wait_for(lambda: owner.beats().count("succeeded") == 3)
        assert len(connections(server)) == 1
        assert len(samples.samples) >= 3  # every polled hello is a sample
    finally:
        monitor.stop()


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_check_ends_the_stream_at_once_and_reports_nothing(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    events = AllEvents()
    with Client(uri(server), event_listeners=[events]) as client:
        wait_for(lambda: len(hello.awaited) == 1)
        monitor = only_server(client).monitor
        assert monitor is not None and monitor.streaming
        monitor.cancel_check()
        wait_for(lambda: hello.awaited[0].connection in server.hangups)
        gevent.sleep(0.05)
        assert beats(events) == ["started", "succeeded", "started awaited"]
        monitor.request_check()  # the next check opens a new connection
        wait_for(lambda: len(hello.awaited) == 2)
        assert beats(events)[3:5] == ["started", "succeeded"]


def test_an_application_network_error_cancels_the_stream(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    failures = [HANG_UP]
    server.handlers["ping"] = lambda _r: failures.pop() if failures else {"ok": 1.0}
    events = AllEvents()
    with Client(uri(server), event_listeners=[events]) as client:
        wait_for(lambda: len(hello.awaited) == 1)
        with pytest.raises(AutoReconnect):
            client.command("admin", {"ping": 1}, retry=False)
        # The server is Unknown and its pool cleared; the monitoring connection
        # is closed at once, without a failed heartbeat.
        wait_for(lambda: hello.awaited[0].connection in server.hangups)
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        wait_for(lambda: len(hello.awaited) == 2)
        assert "failed" not in " ".join(beats(events))


def test_close_ends_the_stream_and_the_rtt_monitor_at_once(
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    server, hello = streaming
    client = Client(uri(server))
    wait_for(lambda: len(hello.awaited) == 1 and len(connections(server)) == 2)
    monitor = only_server(client).monitor
    assert monitor is not None
    greenlets = [monitor._greenlet, monitor._rtt._greenlet]
    client.close()
    wait_for(lambda: set(connections(server)) <= set(server.hangups))
    gevent.joinall(greenlets, timeout=10)
    assert all(g is not None and g.dead for g in greenlets)


def test_a_fork_while_streaming_never_reads_the_parents_stream(
        monkeypatch: pytest.MonkeyPatch,
        streaming: tuple[FakeServer, AwaitableHello]) -> None:
    """A fork without Python's at-fork hooks (as uWSGI forks), seen from the
    child: the reply that arrives on the inherited stream is left unread; the
    child checks on a connection of its own."""
    server, hello = streaming
    monitor, owner, _samples = monitor_of(server, frequency=LONG / 1000)
    monitor.start()
    try:
        wait_for(lambda: len(hello.awaited) == 1)
        wait_for(lambda: owner.beats() == ["started", "succeeded", "started awaited"])
        parent = os.getpid()
        monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # now the "child"
        hello.change()
        wait_for(lambda: owner.beats().count("succeeded") == 2)
        # The change came from the child's own handshake, not the parent's stream.
        assert owner.beats()[:5] == ["started", "succeeded", "started awaited", "started",
                                     "succeeded"]
        assert owner.failures == []
        assert owner.server.topology_version["counter"] == 1
        assert len(connections(server)) >= 2
    finally:
        monitor.stop()


# -- the round-trip times -----------------------------------------------------------------


def test_round_trips_average_and_minimum() -> None:
    trips = RoundTrips()
    assert (trips.average, trips.minimum) == (None, 0.0)
    trips.add(0.010)
    assert (trips.average, trips.minimum) == (0.010, 0.0)  # a minimum needs two samples
    trips.add(0.020)
    assert trips.average == pytest.approx(0.012) and trips.minimum == 0.010
    for _ in range(10):
        trips.add(0.030)
    assert trips.minimum == 0.030  # of the last ten only
    trips.reset()
    assert (trips.average, trips.minimum) == (None, 0.0)
