"""Who holds a GreenPool's connections: its hold records, report, error and watch.

Rules of this module: :class:`HoldingPool`, the base of
:class:`~greenpool.pymongo.pool.GreenPool` that says who holds its connections,
with :mod:`greenpool.pool.holds` (the records and their text, shared with the core
pool) and :mod:`greenpool.pool.longholds` (the watcher). GreenPool's checkout stores
each checked-out connection's record (:data:`Record`) in the mapping of its
checked-out connections (``_gp_out``), and its checkin drops it with the entry:
one step, so a kill cannot leave a record behind. Nothing here waits or changes a
counter.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import Any, NoReturn

import gevent
from gevent import getcurrent
from pymongo.errors import WaitQueueTimeoutError

from greenpool.pool import reports
from greenpool.pool.holds import (
    LISTED_HOLDERS,
    Hold,
    Holder,
    PoolReport,
    RawSite,
    describe_holders,
    records_sites,
    snapshot,
)
from greenpool.pool.longholds import ConnectionHeldTooLongEvent, check_threshold, describe, watch
from greenpool.pool.monitoring import report_long_hold
from greenpool.pool.waitqueue import Alarm, WaitQueue
from greenpool.pymongo.before_4_18 import BasePool
from greenpool.pymongo.internals import Connection

#: A checked-out connection's record: its holder greenlet, since when, where.
Record = tuple[Any, float, RawSite | None]


class HoldingPool(BasePool):
    """PyMongo's pool, saying who holds its connections (see the module docstring).

    :param acquire_sites: record where each checkout came from (see
        :class:`greenpool.Pool`; None: only with a ``long_hold_threshold``).
    :param long_hold_threshold: seconds (None: never): report connections held
        longer, once per checkout.
    """

    def __init__(self, *args: Any, acquire_sites: bool | None = None,
                 long_hold_threshold: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gp_threshold = check_threshold(long_hold_threshold)
        self._gp_sites = records_sites(acquire_sites, self._gp_threshold)
        # Connections checked out of this pool in this process, not yet back,
        # each with its hold record.
        self._gp_out: weakref.WeakKeyDictionary[Connection, Record] = (
            weakref.WeakKeyDictionary())
        self._gp_watcher: Any = None
        if self._gp_threshold is not None:
            self._gp_watcher = gevent.spawn(watch, weakref.ref(self), Alarm())
        reports.track(self)

    def _gp_stop_holding(self) -> None:
        """The pool is closed: no report, no watcher."""
        reports.untrack(self)
        watcher, self._gp_watcher = self._gp_watcher, None
        if watcher is not None and watcher is not getcurrent():
            watcher.kill(block=False)

    # -- what users read ----------------------------------------------------------

    @property
    def long_hold_threshold(self) -> float | None:
        """Seconds a connection may be held before it is reported (None: never)."""
        return self._gp_threshold

    def holders(self) -> list[Holder]:
        """Who holds this pool's connections, longest-held first (see
        :meth:`greenpool.Pool.holders`)."""
        return list(snapshot(self._holds()))

    def report(self) -> PoolReport:
        """:meth:`holders` and the waiters (see :meth:`greenpool.Pool.report`)."""
        queue = self._gp_queue
        since = queue.oldest_since()
        return PoolReport(
            address=self.address, holders=snapshot(self._holds()), waiting=queue.waiting,
            oldest_wait=None if since is None else time.monotonic() - since,
            in_use=self.active_sockets, available=len(self.conns), pending=self._pending,
            max_pool_size=int(self.opts.max_pool_size or 0))

    def _holds(self) -> Iterator[Hold]:
        for conn, (greenlet, since, site) in list(self._gp_out.items()):
            purpose = ("transaction" if conn.pinned_txn else
                       "cursor" if conn.pinned_cursor else "other")
            yield Hold(conn.id, greenlet, since, site, purpose, purpose != "other")

    # -- the exhaustion error and long holds ----------------------------------------

    def _raise_wait_queue_timeout(self, checkout_started_time: float) -> NoReturn:
        """PyMongo's error (after its ConnectionCheckOutFailed), naming the
        longest holders. It stays PyMongo's very class, which PyMongo's own
        tests (and maybe an application) compare exactly; ``holders`` is
        greenpool's addition, as on :class:`greenpool.WaitQueueTimeoutError`."""
        try:
            super()._raise_wait_queue_timeout(checkout_started_time)
        except WaitQueueTimeoutError as error:
            holds = list(self._holds())
            holders = snapshot(holds, LISTED_HOLDERS)
            named: Any = WaitQueueTimeoutError(f"{error}{describe_holders(holders, len(holds))}")
            named.holders = holders
            raise named from None

    def _report_long_hold(self, event: ConnectionHeldTooLongEvent, stack: str) -> None:
        listeners = self.opts._event_listeners
        text, fields = describe(event, stack)
        report_long_hold(() if listeners is None else listeners.event_listeners(), event,
                         text, fields)

    # Declared for the type checker: GreenPool's wait queue.
    _gp_queue: WaitQueue[Any]
