"""The owner mark: one byte that tells, cheaply, whether the process forked.

The pool checks its owner on every checkout. ``os.getpid()`` is a system
call (about 160 ns here, as much as a gevent Semaphore's acquire and release
together); reading this byte costs about 25 ns. On Linux 4.14 and later the
byte lives on a private page marked ``MADV_WIPEONFORK``: the kernel hands
any child a zeroed copy, whether it forked through ``os.fork`` or libc's
``fork()`` as uWSGI does, so forks that bypass Python's at-fork hooks are
caught too. Elsewhere the mark compares pids.

What lives here: the mark alone. What must not: what a pool does about a
fork (:mod:`greenpool.pool.forking`). Imports: the standard library only.
"""

from __future__ import annotations

import mmap
import os
import sys
from typing import Protocol

__all__ = ["OwnerMark", "owner_mark"]

# Linux 4.14 and later; Python names the constant only if built with headers
# that have it.
_MADV_WIPEONFORK: int | None = getattr(
    mmap, "MADV_WIPEONFORK", 18 if sys.platform == "linux" else None)


class OwnerMark(Protocol):
    """``mark[0]`` is 1 in the process that made the mark, 0 in any process
    forked from it; ``mark[0] = 1`` makes the current process the owner."""

    def __getitem__(self, index: int, /) -> int: ...
    def __setitem__(self, index: int, value: int, /) -> None: ...


def owner_mark() -> OwnerMark:
    """A new :class:`OwnerMark`: a private page the kernel wipes in any child,
    whether it forked through ``os.fork`` or libc's ``fork()`` (as uWSGI
    does); where the kernel cannot, a pid comparison."""
    if _MADV_WIPEONFORK is not None:
        try:
            page = mmap.mmap(-1, mmap.PAGESIZE,
                             flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, AttributeError):
            pass
        else:
            try:
                page.madvise(_MADV_WIPEONFORK)
            except (OSError, AttributeError):  # an older kernel: EINVAL
                page.close()
            else:
                page[0] = 1
                return page
    return _PidMark()


class _PidMark:
    """The owner mark where no page is wiped on fork: a system call per read."""

    def __init__(self) -> None:
        self._pid = os.getpid()

    def __getitem__(self, index: int, /) -> int:
        return int(self._pid == os.getpid())

    def __setitem__(self, index: int, value: int, /) -> None:
        self._pid = os.getpid()

