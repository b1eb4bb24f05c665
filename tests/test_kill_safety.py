"""Kill safety: GreenletExit or gevent.Timeout at any yield point leaks nothing.

Every place a checkout, an establishment or a checkin can block is a yield
point: the wait-queue slot, the connector, a listener during the outbox
flush, the SDAM error hook. Two tests:

* a sweep that, for every yield point k of a scripted scenario, kills the
  greenlet exactly there (the kill is scheduled as a hub callback just before
  the k-th yield), once with GreenletExit and once with gevent.Timeout;
* a seeded random storm of thousands of kills over concurrent workers, with
  random connector delays and failures, yielding listeners, real timeouts
  and clear()/ready() cycles.

Every listener call and every connector call asserts the pool's invariants
(so "maxPoolSize never exceeded" is checked at every instant anyone can
observe), and after each burst all workers stop and the pool must hold
nothing (no in-use, pending or waiting leftovers) and still serve. Hold
records too: at every yield point no connection outside the in-use set has
one, none names a greenlet that has ended (every worker checks in before it
ends), and the wait queue's oldest wait belongs to a live waiter.
"""

from __future__ import annotations

import contextlib
import random
import traceback
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import pytest
from pymongo import errors as pymongo_errors
from pymongo import monitoring

from greenpool import Pool, PoolClearedError, PoolClosedError, WaitQueueTimeoutError
from tests.mock import MockTransport
from tests.yield_points import YieldPoints as BaseYieldPoints

ADDRESS = ("db.test", 27017)
EXPECTED_ERRORS = (PoolClearedError, PoolClosedError, WaitQueueTimeoutError,
                   pymongo_errors.AutoReconnect)
KILLS = (gevent.GreenletExit, gevent.Timeout)


class YieldPoints(BaseYieldPoints):
    """Yield points in the pool's checkout and checkin; mode "others" kills
    every other worker inside checkout at that moment: waiting in the queue,
    establishing, or in a listener."""

    def __init__(self, kill_at: int | None = None,
                 kill: Callable[[], BaseException] = gevent.GreenletExit,
                 mode: str = "self") -> None:
        super().__init__(kill_at, kill, mode)
        self.in_checkout: set[Any] = set()
        self.checkouts = 0  # checkouts that returned a connection to their caller

    def candidates(self) -> set[Any]:
        return self.in_checkout

    def hit(self, pool: Pool[Any]) -> None:
        self.yield_here(lambda: check_holds(pool))


def check_holds(pool: Pool[Any]) -> None:
    """The pool's invariants (hold records on in-use connections only), and
    no hold record names a greenlet that has ended (the raw records: reading
    the holders' sites at every yield point would slow the sweeps down)."""
    pool._check_invariants()
    stale = [hold for hold in pool._holds() if hold.greenlet.dead]
    assert not stale, f"hold records of greenlets that ended: {stale}"


class YieldingListener(monitoring.ConnectionPoolListener):
    def __init__(self, points: YieldPoints, get_pool: Callable[[], Pool[Any]]) -> None:
        self.points = points
        self.get_pool = get_pool

    def _hit(self, event: object) -> None:
        self.points.hit(self.get_pool())

    pool_created = pool_ready = pool_cleared = pool_closed = _hit
    connection_created = connection_ready = connection_closed = _hit
    connection_check_out_started = connection_check_out_failed = _hit
    connection_checked_out = connection_checked_in = _hit


def build_pool(points: YieldPoints, options: dict[str, Any],
               fail: Callable[[Any], bool] = lambda conn: False) -> Pool[Any]:
    pool: Pool[Any] | None = None

    def get_pool() -> Pool[Any]:
        assert pool is not None
        return pool

    def connector(conn: Any) -> MockTransport:
        points.hit(get_pool())
        if fail(conn):
            raise pymongo_errors.AutoReconnect("connection refused")
        return MockTransport(conn.id)

    def on_error(error: Exception, conn: Any) -> None:
        points.hit(get_pool())

    pool = Pool(ADDRESS, options, connector=connector, on_establish_error=on_error,
                acquire_sites=True)
    pool.ready()
    pool._events.listeners = (YieldingListener(points, get_pool),)
    return pool


