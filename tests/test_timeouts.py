"""timeoutMS (the CSOT spec) in the Client: where the limit comes from, and
what it bounds: selection, the checkout wait, establishment, each round trip.

Timing assertions are generous (the machine is shared); the three measured
bounds of the timeouts docs come from ``test_measured_*``, which print what
they measured (run with ``-s``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket
from pymongo import monitoring as _m
from pymongo.errors import (
    ExecutionTimeout,
    InvalidOperation,
    NetworkTimeout,
    PyMongoError,
    ServerSelectionTimeoutError,
)

import greenpool
from greenpool import Client
from greenpool.client.operations.timeouts import Deadline, resolve
from greenpool.client.topology.roundtrips import MinRoundTrip
from greenpool.testing.embedded import free_port
from tests.events import AllEvents
from tests.failpoints import failpoint
from tests.fake_server import FakeServer, Request, block
from tests.servers import unique, with_options

# What timeoutMS promises is time, so these tests bound time: an operation must end
# within this factor of its limit (plus, for the short limits, a few tenths of a second).
# Every bound leaves at least 0.5 s past the limit: a loaded 2-core machine delays a
# timer by tens of milliseconds, and the bound is far from the next-longer limit in play.
SLACK = 2.0


def fail(app_name: str, commands: list[str], **data: Any) -> dict[str, Any]:
    return {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": commands, "appName": app_name, **data}}


def timed_out_after(operation: Callable[[], Any]) -> float:
    """Run ``operation``, which must fail with a timeout NetworkTimeout; the seconds it
    took."""
    began = time.monotonic()
    with pytest.raises(NetworkTimeout) as timed_out:
        operation()
    elapsed = time.monotonic() - began
    assert timed_out.value.timeout
    return elapsed


def started(events: AllEvents, name: str) -> list[dict[str, Any]]:
    return [e.command for e in events.of(_m.CommandStartedEvent) if e.command_name == name]


@pytest.fixture
def events() -> AllEvents:
    return AllEvents()


@pytest.fixture
def app_name() -> str:
    return unique("csot")


# -- where the limit comes from -------------------------------------------------------------


def test_scopes_nest_and_an_inner_scope_only_shortens() -> None:
    assert resolve(None, None) is None  # nothing set: the legacy timeouts
    client_default = resolve(None, 10.0)
    assert client_default is not None and 9 < client_default.remaining() <= 10
    with greenpool.timeout(1.0):
        outer = resolve(None, 10.0)  # the scope replaces the client's timeoutMS
        assert outer is not None and 0.5 < outer.remaining() <= 1.0
        with greenpool.timeout(5.0):
            inner = resolve(None, None)
            assert inner is not None and inner.remaining() <= 1.0  # cannot lengthen
            with greenpool.timeout(0.2):
                shortest = resolve(None, None)
                assert shortest is not None and shortest.remaining() <= 0.2
            call = resolve(60.0, None)  # a call's own timeout cannot lengthen it either
            assert call is not None and call.remaining() <= 1.0
        unlimited_call = resolve(0.0, None)
        assert unlimited_call is not None and unlimited_call.remaining() <= 1.0
    assert resolve(None, None) is None  # the scope is gone
    no_limit = resolve(0.0, 10.0)  # timeout=0: no limit, in place of the client's
    assert no_limit is not None and not no_limit.bounded


def test_a_scope_belongs_to_its_greenlet() -> None:
    with greenpool.timeout(1.0):
        assert resolve(None, None) is not None
        assert gevent.spawn(resolve, None, None).get(timeout=5) is None


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", True])
def test_a_bad_timeout_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")), greenpool.timeout(bad):
        pass


def test_a_bad_call_timeout_is_refused_before_any_io(bad: Any = -0.5) -> None:
    with FakeServer() as server:
        host, port = server.address
        with Client(f"mongodb://{host}:{port}/?directConnection=true") as client:
            with pytest.raises(ValueError, match=r"-0\.5"):
                client.command("admin", {"ping": 1}, timeout=bad)
            with pytest.raises(ValueError, match="'soon'"):
                client.find("db", "coll", timeout=10, timeout_mode="soon")
        assert "ping" not in server.names()


def test_min_round_trip_is_the_minimum_of_the_last_ten_after_two() -> None:
    rtt = MinRoundTrip()
    rtt.add(0.05)
    assert rtt.value == 0  # one sample is not enough (SDAM)
    for sample in (0.03, 0.04) + (0.2,) * 10:
        rtt.add(sample)
    assert rtt.value == 0.2  # the small ones fell out of the window of ten
    rtt.add(0.01)
    assert rtt.value == 0.01


def test_max_time_ms_is_the_time_left_minus_the_minimum_round_trip() -> None:
    deadline = Deadline.after(1.0)
    assert 850 <= deadline.max_time_ms(0.1) <= 900
    with pytest.raises(ExecutionTimeout) as exceeded:
        deadline.max_time_ms(5.0)
    assert exceeded.value.timeout and exceeded.value.code == 50


# -- a server that never answers (fake, in-process) -------------------------------------------


def test_measured_a_never_answering_server_against_timeout_ms_1000() -> None:
    """A server that accepts and does the handshake, then never answers: the
    command ends at timeoutMS with NetworkTimeout, having sent maxTimeMS, and
    its connection is discarded while the pool stays consistent."""
    with FakeServer(handlers={"ping": block(3600)}) as server:
        host, port = server.address
        uri = f"mongodb://{host}:{port}/?directConnection=true&timeoutMS=1000"
        with Client(uri) as client:
            client.topology.select()  # the monitor has seen the server
            elapsed = timed_out_after(lambda: client.command("admin", {"ping": 1}))
            print(f"\nnever-answering server, timeoutMS=1000: ended after {elapsed:.3f} s")
            assert 0.9 <= elapsed <= 1.0 * SLACK
            ping = next(r.command for r in server.requests if r.name == "ping")
            assert 0 < ping["maxTimeMS"] <= 1000
            stats = client.stats()
            assert (stats.in_use, stats.available, stats.total) == (0, 0, 0)


def test_a_per_call_timeout_replaces_the_clients_and_zero_means_no_limit() -> None:
    with FakeServer(handlers={"ping": block(0.5)}) as server:
        host, port = server.address
        uri = f"mongodb://{host}:{port}/?directConnection=true&timeoutMS=100"
        with Client(uri) as client:
            client.topology.select()
            assert client.command("admin", {"ping": 1}, timeout=0) == {"ok": 1.0}
            with pytest.raises(NetworkTimeout):
                client.command("admin", {"ping": 1})
            with greenpool.timeout(0.2), pytest.raises(NetworkTimeout):
                client.command("admin", {"ping": 1}, timeout=0)
    pings = [r.command for r in server.requests if r.name == "ping"]
    assert "maxTimeMS" not in pings[0]  # timeoutMS=0: nothing to tell the server
    assert 0 < pings[1]["maxTimeMS"] <= 100 and 0 < pings[2]["maxTimeMS"] <= 200


def test_timeout_ms_0_lifts_socket_timeout_ms() -> None:
    """timeoutMS set (even to 0) replaces the deprecated socketTimeoutMS."""
    with FakeServer(handlers={"ping": block(0.3)}) as server:
        host, port = server.address
        base = f"mongodb://{host}:{port}/?directConnection=true&socketTimeoutMS=100"
        with Client(base) as legacy, pytest.raises(NetworkTimeout):
            legacy.command("admin", {"ping": 1})
        with Client(base + "&timeoutMS=0") as client:
            assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
            assert client.command("admin", {"ping": 1}, timeout=0) == {"ok": 1.0}


def test_too_little_time_left_sends_nothing_and_keeps_the_connection() -> None:
    with FakeServer() as server:
        host, port = server.address
        with Client(f"mongodb://{host}:{port}/?directConnection=true") as client:
            client.command("admin", {"ping": 1})  # an idle connection to reuse
            (server_,) = client.topology.servers.values()
            server_.min_round_trip.reset()
            server_.min_round_trip.add(0.5)
            server_.min_round_trip.add(0.5)  # the server looks 500 ms away
            with pytest.raises(ExecutionTimeout) as exceeded:
                client.command("admin", {"ping": 2}, timeout=0.3)
            assert exceeded.value.timeout and exceeded.value.code == 50
            stats = client.stats()
            assert (stats.in_use, stats.available) == (0, 1)
    assert [r.command["ping"] for r in server.requests if r.name == "ping"] == [1]


def _silent_listener() -> tuple[Any, Iterator[None]]:
    """A TCP listener on 127.0.0.1 that accepts and never says a word."""
    listener = gsocket.socket()
    listener.bind(("127.0.0.1", free_port()))
    listener.listen(8)
    accepted: list[Any] = []

    def accept() -> None:
        while True:
            sock, _ = listener.accept()
            accepted.append(sock)

    acceptor = gevent.spawn(accept)

    def stop() -> Iterator[None]:
        yield
        acceptor.kill()
        for sock in accepted:
            sock.close()
        listener.close()

    return listener, stop()


def test_establishment_is_bounded_by_the_operations_time_left() -> None:
    """Behind a load balancer (no monitor), the handshake with a balancer
    that never answers ends at the operation's limit, not connectTimeoutMS."""
    listener, cleanup = _silent_listener()
    next(cleanup)
    try:
        port = listener.getsockname()[1]
        uri = f"mongodb://127.0.0.1:{port}/?loadBalanced=true&connectTimeoutMS=20000"
        events = AllEvents()
        with Client(uri, event_listeners=[events]) as client:
            elapsed = timed_out_after(lambda: client.command("admin", {"ping": 1}, timeout=0.3))
            assert 0.25 <= elapsed <= 0.3 * SLACK + 0.5
            failed = events.of(_m.ConnectionCheckOutFailedEvent)
            assert [e.reason for e in failed] == ["connectionError"]
            stats = client.stats()
            assert (stats.in_use, stats.pending, stats.total) == (0, 0, 0)
    finally:
        next(cleanup, None)


