"""The wait primitives: one-shot slots, the FIFO queue, the alarm."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import gevent
import pytest

from greenpool.pool.waitqueue import Alarm, WaitQueue, WaitTimedOut
from tests.turns import switches_during


def test_deliver_goes_to_the_oldest_waiter() -> None:
    queue: WaitQueue[str] = WaitQueue()
    got: list[tuple[int, str]] = []

    def waiter(n: int) -> None:
        got.append((n, queue.join().wait(None)))

    greenlets = [gevent.spawn(waiter, n) for n in range(5)]
    gevent.sleep(0)
    assert len(queue) == 5
    for value in "abcde":
        assert queue.deliver(value)
    gevent.joinall(greenlets, timeout=5)
    assert got == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")]
    assert len(queue) == 0
    assert not queue.deliver("f")


def test_slot_resolves_once() -> None:
    queue: WaitQueue[int] = WaitQueue()
    slot = queue.join()
    assert slot.deliver(1)
    assert not slot.deliver(2)
    assert not slot.fail(RuntimeError("late"))
    assert slot.wait(0) == 1  # resolved before waiting: no block, even with timeout 0


def test_fail_raises_in_the_waiter() -> None:
    queue: WaitQueue[int] = WaitQueue()
    slot = queue.join()
    greenlet = gevent.spawn(slot.wait, None)
    gevent.sleep(0)
    assert slot.fail(KeyError("boom"))
    with pytest.raises(KeyError, match="boom"):
        greenlet.get(timeout=5)


def test_timeout_leaves_the_queue_at_once() -> None:
    queue: WaitQueue[int] = WaitQueue()
    slot = queue.join()
    started = time.monotonic()
    with pytest.raises(WaitTimedOut):
        slot.wait(0.05)
    assert time.monotonic() - started >= 0.04  # not before its time
    assert len(queue) == 0
    assert not queue.deliver(1), "a timed-out slot must not take a value"


def test_zero_timeout_expires_without_blocking() -> None:
    queue: WaitQueue[int] = WaitQueue()
    with pytest.raises(WaitTimedOut):
        queue.join().wait(0)
    assert len(queue) == 0


def test_two_waiters_one_dies() -> None:
    """gevent's test__queue test_two_waiters_one_dies: a cancelled waiter
    does not swallow the value meant for the next one."""
    queue: WaitQueue[str] = WaitQueue()
    dead = gevent.spawn(queue.join().wait, None)
    alive_slot = None

    def alive() -> str:
        nonlocal alive_slot
        alive_slot = queue.join()
        return alive_slot.wait(None)

    survivor = gevent.spawn(alive)
    gevent.sleep(0)
    dead.kill()
    assert queue.deliver("value")
    assert survivor.get(timeout=5) == "value"


def test_outer_timeout_is_not_lost() -> None:
    """gevent's timing mixin test: an outer gevent.Timeout propagates as
    itself, not as the slot's own WaitTimedOut, and cancels the slot."""
    queue: WaitQueue[int] = WaitQueue()
    slot = queue.join()
    outer = gevent.Timeout(0.01)
    with pytest.raises(gevent.Timeout) as raised, outer:
        slot.wait(10)
    assert raised.value is outer
    assert slot.resolved and len(queue) == 0
    assert not queue.deliver(1)


def test_kill_after_delivery_keeps_the_value_as_leftover() -> None:
    """A value delivered just before the waiter is killed is not lost."""
    queue: WaitQueue[str] = WaitQueue()
    slot = queue.join()
    waiter = gevent.spawn(slot.wait, None)
    gevent.sleep(0)
    # Hub callbacks run in order: the kill is scheduled before the wake-up
    # that deliver() schedules, so it lands after the slot was resolved.
    gevent.get_hub().loop.run_callback(waiter.throw, gevent.GreenletExit())
    assert queue.deliver("conn")
    gevent.sleep(0.01)  # the stale wake-up callback must find nobody to wake
    assert waiter.dead
    assert slot.abandon() == "conn"
    assert slot.abandon() is None  # at most once


def test_abandon_before_waiting_cancels_the_slot() -> None:
    """A waiter killed after joining but before waiting must leave the line."""
    queue: WaitQueue[str] = WaitQueue()
    slot = queue.join()
    assert slot.abandon() is None
    assert len(queue) == 0 and not queue.deliver("conn")