def assert_quiescent(pool: Pool[Any], checkouts: int | None = None) -> None:
    """Nobody runs: the pool must hold nothing and still serve, and its
    always-on counters must add up (``checkouts``: how many checkouts
    returned a connection to their callers, when the test counted them)."""
    pool._check_invariants()
    stats = pool.stats()
    assert (stats.in_use, stats.pending, stats.waiting) == (0, 0, 0), stats
    report = pool.report()
    assert (report.holders, report.waiting, report.oldest_wait) == ((), 0, None), report
    counted = pool.get_stats()
    # Every checkout either returned or raised, exactly once, kills included.
    if checkouts is not None:
        assert counted["requests_num"] == checkouts + counted["requests_errors"], counted
    assert counted["requests_timeouts"] <= counted["requests_errors"], counted
    assert counted["requests_queued"] <= counted["requests_num"], counted
    # Every connection the pool created was counted, and each failed at most once.
    assert counted["connections_num"] == pool._next_id - 1, counted
    assert counted["connections_errors"] <= counted["connections_num"], counted
    assert min(counted.values()) >= 0, counted
    if pool.state.value == "paused":
        pool.ready()
    with gevent.Timeout(5), pool.checkout(timeout=5) as conn:
        assert conn.transport is not None
    pool._check_invariants()


def scenario(pool: Pool[Any], points: YieldPoints) -> None:
    """Four workers over maxPoolSize 2: waits, establishments, handoffs,
    one failed establishment and its SDAM hook, checkins."""

    def worker(rounds: int) -> None:
        me = gevent.getcurrent()
        for _ in range(rounds):
            try:
                points.in_checkout.add(me)
                try:
                    conn = pool.checkout(timeout=5)
                finally:
                    points.in_checkout.discard(me)
                points.checkouts += 1  # no yield since checkout returned
                with conn:
                    gevent.sleep(0)
            except EXPECTED_ERRORS:
                pass
            except gevent.Timeout:
                return  # killed with a Timeout: end quietly

    workers = [gevent.spawn(worker, 4) for _ in range(4)]
    gevent.joinall(workers, timeout=10)
    for greenlet in workers:
        greenlet.kill()


def failing_second(conn: Any) -> bool:
    return bool(conn.id == 2)


def count_yield_points() -> int:
    points = YieldPoints()
    scenario(build_pool(points, {"maxPoolSize": 2}, fail=failing_second), points)
    return points.count


@pytest.mark.parametrize("mode", ["self", "others"])
@pytest.mark.parametrize("kill", KILLS, ids=lambda k: k.__name__)
def test_kill_at_every_yield_point(kill: Callable[[], BaseException], mode: str) -> None:
    total = count_yield_points()
    assert total > 40, f"the scenario must exercise many yield points, not {total}"
    killed = 0
    for kill_at in range(total):
        points = YieldPoints(kill_at=kill_at, kill=kill, mode=mode)
        pool = build_pool(points, {"maxPoolSize": 2}, fail=failing_second)
        scenario(pool, points)
        killed += points.killed
        points.kill_at = None
        assert_quiescent(pool, points.checkouts)
    assert killed >= total // 2, f"only {killed} kills landed over {total} yield points"


def stop_all(greenlets: list[gevent.Greenlet]) -> None:
    """Kill ``greenlets`` and wait for them; a survivor fails the test with
    where each one is (a worker that outlives its GreenletExit lost the kill
    somewhere: its stack says where)."""
    with contextlib.suppress(gevent.Timeout):
        gevent.killall(greenlets, timeout=10)
    survivors = [g for g in greenlets if not g.dead]
    stacks = ["".join(traceback.format_stack(g.gr_frame)) for g in survivors[:3]]
    assert not survivors, f"{len(survivors)} workers outlived their kill:\n" + "\n".join(stacks)


def test_random_kill_storm() -> None:
    """Thousands of seeded random kills across checkout, establishment,
    listeners and checkin, with clears; invariants after every burst."""
    rng = random.Random(20261123)
    options = {"maxPoolSize": 5, "maxConnecting": 2, "minPoolSize": 2,
               "backgroundThreadIntervalMS": 5}
    points = YieldPoints()
    pool = build_pool(points, options, fail=lambda conn: rng.random() < 0.05)
    kills_done = 0
    bursts = 0
    checkouts = 0

    def worker() -> None:
        nonlocal checkouts
        try:
            while True:
                timer = gevent.Timeout(rng.choice((0.0001, 0.001, 0.003)))
                use_timer = rng.random() < 0.3
                try:
                    with timer if use_timer else contextlib.nullcontext():
                        conn = pool.checkout(timeout=rng.choice((None, 0.002, 0.5)))
                        checkouts += 1  # no yield since checkout returned
                        with conn:
                            gevent.sleep(rng.choice((0, 0, 0.0005)))
                except EXPECTED_ERRORS:
                    gevent.sleep(0)
                except gevent.Timeout as fired:
                    if fired is not timer:
                        raise  # a kill, not the worker's own timer
        except gevent.Timeout:
            pass  # killed with a Timeout: end quietly (GreenletExit ends quietly anyway)

    while kills_done < 3000:
        workers = [gevent.spawn(worker) for _ in range(30)]
        everyone = list(workers)
        for _ in range(100):
            gevent.sleep(rng.choice((0, 0, 0.0002, 0.001)))
            slot = rng.randrange(len(workers))
            kill = gevent.GreenletExit if rng.random() < 0.5 else gevent.Timeout()
            workers[slot].kill(kill, block=False)
            workers[slot] = gevent.spawn(worker)
            everyone.append(workers[slot])
            kills_done += 1
            if rng.random() < 0.03:
                pool.clear(interrupt_in_use_connections=rng.random() < 0.5)
                gevent.sleep(0)
                pool.ready()
        stop_all(everyone)
        gevent.sleep(0.01)  # background fills finish
        assert_quiescent(pool, checkouts)
        checkouts += 1  # assert_quiescent's own checkout
        bursts += 1
    assert bursts >= 30 and points.count > 10_000
    pool.close()
    assert pool.stats().total == 0


