"""The condition PyMongo's server selection waits on, made kill-safe.

Rules of this module: :class:`KillSafeCondition`, PyMongo's ``_condition_class``, and
nothing else; it knows ``threading`` and gevent, no PyMongo internals.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import gevent


class KillSafeCondition(threading.Condition):
    """``threading.Condition`` whose :meth:`wait` always returns holding the lock.

    With the stock ``threading.Condition``, a kill that lands while ``wait()``
    re-acquires its lock returns without the lock, and the caller's ``with``
    block then releases a lock it does not hold: "RuntimeError: Semaphore
    released too many times", or two greenlets in one critical section
    (PYTHON-6074). The stock ``wait()`` re-acquires the lock in a ``finally``;
    under gevent that acquire can block, and a kill landing there propagates
    without the lock. This ``wait()`` re-acquires whatever happens, then
    re-raises the first kill; a second one that lands while it re-acquires (its
    own timeout firing, then a ``GreenletExit``, say) is thrown into the
    greenlet again at its next yield, so no kill is ever lost. A notification
    delivered to a waiter that is then killed is lost, so it suits broadcast
    use (PyMongo's topology calls ``notify_all``), not a FIFO queue.
    """

    _is_owned: Callable[[], bool]
    _release_save: Callable[[], Any]
    _acquire_restore: Callable[[Any], None]
    _waiters: Any

    def wait(self, timeout: float | None = None) -> bool:
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        waiter = threading._allocate_lock()  # type: ignore[attr-defined]
        waiter.acquire()
        self._waiters.append(waiter)
        saved_state = self._release_save()
        gotit = False
        pending: BaseException | None = None
        try:
            if timeout is None:
                waiter.acquire()
                gotit = True
            elif timeout > 0:
                gotit = waiter.acquire(True, timeout)
            else:
                gotit = waiter.acquire(False)
        except BaseException as error:
            pending = error
        later: list[BaseException] = []
        while True:
            try:
                self._acquire_restore(saved_state)
                break
            except BaseException as error:
                if pending is None:
                    pending = error
                else:
                    later.append(error)
        if not gotit:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
        for kill in later:
            _throw_later(gevent.getcurrent(), kill)
        if pending is not None:
            raise pending
        return gotit


def _throw_later(glet: Any, error: BaseException) -> None:
    """Throw ``error`` into ``glet`` at its next yield, as a kill would be."""

    def throw() -> None:
        if not glet.dead:
            glet.throw(error)

    gevent.get_hub().loop.run_callback(throw)
