"""Every pool's report, on demand or on a signal.

What lives here: the registry of open pools of both routes (the core
:class:`~greenpool.Pool` and ``greenpool.pymongo``'s ``GreenPool`` register
themselves), :func:`pool_reports`, and :func:`report_on_signal`, the opt-in
handler that writes every pool's :class:`~greenpool.pool.holds.PoolReport`
to the log when the process receives a signal: ``kill -USR2 <pid>`` on a
running gunicorn worker shows who holds its connections and who waits,
with nothing to deploy.

What must not live here: the reports' content (``holds.py``) and any pool
state. Imports: the pool core only.
"""

from __future__ import annotations

import logging
import os
import signal
import weakref
from typing import Any, Protocol

import gevent

from greenpool.address import format_address
from greenpool.pool.holds import PoolReport

__all__ = ["log_pool_reports", "pool_reports", "report_on_signal", "track", "untrack"]

LOGGER = logging.getLogger("greenpool")


class Reporting(Protocol):
    """A pool that reports (both routes' pools do)."""

    def report(self) -> PoolReport: ...


_pools: weakref.WeakSet[Any] = weakref.WeakSet()


def track(pool: Reporting) -> None:
    """Include ``pool`` in :func:`pool_reports` from now on."""
    _pools.add(pool)


def untrack(pool: Reporting) -> None:
    _pools.discard(pool)


def pool_reports() -> list[PoolReport]:
    """A report of every open pool of this process (both routes)."""
    reports = [pool.report() for pool in list(_pools)]
    return sorted(reports, key=lambda report: format_address(report.address))


def log_pool_reports() -> None:
    """Write every open pool's report to the ``greenpool`` logger, one
    record each, at WARNING: asked for on purpose, it must show where
    logging was never configured (Python then prints WARNING and above to
    stderr, which gunicorn's error log captures)."""
    reports = pool_reports()
    if not reports:
        LOGGER.warning("greenpool: no open connection pools in process %d", os.getpid())
    for report in reports:
        LOGGER.warning("greenpool: process %d: %s", os.getpid(), report,
                       extra={"structured": report.fields()})


def report_on_signal(signum: int = signal.SIGUSR2) -> Any:
    """Write every pool's report to the log whenever this process receives
    ``signum`` (default SIGUSR2), from a new greenlet.

    Call it in the process whose pools you want to see: in a gunicorn
    worker, from the ``post_worker_init`` hook (gunicorn resets the workers'
    signal handlers after the fork, and SIGUSR2 to gunicorn's *master*
    means "upgrade the binary": send it to a worker's pid).
    Returns gevent's handler object; its ``cancel()`` uninstalls it.

    >>> greenpool.report_on_signal()  # doctest: +SKIP
    """
    if not isinstance(signum, int) or isinstance(signum, bool):
        raise TypeError(f"signum must be a signal number such as signal.SIGUSR2, not {signum!r}")
    return gevent.signal_handler(signum, log_pool_reports)
