"""Every gevent wait greenpool does lives in this module.

Four primitives, each small enough to reason about completely:

* :class:`Slot`: one checkout's place in line. It is resolved at most once:
  delivered a value, failed with an error, expired by its own timer, or
  cancelled because its greenlet was killed. The first of those wins and the
  others find the slot taken (deliver/fail return False), so a connection is
  never handed to a greenlet that has left.
* :class:`WaitQueue`: slots in arrival order. ``deliver`` gives a value to
  the oldest live slot; that is the whole fairness policy. Slots that left
  early are skipped and compacted away, so leaving is O(1).
* :class:`Alarm`: the maintenance greenlet's (and the monitor's) sleep, cut
  short by ``ring()``.
  Its timer does not keep ``Hub.join()`` from returning.
* :class:`Turns`: fair turns for checkouts that find something free and so
  never join a queue (see its docstring).

gevent switches greenlets only when one blocks, so the code here changes its
state without yielding and needs no lock. Resolving a slot and waking its
greenlet are two steps: resolution is immediate, the switch is a hub callback,
and the callback checks that the greenlet is still waiting on this very slot
before switching into it. ``fail_all`` and ``deliver_all`` wake every slot
they resolve from one callback, in FIFO order (as gevent's ``Event.set()``
does): the order the per-slot callbacks would have had, without 10,000 of
them after a clear.

A slot holds no reference to the error its wait raised: the error's traceback
holds the waiting frame, and that frame holds the slot, a cycle only the
garbage collector could free (a clear would leave one per waiter).

What must not live here: pool policy (who gets what; that is the pool's),
events, sockets. This module imports gevent and nothing of greenpool.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from time import monotonic
from typing import Any, Generic, TypeVar

from gevent import get_hub, getcurrent, sleep
from gevent import spawn as gevent_spawn
from gevent.exceptions import InvalidSwitchError

__all__ = ["Alarm", "Slot", "Turns", "WaitQueue", "WaitTimedOut", "spawn_background"]

T = TypeVar("T")

# Rebuild the deque once cancelled slots outnumber live ones by this much.
_COMPACT_SLACK = 32


class WaitTimedOut(Exception):
    """A slot's own timer expired before anything was delivered to it."""


class Slot(Generic[T]):
    """One waiter's place in a :class:`WaitQueue`, resolved at most once."""

    __slots__ = ("_error", "_greenlet", "_hub", "_queue", "_resolved", "_value", "since")

    def __init__(self, queue: WaitQueue[T], since: float) -> None:
        #: When its waiter started waiting (``time.monotonic()``).
        self.since = since
        self._queue = queue
        self._resolved = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._greenlet: Any = None
        self._hub: Any = None

    @property
    def resolved(self) -> bool:
        return self._resolved

    def deliver(self, value: T) -> bool:
        """Hand ``value`` to this slot; False if it was already resolved."""
        if self._resolved:
            return False
        self._resolve()
        self._value = value
        self._wake_soon()
        return True

    def fail(self, error: BaseException) -> bool:
        """Make this slot's wait raise ``error``; False if already resolved."""
        if self._resolved:
            return False
        self._resolve()
        self._error = error
        self._wake_soon()
        return True

    def wait(self, timeout: float | None) -> T:
        """Block until resolved; return the value or raise the error (once).

        Raises :class:`WaitTimedOut` when ``timeout`` seconds pass first
        (``timeout <= 0``: at once, unless already resolved). If the greenlet
        is killed while waiting (GreenletExit, an outer gevent.Timeout), the
        slot is cancelled and the exception propagates; a value delivered just
        before the kill is kept for :meth:`abandon`.
        """
        if not self._resolved:
            if timeout is not None and timeout <= 0:
                self._expire()
            else:
                self._block(timeout)
        error = self._error
        if error is not None:
            self._error = None  # raised once; see the module docstring on cycles
            try:
                raise error
            finally:
                del error  # this frame's reference, for the same reason
        return self._value  # type: ignore[return-value]

    def abandon(self) -> T | None:
        """Leave the line for good (the waiter was killed): cancel the slot if
        it is unresolved, else return the value delivered to it, at most once.
        Safe to call whether or not :meth:`wait` ran or returned."""
        if not self._resolved:
            self._resolve()
            return None
        value, self._value = self._value, None
        return value

    def _block(self, timeout: float | None) -> None:
        hub = self._hub = get_hub()
        self._greenlet = getcurrent()
        timer = None
        if timeout is not None:
            timer = hub.loop.timer(timeout)
            timer.start(self._expire)
        try:
            switched_with = hub.switch()
            if switched_with is not self:
                raise InvalidSwitchError(f"Invalid switch into a greenpool wait: {switched_with!r}")
        except BaseException:
            if not self._resolved:
                self._resolve()
            raise
        finally:
            self._greenlet = None
            if timer is not None:
                timer.close()

    def _resolve(self) -> None:
        self._resolved = True
        self._queue.waiting -= 1

    def _wake_soon(self) -> None:
        if self._greenlet is not None:
            self._hub.loop.run_callback(self._wake)

    def _wake(self) -> None:
        # Runs in the hub. The greenlet may have stopped waiting on this slot
        # since the callback was scheduled (killed); then there is no one to wake.
        greenlet = self._greenlet
        if greenlet is not None:
            greenlet.switch(self)

    def _expire(self) -> None:
        if self._resolved:
            return
        self._resolve()
        self._error = WaitTimedOut()
        self._wake()


