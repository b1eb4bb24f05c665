"""Torture: seeded random kills, clear() storms, a server killed under load,
listeners that raise or block. Every test is bounded and seeded.

* 10,000 GreenletExit / gevent.Timeout kills over a mock-connector pool (100,000 in
  the long run, ``python3 devtools/dev.py slow``),
  spread across the four places a greenlet can be: waiting for a checkout,
  establishing a connection, using it ("command"), checking it in (a
  listener yields there). Invariants after every burst; at the end every
  transport the connector opened is either in the pool or closed.
* a smaller storm of kills through a real Client against the test server;
* clear() storms (with and without interrupting in-use connections) while
  workers run, on the mock pool and on a real Client;
* the server SIGKILLed and restarted under load: nothing hangs, work resumes,
  and closing the Client leaves exactly the file descriptors it found;
* listeners that raise or block (a gevent sleep) on every kind of event
  while commands run and get killed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import time
from collections import Counter
from typing import Any

import gevent
import pytest
from pymongo import monitoring
from pymongo.errors import AutoReconnect, PyMongoError

from greenpool import Pool, PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from greenpool.client.api.client import Client
from greenpool.client.config.uri import parse_uri
from tests.mock import MockTransport
from tests.servers import ServerProcess, with_options

ADDRESS = ("torture.test", 27017)
EXPECTED = (PoolClearedError, PoolClosedError, WaitQueueTimeoutError, PyMongoError)
PHASES = ("checkout", "establish", "command", "checkin")


def open_sockets(port: int) -> set[str]:
    """This process's open TCP sockets to 127.0.0.1:``port`` ("socket:[inode]").

    Only that port: other tests' leftovers (a monitor reconnecting somewhere)
    must not count.
    """
    to_port = set()
    with open("/proc/self/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port:
                to_port.add(f"socket:[{fields[9]}]")
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (listdir's own descriptor)
        if target in to_port:
            found.add(target)
    return found


def assert_quiescent(pool: Pool[Any]) -> None:
    pool._check_invariants()
    stats = pool.stats()
    assert (stats.in_use, stats.pending, stats.waiting) == (0, 0, 0), stats


class Phases:
    """Where each worker greenlet is right now."""

    def __init__(self) -> None:
        self.where: dict[gevent.Greenlet, str] = {}

    def set(self, phase: str) -> None:
        self.where[gevent.getcurrent()] = phase  # type: ignore[index]

    def done(self) -> None:
        self.where.pop(gevent.getcurrent(), None)  # type: ignore[call-overload]


class CheckinYielder(monitoring.ConnectionPoolListener):
    """Yields to the hub on some checkins, so a kill can land inside checkin."""

    def __init__(self, rng: random.Random, phases: Phases) -> None:
        self.rng = rng
        self.phases = phases

    def _nothing(self, event: object) -> None:
        pass

    def connection_checked_in(self, event: object) -> None:
        if self.rng.random() < 0.5:
            gevent.sleep(0)

    pool_created = pool_ready = pool_cleared = pool_closed = _nothing
    connection_created = connection_ready = connection_closed = _nothing
    connection_check_out_started = connection_check_out_failed = _nothing
    connection_checked_out = _nothing


@pytest.mark.timeout(120)
def test_10k_random_kills_on_the_mock_pool() -> None:
    random_kills_on_the_mock_pool(10_000, per_phase=100)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_100k_random_kills_on_the_mock_pool() -> None:
    random_kills_on_the_mock_pool(100_000, per_phase=1000)


def random_kills_on_the_mock_pool(total: int, *, per_phase: int) -> None:
    """``total`` seeded kills over 40 workers, at least ``per_phase`` in each phase."""
    rng = random.Random(20261123)
    phases = Phases()
    opened: list[MockTransport] = []

    def connector(conn: Any) -> MockTransport:
        phases.set("establish")
        gevent.sleep(0)
        if rng.random() < 0.02:
            raise AutoReconnect("connection refused")
        transport = MockTransport(conn.id)
        opened.append(transport)
        return transport

    pool: Pool[MockTransport] = Pool(
        ADDRESS, {"maxPoolSize": 8, "maxConnecting": 2, "minPoolSize": 2,
                  "backgroundThreadIntervalMS": 5},
        connector=connector, listeners=[CheckinYielder(rng, phases)])
    pool.ready()

    def worker() -> None:
        try:
            while True:
                phases.set("checkout")
                try:
                    conn = pool.checkout(timeout=rng.choice((None, 0.002)))
                except EXPECTED:
                    gevent.sleep(0)
                    continue
                phases.set("command")
                try:
                    gevent.sleep(0)
                    if rng.random() < 0.2:  # a network error: the connection is discarded
                        conn.mark_errored(AutoReconnect("network error"))
                finally:
                    phases.set("checkin")
                    pool.checkin(conn)
        except gevent.Timeout:
            pass  # a kill with a Timeout: end quietly
        except Exception as error:
            unexpected.append(error)
        finally:
            phases.done()

    kills: Counter[str] = Counter()
    unexpected: list[Exception] = []
    workers = [gevent.spawn(worker) for _ in range(40)]
    while sum(kills.values()) < total:
        for _ in range(500):  # a burst
            gevent.sleep(0)
            for _ in range(10):
                slot = rng.randrange(len(workers))
                victim = workers[slot]
                phase = phases.where.get(victim)
                if phase is None:
                    continue  # not started yet
                kills[phase] += 1
                kill = gevent.GreenletExit if rng.random() < 0.5 else gevent.Timeout()
                victim.kill(kill, block=False)
                workers[slot] = gevent.spawn(worker)
            pool._check_invariants()
            if rng.random() < 0.01:
                pool.clear(interrupt_in_use_connections=rng.random() < 0.5)
                pool.ready()
        gevent.killall(workers, timeout=10)
        assert all(w.dead for w in workers)
        gevent.sleep(0.005)  # background fills (minPoolSize) finish
        assert_quiescent(pool)
        workers = [gevent.spawn(worker) for _ in range(40)]
    gevent.killall(workers, timeout=10)
    gevent.sleep(0.02)  # background fills finish
    assert_quiescent(pool)
    # Every transport ever opened is idle in the pool or closed: none leaked.
    live = [t for t in opened if not t.closed]
    assert len(live) == pool.stats().total == pool.stats().available
    with pool.checkout(timeout=5) as conn:
        assert conn.transport is not None and not conn.transport.closed
    pool.close()
    assert all(t.closed for t in opened)
    assert unexpected == []
    assert sum(kills.values()) >= total
    for phase in PHASES:
        assert kills[phase] >= per_phase, f"too few kills while {phase}: {kills}"
    print(f"\nkills by phase: {dict(kills)}; connections opened: {len(opened)}")


@pytest.mark.timeout(60)
def test_clear_storm_on_the_mock_pool() -> None:
    rng = random.Random(7)
    pool: Pool[MockTransport] = Pool(
        ADDRESS, {"maxPoolSize": 5, "maxConnecting": 2},
        connector=lambda conn: MockTransport(conn.id))
    pool.ready()
    served = Counter[str]()

    def worker() -> None:
        while True:
            try:
                with pool.checkout(timeout=0.5):
                    gevent.sleep(rng.choice((0, 0.0005)))
                served["ok"] += 1
            except (PoolClearedError, WaitQueueTimeoutError):
                served["cleared"] += 1
                gevent.sleep(0.0005)

    workers = [gevent.spawn(worker) for _ in range(100)]
    for _ in range(2000):
        gevent.sleep(rng.choice((0, 0.0002)))
        pool.clear(interrupt_in_use_connections=rng.random() < 0.5)
        pool._check_invariants()
        if rng.random() < 0.8:
            pool.ready()
        pool._check_invariants()
    pool.ready()
    gevent.sleep(0.05)
    gevent.killall(workers, timeout=10)
    assert_quiescent(pool)
    assert served["ok"] > 1000 and served["cleared"] > 100, served
    assert pool.generation >= 2000
    pool.close()


@pytest.mark.timeout(60)
def test_random_kills_and_clears_through_a_client(mongodb_uri: str) -> None:
    rng = random.Random(11)
    done = Counter[str]()
    port = parse_uri(mongodb_uri).hosts[0][1]
    before = open_sockets(port)  # other tests' clients of the shared server
    with Client(with_options(mongodb_uri, maxPoolSize=5, appName="torture-kills")) as client:

        def worker() -> None:
            try:
                while True:
                    try:
                        client.command("admin", {"ping": 1})
                        done["ok"] += 1
                    except EXPECTED as error:
                        done[type(error).__name__] += 1
                        gevent.sleep(0.001)
            except gevent.Timeout:
                pass

        kills = 0
        for burst in range(20):
            workers = [gevent.spawn(worker) for _ in range(40)]
            for _ in range(100):
                gevent.sleep(rng.choice((0, 0.0002, 0.001)))
                slot = rng.randrange(len(workers))
                kill = gevent.GreenletExit if rng.random() < 0.5 else gevent.Timeout()
                workers[slot].kill(kill, block=False)
                workers[slot] = gevent.spawn(worker)
                kills += 1
                if burst % 2 and rng.random() < 0.05:
                    client.pool.clear(interrupt_in_use_connections=rng.random() < 0.5)
                    gevent.sleep(0.001)
                    client.pool.ready()  # as the monitor's next successful check would
                client.pool._check_invariants()
            gevent.killall(workers, timeout=10)
            assert all(w.dead for w in workers)
            assert_quiescent(client.pool)
        assert kills == 2000 and done["ok"] > 1000, done
        assert client.command("admin", {"ping": 1})["ok"] == 1
        assert client.stats().total <= 5
    # Closing the Client closed every socket it opened under the kills.
    assert open_sockets(port) - before == set()


@pytest.mark.timeout(90)
def test_server_killed_and_restarted_under_load() -> None:
    with ServerProcess() as server:
        gevent.sleep(0.05)
        # Earlier tests' leftovers may hold sockets to a server that had this port.
        before = open_sockets(server.port)
        outcomes = Counter[str]()
        client = Client(with_options(server.uri, appName="torture-restart",
                                     maxPoolSize=10, serverSelectionTimeoutMS=2000,
                                     heartbeatFrequencyMS=500, connectTimeoutMS=1000,
                                     socketTimeoutMS=2000))
        stop = False

        def worker() -> None:
            while not stop:
                try:
                    client.command("admin", {"ping": 1})
                    outcomes["ok"] += 1
                except PyMongoError:
                    outcomes["error"] += 1
                    gevent.sleep(0.01)

        try:
            workers = [gevent.spawn(worker) for _ in range(50)]
            for _ in range(2):
                gevent.sleep(0.3)
                ok_before = outcomes["ok"]
                assert ok_before > 0
                server.kill()
                gevent.sleep(0.3)
                server.restart()
                # Work resumes after the restart, within a bound.
                with gevent.Timeout(15):
                    while outcomes["ok"] < ok_before + 500:
                        gevent.sleep(0.01)
            stop = True
            finished = gevent.joinall(workers, timeout=15)
            assert len(finished) == len(workers), "workers hung"
            assert outcomes["error"] > 0, outcomes  # the kills were felt
            assert_quiescent(client.pool)
            assert client.stats().total <= 10
        finally:
            client.close()
        gevent.sleep(0.1)
        # The server sees no connection of this Client any more (it would
        # keep a leaked one open).
        ours = connections_of(server, "torture-restart")
        assert ours == set(), f"the Client left connections open from ports {ours}"
        # And this process holds no socket to the server that it did not
        # hold before. PyMongo clients (ServerProcess's readiness probe at
        # restart, the observer above) close their monitor sockets a moment
        # after close(): give them that moment.
        deadline = time.monotonic() + 5
        while (leaked := open_sockets(server.port) - before) and time.monotonic() < deadline:
            gc.collect()
            gevent.sleep(0.05)
        assert leaked == set(), f"the Client leaked {len(leaked)} sockets"


def connections_of(server: ServerProcess, app_name: str) -> set[str]:
    """Client host:port of the server's open connections with this appName."""
    with server.client() as observer:
        ops = observer.admin.command("currentOp")["inprog"]
    return {op["client"] for op in ops
            if (op.get("clientMetadata") or {}).get("application", {}).get("name") == app_name}


