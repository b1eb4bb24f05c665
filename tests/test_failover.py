"""greenpool.Client when the server goes away and comes back: server selection's loop,
the monitor's requested checks, SDAM's judgement of "not primary" errors, and retries.

Against a real SecantusDB that is stopped and started again, or stepped down, behind the
plain TCP proxy of tests/lb_proxy.py where connections are reset; and against the scripted
server of tests/fake_server.py for what SecantusDB does not do as mongod does (it does
not announce its return to a waiting monitor, and its "not primary" errors carry no
RetryableWriteError label). The longer fleet run is ``python3 devtools/dev.py faults``
(benchmarks/bench_faults.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect, NotPrimaryError, ServerSelectionTimeoutError

from greenpool import Client
from greenpool.client.topology.monitor import MIN_HEARTBEAT_FREQUENCY
from tests.events import AllEvents
from tests.fake_server import FakeServer, Request
from tests.lb_proxy import LBCluster, LBProxy
from tests.servers import ServerProcess, with_options

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A one-node replica set of this module's own: tests stop it and step it down."""
    with ServerProcess(replica_set=True) as process:
        yield process


def wait_until(condition: Any, timeout: float) -> None:
    """Wait until ``condition()`` holds, looking every 10 ms; past ``timeout`` seconds (a
    guard against a hang, not a bound on the time taken) AssertionError."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not so after {timeout} s"
        gevent.sleep(0.01)


def warm(client: Client, count: int) -> None:
    """Open ``count`` connections, so that as many commands can be in flight at once."""
    client.topology.select()
    connections = [client.pool.checkout() for _ in range(count)]
    for conn in connections:
        client.pool.checkin(conn)
    assert client.stats().total == count


# -- server selection's loop ---------------------------------------------------------------


def test_a_command_started_before_the_server_is_up_runs_when_it_is(
        server: ServerProcess) -> None:
    """The reduced case: nothing listens yet; the ping waits in selection, which asks
    for a check every round, and goes through at the first check after the server
    answers (not after heartbeatFrequencyMS, nor at the selection timeout)."""
    server.stop()
    uri = with_options(server.uri, directConnection="true", serverSelectionTimeoutMS=8000)
    events = AllEvents()
    with Client(uri, event_listeners=[events]) as client:
        ping = gevent.spawn(client.command, "admin", {"ping": 1})
        gevent.sleep(0.7)
        assert not ping.ready()
        server.start()  # returns once the server answers hello
        up = time.monotonic()
        ping.join(10)
        done = time.monotonic()
        assert ping.successful(), ping.exception
        # At the next check, every MIN_HEARTBEAT_FREQUENCY (0.5 s): far from both other
        # ends, heartbeatFrequencyMS (10 s) and the selection timeout (8 s); half the
        # shorter is a bound a busy machine meets.
        assert done - up < 4, f"{done - up:.2f} s after the server"
        # Each failed check was a round of selection's loop, spaced as the spec says.
        starts = [e for e in events.events if isinstance(e, _m.ServerHeartbeatStartedEvent)]
        assert len(starts) >= 3


class Heartbeats(_m.ServerHeartbeatListener):
    """When each check started and ended."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def started(self, event: Any) -> None:
        self.starts.append(time.monotonic())

    def succeeded(self, event: Any) -> None:
        self.ends.append(time.monotonic())

    failed = succeeded


def test_requested_checks_are_at_least_min_heartbeat_frequency_apart() -> None:
    """Selection asks for a check every round; the monitor runs them no closer together
    than minHeartbeatFrequencyMS, counted from the end of the previous check."""
    heartbeats = Heartbeats()
    # A port nothing listens on: every check fails at once.
    with FakeServer() as fake:
        host, port = fake.address
    uri = f"mongodb://{host}:{port}/?serverSelectionTimeoutMS=1200"
    with Client(uri, event_listeners=[heartbeats]) as client:
        waiters = [gevent.spawn(client.topology.select) for _ in range(20)]
        gevent.joinall(waiters, timeout=10)
    assert all(isinstance(w.exception, ServerSelectionTimeoutError) for w in waiters)
    # 1.2 s of 20 selections asking: a check about every 0.5 s, not 20 at once.
    assert 2 <= len(heartbeats.starts) <= 4, heartbeats.starts
    gaps = [start - end for end, start in zip(heartbeats.ends, heartbeats.starts[1:],
                                              strict=False)]
    assert min(gaps) >= MIN_HEARTBEAT_FREQUENCY - 0.02, gaps


