"""Who holds the pool: hold records, exhaustion errors, reports, long holds.

The pool core with a mock connector: each test holds connections in
greenlets it names, at lines it knows, and checks what the pool says of
them (tests/test_holds_client.py does the same through greenpool.Client on a
real server, tests/test_pymongo_pool.py through greenpool.pymongo).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest
from bson.objectid import ObjectId
from pymongo import monitoring

import greenpool
from greenpool import Pool, Purpose, WaitQueueTimeoutError
from greenpool.pool import holds, reports
from greenpool.pool.holds import LISTED_HOLDERS, Holder, Site
from greenpool.pool.longholds import ConnectionHeldTooLongEvent
from tests.events import QuietPoolListener
from tests.holding import HoldListener, here, until
from tests.listening import listened
from tests.mock import MockConnector

ADDRESS = ("db.test", 27017)
HERE = __file__


# Every test twice: with a listener, and without one (the pool's fast paths).
pytestmark = pytest.mark.usefixtures("listening")


def make_pool(options: dict[str, Any] | None = None, **kwargs: Any) -> Pool[Any]:
    pool: Pool[Any] = Pool(ADDRESS, options or {}, connector=MockConnector(),
                           listeners=[QuietPoolListener()] if listened() else [], **kwargs)
    pool.ready()
    return pool


def spawn(name: str, run: Callable[[], Any]) -> gevent.Greenlet:
    greenlet = gevent.Greenlet(run)
    greenlet.name = name
    greenlet.start()
    return greenlet


class Lines:
    """Where a holder checked out, where it waits now, and how long its checkout and hold
    took (seconds, from before the checkout to after the checkin)."""

    acquired = 0
    waiting = 0
    held = 0.0


def hold_for(pool: Pool[Any], seconds: float, lines: Lines) -> None:
    started = time.monotonic()
    lines.acquired = here() + 1
    with pool.checkout():
        lines.waiting = here() + 1
        gevent.sleep(seconds)
    lines.held = time.monotonic() - started


# -- hold records ---------------------------------------------------------------------------


def test_holders_name_the_greenlet_its_age_and_both_sites() -> None:
    pool = make_pool({"maxPoolSize": 3}, acquire_sites=True)
    lines = Lines()
    holder = spawn("slow-report", lambda: hold_for(pool, 10, lines))
    until(lambda: pool.stats().in_use == 1)
    gevent.sleep(0.05)
    (seen,) = pool.holders()
    assert seen.greenlet == "slow-report" and 0.05 <= seen.held_for < 5
    assert seen.acquired_at == Site(HERE, lines.acquired, "hold_for")
    assert seen.now_at == Site(HERE, lines.waiting, "hold_for", inside="sleep")
    assert (seen.purpose, seen.pinned, seen.ended) == ("other", False, False)
    assert str(seen) == (
        f"connection 1, held {seen.held_for * 1000:.0f} ms by slow-report: checked out at "
        f"{HERE}:{lines.acquired} in hold_for; now at {HERE}:{lines.waiting} in hold_for, "
        f"inside sleep")
    holder.kill()
    assert pool.holders() == [] and pool.stats().in_use == 0


def test_holders_come_longest_first_and_leave_at_checkin() -> None:
    pool = make_pool(acquire_sites=True)
    first = pool.checkout()
    gevent.sleep(0.01)
    second = pool.checkout()
    pool.checkout().purpose = Purpose.TRANSACTION
    assert [h.connection_id for h in pool.holders()] == [first.id, second.id, 3]
    assert pool.holders()[2].purpose == "transaction"
    pool.checkin(first)
    assert [h.connection_id for h in pool.holders()] == [second.id, 3]
    with pool.checkout() as again:  # the same connection, a new hold
        assert again is first
        assert pool.holders()[-1].connection_id == first.id
        assert pool.holders()[-1].held_for < pool.holders()[0].held_for


def test_without_acquire_sites_the_holder_and_its_current_site_remain() -> None:
    """The default, unless long holds are reported: no acquire site, and the
    exhaustion error says how to get one."""
    pool = make_pool({"maxPoolSize": 1})
    assert not pool._acquire_sites
    lines = Lines()
    holder = spawn("h", lambda: hold_for(pool, 10, lines))
    until(lambda: pool.stats().in_use == 1)
    (seen,) = pool.holders()
    assert seen.acquired_at is None
    assert seen.now_at == Site(HERE, lines.waiting, "hold_for", inside="sleep")
    assert str(seen).endswith(f"by h: now at {seen.now_at}")
    with pytest.raises(WaitQueueTimeoutError) as raised:
        pool.checkout(timeout=0.01)
    assert str(raised.value).splitlines()[1:] == [
        "Held by, longest first:", f"  {raised.value.holders[0]}",
        "  (where each was checked out: acquire_sites=True records it)"]
    holder.kill()


def test_acquire_sites_follow_the_long_hold_threshold_unless_told() -> None:
    assert make_pool(long_hold_threshold=60)._acquire_sites
    assert not make_pool(long_hold_threshold=60, acquire_sites=False)._acquire_sites
    assert make_pool(acquire_sites=True)._acquire_sites


def test_a_holder_that_ended_without_checking_in_is_named() -> None:
    pool = make_pool(acquire_sites=True)
    line = 0

    def leak() -> None:
        nonlocal line
        pool.checkout(); line = here()  # noqa: E702 (the line of the checkout)

    spawn("leaky", leak).join()
    (seen,) = pool.holders()
    assert (seen.greenlet, seen.ended, seen.now_at) == ("leaky", True, None)
    assert seen.acquired_at == Site(HERE, line, "test_a_holder_that_ended_without_checking_in"
                                                "_is_named.<locals>.leak")
    assert str(seen).endswith("; its greenlet has ended without checking it in")


def test_a_pinned_connection_says_what_it_is_pinned_to() -> None:
    pool = make_pool({"loadBalanced": True}, acquire_sites=True)
    pool._maintenance.connector = MockConnector(service_ids=lambda conn: ObjectId())
    conn = pool.checkout()
    conn.purpose, conn.pinned = Purpose.CURSOR, True  # what greenpool.Client's pinning does
    assert "(pinned to a cursor)" in str(pool.holders()[0])
    pool.checkin(conn)
    again = pool.checkout()
    assert again is conn and not again.pinned and again.purpose is Purpose.OTHER
    pool.checkin(again)


def test_the_acquire_site_is_the_first_frame_outside_the_libraries(tmp_path: Path) -> None:
    """A frame in a file inside greenpool's package counts as library code,
    wherever it was compiled from. A greenlet with no other frame (greenpool's
    own, such as a cursor's reaper) is shown at its outermost frame."""
    pool = make_pool(acquire_sites=True)
    library_file = os.path.join(os.path.dirname(greenpool.__file__), "pool", "not_a_module.py")
    scope: dict[str, Any] = {}
    exec(compile("def library_checkout(pool):\n    return pool.checkout()\n",
                 library_file, "exec"), scope)
    conn, line = scope["library_checkout"](pool), here()
    assert pool.holders()[0].acquired_at == Site(
        HERE, line, "test_the_acquire_site_is_the_first_frame_outside_the_libraries")
    pool.checkin(conn)

    # A greenlet with no frame outside the libraries: its outermost frame.
    library_only = gevent.spawn(scope["library_checkout"], pool)
    library_only.join()
    site = pool.holders()[0].acquired_at
    assert site == Site(library_file, 2, "library_checkout")

    # ... and where it is now: its innermost frame outside gevent.
    exec(compile("import gevent\ndef library_hold(pool):\n    with pool.checkout():\n"
                 "        gevent.sleep(10)\n", library_file, "exec"), scope)
    holding = gevent.spawn(scope["library_hold"], pool)
    until(lambda: len(pool.holders()) == 2)
    newest = pool.holders()[-1]
    assert newest.acquired_at == Site(library_file, 3, "library_hold")
    assert newest.now_at == Site(library_file, 4, "library_hold")
    holding.kill()


# -- exhaustion errors ----------------------------------------------------------------------


def test_the_timeout_error_names_the_longest_holders_bounded() -> None:
    size = LISTED_HOLDERS + 2
    pool = make_pool({"maxPoolSize": size, "waitQueueTimeoutMS": 50}, acquire_sites=True)
    lines = Lines()
    holders = []
    for n in range(size):
        holders.append(spawn(f"holder-{n}", lambda: hold_for(pool, 10, lines)))
        gevent.sleep(0.002)
    until(lambda: pool.stats().in_use == size)
    with pytest.raises(WaitQueueTimeoutError) as raised:
        pool.checkout()
    error = raised.value
    head, title, *listed = str(error).splitlines()
    assert head.startswith("Timed out while checking out a connection from connection pool "
                           "db.test:27017 after ") and f"in use: {size}" in head
    assert title == "Held by, longest first:"
    assert listed[-1] == "  ... and 2 more"
    assert [h.greenlet for h in error.holders] == [f"holder-{n}" for n in range(LISTED_HOLDERS)]
    assert [line.strip() for line in listed[:-1]] == [str(h) for h in error.holders]
    for holder in error.holders:
        assert holder.acquired_at == Site(HERE, lines.acquired, "hold_for")
        assert holder.now_at == Site(HERE, lines.waiting, "hold_for", inside="sleep")
    assert error.holders[0].held_for >= error.holders[-1].held_for
    gevent.killall(holders)


def test_an_operation_timeout_while_waiting_names_the_holders_too() -> None:
    """timeoutMS replaces waitQueueTimeoutMS (the CSOT spec): the same error."""
    pool = make_pool({"maxPoolSize": 1, "waitQueueTimeoutMS": 60_000}, acquire_sites=True)
    lines = Lines()
    holder = spawn("slow", lambda: hold_for(pool, 10, lines))
    until(lambda: pool.stats().in_use == 1)
    with pytest.raises(WaitQueueTimeoutError) as raised:
        pool.checkout(0.02, replaces_wait_queue_timeout=True)
    assert [h.greenlet for h in raised.value.holders] == ["slow"]
    assert f"checked out at {HERE}:{lines.acquired} in hold_for" in str(raised.value)
    holder.kill()


def test_a_greenlet_waiting_for_its_own_connection_shows_as_its_holder() -> None:
    """Two checkouts nested in one greenlet on a pool of one: a deadlock the
    error makes plain (the holder is inside checkout, waiting)."""
    pool = make_pool({"maxPoolSize": 1}, acquire_sites=True)

    def nested() -> None:
        with pool.checkout():
            pool.checkout(timeout=0.01)

    with pytest.raises(WaitQueueTimeoutError) as raised:
        spawn("nested", nested).get()
    (holder,) = raised.value.holders
    assert holder.greenlet == "nested"
    assert holder.now_at is not None and holder.now_at.inside == "Pool.checkout"
    assert holder.acquired_at is not None and holder.acquired_at.lineno == \
        holder.now_at.lineno - 1


def test_the_load_balanced_error_keeps_the_spec_message_first() -> None:
    pool = make_pool({"maxPoolSize": 1, "loadBalanced": True}, acquire_sites=True)
    pool._maintenance.connector = MockConnector(service_ids=lambda conn: ObjectId())
    held = pool.checkout()
    with pytest.raises(WaitQueueTimeoutError) as raised:
        pool.checkout(timeout=0.01)
    lines = str(raised.value).splitlines()
    assert lines[0].startswith("Timeout waiting for connection from the connection pool.")
    assert lines[1:] == ["Held by, longest first:", f"  {raised.value.holders[0]}"]
    pool.checkin(held)


# -- the live view --------------------------------------------------------------------------


def test_the_report_counts_the_waiters_and_the_longest_wait() -> None:
    pool = make_pool({"maxPoolSize": 1}, acquire_sites=True)
    lines = Lines()
    holder = spawn("holder", lambda: hold_for(pool, 10, lines))
    until(lambda: pool.stats().in_use == 1)
    first = gevent.spawn(pool.checkout)
    gevent.sleep(0.05)
    second = gevent.spawn(pool.checkout)
    until(lambda: pool.stats().waiting == 2)
    report = pool.report()
    assert report.waiting == 2 and report.oldest_wait is not None
    assert 0.05 <= report.oldest_wait < 5
    assert (report.in_use, report.available, report.pending, report.max_pool_size) == (1, 0, 0, 1)
    assert [h.greenlet for h in report.holders] == ["holder"]
    text = str(report).splitlines()
    assert text[0].startswith("Connection pool db.test:27017: 1 in use (maxPoolSize 1), "
                              "0 available, 0 pending; 2 waiting, the longest for ")
    assert text[1:] == ["Held by, longest first:", f"  {report.holders[0]}"]
    first.kill()  # the oldest waiter leaves: the next one is the oldest now
    newer = pool.report()
    assert newer.waiting == 1 and newer.oldest_wait is not None
    assert newer.oldest_wait < report.oldest_wait
    second.kill()
    holder.kill()
    empty = pool.report()
    assert (empty.holders, empty.waiting, empty.oldest_wait) == ((), 0, None)
    assert str(empty) == ("Connection pool db.test:27017: 0 in use (maxPoolSize 1), "
                          "1 available, 0 pending; nobody waiting")


def test_pool_reports_cover_the_open_pools_and_a_signal_logs_them(
        caplog: pytest.LogCaptureFixture) -> None:
    address = ("reported.test", 27017)
    pool: Pool[Any] = Pool(address, connector=MockConnector(), acquire_sites=True)
    pool.ready()
    closed: Pool[Any] = Pool(address, connector=MockConnector())
    closed.close()
    conn, line = pool.checkout(), here()
    mine = [r for r in reports.pool_reports() if r.address == address]
    assert len(mine) == 1 and mine[0].holders[0].acquired_at == Site(
        HERE, line, "test_pool_reports_cover_the_open_pools_and_a_signal_logs_them")
    handler = greenpool.report_on_signal(signal.SIGUSR2)
    try:
        with caplog.at_level(logging.WARNING, logger="greenpool"):
            os.kill(os.getpid(), signal.SIGUSR2)
            until(lambda: any("reported.test" in r.getMessage() for r in caplog.records))
    finally:
        handler.cancel()
    (record,) = [r for r in caplog.records if "reported.test" in r.getMessage()]
    assert record.name == "greenpool" and record.levelno == logging.WARNING
    assert (f"process {os.getpid()}: Connection pool reported.test:27017: 1 in use"
            in record.getMessage())
    assert f"checked out at {HERE}:{line}" in record.getMessage()
    fields = record.structured  # type: ignore[attr-defined]
    assert fields["message"] == "Connection pool report"
    assert (fields["serverHost"], fields["serverPort"], fields["inUse"]) == (
        "reported.test", 27017, 1)
    assert fields["holders"][0]["acquireSite"] == f"{HERE}:{line} in " \
        "test_pool_reports_cover_the_open_pools_and_a_signal_logs_them"
    pool.checkin(conn)
    pool.close()


def test_report_on_signal_refuses_what_is_not_a_signal_number() -> None:
    with pytest.raises(TypeError, match=r"signum must be a signal number.*'USR2'"):
        greenpool.report_on_signal("USR2")  # type: ignore[arg-type]


# -- long holds -----------------------------------------------------------------------------


def test_a_long_hold_is_logged_and_sent_once_per_hold(caplog: pytest.LogCaptureFixture) -> None:
    listener = HoldListener()
    plain = monitoring.ConnectionPoolListener  # PyMongo's: no connection_held_too_long
    bare = type("Bare", (plain,), {name: lambda self, event: None for name in dir(plain)
                                   if name.startswith(("pool_", "connection_"))})()
    pool: Pool[Any] = Pool(ADDRESS, {}, connector=MockConnector(), listeners=[listener, bare],
                           acquire_sites=True, long_hold_threshold=0.05)
    pool.ready()
    lines = Lines()
    with caplog.at_level(logging.WARNING, logger="greenpool"):
        holder = spawn("slow-report", lambda: hold_for(pool, 0.3, lines))
        quick = spawn("quick", lambda: hold_for(pool, 0.01, Lines()))
        until(lambda: len(listener.long_holds) == 1)
        holder.join()
        quick.join()
        gevent.sleep(0.1)  # no second report of the same hold, none of the quick one
    (event,) = listener.long_holds
    assert (event.address, event.connection_id, event.threshold) == (ADDRESS, 1, 0.05)
    # Past the threshold, and sent while the connection was held, however long a busy
    # machine made that hold.
    assert 0.05 <= event.duration <= lines.held and event.holder.greenlet == "slow-report"
    assert event.holder.acquired_at == Site(HERE, lines.acquired, "hold_for")
    (record,) = [r for r in caplog.records if "long_hold_threshold" in r.getMessage()]
    assert (record.name, record.levelno) == ("greenpool", logging.WARNING)
    text = record.getMessage()
    assert text.startswith("Connection held longer than long_hold_threshold (0.05 s): "
                           "address=db.test:27017, connection 1, held ")
    assert f"checked out at {HERE}:{lines.acquired} in hold_for" in text
    assert "Current stack of slow-report (most recent call last):" in text
    assert f'File "{HERE}", line {lines.waiting}, in hold_for' in text
    fields = record.structured  # type: ignore[attr-defined]
    assert fields["message"] == "Connection held longer than long_hold_threshold"
    assert (fields["serverHost"], fields["serverPort"], fields["driverConnectionId"]) == (
        "db.test", 27017, 1)
    assert fields["durationMS"] >= 50 and fields["thresholdMS"] == 50
    assert fields["acquireSite"] == f"{HERE}:{lines.acquired} in hold_for"
    assert fields["currentSite"] == f"{HERE}:{lines.waiting} in hold_for, inside sleep"
    assert f"line {lines.waiting}, in hold_for" in fields["currentStack"]

    # The same connection held too long again: a new hold, a new report.
    again = spawn("again", lambda: hold_for(pool, 0.2, Lines()))
    until(lambda: len(listener.long_holds) == 2)
    assert listener.long_holds[1].holder.greenlet == "again"
    again.join()
    pool.close()


def test_a_listener_that_raises_on_a_long_hold_is_logged_not_propagated(
        caplog: pytest.LogCaptureFixture) -> None:
    class Raising(HoldListener):
        def connection_held_too_long(self, event: ConnectionHeldTooLongEvent) -> None:
            raise RuntimeError("listener bug")

    pool: Pool[Any] = Pool(ADDRESS, {}, connector=MockConnector(), listeners=[Raising()],
                           long_hold_threshold=0.01)
    pool.ready()
    with caplog.at_level(logging.WARNING, logger="greenpool"):
        conn = pool.checkout()
        until(lambda: any("raised in connection_held_too_long" in r.getMessage()
                          for r in caplog.records))
    watcher = pool._maintenance.watcher
    assert watcher is not None and not watcher.dead
    pool.checkin(conn)
    pool.close()
    gevent.sleep(0)
    assert watcher.dead and pool._maintenance.watcher is None


def test_the_watcher_runs_only_with_a_threshold_and_ends_with_the_pool() -> None:
    assert make_pool()._maintenance.watcher is None
    pool = make_pool(long_hold_threshold=5)
    watcher = pool._maintenance.watcher
    assert watcher is not None and not watcher.dead and pool.long_hold_threshold == 5.0
    pool.close()
    gevent.sleep(0)
    assert watcher.dead


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), "5", True])
def test_a_bad_long_hold_threshold_is_refused_naming_it(value: object) -> None:
    with pytest.raises(ValueError, match=f"long_hold_threshold must be None or a finite "
                                         f"number of seconds > 0, not {value!r}"):
        Pool(ADDRESS, connector=MockConnector(), long_hold_threshold=value)  # type: ignore