class Nasty(monitoring.CommandListener, monitoring.ConnectionPoolListener):
    """Raises on some events and blocks (a gevent sleep) on others."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.raised = 0
        self.blocked = 0

    def _any(self, event: object) -> None:
        roll = self.rng.random()
        if roll < 0.05:
            self.raised += 1
            raise RuntimeError(f"listener failure on {type(event).__name__}")
        if roll < 0.15:
            self.blocked += 1
            gevent.sleep(self.rng.choice((0, 0.001, 0.003)))

    started = succeeded = failed = _any
    pool_created = pool_ready = pool_cleared = pool_closed = _any
    connection_created = connection_ready = connection_closed = _any
    connection_check_out_started = connection_check_out_failed = _any
    connection_checked_out = connection_checked_in = _any


@pytest.mark.timeout(60)
def test_listeners_that_raise_or_block(mongodb_uri: str,
                                       caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(3)
    nasty = Nasty(rng)
    caplog.set_level("CRITICAL", logger="greenpool")  # thousands of logged listener errors
    results = Counter[str]()
    with Client(with_options(mongodb_uri, maxPoolSize=4), event_listeners=[nasty]) as client:

        def worker(n: int) -> None:
            for _ in range(n):
                try:
                    assert client.command("admin", {"ping": 1})["ok"] == 1
                    results["ok"] += 1
                except EXPECTED as error:
                    results[type(error).__name__] += 1

        def quiet_worker(n: int) -> None:
            with contextlib.suppress(gevent.Timeout):  # killed with a Timeout
                worker(n)

        greenlets = [gevent.spawn(quiet_worker, 50) for _ in range(40)]
        # Kill a few in the middle, wherever they are (maybe inside a listener).
        gevent.sleep(0.05)
        for greenlet in rng.sample(greenlets, 10):
            greenlet.kill(gevent.Timeout() if rng.random() < 0.5 else gevent.GreenletExit,
                          block=False)
        gevent.joinall(greenlets, timeout=30)
        assert all(g.dead for g in greenlets)
        assert_quiescent(client.pool)
        assert client.command("admin", {"ping": 1})["ok"] == 1
    # A listener's exception never fails a command: only killed greenlets fell short.
    assert set(results) == {"ok"}, results
    assert results["ok"] >= 30 * 50
    assert nasty.raised > 100 and nasty.blocked > 100