def test_closing_ends_every_selection_at_once() -> None:
    """Selections waiting round after round end when the client closes, not at their
    timeout; also when the close comes after a failed check has woken them for their
    next round and before they ran (here: a close started from the check's event)."""

    class CloseAfterAFailedCheck(_m.ServerHeartbeatListener):
        started = succeeded = lambda self, event: None

        def failed(self, event: Any) -> None:
            if not closing:
                closing.append(gevent.spawn(client.close))  # runs before the waiters

    closing: list[gevent.Greenlet] = []
    with FakeServer() as fake:
        host, port = fake.address
    client = Client(f"mongodb://{host}:{port}/?serverSelectionTimeoutMS=10000",
                    event_listeners=[CloseAfterAFailedCheck()])
    started = time.monotonic()
    waiters = [gevent.spawn(client.topology.select) for _ in range(10)]
    gevent.joinall(waiters, timeout=5)
    # At the close, far from serverSelectionTimeoutMS (10 s): half of it is a bound a
    # busy machine meets.
    assert closing and time.monotonic() - started < 5
    assert all(isinstance(w.exception, ServerSelectionTimeoutError) for w in waiters)
    assert all("closed" in str(w.exception) for w in waiters)


# -- a stepdown ----------------------------------------------------------------------------


def test_a_stepdown_under_concurrent_writes_clears_nothing(server: ServerProcess) -> None:
    """The reduced case: 8 inserts in flight when the server steps down all fail with
    "not primary"; the first marks the server Unknown, the others carry the same
    topologyVersion and change nothing. No clear, no connection closed."""
    events = AllEvents()
    uri = with_options(server.uri, directConnection="true", maxPoolSize=8)
    with Client(uri, event_listeners=[events]) as client:
        warm(client, 8)
        client.command("admin", {"replSetStepDown": 1, "force": True})
        inserts = [gevent.spawn(client.command, "db", {"insert": "c", "documents": [{}]})
                   for _ in range(8)]
        gevent.joinall(inserts, timeout=10)
        assert all(isinstance(g.exception, NotPrimaryError) for g in inserts)
        unknown = [e for e in events.of(_m.ServerDescriptionChangedEvent)
                   if e.new_description.server_type_name == "Unknown"]
        assert len(unknown) == 1, "stale errors must not mark the server Unknown again"
        assert not events.of(_m.PoolClearedEvent)
        assert not events.of(_m.ConnectionClosedEvent)
        # Back in a second: the same connections serve the writes again.
        deadline = time.monotonic() + 5
        while True:
            try:
                client.command("db", {"insert": "c", "documents": [{}]})
                break
            except NotPrimaryError:
                assert time.monotonic() < deadline, "the server never came back"
                gevent.sleep(0.1)
        assert client.stats().total == 8
        assert not events.of(_m.ConnectionClosedEvent)


# -- a restart behind a proxy --------------------------------------------------------------


def test_reads_come_back_the_moment_the_server_does(server: ServerProcess) -> None:
    """Every connection reset and new ones refused for a while, as in a restart, under
    20 greenlets reading: the reads in flight and those waiting for a connection are
    retried (each waits in selection, within serverSelectionTimeoutMS), so none
    surfaces an error; every reader reads again at the monitor's first good check after
    the server's return (within minHeartbeatFrequencyMS, half a second: selection asks for
    a check every round), before any later check, and the pool reopens at most
    maxPoolSize connections (plus the monitor's)."""

    class GoodChecks(_m.ServerHeartbeatListener):
        started = failed = lambda self, event: None

        def succeeded(self, event: Any) -> None:
            good_checks.append(time.monotonic())

    good_checks: list[float] = []
    with LBProxy([server.address], relay_only=True) as proxy:
        uri = with_options(proxy.uri, maxPoolSize=5, serverSelectionTimeoutMS=5000)
        with Client(uri, event_listeners=[GoodChecks()]) as client:
            client.command("db", {"insert": "r", "documents": [{"_id": 1}]})
            stop = False
            back = float("inf")
            errors: list[BaseException] = []
            first_read_after_back = [0.0] * 20

            def reader(index: int) -> None:
                while not stop:
                    try:
                        with client.find("db", "r", {"_id": 1}) as cursor:
                            list(cursor)
                    except AutoReconnect as error:
                        errors.append(error)
                        continue
                    now = time.monotonic()
                    if now > back and not first_read_after_back[index]:
                        first_read_after_back[index] = now

            readers = [gevent.spawn(reader, i) for i in range(20)]
            gevent.sleep(0.3)
            accepted_before = len(proxy.backends[0].accepted_at)
            proxy.set_mode(0, "refuse")
            proxy.kill_connections(0, reset=True)
            gevent.sleep(0.7)
            proxy.set_mode(0, "up")
            back = time.monotonic()
            wait_until(lambda: all(first_read_after_back), timeout=10)
            stop = True
            gevent.joinall(readers, timeout=10, raise_error=True)
            assert not errors, errors[:3]
            # Order, not seconds: after the first good check since the server came back
            # and before any later one (the next regular check is heartbeatFrequencyMS,
            # 10 s, away).
            checks_after = [t for t in good_checks if t > back]
            assert checks_after and min(first_read_after_back) > checks_after[0]
            assert len(checks_after) == 1 or max(first_read_after_back) < checks_after[1]
            reconnects = [t for t in proxy.backends[0].accepted_at[accepted_before:]
                          if t >= back]
            assert len(reconnects) <= 5 + 1, len(reconnects)