def test_fail_all_reaches_every_live_waiter_with_its_own_error() -> None:
    queue: WaitQueue[int] = WaitQueue()
    slots = [queue.join() for _ in range(4)]
    slots[1].deliver(7)
    greenlets = [gevent.spawn(slot.wait, None) for slot in slots]
    gevent.sleep(0)
    assert queue.fail_all(lambda: RuntimeError("cleared")) == 3
    errors = [g.exception for g in gevent.joinall(greenlets, timeout=5) if g.exception]
    assert len(errors) == 3 and len({id(e) for e in errors}) == 3
    assert greenlets[1].value == 7
    assert len(queue) == 0


def test_deliver_all_wakes_every_live_waiter() -> None:
    queue: WaitQueue[str] = WaitQueue()
    slots = [queue.join() for _ in range(3)]
    slots[0].abandon()
    greenlets = [gevent.spawn(slot.wait, 5) for slot in slots[1:]]
    gevent.sleep(0)
    assert queue.deliver_all("known") == 2
    assert [g.get(timeout=5) for g in greenlets] == ["known", "known"]
    assert len(queue) == 0


def test_cancelled_slots_are_compacted() -> None:
    queue: WaitQueue[int] = WaitQueue()
    for _ in range(1000):
        with pytest.raises(WaitTimedOut):
            queue.join().wait(0)
    queue.join()
    assert len(queue._slots) < 100, "cancelled slots must not pile up"


def test_alarm_ring_cuts_sleep_short_and_is_not_lost() -> None:
    alarm = Alarm()
    started = time.monotonic()
    gevent.spawn_later(0.02, alarm.ring)
    alarm.sleep(10)
    assert time.monotonic() - started < 5  # woken by the ring, far from the 10 s (half)
    alarm.ring()  # rung while awake: the next sleep returns after one hub turn
    assert switches_during(lambda: alarm.sleep(10)) == 1  # to the hub and back


def test_alarm_forget_drops_a_ring_received_while_awake() -> None:
    alarm = Alarm()
    alarm.ring()
    alarm.forget()
    started = time.monotonic()
    # In a greenlet joined with a timeout: the alarm's own timer keeps no
    # hub alive, and this test's main greenlet would have nothing to wait on.
    gevent.spawn(alarm.sleep, 0.05).join(5)
    assert time.monotonic() - started >= 0.045, "a forgotten ring still cut the sleep short"
    gevent.spawn_later(0.01, alarm.ring)  # a ring after forget() still wakes the sleeper
    started = time.monotonic()
    alarm.sleep(10)
    assert time.monotonic() - started < 5  # woken by the ring, far from the 10 s (half)


def test_alarm_sleep_always_yields() -> None:
    alarm = Alarm()
    ran: list[bool] = []
    gevent.spawn(ran.append, True)
    alarm.ring()
    alarm.sleep(None)
    assert ran == [True], "a rung alarm must still let other greenlets run"


def test_alarm_does_not_keep_the_hub_alive() -> None:
    """A greenlet sleeping on an Alarm must not keep Hub.join() waiting."""
    script = textwrap.dedent("""
        import gevent
        from greenpool.pool.waitqueue import Alarm
        gevent.spawn(Alarm().sleep, 3600)
        gevent.spawn(Alarm().sleep, None)
        gevent.sleep(0)
        assert gevent.get_hub().join(timeout=30), "Hub.join() timed out"
        print("joined")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "joined"


def test_ctrl_c_in_a_background_loop_reaches_main_quietly_and_the_loop_goes_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    from greenpool.pool.waitqueue import spawn_background

    runs: list[int] = []

    def loop() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise KeyboardInterrupt  # as Ctrl-C would, while this greenlet ran
        gevent.sleep(0)

    greenlet = spawn_background(loop)
    with pytest.raises(KeyboardInterrupt):
        gevent.sleep(0.5)  # the main greenlet gets the interrupt
    greenlet.join(timeout=5)
    assert greenlet.dead and greenlet.successful()
    assert len(runs) == 2  # the loop started again once the program carried on
    assert "Traceback" not in capsys.readouterr().err
