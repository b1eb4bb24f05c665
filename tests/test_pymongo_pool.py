"""greenpool.pymongo's GreenPool without a server: PyMongo's own pool code and
connect() run for real over tests.pymongo_support.FakeNetwork.

Covers the supported-version guard, the pool factory, the CMAP spec's
cmap-format unit tests through the adapter, FIFO handoff, maxConnecting,
clearing, the load-balanced timeout message, the kill-safe Condition, and a
kill (GreenletExit, gevent.Timeout) at every yield point of a scenario.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.lock
import pymongo
import pytest
from pymongo import monitoring
from pymongo.errors import AutoReconnect, WaitQueueTimeoutError
from pymongo.pool_options import PoolOptions
from pymongo.synchronous.pool import Pool as StockPool

import greenpool.pymongo as adapter
from greenpool.pymongo import GreenPool, KillSafeCondition, client_kwargs, pool_factory
from greenpool.pymongo.before_4_13 import MONITOR_FLAG, MONITOR_VALUE
from greenpool.pymongo.internals import PoolState
from tests.cmap_runner import CMAP_DIR, CmapTestRunner, Recorder, load_cmap_tests
from tests.holding import HoldListener
from tests.pymongo_support import (
    ADDRESS,
    FakeNetwork,
    SpecPool,
    check_invariants,
    counters,
    hold,
    make_pool,
)
from tests.turns import assert_fair_turns
from tests.yield_points import YieldPoints as BaseYieldPoints

ROOT = Path(__file__).resolve().parents[1]
IDLE = {"requests": 0, "active_sockets": 0, "operation_count": 0, "pending": 0,
        "ncursors": 0, "ntxns": 0, "waiting": 0}


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> FakeNetwork:
    return FakeNetwork().install(monkeypatch)


# -- the supported PyMongo versions ------------------------------------------------------------


def _setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def test_installed_pymongo_is_in_the_declared_range() -> None:
    extras = _setup_cfg()["options.extras_require"]
    low, high = adapter.SUPPORTED_PYMONGO
    declared = f"pymongo>={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    assert extras["pymongo"].split() == [declared], (declared, extras["pymongo"])
    assert declared in extras["test"].split(), "the test extra pins the adapter's range too"
    adapter.check_pymongo_version(pymongo.version)  # what the import already did


def test_the_test_command_covers_every_supported_minor_release() -> None:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "devtools" / "dev.py")
    assert spec is not None and spec.loader is not None
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    (low_major, low_minor), (high_major, high_minor) = adapter.SUPPORTED_PYMONGO
    assert low_major == high_major == 4
    minors = [tuple(int(part) for part in version.split(".")[:2])
              for version in dev.PYMONGO_MATRIX]
    assert minors == [(4, minor) for minor in range(low_minor, high_minor)], minors
    for version in dev.PYMONGO_MATRIX:
        adapter.check_pymongo_version(version)


def test_the_base_requirement_has_no_upper_bound_and_admits_the_adapter_range() -> None:
    # greenpool.Client needs only PyMongo's public parts: installing greenpool must not
    # move an application's PyMongo, so the adapter's pin lives in the extra alone.
    base = [req for req in _setup_cfg()["options"]["install_requires"].split()
            if req.startswith("pymongo")]
    assert base == ["pymongo>=4.9"], base
    assert adapter.SUPPORTED_PYMONGO[0] >= (4, 9)


@pytest.mark.parametrize("version", ["4.8.0", "4.21.0", "5.0.0", "3.13.0", "nonsense"])
def test_an_unsupported_pymongo_is_refused_with_both_versions_named(version: str) -> None:
    with pytest.raises(adapter.UnsupportedPyMongoVersion) as caught:
        adapter.check_pymongo_version(version)
    text = str(caught.value)
    assert f"pymongo {version} is installed" in text
    assert "pymongo>=4.9,<4.21" in text
    assert "greenpool[pymongo]" in text
    assert isinstance(caught.value, ImportError)


@pytest.mark.parametrize("version", ["4.9.2", "4.13.2", "4.19.0", "4.20.0", "4.20.7",
                                     "4.19.0.dev1"])
def test_supported_versions_pass(version: str) -> None:
    adapter.check_pymongo_version(version)


# -- the factory -------------------------------------------------------------------------------


def test_factory_keeps_monitor_pools_stock_and_makes_app_pools_green() -> None:
    # PyMongo 4.13 on mark a monitor pool is_sdam=True; 4.9-4.12, handshake=False.
    options = PoolOptions()
    flag, monitor_value = MONITOR_FLAG, MONITOR_VALUE
    assert flag == ("is_sdam" if pymongo.version_tuple[:2] >= (4, 13) else "handshake")
    pools = [
        (pool_factory(ADDRESS, options, **{flag: monitor_value}, client_id=None), StockPool),
        (pool_factory(ADDRESS, options, monitor_value, None), StockPool),
        (pool_factory(ADDRESS, options, **{flag: not monitor_value}, client_id=None),
         GreenPool),
        (pool_factory(ADDRESS, options, client_id=None), GreenPool),
    ]
    for pool, expected in pools:
        assert type(pool) is expected
        pool.close()


def test_client_refuses_other_pool_classes() -> None:
    with pytest.raises(TypeError, match="_pool_class"):
        adapter.MongoClient("mongodb://127.0.0.1:1", connect=False, _pool_class=StockPool)


def test_client_kwargs_keeps_the_options_and_plugs_greenpool_in() -> None:
    kwargs = client_kwargs(maxPoolSize=7, connect=False)
    assert {key: kwargs.pop(key) for key in ("maxPoolSize", "connect")} == {
        "maxPoolSize": 7, "connect": False}
    assert sorted(kwargs.values(), key=id) == sorted([pool_factory, KillSafeCondition], key=id)
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(
        "mongodb://127.0.0.1:1", **client_kwargs(connect=False))
    try:
        assert client._topology._settings.pool_class is pool_factory
        assert client._topology._settings.condition_class is KillSafeCondition
    finally:
        client.close()
    assert client_kwargs() == client_kwargs(**client_kwargs())  # giving ours back is fine


@pytest.mark.parametrize("keyword", ["_pool_class", "_condition_class"])
def test_client_kwargs_refuses_to_replace_greenpool_naming_what_it_got(keyword: str) -> None:
    with pytest.raises(TypeError) as caught:
        client_kwargs(**{keyword: StockPool})
    assert keyword in str(caught.value)
    assert repr(StockPool) in str(caught.value)


def test_only_the_keywords_module_names_pymongos_private_client_keywords() -> None:
    # Code, not prose: a string constant or a keyword argument naming them.
    private = {"_pool_class", "_condition_class"}
    naming = set()
    for path in sorted((ROOT / "greenpool").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if ((isinstance(node, ast.Constant) and node.value in private)
                    or (isinstance(node, ast.keyword) and node.arg in private)):
                naming.add(path.relative_to(ROOT).as_posix())
    assert naming == {"greenpool/pymongo/keywords.py"}
    # User code (the examples) and the guides name neither.
    for path in [*sorted((ROOT / "examples").rglob("*.py")),
                 *sorted((ROOT / "docs" / "guides").glob("*.rst"))]:
        text = path.read_text()
        assert not [name for name in private if name in text], path


# -- the CMAP spec's unit tests, through the adapter -------------------------------------------


class AdapterRunner(CmapTestRunner):
    """PyMongo names its closed-pool error _PoolClosedError, and its timeout
    message continues after the spec's text with the pool's figures."""

    def check(self, error: BaseException | None) -> None:
        expected = self.test.get("error")
        if expected:
            assert error is not None, f"expected an error {expected}, got none"
            assert type(error).__name__.lstrip("_") == expected["type"], repr(error)
            assert str(error).startswith(expected["message"]), repr(error)
            self.test = {key: value for key, value in self.test.items() if key != "error"}
            error = None
        super().check(error)


UNIT = [(name, test) for name, test in load_cmap_tests() if test["style"] == "unit"]


@pytest.mark.parametrize(("name", "test"), UNIT, ids=[name for name, _ in UNIT])
def test_cmap_unit_through_the_adapter(name: str, test: dict[str, Any],
                                       network: FakeNetwork) -> None:
    AdapterRunner(test, SpecPool).run()


@pytest.mark.skipif(not UNIT, reason=f"CMAP spec tests not found in {CMAP_DIR} "
                    "(set GREENPOOL_SPEC_TESTS to the spec-tests 'source' directory)")
def test_cmap_unit_tests_are_present() -> None:
    assert len(UNIT) == 26, "the cmap-format unit tests were not found"


# -- fairness and limits -----------------------------------------------------------------------


def test_waiters_are_served_in_arrival_order_and_a_returner_cannot_barge(
        network: FakeNetwork) -> None:
    pool = make_pool({"maxPoolSize": 1})
    pool.ready()
    holder = hold(pool)
    served: list[int] = []

    def waiter(index: int) -> None:
        conn = hold(pool)
        served.append(index)
        gevent.sleep(0)
        pool.checkin(conn)

    waiters = [gevent.spawn(waiter, index) for index in range(10)]
    gevent.sleep(0.01)
    assert counters(pool)["waiting"] == 10
    pool.checkin(holder)
    # The old holder comes straight back: it must queue behind all ten.
    with gevent.Timeout(5):
        again = hold(pool)
    served.append(99)
    pool.checkin(again)
    gevent.joinall(waiters, timeout=5, raise_error=True)
    assert served == [*range(10), 99]
    assert counters(pool) == IDLE


def test_greenlets_spawned_together_take_turns_when_nothing_blocks(
        network: FakeNetwork) -> None:
    # The fake network never blocks, as a server that answers before the
    # greenlet waits: without fair turns the first greenlet took all its turns
    # before the others had even started, so none of them was in the queue.
    pool = make_pool({"maxPoolSize": 2})
    pool.ready()
    first, second = hold(pool), hold(pool)
    pool.checkin(first)
    pool.checkin(second)
    assert_fair_turns(pool)
    assert counters(pool) == IDLE
    pool.close()


def test_max_connecting_is_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = gevent.event.Event()
    network = FakeNetwork(before_connect=gate.wait).install(monkeypatch)
    pool = make_pool({"maxPoolSize": 10, "maxConnecting": 2})
    pool.ready()
    results: list[Any] = []
    greenlets = [gevent.spawn(lambda: results.append(hold(pool))) for _ in range(5)]
    gevent.sleep(0.01)
    assert pool._pending == 2 and len(network.opened) == 0
    assert counters(pool)["waiting"] == 3
    check_invariants(pool)
    gate.set()
    gevent.joinall(greenlets, timeout=5, raise_error=True)
    assert len(results) == 5 and len(network.opened) == 5
    for conn in results:
        pool.checkin(conn)
    assert counters(pool) == IDLE and len(pool.conns) == 5


def test_clear_fails_every_waiter_once_with_a_retryable_error(network: FakeNetwork) -> None:
    recorder = Recorder()
    pool = make_pool({"maxPoolSize": 1}, [recorder])
    pool.ready()
    holder = hold(pool)
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            hold(pool)
        except AutoReconnect as error:
            errors.append(error)

    waiters = [gevent.spawn(waiter) for _ in range(3)]
    gevent.sleep(0.01)
    pool.reset()
    pool.ready()  # at once: the waiters failed regardless
    gevent.joinall(waiters, timeout=5, raise_error=True)
    assert [str(error).split(" (")[0] for error in errors] == (
        ["db.test:27017: connection pool paused"] * 3)
    failed = [e for e in recorder.events if isinstance(e, monitoring.ConnectionCheckOutFailedEvent)]
    assert [e.reason for e in failed] == ["connectionError"] * 3
    # The clear is announced before any waiter reports its failure, on every
    # release (PyMongo's test_pool_paused_error_is_retryable counts on it).
    watched = (monitoring.PoolClearedEvent, monitoring.ConnectionCheckOutFailedEvent)
    kinds = [type(e).__name__ for e in recorder.events if isinstance(e, watched)]
    assert kinds == ["PoolClearedEvent"] + ["ConnectionCheckOutFailedEvent"] * 3
    pool.checkin(holder)  # stale now: closed, not reused
    assert counters(pool) == IDLE and not pool.conns and network.open_count == 0


def test_load_balanced_timeout_message_counts_connections_by_use(network: FakeNetwork) -> None:
    pool = make_pool({"loadBalanced": True, "maxPoolSize": 3, "waitQueueTimeoutMS": 50})
    pool.ready()
    with pool.checkout() as cursor_conn:
        cursor_conn.pin_cursor()
    with pool.checkout() as txn_conn:
        txn_conn.pin_txn()
    other = hold(pool)
    assert (pool.ncursors, pool.ntxns, pool.active_sockets) == (1, 1, 3)
    with pytest.raises(WaitQueueTimeoutError) as caught:
        hold(pool)
    spec_message, *holders = str(caught.value).splitlines()
    assert spec_message == (
        "Timeout waiting for connection from the connection pool. maxPoolSize: 3, "
        "connections in use by cursors: 1, connections in use by transactions: 1, "
        "connections in use by other operations: 1, timeout: 0.05")
    # Then the holders (tests/test_pymongo_holds.py), what each is pinned to.
    assert holders[0] == "Held by, longest first:" and len(holders) == 5
    assert holders[-1] == "  (where each was checked out: acquire_sites=True records it)"
    assert [h.purpose for h in caught.value.holders] == ["cursor", "transaction", "other"]
    cursor_conn.unpin()
    txn_conn.unpin()
    pool.checkin(other)
    assert counters(pool) == IDLE and len(pool.conns) == 3


def test_a_second_checkin_of_the_same_connection_changes_nothing(network: FakeNetwork) -> None:
    pool = make_pool({"maxPoolSize": 2})
    pool.ready()
    conn = hold(pool)
    pool.checkin(conn)
    again = hold(pool)  # the same connection, handed out again
    assert again is conn
    pool.checkin(conn)
    pool.checkin(conn)
    assert counters(pool) == IDLE and list(pool.conns) == [conn] and not conn.closed


def test_min_pool_size_filler_never_overtakes_a_waiter(network: FakeNetwork) -> None:
    pool = make_pool({"maxPoolSize": 1, "minPoolSize": 1})
    pool.ready()
    holder = hold(pool)
    waiter = gevent.spawn(hold, pool)
    gevent.sleep(0.01)
    pool.remove_stale_sockets(pool.gen.get_overall())
    assert len(network.opened) == 1  # the filler made nothing while someone waits
    pool.checkin(holder)
    conn = waiter.get(timeout=5)
    pool.checkin(conn)
    pool.close()
    assert network.open_count == 0


# -- the kill-safe Condition -------------------------------------------------------------------


def test_kill_while_reacquiring_leaves_the_lock_consistent() -> None:
    """A waiter whose wait() times out while another greenlet holds the lock,
    killed as it re-acquires: it must still return holding the lock, so its
    ``with`` releases exactly once and never someone else's hold."""
    lock = gevent.lock.RLock()
    condition = KillSafeCondition(lock)
    log: list[str] = []
    waiting_started = gevent.event.Event()

    def waiter() -> None:
        try:
            with condition:
                waiting_started.set()
                condition.wait(0.05)
        except gevent.GreenletExit:
            log.append(f"waiter killed, lock owned by me: {lock._is_owned()}")
            raise

    def holder() -> None:
        waiting_started.wait()
        with lock:  # taken as soon as the waiter's wait() lets go of it
            gevent.sleep(0.1)  # the waiter's timeout fires; it blocks re-acquiring
            waiting.kill(block=False)  # while the lock is surely held
            gevent.sleep(0.02)
            log.append("holder still alone")
        log.append("holder released")

    waiting = gevent.spawn(waiter)
    holding = gevent.spawn(holder)
    gevent.joinall([waiting, holding], timeout=5)
    assert holding.successful(), holding.exception
    assert isinstance(waiting.exception, type(None)) or waiting.dead
    assert log == ["holder still alone", "holder released",
                   "waiter killed, lock owned by me: False"]
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_kill_during_reacquiring_after_a_timeout_is_not_lost() -> None:
    """The waiter's own gevent.Timeout fires; while it re-acquires the lock a
    GreenletExit arrives. wait() raises the Timeout (the first), and the kill
    still lands at the waiter's next yield: a killed greenlet never lives on."""
    lock = gevent.lock.RLock()
    condition = KillSafeCondition(lock)
    log: list[str] = []

    waiting_started = gevent.event.Event()

    def waiter() -> None:
        own = gevent.Timeout(0.05)
        try:
            with own, condition:
                waiting_started.set()
                condition.wait()
        except gevent.Timeout as fired:
            log.append(f"own timeout: {fired is own}")
        while True:  # a worker that carries on after its own timeout
            gevent.sleep(0.001)

    def holder() -> None:
        waiting_started.wait()
        with lock:  # taken as soon as the waiter's wait() lets go of it
            gevent.sleep(0.1)  # the waiter's timeout fires; it blocks re-acquiring
            waiting.kill(block=False)  # lands while the waiter re-acquires

    waiting = gevent.spawn(waiter)
    holding = gevent.spawn(holder)
    gevent.joinall([waiting, holding], timeout=5)
    assert waiting.dead, "the kill was swallowed: the greenlet lives on"
    assert isinstance(waiting.exception, type(None))  # GreenletExit ends it quietly
    assert log == ["own timeout: True"]