def test_server_selection_is_bounded_by_the_time_left() -> None:
    listener, cleanup = _silent_listener()
    next(cleanup)
    try:
        port = listener.getsockname()[1]
        uri = (f"mongodb://127.0.0.1:{port}/?directConnection=true&timeoutMS=300"
               f"&serverSelectionTimeoutMS=30000")
        with Client(uri) as client:
            began = time.monotonic()
            with pytest.raises(ServerSelectionTimeoutError) as timed_out:
                client.command("admin", {"ping": 1})
            assert timed_out.value.timeout
            assert time.monotonic() - began <= 0.3 * SLACK + 0.5
    finally:
        next(cleanup, None)


def test_a_server_side_max_time_ms_expiry_is_execution_timeout() -> None:
    """A server that honours maxTimeMS (the fake one does) answers code 50
    when it runs out: that is ExecutionTimeout, a timeout error."""

    def slow(request: Request) -> Any:
        # Its clock runs out a little before the client's, which allows for
        # the way back (as the minimum round trip does for a real server).
        gevent.sleep(request.command["maxTimeMS"] / 1000 * 0.8)
        return {"ok": 0.0, "code": 50, "codeName": "MaxTimeMSExpired",
                "errmsg": "operation exceeded time limit"}

    with FakeServer(handlers={"find": slow}) as server:
        host, port = server.address
        with Client(f"mongodb://{host}:{port}/?directConnection=true") as client:
            client.topology.select()
            began = time.monotonic()
            with pytest.raises(ExecutionTimeout) as exceeded:
                client.command("db", {"find": "coll"}, timeout=0.5)
            elapsed = time.monotonic() - began
            print(f"\nslow command, server-side maxTimeMS from timeout=0.5: "
                  f"ended after {elapsed:.3f} s")
            assert exceeded.value.timeout and exceeded.value.code == 50
            assert elapsed <= 0.5 * SLACK
            assert client.stats().available == 1  # the server answered: the link is fine