def test_a_kill_in_the_establishment_error_handler_is_never_replaced() -> None:
    """A connection that fails to establish goes to the SDAM error handler,
    which may yield (it clears the pool and reports): a kill landing there
    must leave without another yield, or a slow ConnectionClosed listener
    would let the greenlet's own gevent.Timeout fire and replace the kill,
    and the greenlet would live on (the random storm once lost a worker
    that way: gevent.killall waited for it in vain)."""

    class Slow(monitoring.ConnectionPoolListener):
        def connection_closed(self, event: object) -> None:
            gevent.sleep(1.0)

    in_handler = gevent.event.Event()

    def refuse(conn: Any) -> MockTransport:
        raise pymongo_errors.AutoReconnect("connection refused")

    def handler(error: Exception, conn: Any) -> None:
        in_handler.set()
        gevent.sleep(10)

    pool: Pool[Any] = Pool(ADDRESS, {"maxPoolSize": 1}, connector=refuse,
                           on_establish_error=handler, listeners=[Slow()])
    pool.ready()
    outcome: list[str] = []

    def victim() -> None:
        own = gevent.Timeout(0.5)
        try:
            with own, pool.checkout():
                pass
        except gevent.Timeout as fired:
            outcome.append("own timeout" if fired is own else "other timeout")
            return
        except pymongo_errors.AutoReconnect:
            outcome.append("refused")
            return
        outcome.append("finished")

    greenlet = gevent.spawn(victim)
    assert in_handler.wait(5)
    greenlet.kill(block=True, timeout=5)
    assert greenlet.dead and outcome == [], f"the kill was lost: {outcome}"
    gevent.sleep(1.5)  # the deferred ConnectionClosed is delivered
    stats = pool.stats()
    assert (stats.total, stats.in_use, stats.pending, stats.waiting) == (0, 0, 0, 0), stats


@pytest.mark.parametrize("where", ["waiting", "holding"])
def test_a_kill_is_never_replaced_by_the_greenlets_own_timeout(where: str) -> None:
    """Cleanup after a kill must not yield: a slow listener there would let
    the greenlet's own gevent.Timeout fire and replace the GreenletExit.
    (Generous times: a loaded machine must not fire the own timeout before
    the kill lands.)"""

    # The listener sleeps longer than the victim's own timeout, which is long
    # next to the test's own steps (so a loaded machine cannot fire it first).
    class Slow(monitoring.ConnectionPoolListener):
        def _slow(self, event: object) -> None:
            gevent.sleep(1.0)

        connection_check_out_failed = connection_checked_in = _slow

    pool: Pool[Any] = Pool(ADDRESS, {"maxPoolSize": 1},
                           connector=lambda conn: MockTransport(conn.id), listeners=[Slow()])
    pool.ready()
    holder = pool.checkout() if where == "waiting" else None
    outcome: list[str] = []

    def victim() -> None:
        own = gevent.Timeout(0.5)
        try:
            with own, pool.checkout():
                gevent.sleep(10)
        except gevent.Timeout as fired:
            outcome.append("own timeout" if fired is own else "other timeout")
            return
        outcome.append("finished")

    greenlet = gevent.spawn(victim)
    with gevent.Timeout(5):  # until the victim waits (or holds its connection)
        while (pool.stats().waiting if where == "waiting" else pool.stats().in_use) != 1:
            gevent.sleep(0.001)
    greenlet.kill(block=True, timeout=5)
    assert greenlet.dead and outcome == [], f"the kill was lost: {outcome}"
    if holder is not None:
        pool.checkin(holder)
    gevent.sleep(1.5)  # the deferred events are delivered
    assert pool.stats().in_use == 0 and pool.stats().waiting == 0