def test_kill_safe_condition_still_notifies() -> None:
    condition = KillSafeCondition(gevent.lock.RLock())
    woken: list[bool] = []

    def waiter() -> None:
        with condition:
            woken.append(condition.wait(5))

    greenlets = [gevent.spawn(waiter) for _ in range(3)]
    gevent.sleep(0.01)
    with condition:
        condition.notify_all()
    gevent.joinall(greenlets, timeout=5, raise_error=True)
    assert woken == [True, True, True]



# -- who holds the pool (tests/test_pymongo_holds.py runs it on a real server) -------------


def test_holders_waiters_timeouts_and_long_holds(network: FakeNetwork) -> None:
    """On every supported release: the hold record of a checkout, the
    report's waiters, the holders in the timeout error, a long hold sent to
    the pool's listeners once, and nothing left after the checkin."""
    listener = HoldListener()
    pool = make_pool({"maxPoolSize": 1, "waitQueueTimeoutMS": 100}, [listener],
                     long_hold_threshold=0.05)
    pool.ready()
    held = hold(pool)
    (holder,) = pool.holders()
    assert holder.greenlet == "the main greenlet" and holder.purpose == "other"
    assert holder.acquired_at is not None and holder.acquired_at.function == "hold"
    waiter = gevent.spawn(hold, pool)
    with gevent.Timeout(5):
        while not pool.report().waiting:
            gevent.sleep(0.001)
    report = pool.report()
    assert report.waiting == 1 and report.oldest_wait is not None and report.in_use == 1
    with pytest.raises(WaitQueueTimeoutError) as raised:
        waiter.get(timeout=5)
    assert [h.connection_id for h in raised.value.holders] == [held.id]  # type: ignore
    assert "Held by, longest first:" in str(raised.value)
    with gevent.Timeout(5):
        while not listener.long_holds:
            gevent.sleep(0.01)
    (event,) = listener.long_holds
    assert event.connection_id == held.id and event.duration >= 0.05
    pool.checkin(held)
    assert pool.holders() == [] and pool.report().waiting == 0
    pool.close()
    gevent.sleep(0)
    assert pool._gp_watcher is None and len(listener.long_holds) == 1