# -- against SecantusDB -----------------------------------------------------------------------


def test_measured_a_checkout_wait_against_timeout_ms_200(
        mongodb_uri: str, events: AllEvents) -> None:
    uri = with_options(mongodb_uri, maxPoolSize=1, timeoutMS=200)
    with Client(uri, event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        held = client.pool.checkout()  # the only connection
        try:
            began = time.monotonic()
            with pytest.raises(greenpool.WaitQueueTimeoutError) as timed_out:
                client.command("admin", {"ping": 1})
            elapsed = time.monotonic() - began
        finally:
            client.pool.checkin(held)
        print(f"\ncheckout wait, timeoutMS=200, the only connection held: "
              f"ended after {elapsed:.3f} s")
        assert timed_out.value.timeout
        assert 0.18 <= elapsed <= 0.2 * SLACK + 0.5
        failed = events.of(_m.ConnectionCheckOutFailedEvent)
        assert [e.reason for e in failed] == ["timeout"]
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}
        assert client.stats().in_use == 0


def test_timeout_ms_replaces_wait_queue_timeout_ms(mongodb_uri: str) -> None:
    # The CSOT spec: with timeoutMS set, the deprecated waitQueueTimeoutMS is
    # ignored, whether it is shorter or longer.
    uri = with_options(mongodb_uri, maxPoolSize=1, waitQueueTimeoutMS=100, timeoutMS=1500)
    with Client(uri) as client:
        client.command("admin", {"ping": 1})
        held = client.pool.checkout()  # the only connection
        try:
            began = time.monotonic()
            with pytest.raises(greenpool.WaitQueueTimeoutError):
                client.command("admin", {"ping": 1})
            shorter = time.monotonic() - began
            began = time.monotonic()
            with pytest.raises(greenpool.WaitQueueTimeoutError):
                client.command("admin", {"ping": 1}, timeout=0.05)
            longer = time.monotonic() - began
        finally:
            client.pool.checkin(held)
        assert 1.45 <= shorter <= 1.5 * SLACK, shorter
        # The call's 50 ms, far from timeoutMS's 1.5 s (half of it).
        assert longer < 0.75, longer
    # Without timeoutMS, waitQueueTimeoutMS bounds the wait.
    with Client(with_options(mongodb_uri, maxPoolSize=1, waitQueueTimeoutMS=100)) as client:
        client.command("admin", {"ping": 1})
        held = client.pool.checkout()
        try:
            began = time.monotonic()
            with pytest.raises(greenpool.WaitQueueTimeoutError):
                client.command("admin", {"ping": 1})
            assert time.monotonic() - began < 0.1 * SLACK + 0.5
        finally:
            client.pool.checkin(held)


