"""Hub blocks: how long the gevent hub could run no other greenlet, step by step.

:class:`HubBlockDetector` runs a ticker greenlet that asks to wake every ``interval``
(5 ms). How late it wakes is how long the hub ran nothing else: something held it, a
blocking call or a stretch of work that never yields. Each late wake-up (a *gap*) is
charged to the steps (:meth:`HubBlockDetector.step`) it overlaps::

    with HubBlockDetector(limit=0.05) as detector:
        with detector.step("connect"):
            client.command("admin", {"ping": 1})
    for step in detector.steps:
        step.name, step.longest, step.blocks   # blocks: the gaps over the limit, with stacks

A watcher thread (a real one, patched or not) names the code: while the ticker is later
than ``limit``, it takes the stack of the hub's thread once per gap, which is the stack
of whatever holds the hub.

On a shared machine the operating system also stops the process now and then, to run
other processes: time spent waiting for a CPU is nobody's block in this program. Linux
counts it per thread (``/proc/thread-self/schedstat``, the run-queue wait), so each gap is
measured without it (:attr:`Gap.block`); the raw lateness and the run-queue wait are
kept (:attr:`Gap.late`, :attr:`Gap.queued`), and so is the time the thread spent on a CPU
(:attr:`Gap.cpu`): a block that is all CPU is work that never yields; one with little CPU
is a call that waited (a blocking socket, a lock). Without that file (another OS), gaps
are their raw lateness. Each gap also keeps what the whole process ran on a CPU
(:attr:`Gap.process_cpu`: another thread holding the GIL), how late the watcher woke
(:attr:`Gap.watcher_late`: nothing of the process ran) and how long Python's garbage
collector ran (:attr:`Gap.gc`, which stops every thread), to tell a failure's cause.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import gevent
from gevent.monkey import get_original

_SCHEDSTAT = "/proc/thread-self/schedstat"
# Gaps shorter than this are not kept (a timer's usual slack).
_KEEP = 0.002


@dataclass
class Gap:
    """One late wake-up of the ticker: the hub ran nothing else for :attr:`block` seconds."""

    start: float
    end: float
    #: How much later than asked the ticker woke (seconds).
    late: float
    #: Of the gap, the time the hub's thread waited for a CPU (the OS's doing).
    queued: float
    #: Of the gap, the time the hub's thread ran on a CPU.
    cpu: float
    #: Of the gap, the time every thread of the process ran on a CPU.
    process_cpu: float
    #: The longest the watcher thread went without waking, during the gap (beyond
    #: its interval).
    watcher_late: float
    #: Of the gap, the time Python's garbage collector ran (in any thread).
    gc: float
    #: The stack of the hub's thread while the gap was longer than the limit.
    stack: str = ""

    @property
    def block(self) -> float:
        """The hub block: the lateness, less the time the OS kept the thread waiting."""
        return max(self.late - self.queued, 0.0)


@dataclass
class Step:
    """A named stretch of the program, and the gaps charged to it."""

    name: str
    start: float
    end: float = float("inf")
    gaps: list[Gap] = field(default_factory=list)
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def longest(self) -> Gap | None:
        """The gap with the longest block, if any was kept."""
        return max(self.gaps, key=lambda gap: gap.block, default=None)

    def blocks(self, limit: float) -> list[Gap]:
        """The gaps whose block is over ``limit``."""
        return [gap for gap in self.gaps if gap.block > limit]


class HubBlockDetector:
    """A ticker greenlet and a watcher thread; see the module docstring.

    :param limit: a gap with a block longer than this gets the stack that held the hub
        (:meth:`Step.blocks`).
    :param interval: how often the ticker asks to wake.
    """

    def __init__(self, *, limit: float = 0.05, interval: float = 0.005) -> None:
        self.limit = limit
        self.interval = interval
        self.steps: list[Step] = []
        self._gaps: list[Gap] = []
        self._last_tick = 0.0
        self._ticker: gevent.Greenlet | None = None
        self._stopping = False
        self._watcher_done: Any = None
        self._hub_thread = 0
        self._schedstat: int | None = None
        # The watcher's stack of the gap in progress: (the tick it follows, the stack).
        self._pending: tuple[float, str] = (0.0, "")
        # How late the watcher woke at worst since the last tick.
        self._watcher_late = 0.0
        # The garbage collector's running total, and when its current run started.
        self._gc_total = 0.0
        self._gc_started = 0.0

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> Self:
        self._hub_thread = get_original("threading", "get_ident")()
        with contextlib.suppress(OSError):
            self._schedstat = os.open(_SCHEDSTAT, os.O_RDONLY)  # this (the hub's) thread's
        gc.callbacks.append(self._on_gc)
        self._last_tick = time.perf_counter()
        self._ticker = gevent.spawn(self._tick)
        lock = get_original("_thread", "allocate_lock")()
        lock.acquire()
        self._watcher_done = lock
        get_original("_thread", "start_new_thread")(self._watch, ())
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._ticker is not None:
            self._ticker.kill()
        if self._watcher_done is not None:
            self._watcher_done.acquire()  # the watcher sleeps at most one interval
        if self._schedstat is not None:
            os.close(self._schedstat)
            self._schedstat = None
        gc.callbacks.remove(self._on_gc)
        self._charge()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[Step]:
        """Charge the gaps during the block to a step called ``name``.

        An exception ends the step (noted in :attr:`Step.error`) and propagates.
        """
        gevent.sleep(2 * self.interval)  # a tick between steps: no gap spans two of them
        step = Step(name, time.perf_counter())
        self.steps.append(step)
        try:
            yield step
        except BaseException as error:
            step.error = f"{type(error).__name__}: {error}"
            raise
        finally:
            step.end = time.perf_counter()

    # -- measuring ----------------------------------------------------------------------

    def _clocks(self) -> tuple[float, float]:
        """The hub's thread's time on a CPU and waiting for one, in seconds."""
        if self._schedstat is None:
            return 0.0, 0.0
        fields = os.pread(self._schedstat, 128, 0).split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self._gc_total += time.perf_counter() - self._gc_started

    def _tick(self) -> None:
        cpu, queued = self._clocks()
        process_cpu, collected = time.process_time(), self._gc_total
        while True:
            gevent.sleep(self.interval)
            now = time.perf_counter()
            late = now - self._last_tick - self.interval
            now_cpu, now_queued = self._clocks()
            now_process_cpu, now_collected = time.process_time(), self._gc_total
            watcher_late, self._watcher_late = self._watcher_late, 0.0
            if late > _KEEP:
                tick, stack = self._pending
                self._gaps.append(Gap(
                    self._last_tick, now, late, now_queued - queued, now_cpu - cpu,
                    now_process_cpu - process_cpu, watcher_late, now_collected - collected,
                    stack if tick == self._last_tick else ""))
            self._last_tick, cpu, queued = now, now_cpu, now_queued
            process_cpu, collected = now_process_cpu, now_collected

    def _watch(self) -> None:
        sleep = get_original("time", "sleep")
        try:
            seen = 0.0
            woke = time.perf_counter()
            while not self._stopping:
                sleep(self.interval)
                now = time.perf_counter()
                self._watcher_late = max(self._watcher_late, now - woke - self.interval)
                woke = now
                tick = self._last_tick
                if tick != seen and time.perf_counter() - tick > self.limit:
                    seen = tick  # one stack per gap: the code holding the hub now
                    frame = sys._current_frames().get(self._hub_thread)
                    if frame is not None:
                        self._pending = (tick, "".join(traceback.format_stack(frame)))
        finally:
            self._watcher_done.release()

    def _charge(self) -> None:
        for step in self.steps:
            step.gaps = [gap for gap in self._gaps
                         if gap.start < step.end and gap.end > step.start]
