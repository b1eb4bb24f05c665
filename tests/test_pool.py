"""Pool behaviour beyond the spec's test files."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import gevent
import gevent.event
import pytest
from bson.objectid import ObjectId
from pymongo import errors as pymongo_errors

from greenpool import (
    ConnectionState,
    Pool,
    PoolClearedError,
    PoolClosedError,
    PoolState,
    Purpose,
    WaitQueueTimeoutError,
)
from tests.cmap_runner import EVENT_TYPES, Recorder
from tests.listening import listened, overhear
from tests.mock import MockConnector
from tests.turns import assert_fair_turns, hub_turns_until, switches_during

ADDRESS = ("db.test", 27017)


# Every test twice: with a listener, and without one (the pool's fast paths).
pytestmark = pytest.mark.usefixtures("listening")


def make_pool(options: dict[str, Any] | None = None, connector: Any = None,
              ready: bool = True, **kwargs: Any) -> tuple[Pool[Any], Recorder]:
    """A pool and the recorder of its events: attached as a listener, or, in
    the run without listeners, overhearing (no checkout events then)."""
    recorder = Recorder()
    pool: Pool[Any] = Pool(ADDRESS, options or {}, connector=connector or MockConnector(),
                           listeners=[recorder] if listened() else [], **kwargs)
    if not listened():
        overhear(pool, recorder._record)
    if ready:
        pool.ready()
    return pool, recorder


def names(recorder: Recorder) -> list[str]:
    return [EVENT_TYPES[type(e)] for e in recorder.events]


def wait_until(predicate: Any, timeout: float = 5) -> None:
    with gevent.Timeout(timeout, AssertionError("condition not reached")):
        while not predicate():
            gevent.sleep(0.001)


# -- readiness and errors -------------------------------------------------------


def test_a_new_pool_is_paused_and_refuses_checkouts_retryably() -> None:
    pool, recorder = make_pool(ready=False)
    assert pool.state is PoolState.PAUSED
    with pytest.raises(PoolClearedError, match="paused") as raised:
        pool.checkout()
    assert isinstance(raised.value, pymongo_errors.AutoReconnect)
    assert raised.value.address == ADDRESS
    assert names(recorder)[-1] == "ConnectionCheckOutFailed"
    assert recorder.events[-1].reason == "connectionError"


def test_checkout_after_clear_cites_the_clearing_error() -> None:
    pool, _ = make_pool()
    cause = pymongo_errors.NetworkTimeout("monitor check timed out")
    pool.clear(error=cause)
    with pytest.raises(PoolClearedError) as raised:
        pool.checkout()
    assert str(raised.value) == (
        "Connection pool for db.test:27017 was cleared because another operation "
        "failed with: NetworkTimeout('monitor check timed out')"
    )
    assert raised.value.cause is cause


def test_closed_pool_refuses_and_never_reopens() -> None:
    pool, recorder = make_pool()
    pool.close()
    pool.ready()
    pool.clear()
    pool.close()
    assert pool.state is PoolState.CLOSED
    with pytest.raises(PoolClosedError, match=r"closed connection pool db\.test:27017"):
        pool.checkout()
    assert names(recorder).count("ConnectionPoolClosed") == 1
    assert "ConnectionPoolCleared" not in names(recorder)


def test_checkin_checks_ownership_and_state() -> None:
    pool, _ = make_pool()
    other, _ = make_pool()
    conn = pool.checkout()
    with pytest.raises(ValueError, match="another pool"):
        other.checkin(conn)
    pool.checkin(conn)
    with pytest.raises(ValueError, match="not checked out"):
        pool.checkin(conn)


def test_context_manager_checks_in() -> None:
    pool, _ = make_pool()
    with pool.checkout() as conn:
        assert conn.state is ConnectionState.IN_USE
    assert conn.state is ConnectionState.AVAILABLE
    assert pool.stats().available == 1


def test_bad_checkout_timeout_is_refused() -> None:
    pool, _ = make_pool()
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            pool.checkout(timeout=bad)


def test_listeners_must_be_pool_listeners() -> None:
    with pytest.raises(TypeError, match="ConnectionPoolListener"):
        Pool(ADDRESS, connector=MockConnector(), listeners=[object()])


# -- fairness and handoff -----------------------------------------------------------


def test_waiters_are_served_in_arrival_order() -> None:
    pool, _ = make_pool({"maxPoolSize": 1})
    held = pool.checkout()
    order: list[int] = []

    def waiter(n: int) -> None:
        with pool.checkout():
            order.append(n)
            gevent.sleep(0)

    greenlets = []
    for n in range(50):
        greenlets.append(gevent.spawn(waiter, n))
        gevent.sleep(0)  # each joins the queue before the next arrives
    pool.checkin(held)
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    assert order == list(range(50))


def test_greenlets_spawned_together_take_turns_when_nothing_blocks() -> None:
    # Connections that never block (a server that answers before the greenlet
    # waits): without fair turns the first greenlet took all its turns before
    # the others even started, since none of them had reached the queue yet.
    pool, _ = make_pool({"maxPoolSize": 2})
    first, second = pool.checkout(), pool.checkout()
    pool.checkin(first)
    pool.checkin(second)
    assert_fair_turns(pool)
    pool.close()


def test_a_newcomer_never_overtakes_a_waiter() -> None:
    pool, _ = make_pool({"maxPoolSize": 1})
    conn = pool.checkout()
    waiter = gevent.spawn(pool.checkout)
    gevent.sleep(0)
    pool.checkin(conn)  # handed to the waiter, which has not run yet
    assert pool.stats().available == 0
    with pytest.raises(WaitQueueTimeoutError):
        pool.checkout(timeout=0)  # a newcomer finds nothing to take
    assert waiter.get(timeout=5) is conn


def test_the_connection_of_a_killed_waiter_goes_to_the_next() -> None:
    pool, _ = make_pool({"maxPoolSize": 1})
    conn = pool.checkout()
    doomed = gevent.spawn(pool.checkout)
    patient = gevent.spawn(pool.checkout)
    gevent.sleep(0)
    # The kill is scheduled before the handoff's wake-up: it lands after the
    # connection was delivered to ``doomed``.
    gevent.get_hub().loop.run_callback(doomed.throw, gevent.GreenletExit())
    pool.checkin(conn)
    assert patient.get(timeout=5) is conn
    assert doomed.dead
    pool._check_invariants()


def test_a_pending_grant_of_a_killed_waiter_goes_to_the_next() -> None:
    doomed: Any = None
    gate = gevent.event.Event()  # not a timer: a loaded machine cannot reorder it

    def connector(conn: Any) -> Any:
        if conn.id == 1:
            gate.wait(5)
            # Scheduled before the grant's wake-up (which our return triggers):
            # ``doomed`` dies holding a pending connection it never used.
            gevent.get_hub().loop.run_callback(doomed.throw, gevent.GreenletExit())
        return MockConnector()(conn)

    pool, recorder = make_pool({"maxPoolSize": 2, "maxConnecting": 1}, connector=connector)
    first = gevent.spawn(pool.checkout)  # establishing: maxConnecting is full
    doomed = gevent.spawn(pool.checkout)
    patient = gevent.spawn(pool.checkout)
    wait_until(lambda: pool.stats().waiting == 2)
    gate.set()
    assert first.get(timeout=5).id == 1
    conn = patient.get(timeout=5)
    assert isinstance(doomed.value, gevent.GreenletExit), "the kill landed after the grant"
    assert conn.id == 2, "the pending connection is handed on, not recreated"
    assert names(recorder).count("ConnectionCreated") == 2
    pool._check_invariants()


# -- timeouts --------------------------------------------------------------------------


def test_per_call_timeout_and_the_error_details() -> None:
    pool, recorder = make_pool({"maxPoolSize": 1, "waitQueueTimeoutMS": 10_000})
    held = pool.checkout()
    started = time.monotonic()
    with pytest.raises(WaitQueueTimeoutError) as raised:
        pool.checkout(timeout=0.05)
    # Not before its 50 ms, and far from waitQueueTimeoutMS's 10 s, which would apply had
    # the call's timeout been ignored: half of that leaves a loaded machine 4.9 s.
    assert 0.04 < time.monotonic() - started < 5
    error = raised.value
    assert error.message == "Timed out while checking out a connection from connection pool"
    assert str(error).startswith(error.message + " db.test:27017 after ")
    assert "maxPoolSize: 1, in use: 1" in str(error)
    assert error.details["in_use"] == 1 and error.address == ADDRESS
    assert recorder.events[-1].reason == "timeout"
    pool.checkin(held)


def test_wait_queue_timeout_limits_the_wait() -> None:
    pool, _ = make_pool({"maxPoolSize": 1, "waitQueueTimeoutMS": 30})
    pool.checkout()
    started = time.monotonic()
    with pytest.raises(WaitQueueTimeoutError):
        pool.checkout(timeout=10)  # the shorter of the two applies
    assert time.monotonic() - started < 5  # far from the call's 10 s (half of it)


def test_load_balanced_timeout_message_counts_purposes() -> None:
    pool, _ = make_pool({"maxPoolSize": 3, "loadBalanced": True},
                        connector=MockConnector(service_ids=lambda conn: ObjectId()))
    pool.checkout().purpose = Purpose.CURSOR
    pool.checkout().purpose = Purpose.TRANSACTION
    pool.checkout()
    with pytest.raises(WaitQueueTimeoutError) as raised:
        pool.checkout(timeout=0.01)
    spec_message, *holders = str(raised.value).splitlines()
    assert spec_message == (
        "Timeout waiting for connection from the connection pool. maxPoolSize: 3, "
        "connections in use by cursors: 1, connections in use by transactions: 1, "
        "connections in use by other operations: 1"
    )
    # Then the holders (tests/test_holds.py): all three are this greenlet's,
    # and how to learn where they were checked out.
    assert holders[0] == "Held by, longest first:" and len(holders) == 5
    assert holders[-1] == "  (where each was checked out: acquire_sites=True records it)"


# -- establishment ----------------------------------------------------------------------


def test_max_connecting_limits_concurrent_establishment() -> None:
    concurrent = peak = 0

    def connector(conn: Any) -> Any:
        nonlocal concurrent, peak
        concurrent += 1
        peak = max(peak, concurrent)
        try:
            return MockConnector(delay=0.005)(conn)
        finally:
            concurrent -= 1

    pool, _ = make_pool({"maxPoolSize": 20, "maxConnecting": 3}, connector=connector)
    conns = [g.get(timeout=5) for g in [gevent.spawn(pool.checkout) for _ in range(12)]]
    assert peak == 3
    assert len({c.id for c in conns}) == 12


def test_failed_establishment_frees_its_slot_for_the_next_waiter() -> None:
    attempts: list[int] = []

    def flaky(conn: Any) -> Any:
        attempts.append(conn.id)
        gevent.sleep(0.001)
        if len(attempts) == 1:
            raise pymongo_errors.AutoReconnect("connection refused")
        return MockConnector()(conn)

    handled: list[tuple[str, int]] = []
    pool, recorder = make_pool({"maxPoolSize": 1}, connector=flaky,
                               on_establish_error=lambda e, c: handled.append((str(e), c.id)))
    first = gevent.spawn(pool.checkout)
    second = gevent.spawn(pool.checkout)
    with pytest.raises(pymongo_errors.AutoReconnect):
        first.get(timeout=5)
    assert second.get(timeout=5).id == 2, "the next waiter must not hang"
    assert handled == [("connection refused", 1)]
    failed = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionCheckOutFailed"]
    assert failed[0].reason == "connectionError"
    closed = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionClosed"]
    assert (closed[0].connection_id, closed[0].reason) == (1, "error")


def test_establish_error_handler_runs_before_connection_closed() -> None:
    pool, recorder = make_pool(
        {"minPoolSize": 1, "backgroundThreadIntervalMS": 50},
        connector=MockConnector(fail=pymongo_errors.OperationFailure("shutting down", 91)),
    )
    pool._maintenance.on_establish_error = lambda error, conn: pool.clear(error=error)
    recorder.wait_for("ConnectionClosed", 1, timeout=5)
    assert names(recorder)[-3:] == ["ConnectionCreated", "ConnectionPoolCleared",
                                    "ConnectionClosed"]
    gevent.sleep(0.2)
    assert names(recorder).count("ConnectionCreated") == 1, "a paused pool must not refill"


def test_pool_closed_while_establishing() -> None:
    pool, recorder = make_pool(connector=MockConnector(delay=0.02))
    checkout = gevent.spawn(pool.checkout)
    gevent.sleep(0.005)
    pool.close()
    with pytest.raises(PoolClosedError):
        checkout.get(timeout=5)
    closed = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionClosed"]
    assert [e.reason for e in closed] == ["poolClosed"]
    assert recorder.events[-1].reason == "poolClosed"


# -- perishing ---------------------------------------------------------------------------


def test_errored_connection_is_closed_at_checkin() -> None:
    pool, recorder = make_pool()
    conn = pool.checkout()
    conn.mark_errored(pymongo_errors.AutoReconnect("reset by peer"))
    pool.checkin(conn)
    assert conn.state is ConnectionState.CLOSED and conn.transport.closed
    assert recorder.events[-1].reason == "error"
    assert pool.stats().total == 0


def test_idle_connections_are_pruned_in_the_background() -> None:
    pool, recorder = make_pool({"maxIdleTimeMS": 20, "backgroundThreadIntervalMS": 10})
    pool.checkin(pool.checkout())
    recorder.wait_for("ConnectionClosed", 1, timeout=5)
    assert recorder.events[-1].reason == "idle"
    assert pool.stats().total == 0


def test_min_pool_size_is_kept_after_connections_close() -> None:
    pool, recorder = make_pool({"minPoolSize": 2, "backgroundThreadIntervalMS": 10_000})
    wait_until(lambda: pool.stats().available == 2)
    conn = pool.checkout()
    conn.mark_errored(RuntimeError("broken"))
    pool.checkin(conn)  # total drops to 1: the filler is rung, not waited for
    wait_until(lambda: pool.stats().total == 2)
    assert names(recorder).count("ConnectionCreated") == 3


# -- clear and interruption ----------------------------------------------------------------


def test_clear_with_interrupt_closes_in_use_transports_at_once() -> None:
    pool, recorder = make_pool()
    conn = pool.checkout()
    pool.clear(interrupt_in_use_connections=True)
    assert conn.interrupted and conn.transport.closed
    assert isinstance(conn.error, PoolClearedError)
    assert str(conn.error) == ("Connection to db.test:27017 interrupted due to server "
                               "monitor timeout")
    cleared = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionPoolCleared"]
    assert cleared[0].interrupt_connections is True
    pool.checkin(conn)
    assert recorder.events[-1].reason == "stale"


def test_clear_with_interrupt_interrupts_pending_establishment() -> None:
    pool, recorder = make_pool(connector=MockConnector(delay=10))
    checkout = gevent.spawn(pool.checkout)
    recorder.wait_for("ConnectionCreated", 1, timeout=5)
    clear = functools.partial(pool.clear, interrupt_in_use_connections=True)
    assert switches_during(clear) == 0, "clear must not wait for the interruption"
    # Within a few turns of the hub, not after the connector's 10 s.
    assert hub_turns_until(lambda: checkout.dead) <= 3
    with pytest.raises(PoolClearedError, match="interrupted due to server monitor timeout"):
        checkout.get()
    assert names(recorder)[-3:] == ["ConnectionPoolCleared", "ConnectionClosed",
                                    "ConnectionCheckOutFailed"]


def test_clear_without_interrupt_leaves_in_use_connections_alone() -> None:
    pool, _ = make_pool()
    conn = pool.checkout()
    pool.clear()
    assert not conn.interrupted and not conn.transport.closed
    assert pool.is_stale(conn)


# -- load-balanced mode -------------------------------------------------------------------


def test_load_balanced_generations_are_per_service() -> None:
    services = [ObjectId(), ObjectId()]
    pool, recorder = make_pool(
        {"loadBalanced": True, "maxPoolSize": 3},
        connector=MockConnector(service_ids=lambda conn: services[conn.id % 2]),
    )
    a, b, c = pool.checkout(), pool.checkout(), pool.checkout()  # ids 1, 2, 3
    assert {sid: entry[1] for sid, entry in pool._services.entries.items()} == {
        services[1]: 2, services[0]: 1}
    waiter = gevent.spawn(pool.checkout, timeout=10)
    pool.clear(service_id=services[1])
    assert pool.state is PoolState.READY, "a load-balanced clear never pauses"
    gevent.sleep(0)
    assert not waiter.dead, "a load-balanced clear keeps the wait queue"
    assert pool.is_stale(a) and pool.is_stale(c) and not pool.is_stale(b)
    cleared = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionPoolCleared"]
    assert cleared[-1].service_id == services[1]
    pool.checkin(a)  # stale: closed, which makes room for the waiter
    closed = [e for e in recorder.events if EVENT_TYPES[type(e)] == "ConnectionClosed"]
    assert [(e.connection_id, e.reason) for e in closed] == [(1, "stale")]
    pool.checkin(c)
    assert services[1] not in pool._services.entries, "the entry goes when its count reaches 0"
    waiter.get(timeout=5)
    pool._check_invariants()


def test_clear_arguments_must_match_the_mode() -> None:
    plain, _ = make_pool()
    with pytest.raises(ValueError, match="only applies to load-balanced"):
        plain.clear(service_id=ObjectId())
    balanced, _ = make_pool({"loadBalanced": True})
    with pytest.raises(ValueError, match="pass service_id"):
        balanced.clear()


# -- stats, listeners, ownership ---------------------------------------------------------------


def test_stats_snapshot() -> None:
    pool, _ = make_pool({"maxPoolSize": 5})
    conns = [pool.checkout() for _ in range(3)]
    conns[0].purpose = Purpose.CURSOR
    pool.checkin(conns[2])
    stats = pool.stats()
    assert (stats.total, stats.available, stats.in_use, stats.pending) == (3, 1, 2, 0)
    assert stats.in_use_by_purpose == {"other": 1, "cursor": 1, "transaction": 0}
    assert (stats.state, stats.generation, stats.max_pool_size) == ("ready", 0, 5)


def test_a_raising_listener_does_not_break_the_pool(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        def connection_checked_out(self, event: object) -> None:
            raise RuntimeError("listener bug")

    pool = Pool(ADDRESS, connector=MockConnector(), listeners=[Broken()])
    pool.ready()
    with caplog.at_level(logging.ERROR, logger="greenpool"):
        conn = pool.checkout()
    pool.checkin(conn)
    assert "listener bug" in caplog.text
    assert pool.stats().available == 1


def test_a_blocking_listener_sees_a_consistent_pool() -> None:
    class Sleepy(Recorder):
        def _record(self, event: object) -> None:
            pool._check_invariants()
            gevent.sleep(0.0005)
            pool._check_invariants()
            super()._record(event)

        pool_created = pool_ready = pool_cleared = pool_closed = _record
        connection_created = connection_ready = connection_closed = _record
        connection_check_out_started = connection_check_out_failed = _record
        connection_checked_out = connection_checked_in = _record

    pool = Pool.__new__(Pool)  # the listener needs the name bound first
    Pool.__init__(pool, ADDRESS, {"maxPoolSize": 3}, connector=MockConnector(delay=0.001),
                  listeners=[Sleepy()])
    pool.ready()

    def work() -> None:
        for _ in range(20):
            with pool.checkout():
                gevent.sleep(0)

    gevent.joinall([gevent.spawn(work) for _ in range(10)], timeout=30, raise_error=True)
    pool._check_invariants()
    assert pool.stats().in_use == 0


def test_a_pool_belongs_to_its_thread() -> None:
    from gevent.monkey import get_original

    pool, _ = make_pool()
    start_thread = get_original("_thread", "start_new_thread")
    outcome: list[BaseException] = []
    lock = get_original("_thread", "allocate_lock")()
    lock.acquire()

    def other_thread() -> None:
        try:
            pool.checkout()
        except BaseException as error:
            outcome.append(error)
        finally:
            lock.release()

    start_thread(other_thread, ())
    with gevent.Timeout(5):
        while not lock.acquire(False):
            gevent.sleep(0.001)
    assert outcome and isinstance(outcome[0], RuntimeError)
    assert "belongs to one thread" in str(outcome[0])