def test_measured_a_slow_command_against_its_time_limit(
        mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    """A command the server holds for 3 s, under timeoutMS=500: maxTimeMS
    goes out, the round trip ends at the limit, the connection is discarded
    and the pool is not cleared (a timeout after the handshake)."""
    uri = with_options(mongodb_uri, appName=app_name, timeoutMS=500)
    with Client(uri, event_listeners=[events]) as client:
        client.command("admin", {"ping": 1})
        generation = client.stats().generation
        with failpoint(mongodb_uri, fail(app_name, ["ping"], blockConnection=True,
                                         blockTimeMS=3000)):
            elapsed = timed_out_after(lambda: client.command("admin", {"ping": 1}))
        print(f"\nslow command (blocked 3 s), timeoutMS=500: ended after {elapsed:.3f} s")
        assert 0.45 <= elapsed <= 0.5 * SLACK
        assert all(0 < c["maxTimeMS"] <= 500 for c in started(events, "ping"))
        stats = client.stats()
        assert stats.generation == generation and stats.in_use == 0
        assert client.command("admin", {"ping": 1}) == {"ok": 1.0}


def test_a_cursor_lifetime_bounds_every_get_more_without_max_time_ms(
        mongodb_uri: str, app_name: str, events: AllEvents) -> None:
    uri = with_options(mongodb_uri, appName=app_name)
    with Client(uri, event_listeners=[events]) as client:
        coll = unique("lifetime")
        client.command("db", {"insert": coll, "documents": [{"i": i} for i in range(6)]})
        cursor = client.find("db", coll, batch_size=2, timeout=0.4)
        assert [next(cursor)["i"], next(cursor)["i"]] == [0, 1]
        with failpoint(mongodb_uri, fail(app_name, ["getMore"], blockConnection=True,
                                         blockTimeMS=1000)), pytest.raises(NetworkTimeout):
            next(cursor)
        cursor.close()
        (find,) = started(events, "find")
        assert 0 < find["maxTimeMS"] <= 400
        assert all("maxTimeMS" not in c for c in started(events, "getMore"))
        # The timed-out getMore left the server cursor alive: close kills
        # it, with the limit afresh.
        (kill,) = started(events, "killCursors")
        assert 0 < kill["maxTimeMS"] <= 400


def test_iteration_mode_gives_each_next_the_limit_anew(
        mongodb_uri: str, events: AllEvents) -> None:
    with Client(mongodb_uri, event_listeners=[events]) as client:
        coll = unique("iteration")
        client.command("db", {"insert": coll, "documents": [{"i": i} for i in range(6)]})
        with client.find("db", coll, batch_size=2, timeout=0.3,
                         timeout_mode="iteration") as cursor:
            documents = []
            for document in cursor:
                documents.append(document["i"])
                gevent.sleep(0.2)  # the whole iteration outlasts the limit
        assert documents == list(range(6))
        assert "maxTimeMS" not in started(events, "find")[0]
        with pytest.raises(InvalidOperation, match="needs a time limit"):
            client.find("db", coll, timeout_mode="iteration")
        with pytest.raises(InvalidOperation, match=r"\$out"):
            client.cursor("db", {"aggregate": coll, "pipeline": [{"$out": "x"}],
                                 "cursor": {}}, timeout=1, timeout_mode="iteration")


def test_buffered_documents_come_back_after_the_time_is_up(mongodb_uri: str) -> None:
    with Client(mongodb_uri) as client:
        coll = unique("buffered")
        client.command("db", {"insert": coll, "documents": [{"i": i} for i in range(4)]})
        cursor = client.find("db", coll, batch_size=2, timeout=0.2)
        gevent.sleep(0.3)
        assert [next(cursor)["i"], next(cursor)["i"]] == [0, 1]
        with pytest.raises(ExecutionTimeout):
            next(cursor)  # a getMore is needed now: no time left for it
        cursor.close()


def test_with_transaction_is_bounded_and_refuses_a_timeout_inside(
        replset_uri: str, events: AllEvents) -> None:
    app_name = unique("txn")
    uri = with_options(replset_uri, directConnection="true", appName=app_name, timeoutMS=500)
    with Client(uri, event_listeners=[events]) as client:
        coll = unique("txn")
        client.command("test", {"create": coll})
        with client.start_session() as session:

            def override(s: greenpool.Session) -> None:
                client.command("test", {"insert": coll, "documents": [{}]}, session=s,
                               timeout=0.1)

            with pytest.raises(InvalidOperation, match="with_transaction"):
                session.with_transaction(override)

            def insert_twice(s: greenpool.Session) -> None:
                client.command("test", {"insert": coll, "documents": [{"_id": 1}]}, session=s)
                client.command("test", {"insert": coll, "documents": [{"_id": 2}]}, session=s)

            events.clear()
            with failpoint(replset_uri, {**fail(app_name, ["insert"], blockConnection=True,
                                                blockTimeMS=300),
                                         "mode": {"times": 2}}):
                elapsed = timed_out_after(lambda: session.with_transaction(insert_twice))
        assert elapsed <= 0.5 * SLACK + 0.5
        inserts = started(events, "insert")
        assert len(inserts) == 2 and all(0 < c["maxTimeMS"] <= 500 for c in inserts)
        (abort,) = started(events, "abortTransaction")
        assert 0 < abort["maxTimeMS"] <= 500  # refreshed for the abort


# -- kill safety ------------------------------------------------------------------------------


def test_timeouts_and_kills_together_leave_the_pool_consistent() -> None:
    """Greenlets run bounded commands (some time out in the wait, some in the
    round trip, some while establishing) and are killed by their own
    gevent.Timeout at arbitrary points: afterwards nothing is in use, pending
    or waiting, no scope leaked, and the pool still works."""
    import random

    rng = random.Random(11)

    def jittery(request: Request) -> Any:
        gevent.sleep(rng.random() * 0.03)
        return {"ok": 1.0}

    with FakeServer(handlers={"ping": jittery}) as server:
        host, port = server.address
        uri = f"mongodb://{host}:{port}/?directConnection=true&maxPoolSize=3&timeoutMS=25"
        outcomes: list[str] = []
        with Client(uri) as client:
            client.topology.select()

            def worker(seed: int) -> None:
                local = random.Random(seed)
                for _ in range(15):
                    try:
                        with gevent.Timeout(local.random() * 0.04):
                            if local.random() < 0.2:  # now and then, a fresh connection
                                client.pool.clear()
                                client.pool.ready()
                            with greenpool.timeout(local.choice([None, 0.01, 0.05])):
                                client.command("admin", {"ping": 1})
                        outcomes.append("ok")
                    except gevent.Timeout:
                        outcomes.append("killed")
                    except PyMongoError as error:
                        outcomes.append("timeout" if error.timeout else type(error).__name__)
                    assert resolve(None, None) is None  # no scope outlives its block

            workers = [gevent.spawn(worker, seed) for seed in range(30)]
            gevent.joinall(workers, timeout=60, raise_error=True)
            assert all(w.dead for w in workers)
            stats = client.stats()
            assert (stats.in_use, stats.pending, stats.waiting) == (0, 0, 0), stats
            assert stats.total <= 3
            assert client.command("admin", {"ping": 1}, timeout=5) == {"ok": 1.0}
        kinds = set(outcomes)
        # Successes depend on the machine's load; kills and timeouts do not.
        assert {"killed", "timeout"} <= kinds <= {"ok", "killed", "timeout",
                                                  "PoolClearedError"}, kinds