class WaitQueue(Generic[T]):
    """Slots in arrival order; values go to the oldest live slot."""

    __slots__ = ("_slots", "waiting")

    def __init__(self) -> None:
        self._slots: deque[Slot[T]] = deque()
        #: How many slots are still waiting (cancelled ones do not count).
        self.waiting = 0

    def __len__(self) -> int:
        return self.waiting

    def join(self, since: float | None = None) -> Slot[T]:
        """A new slot at the back of the line, for a waiter that started
        waiting at ``since`` (``time.monotonic()``; None: now)."""
        if len(self._slots) > 2 * self.waiting + _COMPACT_SLACK:
            self._slots = deque(slot for slot in self._slots if not slot.resolved)
        slot: Slot[T] = Slot(self, monotonic() if since is None else since)
        self._slots.append(slot)
        self.waiting += 1
        return slot

    def join_first(self, since: float) -> Slot[T]:
        """A new slot at the front of the line, for a waiter served before
        everyone who waits now (one that must wait again after it was
        served, as GreenPool's checkout whose idle connection had perished)."""
        slot: Slot[T] = Slot(self, since)
        self._slots.appendleft(slot)
        self.waiting += 1
        return slot

    def oldest_since(self) -> float | None:
        """When the longest-waiting live slot's waiter started waiting, if any."""
        for slot in self._slots:
            if not slot._resolved:
                return slot.since
        return None

    def deliver(self, value: T) -> bool:
        """Give ``value`` to the oldest live slot; False if there is none."""
        slots = self._slots
        while slots:
            if slots.popleft().deliver(value):
                return True
        return False

    def deliver_all(self, value: T) -> int:
        """Give ``value`` to every live slot (a broadcast); return how many."""
        return self._resolve_all(value, None)

    def fail_all(self, make_error: Callable[[], BaseException]) -> int:
        """Fail every live slot with its own ``make_error()``; return how many."""
        return self._resolve_all(None, make_error)

    def _resolve_all(self, value: T | None,
                     make_error: Callable[[], BaseException] | None) -> int:
        """Deliver ``value`` to every live slot, or fail each with its own
        ``make_error()``; then wake their greenlets, oldest first."""
        resolved = 0
        blocked: list[Slot[T]] = []
        slots, self._slots = self._slots, deque()
        for slot in slots:
            if slot._resolved:
                continue
            slot._resolve()
            if make_error is None:
                slot._value = value
            else:
                slot._error = make_error()
            resolved += 1
            if slot._greenlet is not None:
                blocked.append(slot)
        if blocked:
            blocked[0]._hub.loop.run_callback(_wake_each, iter(blocked))
        return resolved


def _wake_each(slots: Iterator[Slot[Any]]) -> None:
    # Runs in the hub, once for a whole fail_all or deliver_all: one callback
    # rather than one per slot, in the same order. A woken greenlet that dies
    # of an exception raises it here, in its parent: the rest wake from a new
    # callback, and the hub reports the exception as it would a per-slot one's.
    for slot in slots:
        try:
            slot._wake()
        except BaseException:
            slot._hub.loop.run_callback(_wake_each, slots)
            raise