def test_load_balanced_commands_reach_a_service_as_soon_as_it_is_back(
        lb: LBCluster) -> None:
    """No monitor behind a load balancer: the first command after the services are back
    goes through at once."""
    with Client(lb.uri) as client:
        client.command("admin", {"ping": 1})
        for backend in range(2):
            lb.proxy.set_mode(backend, "refuse")
            lb.proxy.kill_connections(backend)
        with pytest.raises(AutoReconnect):
            client.command("admin", {"ping": 1})
        for backend in range(2):
            lb.proxy.set_mode(backend, "up")
        back = time.monotonic()
        assert client.command("admin", {"ping": 1})["ok"] == 1
        # At once, not after a wait for a check no monitor would make: that wait would
        # end only at serverSelectionTimeoutMS (30 s); a sixth of it is a bound a busy
        # machine meets.
        assert time.monotonic() - back < 5


# -- a scripted server: what mongod does that SecantusDB does not -----------------------


class SteppingServer:
    """A FakeServer scripted as a one-node replica set that steps down: its hello and
    its "not primary" errors carry a topologyVersion, the errors the RetryableWriteError
    label (as mongod 4.4+ sends them), and it answers inserts while primary."""

    def __init__(self) -> None:
        self.process = ObjectId()
        self.counter = 0
        self.primary = True
        self.inserts: list[dict[str, Any]] = []
        self.fake = FakeServer(hello=self._hello_fields(),
                               handlers={"insert": self._insert, "endSessions": self._ok})

    def _version(self) -> dict[str, Any]:
        return {"processId": self.process, "counter": Int64(self.counter)}

    def _hello_fields(self) -> dict[str, Any]:
        return {"setName": "rs", "isWritablePrimary": self.primary,
                "secondary": not self.primary, "logicalSessionTimeoutMinutes": 30,
                "topologyVersion": self._version()}

    def step(self, primary: bool) -> None:
        """Step down or up: a new topologyVersion, announced by hello from now on."""
        self.counter += 1
        self.primary = primary
        self.fake.hello.update(self._hello_fields())

    def _insert(self, request: Request) -> dict[str, Any]:
        self.inserts.append(request.command)
        if self.primary:
            return {"ok": 1.0, "n": 1}
        return {"ok": 0.0, "code": 10107, "codeName": "NotWritablePrimary",
                "errmsg": "not primary", "topologyVersion": self._version(),
                "errorLabels": ["RetryableWriteError"]}

    def _ok(self, request: Request) -> dict[str, Any]:
        return {"ok": 1.0}

    @property
    def uri(self) -> str:
        host, port = self.fake.address
        return f"mongodb://{host}:{port}/?directConnection=true"


@pytest.fixture
def stepping() -> Iterator[SteppingServer]:
    scripted = SteppingServer()
    with scripted.fake:
        yield scripted


def test_a_write_is_retried_with_its_transaction_id_after_a_labelled_stepdown(
        stepping: SteppingServer) -> None:
    """mongod labels "not primary" RetryableWriteError: the insert is retried once the
    monitor has seen the new primary, with the same lsid and txnNumber, and the pool
    is never cleared."""
    events = AllEvents()
    with Client(stepping.uri, event_listeners=[events]) as client:
        client.command("db", {"insert": "c", "documents": [{}]})
        stepping.step(primary=False)
        # The server is back (and says so) a moment after refusing the write.
        gevent.spawn_later(0.2, stepping.step, True)
        started = time.monotonic()
        assert client.command("db", {"insert": "c", "documents": [{}]})["n"] == 1
        # After the monitor's next quick check (every MIN_HEARTBEAT_FREQUENCY while an
        # operation waits), far from heartbeatFrequencyMS (10 s), the next regular one.
        assert time.monotonic() - started < 5
    first, refused, retried = stepping.inserts
    assert refused["lsid"] == retried["lsid"] and refused["txnNumber"] == retried["txnNumber"]
    assert refused["txnNumber"] == first["txnNumber"] + 1, "a new number per write"
    assert not events.of(_m.PoolClearedEvent)


def test_concurrent_not_primary_errors_with_one_topology_version_count_once(
        stepping: SteppingServer) -> None:
    events = AllEvents()
    with Client(with_options(stepping.uri, retryWrites="false", maxPoolSize=8),
                event_listeners=[events]) as client:
        warm(client, 8)
        stepping.step(primary=False)
        inserts = [gevent.spawn(client.command, "db", {"insert": "c", "documents": [{}]})
                   for _ in range(8)]
        gevent.joinall(inserts, timeout=10)
        assert all(isinstance(g.exception, NotPrimaryError) for g in inserts)
        assert all("txnNumber" not in insert for insert in stepping.inserts)
        unknown = [e for e in events.of(_m.ServerDescriptionChangedEvent)
                   if e.new_description.server_type_name == "Unknown"]
        assert len(unknown) == 1
        assert not events.of(_m.PoolClearedEvent)
        assert client.stats().total == 8