# -- kills at every yield point ----------------------------------------------------------------


class YieldPoints(BaseYieldPoints):
    """Yield points in the adapter's pool; mode "others" kills every other
    live worker."""

    def __init__(self, kill_at: int | None = None,
                 kill: Callable[[], BaseException] = gevent.GreenletExit,
                 mode: str = "self") -> None:
        super().__init__(kill_at, kill, mode)
        self.pool: GreenPool | None = None
        self.workers: list[gevent.Greenlet] = []

    def candidates(self) -> list[gevent.Greenlet]:
        return [g for g in self.workers if not g.dead]

    def hit(self) -> None:
        pool = self.pool
        if pool is not None:  # None: PoolCreated, from the constructor
            self.yield_here(lambda: check_invariants(pool))


class YieldingListener(monitoring.ConnectionPoolListener):
    def __init__(self, points: YieldPoints) -> None:
        self.points = points

    def _hit(self, event: object) -> None:
        self.points.hit()

    pool_created = pool_ready = pool_cleared = pool_closed = _hit
    connection_created = connection_ready = connection_closed = _hit
    connection_check_out_started = connection_check_out_failed = _hit
    connection_checked_out = connection_checked_in = _hit


def run_scenario(points: YieldPoints, monkeypatch: pytest.MonkeyPatch) -> GreenPool:
    """Five workers over maxPoolSize 2, maxConnecting 1: queued waits, handoffs,
    a failed connect, a connection that dies in use, a clear and a ready."""
    attempts = [0]
    running = [True]

    def fail() -> BaseException | None:
        attempts[0] += 1
        second = attempts[0] == 2 and running[0]
        return ConnectionRefusedError("refused") if second else None

    FakeNetwork(before_connect=points.hit, fail=fail).install(monkeypatch)
    pool = make_pool({"maxPoolSize": 2, "maxConnecting": 1}, [YieldingListener(points)])
    pool.ready()
    points.pool = pool  # counting starts with the workers

    def worker(index: int) -> None:
        for round_ in range(3):
            try:
                conn = hold(pool)
                try:
                    points.hit()
                    if index == 1 and round_ == 1:
                        conn.close_conn(None)  # the socket died in use
                finally:
                    pool.checkin(conn)
            except (AutoReconnect, WaitQueueTimeoutError):
                pass
            except gevent.Timeout:
                return  # killed with a Timeout: end quietly
            if index == 4 and round_ == 0:
                pool.reset()
                points.hit()
                pool.ready()

    points.workers = [gevent.spawn(worker, index) for index in range(5)]
    gevent.joinall(points.workers, timeout=10)
    for greenlet in points.workers:
        greenlet.kill()
    running[0] = False
    return pool


def assert_quiescent(pool: GreenPool) -> None:
    check_invariants(pool)
    assert counters(pool) == IDLE, counters(pool)
    assert pool.holders() == [], pool.holders()
    if pool.state != PoolState.READY:
        pool.ready()
    with gevent.Timeout(5):
        first, second = hold(pool), hold(pool)  # every slot is still there
        pool.checkin(first)
        pool.checkin(second)
    assert counters(pool) == IDLE, counters(pool)


@pytest.mark.parametrize("mode", ["self", "others"])
@pytest.mark.parametrize("kill", [gevent.GreenletExit, gevent.Timeout],
                         ids=["GreenletExit", "Timeout"])
def test_kill_at_every_yield_point(kill: Callable[[], BaseException], mode: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    counting = YieldPoints()
    assert_quiescent(run_scenario(counting, monkeypatch))
    total = counting.count
    assert total > 60, f"the scenario must exercise many yield points, not {total}"
    killed = 0
    for kill_at in range(total):
        points = YieldPoints(kill_at=kill_at, kill=kill, mode=mode)
        pool = run_scenario(points, monkeypatch)
        killed += points.killed
        points.kill_at = None
        assert_quiescent(pool)
    assert killed >= total // 2, f"only {killed} kills landed over {total} yield points"