class Alarm:
    """A sleep that :meth:`ring` cuts short; a ring while awake is not lost."""

    __slots__ = ("_greenlet", "_hub", "_rung")

    def __init__(self) -> None:
        self._rung = False
        self._greenlet: Any = None
        self._hub: Any = None

    def ring(self) -> None:
        """Wake the sleeper now, or make its next sleep return at once."""
        self._rung = True
        if self._greenlet is not None:
            self._hub.loop.run_callback(self._wake)

    def forget(self) -> None:
        """Drop a ring received while awake: the next sleep runs its course
        unless rung again (for a sleeper whose work answers the rings so far)."""
        self._rung = False

    def sleep(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (None: until rung), or one hub turn if rung since
        the last sleep: it always yields, so a sleeper cannot spin.

        The timer is unreferenced: a greenlet sleeping here never keeps
        ``Hub.join()`` (or the end of a program) waiting.
        """
        hub = self._hub = get_hub()
        self._greenlet = getcurrent()
        timer = None
        if self._rung:
            hub.loop.run_callback(self._wake)
        elif seconds is not None:
            timer = hub.loop.timer(max(seconds, 0.0), ref=False)
            timer.start(self._wake)
        try:
            while hub.switch() is not self:
                pass
        finally:
            self._greenlet = None
            if timer is not None:
                timer.close()
        self._rung = False

    def _wake(self) -> None:
        greenlet = self._greenlet
        if greenlet is not None:
            greenlet.switch(self)


class Turns:
    """Fair turns at checkout, for greenlets that have not queued yet.

    The wait queue is fair to greenlets that wait. But a greenlet whose server
    answers before it blocks never yields: it checks in, finds its connection
    free again (nobody queues, because the greenlets spawned with it have not
    even started) and checks out again, turn after turn. :meth:`take`, called
    by every checkout that could take without queueing (the pool is ready,
    nobody waits), stops that: a greenlet that checks out
    again with no other checkout in between, while other greenlets are ready
    to run, first lets them run (``sleep(0)`` puts it behind every pending
    hub callback, greenlet starts and wake-ups included), so they reach the
    pool, and the queue, before it takes another turn.

    The uncontended path pays a ``getcurrent()``, a comparison and a look at
    the hub's callback queue; a lone greenlet looping over commands yields
    only when something else is ready to run. Nothing is held across the
    yield, so a kill there costs nothing.
    """

    __slots__ = ("_last", "_loop")

    def __init__(self) -> None:
        self._last: Any = None  # the greenlet that checked out last
        self._loop: Any = None  # the hub's loop, on first need (a pool has one hub)

    def take(self) -> Any:
        """Yield once first if this greenlet also had the previous turn and
        others are ready to run. Returns the greenlet taking the turn (the
        current one), which the caller would otherwise look up again."""
        current = getcurrent()
        if current is not self._last:
            self._last = current
            return current
        loop = self._loop
        if loop is None:
            loop = self._loop = get_hub().loop
        # Hub callbacks queued: greenlets to start or wake. A loop that does
        # not expose its queue is assumed to have some.
        if getattr(loop, "_callbacks", True):
            sleep(0)
            self._last = current  # whoever went meanwhile, this is the latest turn
        return current


def spawn_background(function: Callable[..., object], *args: Any) -> Any:
    """``gevent.spawn(function, *args)`` for greenpool's own long-lived loops
    (monitors, pollers, maintenance), which start over if they return early.

    Ctrl-C raises KeyboardInterrupt in whichever greenlet runs when it comes.
    If that is one of these loops, the interrupt goes to the main greenlet,
    as gevent would send it, but without gevent's traceback of the loop on
    stderr. The loop starts again should the program carry on, so an
    interrupt that the program handles does not stop the monitoring.
    """
    return gevent_spawn(_background, function, *args)


def _background(function: Callable[..., object], *args: Any) -> None:
    while True:
        try:
            function(*args)
            return
        except KeyboardInterrupt as interrupt:
            get_hub().handle_system_error(KeyboardInterrupt, interrupt,
                                          interrupt.__traceback__)