def test_a_kill_of_the_holder_while_reported_leaves_no_hold_record() -> None:
    """The watcher reports from its own greenlet; a holder killed meanwhile
    (its report's listener yields) checks in, and nothing is left."""

    class Yielding(HoldListener):
        def connection_held_too_long(self, event: ConnectionHeldTooLongEvent) -> None:
            holder.kill(block=False)
            gevent.sleep(0.01)
            super().connection_held_too_long(event)

    listener = Yielding()
    pool: Pool[Any] = Pool(ADDRESS, {}, connector=MockConnector(), listeners=[listener],
                           long_hold_threshold=0.02)
    pool.ready()
    holder = spawn("victim", lambda: hold_for(pool, 10, Lines()))
    until(lambda: len(listener.long_holds) == 1)
    assert holder.dead and pool.holders() == [] and pool.stats().in_use == 0
    pool._check_invariants()
    pool.close()


# -- pieces -------------------------------------------------------------------------------


def test_holder_text_covers_every_case() -> None:
    site = Site("app.py", 42, "view")
    assert str(Holder(1, 2.5, "g", site, Site("app.py", 44, "view", "Client.command"))) == (
        "connection 1, held 2.50 s by g: checked out at app.py:42 in view; "
        "now at app.py:44 in view, inside Client.command")
    assert str(Holder(2, 0.0123, "g", None, None, "transaction", pinned=True)) == (
        "connection 2, held 12 ms by g (pinned to a transaction)")
    assert str(Holder(3, 1, "g", site, None, "cursor", ended=True)) == (
        "connection 3, held 1.00 s by g (for a cursor): checked out at app.py:42 in view; "
        "its greenlet has ended without checking it in")
    assert holds.greenlet_name(gevent.getcurrent()) == "the main greenlet"
